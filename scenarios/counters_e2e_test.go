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
// the scenario whose check guards it:
//   - 55, usage known from the ledger's flag: every floor is counted reported, so provider-usage's
//     unreported count stays 0 against the responses whose usage was missing or below what was
//     generated (process engine);
//   - 58, the reserve run on the request's context: each client that leaves mid-reserve is
//     counted a store error though no client got a store-failure answer; its charge stays 0
//     (the ambiguous reserve is released), so only the counter shows it (lossy-store-link's
//     clients-leave phase alone, on netns: its store-latency lever is a proxy in the link).
//
// The unpatched gateway passes both, white-box and black-box; black-box (quotaqual-blackbox.yaml
// declares no counter) the counter checks are not made and the result says so — those patched
// gateways pass there, the escape docs/contract.md names.
func TestGatewayCountersFailOnBlindDefects(t *testing.T) {
	endToEnd(t, "builds patched gateways, namespaces and real processes")
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
	blackBox, err := undertest.Load(filepath.Join("..", "undertest", "testdata", "quotaqual-blackbox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	// Each scenario on a topology of its own, so that none starts where another's lever left
	// the gateways (a store link healed while its redirect's NAT went first once left
	// gateway-a a half-open store connection for seconds; the heal now ends those
	// connections, enginetest.checkEnded). provider-usage pulls no lever, so the process
	// engine does for it.
	run := func(t *testing.T, bin string, gw *undertest.Profile, store bool) evidence.ScenarioResult {
		t.Helper()
		engine, list := topology.EngineProcess, []Scenario(nil)
		if store {
			engine, list = topology.EngineNetns, []Scenario{lossyStoreLinkRun{only: []string{leavingPhase}}.scenario()}
		} else if list, err = Select([]string{providerUsageRule}); err != nil {
			t.Fatal(err)
		}
		results, _, _ := topologyRunBin(t, engine, bin, func(d *deployment.Deployment) {
			d.Backend = deployment.BackendValkey
		}, func(s *topology.Spec) { s.Gateway = gw }, list)
		if len(results) != 1 {
			t.Fatalf("want one result, got %s", describeAll(results))
		}
		t.Logf("%s: %s — %s", results[0].Name, results[0].Status, results[0].KeyFact)
		return results[0]
	}
	for i, c := range cases {
		t.Run(strings.TrimSuffix(c.patch, ".patch"), func(t *testing.T) {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if c.usage {
				expectFailedOn(t, []evidence.ScenarioResult{run(t, bins[i], nil, false)}, usageCheck)
			}
			if c.store {
				expectFailedOn(t, []evidence.ScenarioResult{run(t, bins[i], nil, true)}, storeCheck)
			}
		})
	}
	t.Run("without a defect", func(t *testing.T) {
		for _, gw := range []*undertest.Profile{nil, blackBox} {
			for _, store := range []bool{false, true} {
				r := run(t, quotaqualBinary(t), gw, store)
				if r.Status != evidence.Passed {
					t.Errorf("%s", describe(r))
				}
				if gw != nil && !strings.Contains(r.Evidence, "declares no counter") {
					t.Errorf("%s black-box: the counter checks are not said to be not made: %q", r.Name, r.Evidence)
				}
			}
		}
	})
}
