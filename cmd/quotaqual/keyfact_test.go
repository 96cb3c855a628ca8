package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/mutant"
	"github.com/quotaqual/quotaqual/internal/testbin"
	"github.com/quotaqual/quotaqual/scenarios"
	"github.com/quotaqual/quotaqual/topology"
)

// keyFactRuns are real failing runs: the known-bad profile (quotaqual's gateway on a
// per-process memory ledger), the black-box profile on the same defect, and mutants that
// fail the scenarios the others leave passing — together every scenario of the quick
// qualification but network-policy fails in one of them (network-policy's failure, a wrong
// enforced policy, is a test-only setup: the scenarios' e2e tests hold it to the same rule).
var keyFactRuns = []struct {
	name      string
	mutant    mutant.Name // "" none
	gateway   string      // profile path; "" quotaqual's own
	scenarios []string    // "" the default list
}{
	{name: "known-bad profile quotaqual-memory", gateway: shippedProfile("quotaqual-memory")},
	{name: "black-box profile, separate memory stores", mutant: mutant.SeparateMemoryStores, gateway: blackBoxProfile},
	{name: "fail-open", mutant: mutant.FailOpen, scenarios: []string{"valkey-outage", "valkey-partition", "valkey-failover"}},
	{name: "store-error-as-429", mutant: mutant.StoreErrorAs429, scenarios: []string{"valkey-outage", "valkey-partition"}},
	{name: "read-then-write-reserve", mutant: mutant.ReadThenWriteReserve, scenarios: []string{"concurrency", "hard-gate", "rolling-upgrade"}},
	{name: "credentials-forwarded", mutant: mutant.CredentialsForwarded, scenarios: []string{"valid-auth"}},
	{name: "401-without-www-authenticate", mutant: mutant.NoWWWAuthenticate, scenarios: []string{"auth-rejection"}},
	{name: "black-box profile, estimate-on-disconnect", mutant: mutant.EstimateOnDisconnect, gateway: blackBoxProfile, scenarios: []string{"usage-accounting"}},
	{name: "black-box profile, sweep-unread-key", mutant: mutant.SweepUnreadKey, gateway: blackBoxProfile, scenarios: []string{"gateway-crash"}},
	{name: "hard-clamp-ignores-n", mutant: mutant.HardClampIgnoresN, scenarios: []string{"output-bound"}},
	{name: "black-box profile, usage-trusts-total", mutant: mutant.UsageTrustsTotal, gateway: blackBoxProfile, scenarios: []string{"provider-usage"}},
	// The altgateway keys its counters by the raw username: subject-privacy fails on them.
	{name: "altgateway, subject-privacy", gateway: shippedProfile("altgateway"), scenarios: []string{"subject-privacy"}},
}

// TestKeyFactsOfFailedRunsAreObservations renders every scenario's key fact from failing real
// runs and holds each to scenarios.KeyFactContradictions: a comparison it writes holds, a
// status it says was answered is one its requests got, and a failed scenario's key fact
// states no passing condition whose check failed. Before the key facts were built from the
// observed values, the fail-open run's valkey-outage said "503 within 2ms" with every answer
// 200, and its valkey-partition "cut-off replica 503 within …" likewise.
func TestKeyFactsOfFailedRunsAreObservations(t *testing.T) {
	t.Parallel() // a whole run: side by side (docker_runs_test.go)
	if testing.Short() {
		t.Skip("end-to-end: nine qualification runs on netns; not in -short")
	}
	if engine, why := topology.Detect(); engine != topology.EngineNetns {
		t.Skipf("the runs use the netns topology, unavailable here: %s", why)
	}
	mutants := filepath.Join(t.TempDir(), "quotaqual-mutants")
	if err := testbin.Build(mutants, mutant.Tag); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex                 // guards the two maps: the runs go side by side
	failedIn := map[string][]string{} // scenario → the runs it failed in
	blackBoxFailed := map[string]bool{}
	// The group returns when every run has: its runs are parallel subtests (each its own
	// process and namespaces), sharing the package's slots with the other whole runs.
	t.Run("runs", func(t *testing.T) {
		for _, run := range keyFactRuns {
			t.Run(run.name, func(t *testing.T) {
				t.Parallel()
				args := []string{"run", "--json", "--require", "none", "--evidence-dir", t.TempDir()}
				if run.gateway != "" {
					args = append(args, "--gateway", run.gateway)
				}
				for _, s := range run.scenarios {
					args = append(args, "--scenario", s)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
				defer cancel()
				cmd := exec.CommandContext(ctx, mutants, args...)
				cmd.Env = append(os.Environ(), mutant.EnvVar+"="+string(run.mutant))
				cmd.WaitDelay = 5 * time.Second
				var stderr strings.Builder
				cmd.Stderr = &stderr
				stdout, err := cmd.Output()
				var ee *exec.ExitError
				if err != nil && !errors.As(err, &ee) {
					t.Fatalf("%v\n%s", err, stderr.String())
				}
				var out runJSON
				if err := json.Unmarshal(stdout, &out); err != nil {
					t.Fatalf("no JSON (%v)\nstderr:\n%s", err, stderr.String())
				}
				b, err := evidence.LoadBundle(out.BundleDir)
				if err != nil {
					t.Fatal(err)
				}
				statuses := map[string][]int{}
				for _, q := range b.Requests {
					statuses[q.Scenario] = append(statuses[q.Scenario], q.Status)
				}
				failed := 0
				for _, r := range b.Results {
					if r.Status == evidence.Skipped {
						continue
					}
					if r.Status == evidence.Failed {
						failed++
						mu.Lock()
						failedIn[r.Name] = append(failedIn[r.Name], run.name)
						blackBoxFailed[r.Name] = blackBoxFailed[r.Name] || r.Evidence != ""
						mu.Unlock()
					}
					got := statuses[r.Name]
					if got == nil {
						got = []int{}
					}
					if lies := scenarios.KeyFactContradictions(r, got); len(lies) > 0 {
						t.Errorf("%s (%s): key fact %q: %s", r.Name, r.Status, r.KeyFact, strings.Join(lies, "; "))
					} else {
						t.Logf("%s (%s): %s", r.Name, r.Status, r.KeyFact)
					}
				}
				if failed == 0 {
					t.Errorf("no scenario failed: the run gives the rule nothing to hold")
				}
			})
		}
	})
	// The rule is applied to a failing key fact of every scenario, black-box paths included.
	for _, sc := range quickDefault() {
		if sc.Name == "network-policy" {
			continue
		}
		if len(failedIn[sc.Name]) == 0 {
			t.Errorf("%s failed in none of the runs: its failing key fact was not checked", sc.Name)
		}
	}
	for _, name := range []string{"gateway-crash", "usage-accounting", "long-generation", "shared-budget"} {
		if !blackBoxFailed[name] {
			t.Errorf("%s's black-box path failed in none of the runs (%v): its key fact was not checked", name, failedIn[name])
		}
	}
	var names []string
	for n := range failedIn {
		names = append(names, n)
	}
	slices.Sort(names)
	t.Logf("failing key facts checked for %d scenarios: %v", len(names), names)
}
