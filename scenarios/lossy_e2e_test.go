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

// TestLossyStoreLinkFailsOnItsDefects proves lossy-store-link on the netns engine (the one
// with the loss lever) against the defects it guards, and that our gateway passes it with
// inspection and from outside (the scenario's other checks read no gateway counter, so both
// views decide them alike and the mutants run from outside only; the clients-leave phase's
// store-error counter, white-box, is proven in TestGatewayCountersFailOnBlindDefects):
//   - a store error answered as a quota denial (429): subjects within their budget are denied,
//     and no store-failure answer is seen;
//   - a store error admitted (fails open): requests admitted without a hold are never charged,
//     so a subject's charge falls below what it generated, and no store-failure answer is seen;
//   - a settlement that is not idempotent (a repeat — the retry after a lost reply — charges
//     the usage again; the mutant repeats every one): a subject's charge exceeds what it
//     generated plus an estimate per store failure.
func TestLossyStoreLinkFailsOnItsDefects(t *testing.T) {
	const (
		bit     = "the loss failed some of gateway-a's store calls"
		denied  = "no subject within its budget was denied"
		charged = "each subject within its budget charged what it generated"
	)
	runProofCases(t, topology.EngineNetns, "lossy-store-link", []proofCase{
		{name: "our gateway passes"},
		{name: "store error answered 429", m: mutant.StoreErrorAs429, failsOutside: []string{bit, denied}, outsideOnly: true},
		{name: "store error admitted", m: mutant.FailOpen, failsOutside: []string{bit, charged}, outsideOnly: true},
		{name: "a repeated settlement charges again", m: mutant.SettleDoubleCharge, failsOutside: []string{charged}, outsideOnly: true},
	})
}

// TestLossyStoreLinkSkipsWithoutLoss: on the process engine (one namespace, no Lossy) the
// scenario is skipped with the lever's reason, never passed.
func TestLossyStoreLinkSkipsWithoutLoss(t *testing.T) {
	endToEnd(t, "starts real processes")
	list, err := Select([]string{"lossy-store-link"})
	if err != nil {
		t.Fatal(err)
	}
	results, _, _ := topologyRunBin(t, topology.EngineProcess, os.Getenv(envTestBinary), func(d *deployment.Deployment) {
		d.Backend = deployment.BackendValkey
	}, nil, list)
	if len(results) != 1 || results[0].Status != evidence.Skipped || !strings.Contains(results[0].Reason, "no Lossy") {
		t.Fatalf("want skipped for want of the loss lever, got %s", describeAll(results))
	}
	t.Logf("skipped: %s", firstLine(results[0].Reason))
}

// TestLossyStoreLinkProxyPhasesFailOnDefects proves the phases that go through the store-link
// proxy on their own (the loss phase left out), each against a defect it must catch:
//   - replies delayed near the store timeout, a store timeout answered as a quota denial
//     (store-error-as-429): subjects within their budget are denied, and no store-failure
//     answer is seen;
//   - every reply lost, every write applied, a store timeout admitted (fail-open): the
//     gateway that can decide nothing admits, so the hot subjects are admitted past their
//     capacity, and no store-failure answer is seen;
//   - a settlement that is not idempotent (settle-double-charge) while settlements time out
//     after they ran and are retried: a subject's charge exceeds the bound.
func TestLossyStoreLinkProxyPhasesFailOnDefects(t *testing.T) {
	endToEnd(t, "builds namespaces and starts real processes")
	if reason := os.Getenv(envNoNetns); reason != "" {
		t.Skip("netns topology unavailable on this host: " + reason)
	}
	list := []Scenario{lossyStoreLinkRun{only: []string{topology.StoreLatency.Name(), topology.StoreLostReplies.Name()}}.scenario()}
	blackBox, err := undertest.Load(filepath.Join("..", "undertest", "testdata", "quotaqual-blackbox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	bin := os.Getenv(envHookBinary)
	if bin == "" {
		t.Fatal("no mutants quotaqual binary: TestMain builds it unless -short")
	}
	const (
		latency = "store-latency: "
		lost    = "store-lost-replies: "
	)
	for _, c := range []struct {
		name    string
		m       mutant.Name
		failsOn []string
	}{
		// Whichever phase met a store failure shows the 429: the latency phase's +300 ms ±100 ms
		// times a call out only now and then (a reconnect's handshake on top; rarely since the
		// ledger pipelines every call), the lost replies' phase always (our gateway passes only
		// with at least one store failure there).
		{"store timeout answered 429", mutant.StoreErrorAs429, []string{"no subject within its budget was denied"}},
		{"store timeout admitted", mutant.FailOpen, []string{lost + "the lost replies failed some", lost + "no subject over-admitted"}},
		{"a repeated settlement charges again", mutant.SettleDoubleCharge, []string{latency + "each subject within its budget charged what it generated"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			results, _, _ := topologyRunBin(t, topology.EngineNetns, bin, func(d *deployment.Deployment) {
				d.Backend = deployment.BackendValkey
				d.GatewayTestEnv = []string{mutant.EnvVar + "=" + string(c.m)}
			}, func(s *topology.Spec) { s.Gateway = blackBox }, list)
			expectFailedOn(t, results, c.failsOn...)
			for _, a := range results[0].Assertions {
				if !a.OK {
					t.Logf("failed: %s: observed %v", a.Name, a.Observed)
				}
				// The run names only the proxy phases: the loss phase (the first, its checks
				// unprefixed) must not have run.
				if !strings.HasPrefix(a.Name, latency) && !strings.HasPrefix(a.Name, lost) {
					t.Errorf("check %q is no proxy phase's: the loss phase ran, though the run names only %s and %s", a.Name, latency, lost)
				}
			}
		})
	}
}
