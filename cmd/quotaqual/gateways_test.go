package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/topology"
)

// TestRunWithFourGatewaysPassesOnEveryReplica runs the whole quick qualification on netns with
// --gateways 4 and then reads the bundle for what each replica did: a scenario that still sent
// to gateway-a and gateway-b only would pass on its own checks, but the evidence below would
// lack gateway-c and gateway-d (no decision from them in the burst, no denial on them after
// the shared budget ran out, no metrics, no log, no config).
func TestRunWithFourGatewaysPassesOnEveryReplica(t *testing.T) {
	t.Parallel() // a whole run: side by side (docker_runs_test.go)
	if testing.Short() {
		t.Skip("end-to-end: a full qualification with four gateways; not in -short")
	}
	if engine, why := topology.Detect(); engine != topology.EngineNetns {
		t.Skipf("netns unavailable here (auto chose %s: %s)", engine, why)
	}
	evDir := t.TempDir()
	start := time.Now()
	stdout, stderr, code := quotaqual(t, 5*time.Minute, "run", "--gateways", "4", "--json", "--evidence-dir", evDir)
	t.Logf("qualification with 4 gateways took %s", time.Since(start).Round(time.Millisecond))
	var out runJSON
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("run --json printed no JSON (%v)\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if code != 0 || out.ExitCode != 0 {
		t.Errorf("exit code %d (json %d, error %q), want 0", code, out.ExitCode, out.Error)
	}
	if want := len(quickDefault()); len(out.Results) != want {
		t.Fatalf("%d results, want all %d scenarios", len(out.Results), want)
	}
	for _, r := range out.Results {
		if r.Status != evidence.Passed {
			t.Errorf("%s: %s (%s)", r.Name, r.Status, r.Reason)
		}
	}
	gateways := topology.GatewayNames(4)

	// The manifest names the four replicas, and the bundle has each one's files.
	var m evidence.Manifest
	readJSON(t, filepath.Join(out.BundleDir, "manifest.json"), &m)
	var replicas []string
	remarshal(t, m.TopologyFacts["gateway_replicas"], &replicas)
	if !slices.Equal(replicas, gateways) {
		t.Errorf("manifest gateway_replicas %v, want %v", replicas, gateways)
	}
	for _, g := range gateways {
		for _, f := range []string{"logs/" + g + ".log", "metrics/" + g + ".prom", "config/" + g + ".yaml"} {
			if _, err := os.Stat(filepath.Join(out.BundleDir, f)); err != nil {
				t.Errorf("bundle lacks %s: %v", f, err)
			}
		}
	}

	// shared-budget: after the exhaustion the next request is denied on every replica.
	var denied map[string]int
	remarshal(t, fact(t, out.Results, "shared-budget", "next_request_status_per_gateway"), &denied)
	for _, g := range gateways {
		if denied[g] != 429 {
			t.Errorf("shared-budget: next request on %s answered %d, want 429 (statuses %v)", g, denied[g], denied)
		}
	}
	// concurrency and valid-auth: every replica decided some of the requests.
	for _, sc := range []string{"concurrency", "valid-auth"} {
		var per map[string]struct {
			Sent     int `json:"sent"`
			Admitted int `json:"admitted"`
			Denied   int `json:"denied_429"`
		}
		remarshal(t, fact(t, out.Results, sc, "per_gateway"), &per)
		for _, g := range gateways {
			if c := per[g]; c.Sent == 0 || c.Admitted+c.Denied == 0 {
				t.Errorf("%s: %s decided none of the requests: %+v", sc, g, per)
			}
		}
	}
}

// fact is the value of a scenario's fact, or fails the test.
func fact(t *testing.T, results []evidence.ScenarioResult, scenario, name string) any {
	t.Helper()
	for _, r := range results {
		if r.Name != scenario {
			continue
		}
		for _, f := range r.Facts {
			if f.Name == name {
				return f.Value
			}
		}
		t.Fatalf("%s has no fact %q", scenario, name)
	}
	t.Fatalf("no result for %s", scenario)
	return nil
}

func readJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func remarshal(t *testing.T, in, out any) {
	t.Helper()
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
}
