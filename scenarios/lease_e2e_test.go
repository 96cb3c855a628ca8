package scenarios

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/mutant/matrix"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
)

// patchedBinary builds quotaqual with the blind patch applied (internal/mutant/blind), as the
// mutation matrix does: the patch changes only the gateway and the ledger, so the binary serves
// as the run's harness and as its gateways.
func patchedBinary(t *testing.T, patch string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "quotaqual-"+patch)
	if err := matrix.BuildPatched(ctx, "..", filepath.Join("..", matrix.BlindDir, patch), out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGatewayCrashLeaseBoundsFailOnTheirDefects proves each of gateway-crash's lease and
// Retry-After checks against the defect it guards, with quota inspection and from outside only
// (undertest/testdata/quotaqual-blackbox.yaml), and that our gateway passes them:
//   - a renewal that re-arms only on failure (blind 15): the dead hold runs out a lease after
//     its first renewal, before last renewal + lease (from outside: admitted again too early);
//   - a renewal that moves the key's earliest deadline to its own (blind 16): the sweep waits
//     for the survivor's renewals, so the dead hold outlives lease + slack (from outside:
//     admitted again too late);
//   - a lease longer than the profile says (the gateways rendered with three times the lease:
//     from outside the hold's end is seen through the charge leaving a window of one-second
//     buckets, after a slack, so a lease only a second or two longer — twice the quick 3 s,
//     renewed late in its period — can land inside the bounds);
//   - a Retry-After rounded instead of ceiled (blind 23): a 429 while the holds fill the
//     budget sends its client back before the dead hold ends. With inspection only: from
//     outside the dead hold's end is known to a bucket, coarser than the rounding (a check
//     the black-box result names as not made).
func TestGatewayCrashLeaseBoundsFailOnTheirDefects(t *testing.T) {
	endToEnd(t, "builds patched gateways and starts real processes")
	list, err := Select([]string{"gateway-crash"})
	if err != nil {
		t.Fatal(err)
	}
	blackBox, err := undertest.Load(filepath.Join("..", "undertest", "testdata", "quotaqual-blackbox.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	const (
		lowerBound   = "the dead hold is released no earlier than its last renewal + lease"
		upperBound   = "the dead hold is released no later than its last renewal + lease + the profile's slack"
		retryAfter   = "every 429 while holds fill the budget carries a Retry-After no earlier than the earliest hold can end"
		bbLowerBound = "the subject is admitted again no earlier than the dead hold's last renewal + lease + window"
		bbUpperBound = "the subject is admitted again no later than the dead hold's last renewal + lease + the profile's slack + window + bucket"
	)
	plain := func(d *deployment.Deployment) { d.Backend = deployment.BackendValkey }
	run := func(t *testing.T, bin string, tweak func(*deployment.Deployment), gw *undertest.Profile) evidence.ScenarioResult {
		results, _, _ := topologyRunBin(t, topology.EngineProcess, bin, tweak, func(s *topology.Spec) { s.Gateway = gw }, list)
		if len(results) != 1 || strings.HasPrefix(results[0].Evidence, "black-box") != (gw != nil) {
			t.Fatalf("want one result at the level of the view, got %s", describeAll(results))
		}
		return results[0]
	}
	for _, c := range []struct {
		name, patch           string
		tweak                 func(*deployment.Deployment)
		failsOn, failsOutside []string
	}{
		{"our gateway passes", "", plain, nil, nil},
		{"renewal fires once", "15-renewal-fires-once.patch", plain, []string{lowerBound}, []string{bbLowerBound}},
		{"renewal moves the earliest deadline", "16-renew-moves-earliest-deadline.patch", plain, []string{upperBound}, []string{bbUpperBound}},
		{"lease three times the profile's", "", func(d *deployment.Deployment) { plain(d); d.Profile.Lease *= 3 }, []string{upperBound}, []string{bbUpperBound}},
		{"retry-after rounded", "23-retry-after-rounded-not-ceiled.patch", plain, []string{retryAfter}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			bin := quotaqualBinary(t)
			if c.patch != "" {
				bin = patchedBinary(t, c.patch)
			}
			for _, view := range []struct {
				name    string
				gw      *undertest.Profile
				failsOn []string
			}{{"white-box", nil, c.failsOn}, {"black-box", blackBox, c.failsOutside}} {
				t.Run(view.name, func(t *testing.T) {
					r := run(t, bin, c.tweak, view.gw)
					if len(view.failsOn) == 0 {
						if r.Status != evidence.Passed {
							t.Fatalf("want passed: %s", describe(r))
						}
						t.Logf("passed: %s", r.KeyFact)
						return
					}
					expectFailedOn(t, []evidence.ScenarioResult{r}, view.failsOn...)
				})
			}
		})
	}
}
