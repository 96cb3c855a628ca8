// Package peerse2e pins what the qualification says of each peer — a real third-party engine
// behind its shim (internal/peers) — on netns, the way TestAltGatewayVerdicts pins the
// altgateway: every scenario's status, a fragment of its deciding fact, and whether black-box
// evidence decided it. A change is a failure listing every verdict that moved. The tests run
// only where the engines are built (`make peers`; CI builds them), and skip saying so
// elsewhere: `make test` does not need them.
package peerse2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/peers"
	"github.com/quotaqual/quotaqual/internal/testbin"
	"github.com/quotaqual/quotaqual/undertest"
)

// The quotaqual binary the runs use, built once by the first test that runs a peer (none is
// built when every peer test skips).
var (
	buildOnce sync.Once
	binDir    string
	binary    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func quotaqualBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "quotaqual-peerse2e-")
		if buildErr == nil {
			binary = filepath.Join(binDir, "quotaqual")
			buildErr = testbin.Build(binary)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// verdict is one scenario's pinned verdict.
type verdict struct {
	status   evidence.Status
	fragment string // in the deciding fact (key fact or reason); "" for any
	blackBox bool
}

// runPeer runs the whole reference qualification on peer (netns) and returns its results, or
// skips the test when the peer's engines are not built or the run is short.
func runPeer(t *testing.T, peer string, timeout time.Duration) []evidence.ScenarioResult {
	t.Helper()
	if testing.Short() {
		t.Skip("a whole qualification of a peer on netns: not in -short")
	}
	p, err := undertest.Shipped(peer)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Services {
		e, err := peers.ByName(s.Engine)
		if err != nil {
			t.Fatal(err)
		}
		if err := peers.Built(e); err != nil {
			t.Skipf("%v", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, quotaqualBinary(t), "run", "--gateway", peer, "--profile", "reference", "--json", "--evidence-dir", t.TempDir())
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("quotaqual run --gateway %s: %v\n%s", peer, err, stderr.String())
	}
	var out struct {
		Error   string                    `json:"error"`
		Results []evidence.ScenarioResult `json:"results"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || len(out.Results) == 0 {
		t.Fatalf("run --json printed no results (%v, %q)\nstderr:\n%s", err, out.Error, stderr.String())
	}
	t.Logf("%s: %d scenarios in %s", peer, len(out.Results), time.Since(start).Round(time.Second))
	return out.Results
}

// checkVerdicts compares results with pinned and fails once, listing every difference.
func checkVerdicts(t *testing.T, peer string, results []evidence.ScenarioResult, pinned map[string]verdict) {
	t.Helper()
	var diffs []string
	seen := map[string]bool{}
	for _, r := range results {
		seen[r.Name] = true
		fact := r.KeyFact + " | " + r.Reason
		want, ok := pinned[r.Name]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: %s (%s), not pinned", r.Name, r.Status, firstLine(fact)))
		case r.Status != want.status || (want.fragment != "" && !strings.Contains(fact, want.fragment)):
			diffs = append(diffs, fmt.Sprintf("%s: was %s with %q, now %s: %s", r.Name, want.status, want.fragment, r.Status, firstLine(fact)))
		case r.Status != evidence.Skipped && (r.Evidence != "") != want.blackBox:
			diffs = append(diffs, fmt.Sprintf("%s: black-box %v, pinned %v (%s)", r.Name, r.Evidence != "", want.blackBox, r.Evidence))
		}
		t.Logf("%s: %s %s", r.Name, r.Status, firstLine(fact))
	}
	for name := range pinned {
		if !seen[name] {
			diffs = append(diffs, name+": pinned, but the run has no result for it")
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("%s: %d verdicts moved (update docs/peers.md with `make peers-table` and the pins here if the change is meant):\n  %s",
			peer, len(diffs), strings.Join(diffs, "\n  "))
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:297] + "..."
	}
	return s
}
