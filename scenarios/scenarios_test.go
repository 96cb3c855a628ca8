package scenarios

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/topology"
)

// capsOnly is a topology that answers Capabilities and nothing else: the framework tests need
// no running component.
type capsOnly struct {
	topology.Topology
	caps topology.Capabilities
}

func (c capsOnly) Capabilities() topology.Capabilities { return c.caps }

func testEnv(caps topology.Capabilities) *Env {
	p, _ := deployment.ProfileByName("quick")
	return &Env{Topo: capsOnly{caps: caps}, Profile: p}
}

// TestTheCatalogueKeepsTheQualificationOrder checks the order the catalogue states
// (catalogue.go) from the catalogue itself — no list of every scenario and no count, so a new
// scenario file needs no change here: the upstream qualification's nine lead in the issue's
// order, valkey-partition follows them, sustained-load (reference only) closes the run, and
// every scenario states its summary, invariant and Run.
func TestTheCatalogueKeepsTheQualificationOrder(t *testing.T) {
	names := Names()
	at := func(n string) int {
		i := slices.Index(names, n)
		if i < 0 {
			t.Fatalf("%s is not in the catalogue %v", n, names)
		}
		return i
	}
	upstream := []string{"probe-no-quota", "valid-auth", "auth-rejection", "shared-budget", "concurrency",
		"window-expiry", "gateway-restart", "valkey-outage", "network-policy"}
	for i := 1; i < len(upstream); i++ {
		if at(upstream[i-1]) > at(upstream[i]) {
			t.Errorf("%s comes after %s: the upstream nine keep the issue's order (%v)", upstream[i-1], upstream[i], names)
		}
	}
	if at("network-policy") > at("valkey-partition") {
		t.Errorf("valkey-partition must follow the upstream nine: %v", names)
	}
	if names[len(names)-1] != "sustained-load" {
		t.Errorf("the catalogue ends with %s, want sustained-load: %v", names[len(names)-1], names)
	}
	seen := map[string]bool{}
	for _, s := range All() {
		if seen[s.Name] {
			t.Errorf("%s is listed twice", s.Name)
		}
		seen[s.Name] = true
		if s.Summary == "" || s.Invariant == "" || s.Run == nil {
			t.Errorf("%s: summary, invariant and Run must all be set", s.Name)
		}
	}
}

// TestRegisterRefusesATakenPositionOrName: two scenarios at one position, or one name twice,
// are a build mistake register panics on.
func TestRegisterRefusesATakenPositionOrName(t *testing.T) {
	saved := maps.Clone(registered)
	defer func() { registered = saved }()
	for _, c := range []struct {
		what     string
		position int
		name     string
	}{
		{"a taken position", 100, "new-scenario"},
		{"a taken name", 99999, Names()[0]},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("register with %s did not panic", c.what)
				}
			}()
			register(c.position, func() Scenario { return Scenario{Name: c.name} })
		}()
	}
}

func TestSelect(t *testing.T) {
	t.Run("no names selects all", func(t *testing.T) {
		got, err := Select(nil)
		if err != nil || len(got) != len(Names()) || len(got) != len(All()) {
			t.Fatalf("Select(nil) = %d scenarios, %v", len(got), err)
		}
	})
	t.Run("a profile's default run: sustained-load only in reference, selectable in quick", func(t *testing.T) {
		quick, _ := ForProfile("quick", nil)
		ref, _ := ForProfile("reference", nil)
		asked, err := ForProfile("quick", []string{"sustained-load"})
		all := len(All())
		if len(quick) != all-1 || slices.ContainsFunc(quick, func(s Scenario) bool { return s.Name == "sustained-load" }) {
			t.Errorf("quick's default run: %d scenarios, sustained-load must not be one of them", len(quick))
		}
		if len(ref) != all || ref[all-1].Name != "sustained-load" {
			t.Errorf("reference's default run: %d scenarios, want all %d ending with sustained-load", len(ref), all)
		}
		if err != nil || len(asked) != 1 || asked[0].Name != "sustained-load" {
			t.Errorf("--scenario sustained-load in quick: %v, %v", asked, err)
		}
	})
	t.Run("keeps the qualification order, not the order given", func(t *testing.T) {
		got, err := Select([]string{"valkey-outage", "probe-no-quota"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0].Name != "probe-no-quota" || got[1].Name != "valkey-outage" {
			t.Fatalf("got %v", got)
		}
	})
	t.Run("an unknown name is an error listing the valid names", func(t *testing.T) {
		_, err := Select([]string{"shared-budget", "nope"})
		if err == nil {
			t.Fatal("no error for an unknown scenario")
		}
		for _, want := range append([]string{`"nope"`}, Names()...) {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not mention %s", err, want)
			}
		}
	})
}

func fake(name string, needs []Need, run func(ctx context.Context, env *Env) *Result) Scenario {
	return Scenario{Name: name, Summary: "s", Invariant: "i", Needs: needs, Run: run}
}

func TestRun(t *testing.T) {
	pass := func(ctx context.Context, env *Env) *Result {
		r := env.NewResult()
		r.Check("ok", 1, 1, true)
		return r
	}
	t.Run("a passing scenario passes with its facts and checks", func(t *testing.T) {
		res := Run(context.Background(), testEnv(topology.Capabilities{}), []Scenario{fake("a", nil, func(ctx context.Context, env *Env) *Result {
			r := env.NewResult()
			r.Fact("n", 3)
			r.Check("ok", 1, 1, true)
			r.Key("key")
			return r
		})})
		if len(res) != 1 || res[0].Status != evidence.Passed || res[0].KeyFact != "key" || len(res[0].Facts) != 1 || len(res[0].Assertions) != 1 {
			t.Fatalf("got %+v", res)
		}
	})
	t.Run("every check is recorded, a failed one does not stop the next, and the verdict is failed", func(t *testing.T) {
		res := Run(context.Background(), testEnv(topology.Capabilities{}), []Scenario{fake("a", nil, func(ctx context.Context, env *Env) *Result {
			r := env.NewResult()
			r.Check("first", 200, 429, false)
			r.Check("second", 1, 1, true)
			r.Check("third", "x", "y", false)
			return r
		})})
		got := res[0]
		if got.Status != evidence.Failed || len(got.Assertions) != 3 {
			t.Fatalf("status %s with %d assertions, want failed with 3", got.Status, len(got.Assertions))
		}
		if !strings.Contains(got.Reason, "first") || !strings.Contains(got.Reason, "third") || strings.Contains(got.Reason, "second") {
			t.Errorf("reason %q should name the failed checks only", got.Reason)
		}
	})
	t.Run("a panic fails the scenario, keeps its partial facts and the next scenario still runs", func(t *testing.T) {
		res := Run(context.Background(), testEnv(topology.Capabilities{}), []Scenario{
			fake("boom", nil, func(ctx context.Context, env *Env) *Result {
				r := env.NewResult()
				r.Fact("before-panic", true)
				r.Check("ok", 1, 1, true)
				panic("lever broke")
			}),
			fake("after", nil, pass),
		})
		if res[0].Status != evidence.Failed || !strings.Contains(res[0].Reason, "panic: lever broke") {
			t.Fatalf("got %s %q", res[0].Status, res[0].Reason)
		}
		if len(res[0].Facts) != 1 || len(res[0].Assertions) != 1 {
			t.Errorf("partial facts lost: %+v", res[0])
		}
		if res[1].Status != evidence.Passed {
			t.Errorf("next scenario: %s", res[1].Status)
		}
	})
	t.Run("an operational error fails the scenario", func(t *testing.T) {
		res := Run(context.Background(), testEnv(topology.Capabilities{}), []Scenario{fake("a", nil, func(ctx context.Context, env *Env) *Result {
			r := env.NewResult()
			r.Check("ok", 1, 1, true)
			return r.Error(errors.New("restarting gateway-a: no such process"))
		})})
		if res[0].Status != evidence.Failed || !strings.Contains(res[0].Reason, "no such process") {
			t.Fatalf("got %s %q", res[0].Status, res[0].Reason)
		}
	})
	t.Run("a lever the topology lacks skips with its reason", func(t *testing.T) {
		res := Run(context.Background(), testEnv(topology.Capabilities{}), []Scenario{fake("a", nil, func(ctx context.Context, env *Env) *Result {
			r := env.NewResult()
			r.Check("before the lever", 200, 200, true)
			return r.Error(fmt.Errorf("restarting gateway-a: %w: kind has no such lever", topology.ErrUnsupported))
		})})
		if res[0].Status != evidence.Skipped || !strings.Contains(res[0].Reason, "kind has no such lever") {
			t.Fatalf("got %s %q", res[0].Status, res[0].Reason)
		}
	})
	t.Run("a failed check is not hidden by a missing lever", func(t *testing.T) {
		res := Run(context.Background(), testEnv(topology.Capabilities{}), []Scenario{fake("a", nil, func(ctx context.Context, env *Env) *Result {
			r := env.NewResult()
			r.Check("before the lever", 429, 200, false)
			return r.Error(fmt.Errorf("restarting gateway-a: %w", topology.ErrUnsupported))
		})})
		if res[0].Status != evidence.Failed {
			t.Fatalf("got %s %q", res[0].Status, res[0].Reason)
		}
	})
	t.Run("a result without assertions cannot pass", func(t *testing.T) {
		res := Run(context.Background(), testEnv(topology.Capabilities{}), []Scenario{fake("a", nil, func(ctx context.Context, env *Env) *Result {
			return env.NewResult()
		})})
		if res[0].Status != evidence.Failed {
			t.Fatalf("got %s", res[0].Status)
		}
	})
	t.Run("a nil result fails", func(t *testing.T) {
		res := Run(context.Background(), testEnv(topology.Capabilities{}), []Scenario{fake("a", nil, func(ctx context.Context, env *Env) *Result { return nil })})
		if res[0].Status != evidence.Failed {
			t.Fatalf("got %s", res[0].Status)
		}
	})
	t.Run("a missing capability skips with the topology's reason, never passes", func(t *testing.T) {
		ran := false
		res := Run(context.Background(), testEnv(topology.Capabilities{NetworkPolicyReason: "process topology: every component shares loopback"}),
			[]Scenario{fake("np", []Need{NeedNetworkPolicy}, func(ctx context.Context, env *Env) *Result { ran = true; return pass(ctx, env) })})
		if ran {
			t.Error("the scenario ran without its capability")
		}
		if res[0].Status != evidence.Skipped || !strings.Contains(res[0].Reason, "shares loopback") || !strings.Contains(res[0].Reason, "network policy") {
			t.Fatalf("got %s %q", res[0].Status, res[0].Reason)
		}
	})
	t.Run("a present capability runs", func(t *testing.T) {
		res := Run(context.Background(), testEnv(topology.Capabilities{NetworkPolicy: true}), []Scenario{fake("np", []Need{NeedNetworkPolicy}, pass)})
		if res[0].Status != evidence.Passed {
			t.Fatalf("got %s %q", res[0].Status, res[0].Reason)
		}
	})
	t.Run("cancellation skips the remaining scenarios as interrupted", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		first := fake("first", nil, func(ctx context.Context, env *Env) *Result { cancel(); return pass(ctx, env) })
		first.Exclusive = "runs alone, so the others start after it"
		res := Run(ctx, testEnv(topology.Capabilities{}), []Scenario{
			first,
			fake("second", nil, pass),
			fake("third", nil, pass),
		})
		if len(res) != 3 {
			t.Fatalf("%d results, want 3", len(res))
		}
		if res[0].Status != evidence.Skipped || !strings.Contains(res[0].Reason, "interrupted") {
			t.Errorf("cut-short scenario: %s %q (a verdict not reached is not a pass)", res[0].Status, res[0].Reason)
		}
		for _, r := range res[1:] {
			if r.Status != evidence.Skipped || !strings.Contains(r.Reason, "interrupted") {
				t.Errorf("%s: %s %q", r.Name, r.Status, r.Reason)
			}
		}
	})
	t.Run("a scenario cut short by cancellation is skipped, not failed, with its checks kept", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		res := Run(ctx, testEnv(topology.Capabilities{}), []Scenario{
			fake("first", nil, func(ctx context.Context, env *Env) *Result {
				r := env.NewResult()
				r.Check("before", 1, 1, true)
				cancel()
				r.Check("request after Ctrl-C", 200, 0, false)
				return r
			}),
		})
		if res[0].Status != evidence.Skipped || !strings.Contains(res[0].Reason, "interrupted") || len(res[0].Assertions) != 2 {
			t.Fatalf("got %s %q with %d assertions", res[0].Status, res[0].Reason, len(res[0].Assertions))
		}
	})
	t.Run("progress reports each scenario", func(t *testing.T) {
		env := testEnv(topology.Capabilities{})
		var lines []string
		env.Progress = func(s string) { lines = append(lines, s) }
		Run(context.Background(), env, []Scenario{fake("a", nil, pass)})
		if len(lines) == 0 || !strings.Contains(lines[len(lines)-1], "a: passed") {
			t.Fatalf("progress %q", lines)
		}
	})
}

func TestPeakReservedFromHistory(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	tests := []struct {
		name string
		ivs  []interval
		want int64
	}{
		{"no admissions", nil, 0},
		{"one request", []interval{{Start: at(0), End: at(100)}}, 15},
		{"four held together", []interval{{Start: at(0), End: at(1500)}, {Start: at(2), End: at(1502)}, {Start: at(5), End: at(1490)}, {Start: at(9), End: at(1600)}}, 60},
		{"sequential requests never overlap", []interval{{Start: at(0), End: at(10)}, {Start: at(11), End: at(20)}, {Start: at(21), End: at(30)}}, 15},
		{"touching intervals count as overlapping", []interval{{Start: at(0), End: at(10)}, {Start: at(10), End: at(20)}}, 30},
		{"five with a gap: peak is the widest instant", []interval{{Start: at(0), End: at(100)}, {Start: at(50), End: at(150)}, {Start: at(60), End: at(70)}, {Start: at(120), End: at(200)}, {Start: at(160), End: at(170)}}, 45},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := peakReserved(tt.ivs, 15)
			if got != tt.want {
				t.Fatalf("peakReserved = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestSharedBudgetPrediction(t *testing.T) {
	adm := func(c int64) exchange { return exchange{Admitted: true, Charge: c} }
	den := exchange{}
	tests := []struct {
		name              string
		capacity, est     int64
		fallback          int64
		obs               []exchange
		wantAdmitted      int
		wantPredictedMask []bool
	}{
		{
			name: "quick profile: 10-token responses, 15 estimate, 60 capacity admit five",
			// 0,10,20,30,40 settled + 15 ≤ 60; 50 + 15 > 60.
			capacity: 60, est: 15, fallback: 10,
			obs:               []exchange{adm(10), adm(10), adm(10), adm(10), adm(10), den},
			wantAdmitted:      5,
			wantPredictedMask: []bool{true, true, true, true, true, false},
		},
		{
			name:     "usage above the estimate admits fewer",
			capacity: 60, est: 15, fallback: 17,
			// 0,17,34 → +15 ≤ 60; 51+15 > 60.
			obs:               []exchange{adm(17), adm(17), adm(17), den},
			wantAdmitted:      3,
			wantPredictedMask: []bool{true, true, true, false},
		},
		{
			name:     "an over-admission is caught",
			capacity: 60, est: 15, fallback: 10,
			obs:               []exchange{adm(10), adm(10), adm(10), adm(10), adm(10), adm(10), den},
			wantAdmitted:      5,
			wantPredictedMask: []bool{true, true, true, true, true, false, false},
		},
		{
			name:     "an early denial is caught and the prediction continues with the fallback",
			capacity: 60, est: 15, fallback: 10,
			obs:               []exchange{adm(10), adm(10), den},
			wantAdmitted:      5,
			wantPredictedMask: []bool{true, true, true},
		},
		{
			name:     "a response without usage settles at the estimate",
			capacity: 60, est: 15, fallback: 10,
			// settled 0,15,25,35,45: each +15 ≤ 60, so the observed denial at #5 is wrong.
			obs:               []exchange{adm(0), adm(10), adm(10), adm(10), den},
			wantAdmitted:      5,
			wantPredictedMask: []bool{true, true, true, true, true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pred, n := predictAdmissions(tt.capacity, tt.est, tt.fallback, tt.obs)
			if n != tt.wantAdmitted {
				t.Errorf("predicted admitted = %d, want %d", n, tt.wantAdmitted)
			}
			for i := range tt.wantPredictedMask {
				if pred[i] != tt.wantPredictedMask[i] {
					t.Errorf("pred[%d] = %v, want %v (all %v)", i, pred[i], tt.wantPredictedMask[i], pred)
				}
			}
		})
	}
	t.Run("matches the stub's deterministic usage for the default request", func(t *testing.T) {
		p, _ := deployment.ProfileByName("quick")
		u := chatUsage(p, 1)
		if u.TotalTokens != 10 {
			t.Fatalf("default request usage = %+v, want total 10 (prompt 9 + completion 1)", u)
		}
	})
}

func TestPlanRecovery(t *testing.T) {
	t0 := time.Unix(2000, 300*int64(time.Millisecond))
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	starts := []time.Time{at(0), at(10), at(20), at(30), at(40)}
	ends := []time.Time{at(5), at(15), at(25), at(35), at(45)}
	charges := []int64{10, 10, 10, 10, 10}
	plan, ok := planRecovery(starts, ends, charges, 60, 15, 4*time.Second, time.Second, 500*time.Millisecond)
	if !ok {
		t.Fatal("no plan")
	}
	if plan.Index != 0 {
		t.Errorf("the first charge leaving makes room (40 + 15 ≤ 60): index %d", plan.Index)
	}
	if !plan.Earliest.Equal(at(4000)) || !plan.Latest.Equal(at(5+4000+1000+500)) {
		t.Errorf("earliest %v latest %v", plan.Earliest.Sub(t0), plan.Latest.Sub(t0))
	}
	// Charged at 2000.3 s, bucket [2000,2001), leaves at 2001 + 4 = 2005.
	if !plan.ExpectedLo.Equal(time.Unix(2005, 0)) {
		t.Errorf("expected lo %v", plan.ExpectedLo)
	}
	plan, _ = planRecovery(starts[:3], ends[:3], []int64{20, 20, 20}, 60, 15, 4*time.Second, time.Second, 0)
	if plan.Index != 0 {
		t.Errorf("20+20 leaves 40 + 15 ≤ 60 after the first: index %d", plan.Index)
	}
	plan, _ = planRecovery(starts[:3], ends[:3], []int64{10, 25, 25}, 60, 15, 4*time.Second, time.Second, 0)
	if plan.Index != 1 {
		t.Errorf("50 + 15 > 60 after the first, 25 + 15 after the second: index %d", plan.Index)
	}
}

func TestPoll(t *testing.T) {
	t.Run("stops when done", func(t *testing.T) {
		n, err := poll(context.Background(), time.Millisecond, time.Second, func(ctx context.Context) (bool, error) { return true, nil })
		if n != 1 || err != nil {
			t.Fatalf("%d %v", n, err)
		}
	})
	t.Run("gives up at its deadline, not later", func(t *testing.T) {
		start := time.Now()
		_, err := poll(context.Background(), 20*time.Millisecond, 100*time.Millisecond, func(ctx context.Context) (bool, error) { return false, nil })
		if !errors.Is(err, errPollDeadline) {
			t.Fatalf("err %v", err)
		}
		if el := time.Since(start); el > time.Second {
			t.Errorf("took %s", el)
		}
	})
	t.Run("honours cancellation", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := poll(ctx, time.Hour, time.Hour, func(ctx context.Context) (bool, error) { return false, nil })
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("err %v", err)
		}
	})
}

func TestResponseParsing(t *testing.T) {
	stream := "data: {\"choices\":[{\"delta\":{\"content\":\"tok\"}}]}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":8,\"total_tokens\":17}}\n\ndata: [DONE]\n\n"
	if u := streamUsage([]byte(stream)); u == nil || u.TotalTokens != 17 {
		t.Errorf("stream usage %+v", u)
	}
	if u := jsonUsage([]byte(`{"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}`)); u == nil || u.TotalTokens != 10 {
		t.Errorf("json usage %+v", u)
	}
	if typ := errorType([]byte(`{"error":{"message":"m","type":"quota_store_unavailable","param":null,"code":null}}`)); typ != "quota_store_unavailable" {
		t.Errorf("error type %q", typ)
	}
	if got := charge(Outcome{}, 15); got != 15 {
		t.Errorf("no usage charges the estimate, got %d", got)
	}
	h := http.Header{}
	h.Set("Retry-After", "4")
	h.Set("X-Ratelimit-Limit-Tokens", "60")
	if ok, missing := (&Env{}).hasQuotaHeaders(h); ok || len(missing) != 2 {
		t.Errorf("missing %v", missing)
	}
}

func TestBucketWidth(t *testing.T) {
	for _, tt := range []struct{ w, want time.Duration }{
		{4 * time.Second, time.Second}, {time.Minute, time.Second}, {2 * time.Minute, 2 * time.Second}, {time.Hour, time.Minute}, {61 * time.Second, 2 * time.Second},
	} {
		if got := (&Env{}).bucketWidth(tt.w); got != tt.want {
			t.Errorf("bucketWidth(%s) = %s, want %s", tt.w, got, tt.want)
		}
	}
}

func TestPolicyProbesBackEveryNegativeWithAPositiveFromTheSameHost(t *testing.T) {
	for _, n := range []int{2, 5} {
		t.Run(fmt.Sprintf("%d gateways", n), func(t *testing.T) { checkPolicyProbes(t, topology.GatewayNames(n)) })
	}
}

// checkPolicyProbes checks the probes of a run with these gateways: every gateway probed (the
// client denied its admin port, the observer reaching it), every negative backed by a positive.
func checkPolicyProbes(t *testing.T, gateways []string) {
	ports := topology.Ports{GatewayData: 8080, GatewayAdmin: 9090, ProviderData: 8000, ProviderAdmin: 9000, Valkey: 6379}
	specs := policyProbes(ports, gateways)
	positive, listening := map[string]bool{}, map[string]bool{}
	for _, s := range specs {
		if s.Allowed {
			positive[s.From] = true
			if s.From != s.To {
				listening[fmt.Sprintf("%s:%d", s.To, s.Port)] = true
			}
		}
	}
	negatives := 0
	adminDenied := map[string]bool{}
	for _, s := range specs {
		if !s.Allowed {
			negatives++
			if s.Port == ports.GatewayAdmin {
				adminDenied[s.To] = true
			}
			if !positive[s.From] {
				t.Errorf("negative %s → %s has no positive control from %s", s.From, s.To, s.From)
			}
			if !listening[fmt.Sprintf("%s:%d", s.To, s.Port)] {
				t.Errorf("negative %s → %s:%d has no positive control to the same port", s.From, s.To, s.Port)
			}
		}
	}
	if want := 8 + len(gateways); negatives != want {
		t.Errorf("%d negatives, want %d (client→valkey, client→3 providers, 3 providers→valkey, client→provider-west's and each gateway's admin port)", negatives, want)
	}
	for _, g := range gateways {
		if !adminDenied[g] || !positive[g] {
			t.Errorf("%s is not probed both ways: admin denied to the client %v, probing out %v", g, adminDenied[g], positive[g])
		}
	}
	pol := topology.DefaultPolicy(ports, gateways)
	for _, s := range specs {
		if got := pol.Allows(s.From, s.To, s.Port); got != s.Allowed {
			t.Errorf("%s → %s:%d: scenario expects allowed=%v, topology.DefaultPolicy says %v", s.From, s.To, s.Port, s.Allowed, got)
		}
	}
}

func TestFaultWindowsAreRecordedAsAFactOnEveryPath(t *testing.T) {
	res := Run(context.Background(), testEnv(topology.Capabilities{}), []Scenario{fake("levers", nil, func(ctx context.Context, env *Env) *Result {
		r := env.NewResult()
		end := env.Fault("outage", "valkey")
		end()
		end()                                      // a second call keeps the first end
		env.Fault("partition", "gateway-a→valkey") // never released: the window stays open
		r.Check("x", 1, 1, true)
		return r
	})})
	var windows []evidence.FaultWindow
	for _, f := range res[0].Facts {
		if f.Name == evidence.FaultWindowsFact {
			windows = f.Value.([]evidence.FaultWindow)
		}
	}
	if len(windows) != 2 {
		t.Fatalf("fault windows %+v, want 2", windows)
	}
	if w := windows[0]; w.Kind != "outage" || w.Target != "valkey" || w.Start.IsZero() || w.End.Before(w.Start) || w.End.IsZero() {
		t.Errorf("outage window %+v", w)
	}
	if w := windows[1]; w.Kind != "partition" || !w.End.IsZero() {
		t.Errorf("unreleased window %+v: End must stay zero", w)
	}
	// A scenario that pulls no lever records no window fact.
	res = Run(context.Background(), testEnv(topology.Capabilities{}), []Scenario{fake("calm", nil, func(ctx context.Context, env *Env) *Result {
		r := env.NewResult()
		r.Check("x", 1, 1, true)
		return r
	})})
	for _, f := range res[0].Facts {
		if f.Name == evidence.FaultWindowsFact {
			t.Errorf("a scenario without levers has fault windows: %v", f.Value)
		}
	}
}

// TestUseStoreGroup: only a selection with valkey-failover or replica-loss (the scenarios that
// put gateways on the replicated store group) asks for the group; "today's ten" do not.
func TestUseStoreGroup(t *testing.T) {
	all, err := Select(nil)
	if err != nil {
		t.Fatal(err)
	}
	if !UseStoreGroup(all) {
		t.Error("the whole list (with valkey-failover) does not use the store group")
	}
	ten, err := Select([]string{"probe-no-quota", "valid-auth", "auth-rejection", "identity-sources", "shared-budget", "concurrency",
		"window-expiry", "gateway-restart", "valkey-outage", "network-policy", "valkey-partition"})
	if err != nil {
		t.Fatal(err)
	}
	if UseStoreGroup(ten) {
		t.Error("today's ten use the store group")
	}
	for _, name := range []string{"valkey-failover", "replica-loss"} {
		if alone, _ := Select([]string{name}); !UseStoreGroup(alone) {
			t.Errorf("%s alone does not use the store group", name)
		}
	}
}

// TestEveryScenarioSaysWhatItsBlackBoxPathSees checks every scenario states what its
// black-box path can and cannot see (Scenario.BlackBox), and that a black-box result carries
// the statement in its evidence level.
func TestEveryScenarioSaysWhatItsBlackBoxPathSees(t *testing.T) {
	for _, s := range All() {
		bb := s.BlackBox
		if !strings.HasPrefix(bb, "sees") && !strings.HasPrefix(bb, "has none") {
			t.Errorf("%s: BlackBox %q does not start with \"sees …\" (or \"has none\")", s.Name, bb)
		}
		if !strings.Contains(bb, "cannot see") && !strings.Contains(bb, "no inspection") && !strings.Contains(bb, "needs quota inspection") && !strings.Contains(bb, "with inspection and without") {
			t.Errorf("%s: BlackBox %q does not say what it cannot see", s.Name, bb)
		}
	}
	sc := fake("blind", nil, func(ctx context.Context, env *Env) *Result {
		r := env.NewResult()
		r.Check("counted at the providers", 1, 1, true)
		r.NotMade("settled unchanged", "no quota inspection")
		return r
	})
	sc.BlackBox = "sees the providers; cannot see the ledger"
	res := Run(context.Background(), testEnv(topology.Capabilities{}), []Scenario{sc})
	if want := "; its black-box path sees the providers; cannot see the ledger"; !strings.HasSuffix(res[0].Evidence, want) {
		t.Errorf("evidence %q does not end with %q", res[0].Evidence, want)
	}
}
