package scenarios

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/mutant/matrix"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
)

// TestGatewayCountersFailOnBlindDefects proves the checks of the gateway's own counters
// (capabilities.metrics) against the blind patches that make them lie, each built into a
// gateway of its own and run white-box (quotaqual.yaml declares the counters) through
// provider-usage and lossy-store-link's clients-leave phase, on netns (the phase's store-latency
// lever is a proxy in the gateway's store link):
//   - 55, usage known from the ledger's flag: every floor is counted reported, so provider-usage's
//     unreported count stays 0 against the responses whose usage was missing or below what was
//     generated; clients-leave passes;
//   - 58, the reserve run on the request's context: each client that leaves mid-reserve is
//     counted a store error though no client got a store-failure answer; its charge stays 0
//     (the ambiguous reserve is released), so only the counter shows it; provider-usage passes.
//
// The unpatched gateway passes both, white-box and black-box; black-box (quotaqual-blackbox.yaml
// declares no counter) the counter checks are not made and the result says so — those patched
// gateways pass there, the escape docs/contract.md names.
func TestGatewayCountersFailOnBlindDefects(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds patched gateways, namespaces and real processes; not in -short")
	}
	if reason := os.Getenv(envNoNetns); reason != "" {
		t.Skip("netns topology unavailable on this host: " + reason)
	}
	const (
		usageCheck = "usage counted unreported for every response whose usage was missing or below what was generated"
		storeCheck = leavingPhase + ": a client leaving mid-reserve is no store failure"
	)
	cases := []struct {
		patch        string
		usage, store bool // the check that must fail
	}{
		{"55-usage-known-metric-from-ledger-flag.patch", true, false},
		{"58-reserve-cancelled-by-client.patch", false, true},
	}
	dir := t.TempDir()
	bins := make([]string, len(cases))
	errs := make([]error, len(cases))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for i, c := range cases {
		bins[i] = filepath.Join(dir, strings.TrimSuffix(c.patch, ".patch"))
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = matrix.BuildPatched(ctx, "..", filepath.Join("..", matrix.BlindDir, c.patch), bins[i])
		}()
	}
	wg.Wait()
	list := func(t *testing.T) []Scenario {
		pu, err := Select([]string{providerUsageRule})
		if err != nil {
			t.Fatal(err)
		}
		return append(pu, lossyStoreLinkRun{only: []string{leavingPhase}}.scenario())
	}
	run := func(t *testing.T, bin string, gw *undertest.Profile) map[string]evidence.ScenarioResult {
		results, _, _ := topologyRunBin(t, topology.EngineNetns, bin, func(d *deployment.Deployment) {
			d.Backend = deployment.BackendValkey
		}, func(s *topology.Spec) { s.Gateway = gw }, list(t))
		out := map[string]evidence.ScenarioResult{}
		for _, r := range results {
			out[r.Name] = r
			t.Logf("%s: %s — %s", r.Name, r.Status, r.KeyFact)
		}
		if len(out) != 2 {
			t.Fatalf("want provider-usage and lossy-store-link, got %s", describeAll(results))
		}
		return out
	}
	judge := func(t *testing.T, r evidence.ScenarioResult, check string, fails bool) {
		t.Helper()
		if !fails {
			if r.Status != evidence.Passed {
				t.Errorf("want passed: %s", describe(r))
			}
			return
		}
		expectFailedOn(t, []evidence.ScenarioResult{r}, check)
	}
	for i, c := range cases {
		t.Run(strings.TrimSuffix(c.patch, ".patch"), func(t *testing.T) {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			rs := run(t, bins[i], nil)
			judge(t, rs[providerUsageRule], usageCheck, c.usage)
			judge(t, rs[deployment.LossyStoreLinkScenario], storeCheck, c.store)
		})
	}
	t.Run("without a defect", func(t *testing.T) {
		blackBox, err := undertest.Load(filepath.Join("..", "undertest", "testdata", "quotaqual-blackbox.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, gw := range []*undertest.Profile{nil, blackBox} {
			for name, r := range run(t, quotaqualBinary(t), gw) {
				if r.Status != evidence.Passed {
					t.Errorf("%s", describe(r))
				}
				if gw != nil && !strings.Contains(r.Evidence, "declares no counter") {
					t.Errorf("%s black-box: the counter checks are not said to be not made: %q", name, r.Evidence)
				}
			}
		}
	})
}
