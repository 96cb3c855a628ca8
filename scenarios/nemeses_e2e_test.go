package scenarios

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/mutant"
	"github.com/quotaqual/quotaqual/internal/mutant/matrix"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
)

// proofCase is one row of a scenario's proof: our gateway (no mutant) or a mutant, and the
// checks it must fail on in each view — with quota inspection (white-box) and from outside
// (undertest/testdata/quotaqual-blackbox.yaml). No check named: it must pass. outsideOnly
// runs the black-box view alone, for a scenario that reads no gateway counter (both views
// decide alike, so a mutant need be proven once).
type proofCase struct {
	name                  string
	m                     mutant.Name
	failsOn, failsOutside []string
	outsideOnly           bool
}

// runProofCases runs scenario name on engine with the mutants build for each case, in each of
// its views, and checks each verdict.
func runProofCases(t *testing.T, engine, name string, cases []proofCase) {
	t.Helper()
	endToEnd(t, "starts real processes")
	if reason := os.Getenv(envNoNetns); engine == topology.EngineNetns && reason != "" {
		t.Skip("netns topology unavailable on this host: " + reason)
	}
	list, err := Select([]string{name})
	if err != nil {
		t.Fatal(err)
	}
	blackBox, err := undertest.Load(filepath.Join("..", "undertest", "testdata", "quotaqual-blackbox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv(envHookBinary)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if bin == "" {
				t.Fatal("no mutants quotaqual binary: TestMain builds it unless -short")
			}
			for _, view := range []struct {
				name    string
				gw      *undertest.Profile
				failsOn []string
			}{{"white-box", nil, c.failsOn}, {"black-box", blackBox, c.failsOutside}} {
				if c.outsideOnly && view.gw == nil {
					continue
				}
				t.Run(view.name, func(t *testing.T) {
					results, _, _ := topologyRunBin(t, engine, bin, func(d *deployment.Deployment) {
						d.Backend = deployment.BackendValkey
						if c.m != "" {
							d.GatewayTestEnv = []string{mutant.EnvVar + "=" + string(c.m)}
						}
					}, func(s *topology.Spec) { s.Gateway = view.gw }, list)
					if len(results) != 1 {
						t.Fatalf("want one result, got %s", describeAll(results))
					}
					if len(view.failsOn) == 0 {
						if results[0].Status != evidence.Passed {
							t.Fatalf("want passed: %s", describe(results[0]))
						}
						t.Logf("passed: %s", results[0].KeyFact)
						return
					}
					expectFailedOn(t, results, view.failsOn...)
				})
			}
		})
	}
}

// TestStoreStallFailsOnItsDefects proves store-stall against the defects it guards, with
// inspection and from outside, and that our gateway passes it:
//   - a renewer that gives up after one failed renewal: the holds whose renewal fell into the
//     short stall run out a lease later, mid-request (the ledger shows it; from outside they
//     are charged their estimate instead of their smaller usage);
//   - a settlement dropped once its hold ran out: the long stall's request is charged its
//     estimate, never its overage (both views);
//   - a store error answered 429: the requests sent during the stalls are denials, not 503s.
func TestStoreStallFailsOnItsDefects(t *testing.T) {
	const (
		held      = "holds stayed live after the short stall"
		keptUsage = "settled at the usage the provider counted ("
		overage   = "its late settlement charged the overage"
		failed    = "request 1 during the short stall → 503"
	)
	runProofCases(t, topology.EngineProcess, "store-stall", []proofCase{
		{name: "our gateway passes"},
		{name: "renewal gives up after a failure", m: mutant.RenewalGivesUp, failsOn: []string{held, keptUsage}, failsOutside: []string{keptUsage}},
		{name: "settlement dropped once the hold ran out", m: mutant.SettleDropsLostOverage, failsOn: []string{overage}, failsOutside: []string{overage}},
		{name: "store error answered 429", m: mutant.StoreErrorAs429, failsOn: []string{failed}, failsOutside: []string{failed}},
	})
}

// TestGatewayPauseFailsOnItsDefects proves gateway-pause against the defects it guards, and that
// our gateway passes it:
//   - a settlement dropped once its hold ran out (the frozen gateway's late settlements): the
//     key keeps the estimates, not the usage (with inspection; from outside a key this full
//     cannot be read, a check the black-box result names as not made);
//   - the double charge of a repeated settlement: estimate and usage both;
//   - an expiry sweep that charges an unread key (the upstream D1 bug): the frozen holds vanish
//     uncharged and gateway-b admits the whole capacity (both views).
func TestGatewayPauseFailsOnItsDefects(t *testing.T) {
	const (
		late  = "the frozen requests' late settlements charged what the providers counted"
		burst = "gateway-b admitted exactly what the capacity less the frozen holds allows"
	)
	runProofCases(t, topology.EngineProcess, "gateway-pause", []proofCase{
		{name: "our gateway passes"},
		{name: "settlement dropped once the hold ran out", m: mutant.SettleDropsLostOverage, failsOn: []string{late}},
		{name: "sweep charges an unread key", m: mutant.SweepUnreadKey, failsOn: []string{burst}, failsOutside: []string{burst}},
	})
}

// TestStoreMemoryPressureFailsOnItsDefects proves store-memory-pressure against a gateway that
// answers a refused write as a quota denial (429) and one that admits on it (fails open), and
// that our gateway passes it.
func TestStoreMemoryPressureFailsOnItsDefects(t *testing.T) {
	const failed = "request 1 while the store refuses writes → 503"
	runProofCases(t, topology.EngineProcess, "store-memory-pressure", []proofCase{
		{name: "our gateway passes"},
		{name: "store error answered 429", m: mutant.StoreErrorAs429, failsOn: []string{failed}, failsOutside: []string{failed}},
		{name: "store error admitted", m: mutant.FailOpen, failsOn: []string{failed}, failsOutside: []string{failed}},
	})
}

// TestGatewayPauseFailsOnTheStoreClockInWholeSeconds proves gateway-pause's thaw short of the
// lease against blind patch 57 (round 3's 62): the scripts' now read from the store's TIME in
// whole seconds, so every lease deadline lands up to a second early. Whatever the store clock's
// phase, one of the two holds, reserved half a second apart, is early by more than the quarter
// of a second the thaw leaves: the scenario fails on that hold's charge (its estimate, not its
// usage) every run, with inspection and from outside, and passes on the unpatched gateway.
// Before, only store-stall met the defect, once in four runs (internal/blindround3).
func TestGatewayPauseFailsOnTheStoreClockInWholeSeconds(t *testing.T) {
	endToEnd(t, "builds a patched gateway and starts real processes")
	const kept = "the hold was kept (a hold ends no earlier than its last renewal + lease)"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	patched := filepath.Join(t.TempDir(), "quotaqual-store-clock-whole-seconds")
	if err := matrix.BuildPatched(ctx, "..", filepath.Join("..", matrix.BlindDir, "57-store-clock-whole-seconds.patch"), patched); err != nil {
		t.Fatal(err)
	}
	blackBox, err := undertest.Load(filepath.Join("..", "undertest", "testdata", "quotaqual-blackbox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := Select([]string{"gateway-pause"})
	if err != nil {
		t.Fatal(err)
	}
	for _, gw := range []struct {
		name, bin string
		defect    bool
	}{{"store clock in whole seconds", patched, true}, {"without the defect", quotaqualBinary(t), false}} {
		for _, view := range []struct {
			name string
			gw   *undertest.Profile
		}{{"white-box", nil}, {"black-box", blackBox}} {
			t.Run(gw.name+"/"+view.name, func(t *testing.T) {
				results, _, _ := topologyRunBin(t, topology.EngineProcess, gw.bin, func(*deployment.Deployment) {},
					func(s *topology.Spec) { s.Gateway = view.gw }, list)
				if len(results) != 1 {
					t.Fatalf("want one result, got %s", describeAll(results))
				}
				r := results[0]
				for _, f := range r.Facts {
					if f.Name == "thawed_short_of_lease" {
						b, _ := json.Marshal(f.Value)
						t.Logf("in %s: %s; %s", r.Elapsed.Round(100*time.Millisecond), r.KeyFact, b)
					}
				}
				if gw.defect {
					expectFailedOn(t, results, kept)
					return
				}
				if r.Status != evidence.Passed {
					t.Errorf("want passed: %s", describe(r))
				}
			})
		}
	}
}
