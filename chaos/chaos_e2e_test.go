package chaos

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/mutant"
	"github.com/quotaqual/quotaqual/internal/testbin"
	"github.com/quotaqual/quotaqual/topology"
)

// The end-to-end tests run `quotaqual chaos` for real: the netns topology, real gateway,
// provider and valkey-server processes, real faults. TestMain builds the quotaqual binary and
// the mutants build (internal/mutant) and re-executes the tests inside the run's namespaces.

const (
	envBinary  = "QQ_CHAOS_TEST_BINARY"
	envMutants = "QQ_CHAOS_MUTANTS_BINARY"
	envNoNetns = "QQ_CHAOS_NO_NETNS"
)

func TestMain(m *testing.M) { os.Exit(testMain(m)) }

func testMain(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	if !topology.Inside() {
		engine, reason := topology.Detect()
		if engine != topology.EngineNetns {
			os.Setenv(envNoNetns, reason)
			return m.Run()
		}
		dir, err := os.MkdirTemp("", "quotaqual-chaos-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		for env, tags := range map[string][]string{envBinary: nil, envMutants: {mutant.Tag}} {
			bin := filepath.Join(dir, strings.ToLower(env))
			if err := testbin.Build(bin, tags...); err != nil {
				fmt.Fprintln(os.Stderr, "building the quotaqual binary for the chaos tests:", err)
				return 1
			}
			os.Setenv(env, bin)
		}
		_, code, err := topology.ReexecIntoNamespace(topology.NewRunID(), nil)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		return code
	}
	if _, _, err := topology.ReexecIntoNamespace(topology.InsideRunID(), nil); err != nil {
		fmt.Fprintln(os.Stderr, "preparing the namespace:", err)
		return 1
	}
	return m.Run()
}

func e2e(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end: starts real processes and faults; not in -short")
	}
	if reason := os.Getenv(envNoNetns); reason != "" {
		t.Skip("the netns topology is not available here: " + reason)
	}
}

func options(t *testing.T, seed int64, d time.Duration, env string) Options {
	return Options{Seed: seed, Duration: d, Engine: topology.EngineNetns, Binary: os.Getenv(env),
		EvidenceDir: t.TempDir(), Progress: func(s string) { t.Log(s) }}
}

// seedsOurGatewayPasses are the seeds our gateway is held to, each for passDuration of faults.
var seedsOurGatewayPasses = []int64{1, 2, 3}

const passDuration = 8 * time.Second

// Our gateway passes every seed: each schedule's history is judged and nothing fails.
func TestChaosOurGatewayPassesSeeds(t *testing.T) {
	e2e(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, seed := range seedsOurGatewayPasses {
		rep, err := Run(ctx, options(t, seed, passDuration, envBinary))
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		a := rep.First
		t.Logf("seed %d: %d faults, %d requests, %d subjects, wall %s: %s", seed, len(rep.Schedule.Faults),
			len(a.History.Requests), a.Subjects, a.Elapsed.Round(time.Millisecond), verdictLine(a.Verdict))
		if a.Verdict.Failed {
			t.Errorf("seed %d failed our gateway:\n%s\nchecks: %+v", seed, Reproduce(rep), a.Verdict.Checks)
		}
		if len(rep.Schedule.Faults) == 0 || a.Verdict.Facts["faults_injected"] != len(rep.Schedule.Faults) {
			t.Errorf("seed %d: %d faults scheduled, %v injected", seed, len(rep.Schedule.Faults), a.Verdict.Facts["faults_injected"])
		}
	}
}

// failOpenSeed draws a store fault early (a partition of gateway-b from the store at 2.8 s).
const failOpenSeed = 42

// A gateway that admits when its store call fails (mutant fail-open) fails, the checker names
// the fault that exposed it, the schedule shrinks to a few faults that still fail, the bundle
// holds the seed and the shrunk schedule, and the seed reproduces the failure.
func TestChaosFailOpenFailsShrunkAndReproduced(t *testing.T) {
	e2e(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := options(t, failOpenSeed, passDuration, envMutants)
	o.GatewayTestEnv = []string{mutant.EnvVar + "=" + string(mutant.FailOpen)}
	o.ShrinkRuns = 4
	start := time.Now()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s(wall %s)", Reproduce(rep), time.Since(start).Round(time.Millisecond))
	if !rep.Failed() {
		t.Fatalf("fail-open passed seed %d: %+v", failOpenSeed, rep.First.Verdict.Checks)
	}
	if failed := rep.First.Verdict.FailedChecks(); !slices.Contains(failed, "no 200 from a gateway cut off from the deciding store") {
		t.Errorf("want the cut-off check failed, got %v", failed)
	}
	if len(rep.First.Verdict.Exposing()) == 0 {
		t.Error("the verdict names no fault that exposed the defect")
	}
	sh := rep.Shrunk
	if sh == nil || rep.Final == nil || !rep.Final.Verdict.Failed {
		t.Fatalf("no failing shrunk schedule: %+v", sh)
	}
	if n := len(sh.Schedule.Faults); n == 0 || n > 3 || n >= len(rep.Schedule.Faults) {
		t.Errorf("shrunk %d faults to %d; want 1 to 3", len(rep.Schedule.Faults), n)
	}
	for _, f := range sh.Schedule.Faults {
		if k, _ := KindByName(f.Lever); len(k.CutsOff(f.Target, twoGateways)) == 0 && len(sh.Schedule.Faults) == 1 {
			t.Errorf("the one fault left, %s, cuts no gateway off the store: it cannot expose fail-open", f)
		}
	}

	// The bundle tells the seed and the shrunk schedule, and report.html draws both runs.
	raw, err := os.ReadFile(filepath.Join(rep.BundleDir, "chaos", "reproduce.txt"))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{fmt.Sprintf("seed: %d", failOpenSeed), sh.Schedule.Faults[0].String()} {
		if !strings.Contains(string(raw), want) {
			t.Errorf("reproduce.txt lacks %q:\n%s", want, raw)
		}
	}
	html, err := os.ReadFile(filepath.Join(rep.BundleDir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), "chaos-shrunk") || !strings.Contains(string(html), "Fault windows") {
		t.Error("report.html shows no shrunk run or no fault windows")
	}

	// The seed reproduces it: the same schedule, failing again.
	o.EvidenceDir, o.RunID, o.ShrinkRuns = t.TempDir(), "", -1
	again, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again.Schedule, rep.Schedule) || !again.Failed() {
		t.Errorf("seed %d again: same schedule %v, failed %v", failOpenSeed, reflect.DeepEqual(again.Schedule, rep.Schedule), again.Failed())
	}
	t.Logf("total wall %s", time.Since(start).Round(time.Millisecond))
}

// A gateway that answers a store error with a quota denial (mutant store-error-as-429) admits
// nothing it should not, so no usage sum can see it; the ledger model does: a 429 while the
// subject's budget certainly had room. The verdict names the faults held meanwhile.
func TestChaosStoreErrorAs429FailsLinearizability(t *testing.T) {
	e2e(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	o := options(t, failOpenSeed, passDuration, envMutants)
	o.GatewayTestEnv = []string{mutant.EnvVar + "=" + string(mutant.StoreErrorAs429)}
	o.ShrinkRuns = -1
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s(wall %s)", Reproduce(rep), rep.Elapsed.Round(time.Millisecond))
	failed := rep.First.Verdict.FailedChecks()
	if !slices.Contains(failed, "every subject's history is linearizable against the ledger model (porcupine)") {
		t.Fatalf("want linearizability failed, got %v", failed)
	}
	if slices.Contains(failed, "hard gate: no subject's admitted usage within any window-long stretch exceeds the capacity") {
		t.Errorf("the hard gate failed too: the mutant over-admits, or the sum is wrong")
	}
	if len(rep.First.Verdict.Exposing()) == 0 {
		t.Error("the verdict names no fault held while the illegal history was written")
	}
}

// failoverPolicySeed draws, at --duration 10s with the levers store-failover and policy-change:
// a tighter policy on gateway-b at 1 s, a failover of the store group's primary at 2.26 s, a
// looser policy on gateway-b at 7.91 s.
const failoverPolicySeed = 11

// Our gateway on the replicated store group (acknowledged replication) passes a schedule of
// store failovers and policy changes: the checker bounds each window by the largest capacity
// in effect, exempts nothing across the failover, and records the policy timeline.
func TestChaosFailoverAndPolicyChangePass(t *testing.T) {
	e2e(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := options(t, failoverPolicySeed, 10*time.Second, envBinary)
	o.Levers = []string{topology.StoreFailover.Name(), PolicyChange.Name()}
	start := time.Now()
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	a := rep.First
	t.Logf("%s(%d requests, %d subjects, attempt %s, wall %s)", Reproduce(rep), len(a.History.Requests), a.Subjects,
		a.Elapsed.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	drawn := map[string]int{}
	for _, f := range rep.Schedule.Faults {
		drawn[f.Lever]++
	}
	if drawn[topology.StoreFailover.Name()] == 0 || drawn[PolicyChange.Name()] == 0 || !rep.Schedule.StoreGroup {
		t.Fatalf("seed %d drew no failover or no policy change on the store group: %s", failoverPolicySeed, rep.Schedule)
	}
	if a.Verdict.Failed {
		t.Fatalf("our gateway failed:\n%s\nchecks: %+v", Reproduce(rep), a.Verdict.Checks)
	}
	if n := a.Verdict.Facts["faults_injected"]; n != len(rep.Schedule.Faults) {
		t.Errorf("%d faults scheduled, %v injected", len(rep.Schedule.Faults), n)
	}
	if len(a.History.Limits) != drawn[PolicyChange.Name()] || a.Verdict.Facts["policy_timeline"] == nil {
		t.Errorf("policy timeline: %d spans for %d policy changes, fact %v", len(a.History.Limits), drawn[PolicyChange.Name()], a.Verdict.Facts["policy_timeline"])
	}
	if !a.History.StoreGroup || a.History.Replication != "acknowledged" || a.Verdict.Facts["failover_rule"] == nil {
		t.Errorf("the history does not say it ran on the store group with acknowledged replication: %v %q %v",
			a.History.StoreGroup, a.History.Replication, a.Verdict.Facts["failover_rule"])
	}
	for _, f := range a.History.Faults {
		if f.Lever == topology.StoreFailover.Name() {
			// Inject returns only once the Sentinels name another primary.
			t.Logf("%s: promoted %s after the cut, healed %s after that", f.Fault, f.Held.Sub(f.Pulled).Round(time.Millisecond),
				f.Released.Sub(f.Held).Round(time.Millisecond))
		}
	}
	t.Logf("facts: %v", a.Verdict.Facts)
}

// Loss, drawn only when named, is a fault the checker can see through: our gateway passes a
// loss-only schedule (its store calls time out or succeed late: 503 or a decision), and the
// mutant fail-open — which admits when a store call fails — fails it, the verdict naming loss
// faults as what exposed it.
func TestChaosLossOnlyWhenNamedExposesFailOpen(t *testing.T) {
	e2e(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	levers := []string{topology.Loss.Name()}
	for _, tc := range []struct {
		mutant string
		fail   bool
	}{{"", false}, {string(mutant.FailOpen), true}} {
		o := options(t, 1, passDuration, envMutants)
		o.Levers, o.ShrinkRuns = levers, -1
		if tc.mutant != "" {
			o.GatewayTestEnv = []string{mutant.EnvVar + "=" + tc.mutant}
		}
		rep, err := Run(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s(wall %s)", Reproduce(rep), rep.Elapsed.Round(time.Millisecond))
		if len(rep.Schedule.Faults) == 0 {
			t.Fatalf("%q: a loss-only schedule drew no fault", tc.mutant)
		}
		if rep.Failed() != tc.fail {
			t.Fatalf("%q: failed %v, want %v: %v", tc.mutant, rep.Failed(), tc.fail, rep.First.Verdict.FailedChecks())
		}
		if tc.fail && len(rep.First.Verdict.Exposing()) == 0 {
			t.Errorf("%q: the verdict names no loss fault that exposed it", tc.mutant)
		}
	}
}
