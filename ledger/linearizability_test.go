package ledger_test

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/quotaqual/quotaqual/internal/valkeytest"
	"github.com/quotaqual/quotaqual/ledger"
	"github.com/quotaqual/quotaqual/ledger/ledgermodel"
)

// The concurrency proof: many clients hammer ONE quota key through one or more ledger instances;
// every Reserve and Settle is recorded with its call and return time, and porcupine checks that
// the history is linearizable against ledgertest's sequential model of one key (admit iff it
// fits, deny iff it does not, settle once). Independently of porcupine, the peak of tokens held
// by certainly-live reservations is reconstructed from the history and sampled with Inspect
// during the run: it must never exceed the capacity.
//
// The window (1h) and the lease (1h) outlast the test, so nothing leaves the window and nothing
// expires: the model needs no clock.
const (
	linCapacity     = 200
	linClients      = 16
	linOpsPerClient = 25 // ~400 operations, plus the final settles
	linMaxHolds     = 3  // open reservations per client: 16×3×~10 tokens of demand vs 200
	linPhaseOps     = 1  // operations per client between two barriers
	linCheckTimeout = 20 * time.Second
)

func linQuota() *ledger.Quota {
	return &ledger.Quota{Rule: "linearizability", Budgets: []ledger.Budget{{Window: time.Hour, Capacity: linCapacity}}, Lease: time.Hour}
}

type trafficRun struct {
	ops         []porcupine.Operation
	facts       ledgermodel.Facts
	peak        int64 // reconstructed from the history
	inspectPeak int64 // largest ReservedTokens seen by Inspect during the run
	inspectErrs int
	samples     int
}

// usageFor picks a settlement: mostly small actual usage (refunds), some overage, some unknown
// (charged at the estimate) — with settled usage growing slowly enough that the key stays near
// its capacity boundary, where races show, for the whole run.
func usageFor(rng *rand.Rand, estimate int64) ledger.Usage {
	switch p := rng.IntN(100); {
	case p < 1:
		return ledger.Usage{}
	case p < 2:
		return ledger.Usage{Tokens: estimate + 1 + rng.Int64N(3), Known: true}
	default:
		return ledger.Usage{Tokens: rng.Int64N(2), Known: true}
	}
}

// runTraffic drives linClients clients (client i uses ledgers[i%len]) against one key and
// records the history. Inspect is sampled through ledgers[0] while the clients run.
func runTraffic(t *testing.T, ledgers []ledger.Ledger, key string, seed uint64) trafficRun {
	t.Helper()
	q := linQuota()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rec := ledgermodel.NewRecorder()

	var run trafficRun
	sampleCtx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { // sample Inspect as often as the scheduler lets it while the clients run
		defer close(sampled)
		for sampleCtx.Err() == nil {
			ks, err := ledgers[0].Inspect(sampleCtx, q, key)
			runtime.Gosched()
			if err != nil {
				if sampleCtx.Err() == nil {
					run.inspectErrs++
				}
				continue
			}
			run.samples++
			run.inspectPeak = max(run.inspectPeak, ks.ReservedTokens)
		}
	}()

	// The clients run in phases separated by barriers: a quiescent point after every phase, at
	// which a prefix of the history can be checked on its own (see ledgermodel.CheckPrefixes).
	type client struct {
		rng   *rand.Rand
		holds []ledger.Reservation
	}
	clients := make([]*client, linClients)
	for c := range clients {
		clients[c] = &client{rng: rand.New(rand.NewPCG(seed, uint64(c)))}
	}
	phase := func(ops int, drain bool) {
		var wg sync.WaitGroup
		for c, cl := range clients {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := ledgers[c%len(ledgers)]
				settle := func(i int) {
					r := cl.holds[i]
					cl.holds = append(cl.holds[:i], cl.holds[i+1:]...)
					_, _ = rec.Settle(ctx, l, c, r, usageFor(cl.rng, r.Estimate))
				}
				for range ops {
					if ctx.Err() != nil {
						return
					}
					// Let the other clients in between: an in-memory call is so short that,
					// without this, a client could run its whole phase within one time slice.
					runtime.Gosched()
					if len(cl.holds) < linMaxHolds && (len(cl.holds) == 0 || cl.rng.IntN(100) < 55) {
						d, err := rec.Reserve(ctx, l, c, q, key, 1+cl.rng.Int64N(20))
						if err == nil && d.Admitted {
							cl.holds = append(cl.holds, d.Reservation)
						}
						continue
					}
					settle(cl.rng.IntN(len(cl.holds)))
				}
				for drain && len(cl.holds) > 0 {
					settle(0)
				}
			}()
		}
		wg.Wait()
	}
	for done := 0; done < linOpsPerClient; done += linPhaseOps {
		phase(min(linPhaseOps, linOpsPerClient-done), false)
	}
	phase(0, true)
	stopSampling()
	<-sampled

	run.ops = rec.Operations()
	run.facts = rec.Facts()
	run.peak, _ = ledgermodel.PeakReserved(run.ops)
	return run
}

// requireLinearizable is the verdict for a correct ledger.
func requireLinearizable(t *testing.T, run trafficRun) {
	t.Helper()
	t.Logf("history: %d operations; %s; reconstructed peak reserved %d, Inspect peak %d over %d samples (capacity %d)",
		len(run.ops), run.facts, run.peak, run.inspectPeak, run.samples, linCapacity)
	if n := run.facts.ReserveErrors + run.facts.SettleErrors; n > 0 {
		t.Errorf("%d calls failed with no fault injected, e.g. %q", n, run.facts.Errors)
	}
	if run.inspectErrs > 0 {
		t.Errorf("%d Inspect calls failed during the run", run.inspectErrs)
	}
	if run.facts.DuplicateIDs > 0 || run.facts.EstimateMismatches > 0 {
		t.Errorf("reservations: %d duplicate ids, %d carrying another estimate than asked", run.facts.DuplicateIDs, run.facts.EstimateMismatches)
	}
	if run.facts.Admitted == 0 || run.facts.Denied == 0 {
		t.Errorf("the traffic did not reach the capacity boundary (admitted %d, denied %d): the check proved little", run.facts.Admitted, run.facts.Denied)
	}
	if run.peak > linCapacity {
		t.Errorf("peak reserved reconstructed from the history is %d > capacity %d", run.peak, linCapacity)
	}
	if run.inspectPeak > linCapacity {
		t.Errorf("Inspect saw %d tokens reserved > capacity %d", run.inspectPeak, linCapacity)
	}
	dir, err := os.MkdirTemp("", "quotaqual-linearizability-")
	if err != nil {
		t.Fatal(err)
	}
	viz := filepath.Join(dir, "history.html")
	began := time.Now()
	res, err := ledgermodel.Check(linCapacity, run.ops, linCheckTimeout, viz)
	if err != nil {
		t.Error(err)
	}
	t.Logf("porcupine: %s in %s", res, time.Since(began).Round(time.Millisecond))
	switch res {
	case porcupine.Ok:
		_ = os.RemoveAll(dir)
	case porcupine.Unknown:
		t.Errorf("porcupine could not decide within %s; partial linearizations in %s", linCheckTimeout, viz)
	default:
		t.Errorf("history is NOT linearizable against the one-key model; visualization: %s", viz)
	}
}

func TestLinearizableMemoryBackend(t *testing.T) {
	m := ledger.NewMemory(ledger.Limits{}, nil)
	t.Cleanup(func() { _ = m.Close() })
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	requireLinearizable(t, runTraffic(t, []ledger.Ledger{m}, "tenant-a", seed))
}

func TestLinearizableTwoValkeyInstancesOneServer(t *testing.T) {
	srv := valkeytest.Start(t)
	var ls []ledger.Ledger
	for range 2 { // two gateways, each with its own ledger and connections
		v, err := ledger.NewValkey(ledger.ValkeyOptions{URL: srv.URL(), Namespace: "lin", Timeout: 5 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = v.Close() })
		ls = append(ls, v)
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	requireLinearizable(t, runTraffic(t, ls, "tenant-a", seed))
}

// TestLinearizabilityCheckCatchesReadThenWrite proves the check above can fail: the same traffic
// through two racy read-then-write ledgers sharing one Valkey must produce a history porcupine
// rejects, or a reconstructed peak above the capacity. A race needs a losing interleaving, so it
// gets up to five rounds; it fails if no round shows a violation.
func TestLinearizabilityCheckCatchesReadThenWrite(t *testing.T) {
	srv := valkeytest.Start(t)
	for round := 1; round <= 5; round++ {
		var ls []ledger.Ledger
		ns := "racy" + string(rune('0'+round))
		for i := range 2 {
			r, err := newRacyLedger(srv.URL(), ns, i)
			if err != nil {
				t.Fatal(err)
			}
			ls = append(ls, r)
		}
		seed := rand.Uint64()
		run := runTraffic(t, ls, "tenant-a", seed)
		for _, l := range ls {
			_ = l.Close()
		}
		began := time.Now()
		res, decidedBy := ledgermodel.CheckPrefixes(linCapacity, run.ops, 1, 10*time.Second)
		t.Logf("round %d (seed %d): %d operations; %s; porcupine: %s (deciding prefix: %d operations) in %s; reconstructed peak %d, Inspect peak %d (capacity %d)",
			round, seed, len(run.ops), run.facts, res, decidedBy, time.Since(began).Round(time.Millisecond), run.peak, run.inspectPeak, linCapacity)
		if res == porcupine.Illegal || run.peak > linCapacity {
			if res != porcupine.Illegal {
				t.Logf("porcupine said %s but the reconstructed peak %d > %d is itself a violation", res, run.peak, linCapacity)
			}
			return
		}
	}
	t.Fatal("five rounds of read-then-write traffic produced no detected violation: the linearizability check (or the traffic) is too weak to catch a non-atomic ledger")
}

// TestOneKeyModel pins the model itself: it must reject over-admission and spurious denials,
// accept any order concurrency allows, and treat an errored call as "may or may not have happened".
func TestOneKeyModel(t *testing.T) {
	type o = ledgermodel.Output
	res := func(est int64) ledgermodel.Input {
		return ledgermodel.Input{Kind: ledgermodel.OpReserve, Estimate: est}
	}
	set := func(id string, actual int64) ledgermodel.Input {
		return ledgermodel.Input{Kind: ledgermodel.OpSettle, ID: id, Actual: actual, Known: true}
	}
	op := func(client int, call, ret int64, in ledgermodel.Input, out o) porcupine.Operation {
		in.Seq = int(call)
		return porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret}
	}
	admit := func(id string) o { return o{Admitted: true, ID: id} }
	deny := o{Reason: ledger.ReasonWindowCapacity}
	tests := []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"sequential admissions beyond capacity are illegal", []porcupine.Operation{
			op(0, 1, 2, res(60), admit("a")), op(0, 3, 4, res(50), admit("b"))}, porcupine.Illegal},
		{"a denial when the estimate does not fit is legal", []porcupine.Operation{
			op(0, 1, 2, res(60), admit("a")), op(0, 3, 4, res(50), deny)}, porcupine.Ok},
		{"a denial when the estimate fits is illegal", []porcupine.Operation{
			op(0, 1, 2, res(30), admit("a")), op(0, 3, 4, res(50), deny)}, porcupine.Illegal},
		{"concurrent reserves: one admitted, one denied, either order", []porcupine.Operation{
			op(0, 1, 4, res(60), deny), op(1, 2, 3, res(60), admit("a"))}, porcupine.Ok},
		{"settlement frees the hold and charges the actual usage", []porcupine.Operation{
			op(0, 1, 2, res(60), admit("a")), op(0, 3, 4, set("a", 10), o{Applied: true, Charged: 10}),
			op(0, 5, 6, res(90), admit("b")), op(0, 7, 8, res(1), deny)}, porcupine.Ok},
		{"a second settlement of the same id must be a no-op", []porcupine.Operation{
			op(0, 1, 2, res(60), admit("a")), op(0, 3, 4, set("a", 10), o{Applied: true, Charged: 10}),
			op(0, 5, 6, set("a", 10), o{Applied: true, Charged: 10})}, porcupine.Illegal},
		{"a reused reservation id is illegal", []porcupine.Operation{
			op(0, 1, 2, res(10), admit("a")), op(0, 3, 4, res(10), admit("a"))}, porcupine.Illegal},
		{"an errored reserve may have taken effect", []porcupine.Operation{
			op(0, 1, 100, res(60), o{Err: "timeout"}), op(1, 2, 3, res(50), deny)}, porcupine.Ok},
		{"an errored reserve may have done nothing", []porcupine.Operation{
			op(0, 1, 100, res(60), o{Err: "timeout"}), op(1, 2, 3, res(50), admit("b")),
			op(1, 4, 5, res(50), admit("c"))}, porcupine.Ok},
		{"an errored reserve cannot explain an over-admission", []porcupine.Operation{
			op(0, 1, 100, res(60), o{Err: "timeout"}), op(1, 2, 3, res(60), admit("b")),
			op(1, 4, 5, res(50), admit("c"))}, porcupine.Illegal},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ledgermodel.Check(100, tc.ops, 5*time.Second, "")
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("porcupine says %s, want %s", got, tc.want)
			}
		})
	}
}
