package scenarios

import (
	"context"
	"path/filepath"
	"slices"
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

// TestIdentityAndModelSourcesFailOnBlindDefects proves identity-sources and model-source catch
// the identity and model defects of the blind set (internal/mutant/blind), each built into a
// gateway of its own: the subject taken from X-Forwarded-User, the Basic username looked up
// case-folded but metered as sent, the x-model header overriding the body's model, and the
// allowlist matched case-insensitively (each variant a key of its own). Each scenario must fail
// on the check that guards the defect, white-box (quotaqual's profile, with inspection) and
// black-box (quotaqual-blackbox.yaml: what a client sees), and pass on the unpatched gateway.
func TestIdentityAndModelSourcesFailOnBlindDefects(t *testing.T) {
	endToEnd(t, "builds patched gateways and starts real processes")
	checkBlindCases(t, []blindCase{
		{"01-subject-from-forwarded-user-header.patch", "identity-sources",
			[]string{"spent application-a naming another subject", "none of the probes reached a provider",
				"application-b charged nothing by the probes"},
			[]string{"application-b: settled and reserved tokens unchanged by the probes"}},
		{"02-basic-username-case-folded.patch", "identity-sources",
			[]string{"spent application-a's username spelled", "none of the probes reached a provider"}, nil},
		{"05-header-model-overrides-body.patch", "model-source",
			[]string{"none admitted", "none of the probes reached a provider", "application-a/qwen3-8b charged nothing by the probes"},
			[]string{"application-a/qwen3-8b: settled and reserved tokens unchanged by the probes"}},
		{"06-allowed-models-case-insensitive.patch", "model-source",
			[]string{"none admitted", "none of the probes reached a provider"}, nil},
	}, "identity-sources", "model-source")
}

// blindCase is one blind patch (internal/mutant/blind) and the scenario that must fail on it.
type blindCase struct {
	patch, scenario string
	failedOn        []string // both views
	whiteBoxOnly    []string // the ledger read through the inspection
}

// checkBlindCases builds each case's patch into a gateway of its own (two builds at a time)
// and runs its scenario on it white-box (quotaqual's profile, with inspection) and black-box
// (quotaqual-blackbox.yaml: what a client sees): each must fail on the checks named. Then the
// unpatched gateway runs the baseline scenarios in both views: each must pass. Every run is
// on the process engine.
func checkBlindCases(t *testing.T, cases []blindCase, baseline ...string) {
	t.Helper()
	checkBlindCasesOn(t, topology.EngineProcess, cases, baseline...)
}

// checkBlindCasesOn is checkBlindCases on engine, for scenarios that need a lever the process
// engine lacks.
func checkBlindCasesOn(t *testing.T, engine string, cases []blindCase, baseline ...string) {
	t.Helper()
	bins := make([]string, len(cases))
	errs := make([]error, len(cases))
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	// Two builds at a time: the machine's cores are shared.
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for i, c := range cases {
		bins[i] = filepath.Join(dir, strings.TrimSuffix(c.patch, ".patch"))
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			errs[i] = matrix.BuildPatched(ctx, "..", filepath.Join("..", matrix.BlindDir, c.patch), bins[i])
		}()
	}
	wg.Wait()
	blackBox, err := undertest.Load(filepath.Join("..", "undertest", "testdata", "quotaqual-blackbox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	run := func(t *testing.T, bin string, gw *undertest.Profile, scenarios ...string) []evidence.ScenarioResult {
		list, err := Select(scenarios)
		if err != nil {
			t.Fatal(err)
		}
		results, _, _ := topologyRunBin(t, engine, bin, func(*deployment.Deployment) {},
			func(s *topology.Spec) { s.Gateway = gw }, list)
		inspecting := map[string]bool{}
		for _, sc := range list {
			inspecting[sc.Name] = slices.Contains(sc.Prefers, NeedQuotaInspection)
		}
		for _, r := range results {
			t.Logf("%s: %s — %s", r.Name, r.Status, r.KeyFact)
			// A scenario that uses no inspection has the same evidence in both views.
			if gw != nil && inspecting[r.Name] && !strings.HasPrefix(r.Evidence, "black-box") {
				t.Fatalf("want every result at the black-box level, got %s", describeAll(results))
			}
		}
		return results
	}
	for i, c := range cases {
		t.Run(strings.TrimSuffix(c.patch, ".patch"), func(t *testing.T) {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			t.Run("white-box", func(t *testing.T) {
				expectFailedOn(t, run(t, bins[i], nil, c.scenario), append(c.failedOn, c.whiteBoxOnly...)...)
			})
			t.Run("black-box", func(t *testing.T) {
				expectFailedOn(t, run(t, bins[i], blackBox, c.scenario), c.failedOn...)
			})
		})
	}
	t.Run("without a defect", func(t *testing.T) {
		for _, gw := range []*undertest.Profile{nil, blackBox} {
			for _, r := range run(t, quotaqualBinary(t), gw, baseline...) {
				if r.Status != evidence.Passed {
					t.Errorf("%s", describe(r))
				}
			}
		}
	})
}
