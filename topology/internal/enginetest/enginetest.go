// Package enginetest holds what the tests of the process-based engines (netns, process)
// share: a TestMain that builds the quotaqual binary and re-executes the test binary inside
// its own namespaces, a Spec for a test, and the walkthrough checks they make on a topology.
package enginetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/internal/testbin"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/internal/e2e"
)

// testBinary is the quotaqual binary built once for all tests.
var testBinary string

// Main is an engine test package's TestMain: it builds the quotaqual binary (outside the
// namespace, where the module cache and the network are), then re-executes the test binary
// inside its own user+net+mount+pid namespaces exactly like `quotaqual run` does, so the netns
// tests use real namespaces, also without root. Everything the tests start dies with that
// namespace at the latest. It returns the exit code.
func Main(m *testing.M) int {
	if !topology.Inside() {
		dir, err := os.MkdirTemp("", "quotaqual-topology-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		bin := filepath.Join(dir, "quotaqual")
		if err := testbin.Build(bin); err != nil {
			fmt.Fprintln(os.Stderr, "building the quotaqual binary for the topology tests:", err)
			return 1
		}
		os.Setenv("QQ_TEST_BINARY", bin)
		engine, reason := topology.Detect()
		if engine == topology.EngineNetns {
			_, code, err := topology.ReexecIntoNamespace(topology.NewRunID(), nil)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
			return code
		}
		os.Setenv("QQ_TEST_NO_NETNS", reason)
	} else if _, _, err := topology.ReexecIntoNamespace(topology.InsideRunID(), nil); err != nil {
		fmt.Fprintln(os.Stderr, "preparing the namespace:", err)
		return 1
	}
	testBinary = os.Getenv("QQ_TEST_BINARY")
	return m.Run()
}

// NewSpec is the Spec of a fresh run for a test, on the quick profile with deny mode mode.
func NewSpec(t *testing.T, mode string) topology.Spec {
	t.Helper()
	return SpecFor(t, testBinary, mode)
}

// SpecFor is NewSpec for a test package with its own quotaqual binary (or none: a topology
// that is built but never brought up).
func SpecFor(t *testing.T, binary, mode string) topology.Spec {
	t.Helper()
	id := topology.NewRunID()
	p, err := deployment.ProfileByName("quick")
	if err != nil {
		t.Fatal(err)
	}
	d, err := deployment.NewDeployment(id, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	return topology.Spec{RunID: id, WorkDir: t.TempDir(), Binary: binary, Deployment: d, DenyMode: mode, Stdout: e2e.LogWriter{T: t}}
}

// Chat sends one walkthrough request to a gateway from the client host and returns the status
// and the provider site that served it; a transport error fails the test.
func Chat(t *testing.T, topo topology.Topology, gateway string, d *deployment.Deployment) (int, string) {
	t.Helper()
	return e2e.Chat(t, topo, gateway, d, deployment.Subjects[0], 10*time.Second, t.Fatalf)
}

// GetStatus fetches url with the observer client.
func GetStatus(topo topology.Topology, url string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := topo.Observer().Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}

// PIDsFromTeardown extracts the pids Down reported.
func PIDsFromTeardown(td topology.Teardown) []int {
	var out []int
	for _, r := range td.Removed {
		f := strings.Fields(r)
		if len(f) == 4 && f[0] == "process" && f[2] == "pid" {
			if n, err := strconv.Atoi(f[3]); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// LivePIDs lists the processes of this run (carrying its run id) that are neither gone nor
// zombies.
func LivePIDs(runID string) []int {
	var out []int
	for _, p := range topology.FindRunProcesses(runID) {
		if !topology.ZombieOrGone(p) {
			out = append(out, p)
		}
	}
	return out
}

// MustJSON is v as JSON, for test messages.
func MustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// WaitStoreBack polls Chat until the gateway decides with the store again (200, or 429 once
// the polling has used the budget up) or the deadline passes.
func WaitStoreBack(t *testing.T, topo topology.Topology, gateway string, d *deployment.Deployment, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		code, _ := Chat(t, topo, gateway, d)
		if code == http.StatusOK || code == http.StatusTooManyRequests {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("chat via %s still %d after %s", gateway, code, within)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// UpTopology brings an engine's topology up for a test, tears it down when the test ends, and
// returns how long Up took.
func UpTopology(t *testing.T, engine string, spec topology.Spec) (topology.Topology, time.Duration) {
	t.Helper()
	topo, err := topology.New(engine, spec)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := topo.Up(context.Background()); err != nil {
		topo.Down(context.Background())
		t.Fatal(err)
	}
	upTime := time.Since(start)
	t.Cleanup(func() { topo.Down(context.Background()) })
	return topo, upTime
}
