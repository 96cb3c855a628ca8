package scenarios

import (
	"os"
	"testing"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/mutant"
	"github.com/quotaqual/quotaqual/topology"
)

// TestQuotaBypassFailsWhenASpellingIsForwardedUnmetered proves quota-bypass catches a gateway
// that serves one spelling of the chat path past its quota (the trailing-slash-unmetered
// mutant: /v1/chat/completions/ forwarded and relayed without a reservation), on the spent pass
// where no reservation could have paid for it, and passes on the same build without the defect.
func TestQuotaBypassFailsWhenASpellingIsForwardedUnmetered(t *testing.T) {
	endToEnd(t, "starts real processes")
	if os.Getenv(envHookBinary) == "" {
		t.Fatal("no mutants quotaqual binary: TestMain builds it unless -short")
	}
	list, err := Select([]string{"quota-bypass"})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("trailing slash forwarded unmetered", func(t *testing.T) {
		expectFailedOn(t, topologyRunHooked(t, topology.EngineProcess, mutant.TrailingSlashUnmetered, nil, list),
			"spent trailing-slash: refused with a 4xx",
			"spent: no spelling reached a provider")
	})
	t.Run("without a defect", func(t *testing.T) {
		for _, r := range topologyRunHooked(t, topology.EngineProcess, "", nil, list) {
			if r.Status != evidence.Passed {
				t.Errorf("%s", describe(r))
			}
		}
	})
}
