package scenarios

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/mutant"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
)

// blackBoxRun runs the named scenario on the process topology with quotaqual's own gateway
// seen through undertest/testdata/quotaqual-blackbox.yaml (no quota inspection, the scenarios'
// rules rendered), its gateways armed with mutant m ("" for none) and the deployment changed by
// tweak, and returns the one result, which must be at the black-box evidence level.
func blackBoxRun(t *testing.T, name string, m mutant.Name, tweak func(*deployment.Deployment)) evidence.ScenarioResult {
	t.Helper()
	bin := os.Getenv(envHookBinary)
	if bin == "" {
		t.Fatal("no mutants quotaqual binary: TestMain builds it unless -short")
	}
	gw, err := undertest.Load(filepath.Join("..", "undertest", "testdata", "quotaqual-blackbox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := Select([]string{name})
	if err != nil {
		t.Fatal(err)
	}
	results, _, _ := topologyRunBin(t, topology.EngineProcess, bin, func(d *deployment.Deployment) {
		if m != "" {
			d.GatewayTestEnv = []string{mutant.EnvVar + "=" + string(m)}
		}
		if tweak != nil {
			tweak(d)
		}
	}, func(s *topology.Spec) { s.Gateway = gw }, list)
	if len(results) != 1 || !strings.HasPrefix(results[0].Evidence, "black-box") {
		t.Fatalf("want one result at the black-box level, got %s", describeAll(results))
	}
	return results[0]
}

// TestRuleScenariosBlackBoxPathsFail proves the scenarios that need their own rule can fail on
// a gateway without quota inspection, now that the black-box profile renders their rules (they
// used to skip there): hard-gate under meter (the providers count more usage than the capacity),
// layered-budgets against a ledger that weighs only the first window or reports the first
// refusing window's Retry-After, and model-budgets against
// a gateway that leaves the model out of the key — each failing on the check its white-box
// twin fails on, decided from the providers' counts and the responses' usage alone; and each
// passes on the same profile without the defect.
func TestRuleScenariosBlackBoxPathsFail(t *testing.T) {
	endToEnd(t, "starts real processes")
	for _, c := range []struct {
		scenario string
		mutant   mutant.Name
		tweak    func(*deployment.Deployment)
		failedOn []string
	}{
		{"hard-gate", "", meterTheHardGate,
			[]string{"usage settled within any window ≤ capacity (at the providers)"}},
		{"layered-budgets", mutant.FirstBudgetOnly, nil,
			[]string{"every decision as the rule replayed on the responses' usage says", "nothing admitted past the long window"}},
		// Blind review 07: both windows refuse and the 429 speaks for the short one; the client
		// that waits its Retry-After out is refused again (no inspection needed to see it).
		{"layered-budgets", mutant.RetryAfterFirstWindow, nil,
			[]string{"a client that waited the both-windows 429's Retry-After", "round 3's 429 (both windows): Retry-After is the long window's wait"}},
		{"model-budgets", mutant.ModelLeftOutOfKey, nil,
			[]string{"the same subject on qwen3-8b admitted after its qwen3-0.6b budget was spent"}},
	} {
		t.Run(c.scenario, func(t *testing.T) {
			expectFailedOn(t, []evidence.ScenarioResult{blackBoxRun(t, c.scenario, c.mutant, c.tweak)}, c.failedOn...)
			if control := blackBoxRun(t, c.scenario, "", nil); control.Status != evidence.Passed {
				t.Errorf("without the defect: %s", describe(control))
			}
		})
	}
}
