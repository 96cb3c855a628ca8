package scenarios

import (
	"os"
	"testing"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/mutant"
	"github.com/quotaqual/quotaqual/topology"
)

// TestAPISurfaceFailsWhenEmbeddingsAreForwardedUnmetered proves api-surface catches a gateway
// that meters chat but forwards /v1/embeddings past its quota (the embeddings-unmetered
// mutant): with the subject spent by chat, embeddings are still admitted and reach a provider;
// and (with the quota inspection) the fresh embeddings request is charged nothing. On the same
// build without the defect it passes.
func TestAPISurfaceFailsWhenEmbeddingsAreForwardedUnmetered(t *testing.T) {
	endToEnd(t, "starts real processes")
	if os.Getenv(envHookBinary) == "" {
		t.Fatal("no mutants quotaqual binary: TestMain builds it unless -short")
	}
	list, err := Select([]string{"api-surface"})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("embeddings forwarded unmetered", func(t *testing.T) {
		expectFailedOn(t, topologyRunHooked(t, topology.EngineProcess, mutant.EmbeddingsUnmetered, nil, list),
			"spent embeddings: refused (the budget chat spent is its budget too)",
			"spent: no endpoint reached a provider",
			"fresh embeddings: charged what the provider counted")
	})
	t.Run("without a defect", func(t *testing.T) {
		for _, r := range topologyRunHooked(t, topology.EngineProcess, "", nil, list) {
			if r.Status != evidence.Passed {
				t.Errorf("%s", describe(r))
			}
			t.Logf("%s", describe(r))
		}
	})
}

// TestAPISurfaceBlackBoxPathFails: on a gateway without quota inspection (quotaqual's own,
// seen through the black-box profile) api-surface still fails against embeddings-unmetered —
// from the answers and the providers' counts alone — and passes without the defect, naming
// the charge checks it could not make.
func TestAPISurfaceBlackBoxPathFails(t *testing.T) {
	endToEnd(t, "starts real processes")
	r := blackBoxRun(t, "api-surface", mutant.EmbeddingsUnmetered, nil)
	expectFailedOn(t, []evidence.ScenarioResult{r},
		"spent embeddings: refused (the budget chat spent is its budget too)",
		"spent: no endpoint reached a provider")
	r = blackBoxRun(t, "api-surface", "", nil)
	if r.Status != evidence.Passed {
		t.Errorf("without the defect: %s", describe(r))
	}
}

// TestAPISurfaceFailsWhenTheDataPortServesTheQuotaInspection proves the unauthenticated probe
// of the admin paths on the data port against blind patch 53 (round 3's 59): a gateway that
// serves GET /admin/quota on its data port answers any client with a subject's settled and
// held quota. api-surface fails on that answer in both views (the probe is the same
// black-box) and passes on the unpatched gateway, whose data port answers those paths 404.
func TestAPISurfaceFailsWhenTheDataPortServesTheQuotaInspection(t *testing.T) {
	endToEnd(t, "builds a patched gateway and starts real processes")
	checkBlindCases(t, []blindCase{
		{"53-admin-quota-on-data-port.patch", "api-surface",
			[]string{"data port, no credentials, GET " + adminProbes[0] + ": no quota information"}, nil},
	}, "api-surface")
}
