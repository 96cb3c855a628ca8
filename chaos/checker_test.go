package chaos

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/ledger/ledgermodel"
	"github.com/quotaqual/quotaqual/topology"
)

var testBounds = Bounds{Capacity: 60, Estimate: 15, Window: 10 * time.Minute, Recovery: 2 * time.Second, LinearizeTimeout: 5 * time.Second}

// hist builds histories on a millisecond clock from t0.
type hist struct {
	h   History
	seq int
}

func newHist() *hist {
	return &hist{h: History{Start: time.Unix(1_700_000_000, 0), Gateways: twoGateways, RequestIDHeader: "X-Request-Id"}}
}

func (b *hist) at(ms int) time.Time { return b.h.Start.Add(time.Duration(ms) * time.Millisecond) }

// req records one request from ms to ms+5 with the given status; a 200 bills 10 tokens and is
// logged by a provider.
func (b *hist) req(ms int, gw, subject string, status int) {
	b.seq++
	r := Request{Seq: b.seq, Phase: PhaseLoad, Gateway: gw, Subject: subject, Start: b.at(ms), End: b.at(ms + 5), Status: status}
	if status == http.StatusOK {
		r.RequestID = fmt.Sprintf("id-%d", b.seq)
		r.Tokens, r.UsageKnown = 10, true
		b.h.Providers = append(b.h.Providers, ProviderCall{RequestID: r.RequestID, PromptTokens: 2, GeneratedTokens: 8, Status: 200})
		b.h.ProviderCalls++
	}
	b.h.Requests = append(b.h.Requests, r)
}

func (b *hist) partition(n int, gw string, from, to int) {
	b.h.Faults = append(b.h.Faults, FaultEvent{Fault: Fault{N: n, Lever: "partition", Target: topology.Target{Host: gw, Peer: topology.HostValkey}},
		Pulled: b.at(from), Held: b.at(from + 1), Releasing: b.at(to), Released: b.at(to + 1), CutsOff: []string{gw}})
}

// spend: subject s admitted n times then denied once, alternating gateways, from ms on.
func (b *hist) spend(s string, ms, n int) int {
	for i := range n {
		b.req(ms, twoGateways[i%2], s, http.StatusOK)
		ms += 10
	}
	b.req(ms, topology.HostGatewayA, s, http.StatusTooManyRequests)
	return ms + 10
}

func failed(v Verdict) []string { return v.FailedChecks() }

func clean() *hist {
	b := newHist()
	b.spend("subject-001", 0, 5) // 50 of 60 settled: a sixth (15 more) does not fit
	b.partition(1, topology.HostGatewayB, 100, 400)
	b.req(150, topology.HostGatewayB, "subject-002", http.StatusServiceUnavailable)
	b.req(200, topology.HostGatewayA, "subject-002", http.StatusOK)
	b.req(450, topology.HostGatewayB, "subject-002", http.StatusOK) // decided again 50 ms after the heal
	return b
}

func TestJudgeAcceptsAHealthyHistory(t *testing.T) {
	v := Judge(clean().h, testBounds)
	if v.Failed {
		t.Fatalf("a healthy history failed: %v\n%+v", failed(v), v.Checks)
	}
}

// A 200 from the cut-off gateway fails, naming the partition.
func TestJudgeFailsA200FromACutOffGateway(t *testing.T) {
	b := clean()
	b.req(300, topology.HostGatewayB, "subject-003", http.StatusOK)
	v := Judge(b.h, testBounds)
	if !slices.Contains(failed(v), "no 200 from a gateway cut off from the deciding store") || !slices.Equal(v.Exposing(), []int{1}) {
		t.Fatalf("want the cut-off check failed by fault 1, got %v exposing %v", failed(v), v.Exposing())
	}
}

// Admissions past the capacity fail the hard gate and the model.
func TestJudgeFailsOverAdmission(t *testing.T) {
	b := clean()
	b.spend("subject-004", 1000, 7) // 70 > 60
	v := Judge(b.h, testBounds)
	for _, want := range []string{
		"hard gate: no subject's admitted usage within any window-long stretch exceeds the capacity",
		"every subject's history is linearizable against the ledger model (porcupine)",
	} {
		if !slices.Contains(failed(v), want) {
			t.Errorf("want %q failed, got %v", want, failed(v))
		}
	}
}

// A denial while the budget certainly had room is no hard-gate breach, but the model catches it.
func TestJudgeFailsASpuriousDenial(t *testing.T) {
	b := clean()
	b.spend("subject-005", 1000, 1)
	v := Judge(b.h, testBounds)
	if got := failed(v); !slices.Equal(got, []string{"every subject's history is linearizable against the ledger model (porcupine)"}) {
		t.Fatalf("want only linearizability failed, got %v", got)
	}
}

// A gateway that never decides again after the heal, with traffic to see it, fails recovery.
func TestJudgeFailsNoRecovery(t *testing.T) {
	b := newHist()
	b.spend("subject-001", 0, 5)
	b.partition(1, topology.HostGatewayB, 100, 400)
	for ms := 500; ms < 5000; ms += 100 {
		b.req(ms, topology.HostGatewayB, "subject-002", http.StatusServiceUnavailable)
	}
	v := Judge(b.h, testBounds)
	if !slices.Contains(failed(v), "every gateway a fault touched decides again within the recovery bound after its release") {
		t.Fatalf("want recovery failed, got %v", failed(v))
	}
	// 45 answers of unknown effect on one key are decided, not left undecided at the timeout.
	if slices.Contains(failed(v), "every subject's history is linearizable against the ledger model (porcupine)") {
		t.Fatalf("the unknown reserves made the key undecidable: %+v", v.Checks)
	}
}

// A provider call for a refused request fails, and so does a 200 no provider logged.
func TestJudgeReadsTheProviders(t *testing.T) {
	b := clean()
	b.h.ProviderCalls += 3
	b.h.Providers = b.h.Providers[1:]
	v := Judge(b.h, testBounds)
	for _, want := range []string{"no refused request reached a provider", "every 200 was served by a provider (its request id in a call log)"} {
		if !slices.Contains(failed(v), want) {
			t.Errorf("want %q failed, got %v", want, failed(v))
		}
	}
}

// A gateway that echoes no request id: the 200-in-a-call-log check is named not made, with
// why, never passed; the call count check is still made, and still fails a refused request
// that reached a provider. A 500 is the store failure of such a profile, not an answer that may
// have reached a provider.
func TestJudgeWithoutRequestIDsSaysNotMade(t *testing.T) {
	const served = "every 200 was served by a provider (its request id in a call log)"
	b := clean()
	b.h.RequestIDHeader = ""
	b.h.Providers = b.h.Providers[1:] // would fail the check, were it made
	v := Judge(b.h, testBounds)
	for _, c := range v.Checks {
		if c.Name == served {
			t.Fatalf("the check was made without request ids: %+v", c)
		}
	}
	if len(v.NotMade) != 1 || v.NotMade[0].Check != served || !strings.Contains(v.NotMade[0].Why, "request_id_header") {
		t.Fatalf("not made = %+v, want the served check with its reason", v.NotMade)
	}
	if v.Failed {
		t.Fatalf("failed %v", failed(v))
	}
	b.h.ProviderCalls += 2
	if v := Judge(b.h, testBounds); !slices.Contains(failed(v), "no refused request reached a provider") {
		t.Fatalf("want the call count check failed, got %v", failed(v))
	}
}

// Denials that contain another denial's interval are dropped before porcupine (they change no
// state), and a history's verdict does not change: a burst of overlapping denials while the
// budget is spent stays legal, and one while it certainly had room stays illegal.
func TestImpliedDenialsDropped(t *testing.T) {
	b := newHist()
	b.spend("subject-001", 0, 5)
	for i := range 30 {
		b.seq++
		b.h.Requests = append(b.h.Requests, Request{Seq: b.seq, Phase: PhaseLoad, Gateway: topology.HostGatewayA, Subject: "subject-001",
			Start: b.at(100 - i), End: b.at(200 + i), Status: http.StatusTooManyRequests})
	}
	ops := operations(b.h, b.h.Requests, b.h.Start, testBounds)
	denials := 0
	for _, op := range ops {
		if out := op.Output.(ledgermodel.Output); out.Err == "" && !out.Admitted && op.Input.(ledgermodel.Input).Kind == ledgermodel.OpReserve {
			denials++
		}
	}
	if denials != 2 { // the spend's own denial at 50 ms and the innermost of the burst
		t.Fatalf("%d denials left of 31", denials)
	}
	if v := Judge(b.h, testBounds); v.Failed {
		t.Fatalf("a legal burst failed: %v", failed(v))
	}
	c := newHist()
	c.req(0, topology.HostGatewayA, "subject-002", http.StatusOK)
	for i := range 30 {
		c.seq++
		c.h.Requests = append(c.h.Requests, Request{Seq: c.seq, Phase: PhaseLoad, Gateway: topology.HostGatewayB, Subject: "subject-002",
			Start: c.at(100 - i), End: c.at(200 + i), Status: http.StatusTooManyRequests})
	}
	c.spend("subject-003", 300, 5)
	if got := failed(Judge(c.h, testBounds)); !slices.Equal(got, []string{"every subject's history is linearizable against the ledger model (porcupine)"}) {
		t.Fatalf("denials with room left: want only linearizability failed, got %v", got)
	}
}

// A reserve whose answer was lost (a 503 after the store timeout) may have taken a hold that the
// ledger later releases at zero in the background (the contract allows an ambiguous reserve
// "released at zero, or held to its lease and charged its estimate"): a denial while that hold
// stood, then an admission once it was gone, is legal. The model that only let such a hold be
// taken forever or never called it illegal.
func TestJudgeAllowsAnAmbiguousHoldReleasedLater(t *testing.T) {
	b := newHist()
	for _, ms := range []int{0, 10, 20} { // 45 of 60 charged: the usage equals the reservation
		b.req(ms, twoGateways[ms/10%2], "subject-001", http.StatusOK)
		b.h.Requests[len(b.h.Requests)-1].Tokens = testBounds.Estimate
	}
	b.req(100, topology.HostGatewayA, "subject-001", http.StatusServiceUnavailable) // its hold: 60 of 60
	b.req(200, topology.HostGatewayB, "subject-001", http.StatusTooManyRequests)    // needs that hold
	b.req(300, topology.HostGatewayB, "subject-001", http.StatusOK)                 // needs it gone
	b.h.Requests[len(b.h.Requests)-1].Tokens = testBounds.Estimate
	if v := Judge(b.h, testBounds); v.Failed {
		t.Fatalf("a hold released after its reserve's 503 failed: %v %+v", failed(v), v.Checks)
	}
	// Without the lost answer, the same denial then admission is a spurious denial.
	b.h.Requests = slices.Delete(b.h.Requests, 3, 4)
	if got := failed(Judge(b.h, testBounds)); !slices.Equal(got, []string{"every subject's history is linearizable against the ledger model (porcupine)"}) {
		t.Fatalf("want only linearizability failed, got %v", got)
	}
}

// Seed 3 under load (two busy loops beside the run): subject-016's recorded history. Six
// reserves sent during the store stall answered 503; when the stall ended their queued writes
// ran and held the budget, so a reserve at +5.18 s was denied; the ledger's background releases
// then freed them and four more were admitted. The checker failed it as not linearizable.
func TestJudgeAcceptsSeed3RecordedUnderLoad(t *testing.T) {
	raw, err := os.ReadFile("testdata/seed3-subject-016.json")
	if err != nil {
		t.Fatal(err)
	}
	var h History
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatal(err)
	}
	if v := Judge(h, BoundsOf(Profile())); v.Failed {
		t.Fatalf("the recorded history failed: %v", failed(v))
	}
}
