package main

// End-to-end tests of the quotaqual binary as a user runs it: the full qualification on the
// default topology through `quotaqual run --json`, the bundle re-verified by `quotaqual
// evidence verify`, the exit codes, and Ctrl-C writing a partial bundle.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/quotaqual/quotaqual/internal/testlock"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/testbin"
	"github.com/quotaqual/quotaqual/scenarios"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/dockerengine"
	"github.com/quotaqual/quotaqual/topology/images"
	"github.com/quotaqual/quotaqual/topology/k8s"
	"github.com/quotaqual/quotaqual/wire"
)

var binary string

func TestMain(m *testing.M) { os.Exit(testbin.Main(m, "cli", &binary)) }

type runJSON struct {
	RunID     string                    `json:"run_id"`
	Topology  string                    `json:"topology"`
	ExitCode  int                       `json:"exit_code"`
	Error     string                    `json:"error"`
	Qual      evidence.Qualification    `json:"qualification"`
	BundleDir string                    `json:"bundle_dir"`
	BundleTar string                    `json:"bundle_tar"`
	Results   []evidence.ScenarioResult `json:"results"`
}

// quotaqual runs the binary with a deadline and returns stdout, stderr and the exit code.
func quotaqual(t *testing.T, timeout time.Duration, args ...string) (string, string, int) {
	t.Helper()
	return quotaqualWith(t, binary, timeout, args...)
}

// quotaqualWith is quotaqual with another build of the binary (a mutants build).
func quotaqualWith(t *testing.T, bin string, timeout time.Duration, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &ee):
		return stdout.String(), stderr.String(), ee.ExitCode()
	default:
		t.Fatalf("quotaqual %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
		return "", "", -1
	}
}

func TestRunDefaultTopologyPassesAllScenariosAndTheBundleVerifies(t *testing.T) {
	t.Parallel() // a whole run: side by side (docker_runs_test.go)
	engine, why := topology.Detect()
	if engine != topology.EngineNetns {
		t.Fatalf("the default topology should be netns on this Linux machine, auto chose %s: %s", engine, why)
	}
	evDir := t.TempDir()
	stdout, stderr, code := quotaqual(t, 3*time.Minute, "run", "--json", "--evidence-dir", evDir, "--bundle", "tar.gz")
	var out runJSON
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("run --json printed no JSON (%v)\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if code != 0 || out.ExitCode != 0 {
		t.Errorf("exit code %d (json %d, error %q), want 0", code, out.ExitCode, out.Error)
	}
	if out.Topology != topology.EngineNetns {
		t.Errorf("topology %q, want netns", out.Topology)
	}
	if want := len(quickDefault()); len(out.Results) != want {
		t.Fatalf("%d results, want all %d scenarios", len(out.Results), want)
	}
	for _, r := range out.Results {
		if r.Status != evidence.Passed {
			t.Errorf("%s: %s (%s)", r.Name, r.Status, r.Reason)
		}
	}
	if q := out.Qual; q.Level != evidence.LevelQualified || q.Require != "all" || q.Passed != len(quickDefault()) {
		t.Errorf("qualification %+v, want qualified under --require all", q)
	}
	// The closing progress line says how they ran: side by side, and on netns each lever
	// scenario on a topology of its own, all of them.
	var levers []string
	for _, sc := range quickDefault() {
		if sc.Exclusive != "" {
			levers = append(levers, sc.Name)
		}
	}
	if want := fmt.Sprintf("%d side by side, %d on topologies of their own: %d of %d passed", len(quickDefault())-len(levers), len(levers), len(quickDefault()), len(quickDefault())); !strings.Contains(stderr, want) {
		t.Errorf("the closing progress line does not say how the scenarios ran (%q):\n%s", want, stderr)
	}
	// The manifest names the topology each scenario ran on; each lever scenario's own topology
	// left its facts, teardown, logs, metrics and configs in the bundle, under the run's id.
	var m evidence.Manifest
	if b, err := os.ReadFile(filepath.Join(out.BundleDir, "manifest.json")); err != nil || json.Unmarshal(b, &m) != nil {
		t.Fatalf("manifest.json: %v", err)
	}
	for _, sc := range quickDefault() {
		on, own := m.RanOn[sc.Name], m.OwnTopologies[sc.Name]
		if sc.Exclusive == "" {
			if on != m.RunID || own.RunID != "" {
				t.Errorf("%s ran on %q (own topology %q), want the run's, %s", sc.Name, on, own.RunID, m.RunID)
			}
			continue
		}
		if on == m.RunID || on != own.RunID || !topology.OfRun(on, m.RunID) || own.Error != "" || own.Teardown == nil || own.Facts["run_id"] != on {
			t.Errorf("%s ran on %q, own topology %+v: want its own, of run %s, torn down", sc.Name, on, own, m.RunID)
		}
		for _, f := range []string{"logs/gateway-a.log", "logs/valkey.log", "metrics/gateway-b.prom", "config/gateway-a.yaml"} {
			if _, err := os.Stat(filepath.Join(out.BundleDir, own.Dir, f)); err != nil {
				t.Errorf("bundle lacks %s of %s's own topology: %v", f, sc.Name, err)
			}
		}
	}
	for _, f := range []string{"manifest.json", "results.json", "requests.jsonl", "summary.md", "junit.xml",
		"logs/gateway-a.log", "logs/valkey.log", "metrics/gateway-b.prom", "config/gateway-a.yaml"} {
		if _, err := os.Stat(filepath.Join(out.BundleDir, f)); err != nil {
			t.Errorf("bundle lacks %s: %v", f, err)
		}
	}
	for _, target := range []string{out.BundleDir, out.BundleTar} {
		vout, verr, vcode := quotaqual(t, time.Minute, "evidence", "verify", target)
		if vcode != 0 {
			t.Errorf("evidence verify %s: exit %d\n%s%s", target, vcode, vout, verr)
		}
	}
	checkReport(t, out.BundleDir, out.BundleTar)
	// Every key fact of the passing run states what its evidence shows (the failing runs:
	// TestKeyFactsOfFailedRunsAreObservations).
	if b, err := evidence.LoadBundle(out.BundleDir); err != nil {
		t.Error(err)
	} else {
		got := map[string][]int{}
		for _, q := range b.Requests {
			got[q.Scenario] = append(got[q.Scenario], q.Status)
		}
		for _, r := range b.Results {
			if lies := scenarios.KeyFactContradictions(r, append([]int{}, got[r.Name]...)); len(lies) > 0 {
				t.Errorf("%s: key fact %q: %s", r.Name, r.KeyFact, strings.Join(lies, "; "))
			}
		}
	}
	// Tampering with any file must be caught.
	results := filepath.Join(out.BundleDir, "results.json")
	b, err := os.ReadFile(results)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(results, bytes.Replace(b, []byte(`"failed"`), []byte(`"passed"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(results, append(b, ' '), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, vcode := quotaqual(t, time.Minute, "evidence", "verify", out.BundleDir); vcode != 1 {
		t.Errorf("evidence verify of a tampered bundle: exit %d, want 1", vcode)
	}
}

func TestRunRejectsBadUsageWithExitCode2(t *testing.T) {
	cases := []struct {
		args []string
		want string // a fragment of the error naming the flag
	}{
		{[]string{"run", "--topology", "vm"}, "--topology"},
		{[]string{"run", "--profile", "slow"}, "--profile"},
		{[]string{"run", "--scenario", "no-such-scenario"}, "--scenario"},
		{[]string{"run", "--bundle", "zip"}, "--bundle"},
		{[]string{"run", "--run-id", "Bad_ID"}, "--run-id"},
		{[]string{"run", "--gateways", "1"}, "--gateways 1 is out of range: use 2 to 16"},
		{[]string{"run", "--gateways", "17"}, "--gateways 17 is out of range: use 2 to 16"},
		{[]string{"up", "--gateways", "17"}, "--gateways 17 is out of range: use 2 to 16"},
		{[]string{"render", "--gateways", "1"}, "--gateways 1 is out of range: use 2 to 16"},
		{[]string{"run", "--require", "valkey-partiton"}, `--require: unknown scenario "valkey-partiton": use all, none, or scenario names from probe-no-quota`},
		{[]string{"run", "--scenario", "valid-auth", "--require", "valkey-partition"}, "--require valkey-partition: not selected by this run, which runs valid-auth (the --scenario flags"},
		{[]string{"run", "--require", "all,none"}, "stand alone"},
		{[]string{"run", "--no-such-flag"}, "unknown flag"},
		{[]string{"run", "extra-argument"}, "unknown command"},
		{[]string{"load", "--rate", "0"}, "--rate 0 is out of range"},
		{[]string{"load", "--duration", "2h"}, "--duration 2h0m0s is out of range"},
		{[]string{"load", "--find-knee", "--rate", "500", "--max-rate", "100"}, "--max-rate 100"},
		{[]string{"load", "--max-lag", "2"}, "--max-lag 2"},
		{[]string{"chaos", "--gateway", "no-such-profile"}, "--gateway: gateway profile: open no-such-profile"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			_, stderr, code := quotaqual(t, 30*time.Second, c.args...)
			if code != wire.ExitUsage {
				t.Errorf("exit %d, want %d; stderr: %s", code, wire.ExitUsage, stderr)
			}
			if !strings.Contains(stderr, c.want) {
				t.Errorf("stderr %q does not name %q", stderr, c.want)
			}
		})
	}
}

// TestARunWithASkipIsPartialAndRequireDecidesItsExit: the process topology has no network to
// cut, so valkey-partition skips there. The run says partial everywhere (JSON, terminal,
// bundle), names the skip and what it lacked, and exits 4 while the skipped scenario is
// required (the default: all; or by name) and 0 when the user accepts a partial
// qualification (--require none) or requires only what ran.
func TestARunWithASkipIsPartialAndRequireDecidesItsExit(t *testing.T) {
	run := []string{"run", "--topology", "process", "--scenario", "valid-auth", "--scenario", "valkey-partition"}
	for _, c := range []struct {
		require []string
		code    int
		policy  string
	}{
		{nil, wire.ExitPartial, "all"},
		{[]string{"--require", "none"}, wire.ExitOK, "none"},
		{[]string{"--require", "valid-auth"}, wire.ExitOK, "valid-auth"},
		{[]string{"--require", "valid-auth,valkey-partition"}, wire.ExitPartial, "valid-auth,valkey-partition"},
	} {
		t.Run(c.policy, func(t *testing.T) {
			args := append(append(append([]string{}, run...), c.require...), "--json", "--evidence-dir", t.TempDir())
			stdout, stderr, code := quotaqual(t, 2*time.Minute, args...)
			var out runJSON
			if err := json.Unmarshal([]byte(stdout), &out); err != nil {
				t.Fatalf("run --json printed no JSON (%v)\nstderr:\n%s", err, stderr)
			}
			if code != c.code || out.ExitCode != c.code {
				t.Errorf("exit %d (json %d, error %q), want %d", code, out.ExitCode, out.Error, c.code)
			}
			if len(out.Results) != 2 || out.Results[0].Status != evidence.Passed || out.Results[1].Status != evidence.Skipped {
				t.Fatalf("results %+v, want valid-auth passed and valkey-partition skipped", out.Results)
			}
			q := out.Qual
			required := c.code == wire.ExitPartial
			if q.Level != evidence.LevelPartial || q.Require != c.policy || len(q.Skipped) != 1 || q.Skipped[0].Scenario != "valkey-partition" ||
				!strings.Contains(q.Skipped[0].Reason, "needs partitions") || q.Skipped[0].Required != required {
				t.Errorf("qualification %+v, want partial under %q naming valkey-partition's missing partitions, required %v", q, c.policy, required)
			}
			says := strings.Contains(stderr, "partial: a required scenario was skipped (--require "+c.policy+"), so the run did not qualify it: valkey-partition (needs partitions: ")
			if says != required {
				t.Errorf("stderr names the required skip: %v, want %v\n%s", says, required, stderr)
			}
			var m evidence.Manifest
			readJSON(t, filepath.Join(out.BundleDir, "manifest.json"), &m)
			wantOutcome := map[bool]string{true: "required-skipped", false: "passed"}[required]
			if m.Outcome != wantOutcome || m.Qualification == nil || m.Qualification.Level != evidence.LevelPartial {
				t.Errorf("manifest outcome %q, qualification %+v; want %s, partial", m.Outcome, m.Qualification, wantOutcome)
			}
			junit, _ := os.ReadFile(filepath.Join(out.BundleDir, "junit.xml"))
			if !strings.Contains(string(junit), `name="qualification" value="partial"`) || strings.Contains(string(junit), evidence.RequiredTestcase) != required {
				t.Errorf("junit.xml: want the partial level and the %q testcase only when required:\n%s", evidence.RequiredTestcase, junit)
			}
			sum, _ := os.ReadFile(filepath.Join(out.BundleDir, "summary.md"))
			if !strings.Contains(string(sum), "# quotaqual qualification: partial") || !strings.Contains(string(sum), "Not qualified (skipped): valkey-partition (needs partitions") {
				t.Errorf("summary.md does not state the level and the skip:\n%s", sum)
			}
			rep, _ := os.ReadFile(filepath.Join(out.BundleDir, "report.html"))
			if !strings.Contains(string(rep), `data-level="partial"`) {
				t.Error("report.html does not state the level")
			}
		})
	}
	// The terminal: the table's header and the closing lines carry the level, and the closing
	// progress line says what ran how (valkey-partition did not run at all).
	// The progress goes to stderr, the closing table (the result) to stdout.
	stdout, stderr, code := quotaqual(t, 2*time.Minute, append(run, "--evidence-dir", t.TempDir())...)
	if code != wire.ExitPartial {
		t.Errorf("exit %d, want %d", code, wire.ExitPartial)
	}
	for _, want := range []string{"◐ partial 2 scenarios", "1 side by side, 0 alone, 1 not run: 1 of 2 passed, 1 skipped"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the progress (stderr) lacks %q:\n%s", want, stderr)
		}
	}
	for _, want := range []string{"verdict: partial", "◐ partial 1 of 2 passed, 1 skipped — not qualified (skipped): valkey-partition (needs partitions: ", "evidence: "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the closing table (stdout) lacks %q:\n%s", want, stdout)
		}
		if strings.Contains(stderr, want) {
			t.Errorf("the closing table's %q is on stderr too:\n%s", want, stderr)
		}
	}
}

func TestRunExitsWith3WhenTheTopologyCannotComeUp(t *testing.T) {
	// A PATH without valkey-server: the topology cannot start Valkey. The bundle is still
	// written, every scenario skipped with the reason.
	bin := t.TempDir()
	for _, tool := range []string{"ip", "nft", "nsenter", "unshare"} {
		if p, err := exec.LookPath(tool); err == nil {
			_ = os.Symlink(p, filepath.Join(bin, tool))
		}
	}
	evDir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "run", "--topology", "process", "--json", "--evidence-dir", evDir)
	cmd.Env = append(os.Environ(), "PATH="+bin)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != wire.ExitTopology {
		t.Fatalf("run without valkey-server: %v, want exit %d\nstderr: %s", err, wire.ExitTopology, stderr.String())
	}
	if !strings.Contains(stderr.String()+stdout.String(), "valkey-server") {
		t.Errorf("the error does not say valkey-server is missing:\n%s\n%s", stderr.String(), stdout.String())
	}
	var out runJSON
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("no JSON: %v\n%s", err, stdout.String())
	}
	for _, r := range out.Results {
		if r.Status != evidence.Skipped || r.Reason == "" {
			t.Errorf("%s: %s %q, want skipped with the reason", r.Name, r.Status, r.Reason)
		}
	}
	if _, err := os.Stat(filepath.Join(out.BundleDir, "manifest.json")); err != nil {
		t.Errorf("no bundle written on topology failure: %v", err)
	}
}

func TestInterruptTearsDownAndWritesThePartialBundle(t *testing.T) {
	// A terminal hang-up (SIGHUP) ends a run like Ctrl-C (issue 10, defect 13).
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) { interruptRun(t, sig) })
	}
}

// startRunUntil starts `quotaqual run` on the process topology and returns once its progress
// shows marker (or ctx ends).
func startRunUntil(ctx context.Context, t *testing.T, runID, evDir, marker string, scenarios ...string) (*exec.Cmd, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	args := []string{"run", "--topology", "process", "--json", "--evidence-dir", evDir, "--run-id", runID}
	for _, s := range scenarios {
		args = append(args, "--scenario", s)
	}
	cmd := exec.CommandContext(ctx, binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(errPipe)
		signalled := false
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
			if !signalled && strings.Contains(sc.Text(), marker) {
				signalled = true
				close(started)
			}
		}
		if !signalled {
			close(started)
		}
	}()
	select {
	case <-started:
	case <-ctx.Done():
	}
	return cmd, &stdout, &stderr
}

// workDirsOf lists the run's work directories in the temporary directory.
func workDirsOf(runID string) []string {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "quotaqual-"+runID+"-*"))
	return dirs
}

// TestKill9LeavesAWorkDirectoryThatDownRemoves: after kill -9 of `quotaqual run` its work
// directory (configs, logs, the Valkey password file) stays; `down --run-id` stops what is
// left and removes it, and says what it removed (issue 10, defect 13).
func TestKill9LeavesAWorkDirectoryThatDownRemoves(t *testing.T) {
	runID := fmt.Sprintf("kill9-%d", time.Now().UnixNano()%1e6)
	// A temporary directory of its own: every run's start removes the dead runs' work
	// directories it finds there, and a run of another package's tests starting between the
	// kill and `down` (a CI run saw it) would take this one away before down could show it.
	tmp, err := os.MkdirTemp("", "qqk9")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd, _, stderr := startRunUntil(ctx, t, runID, t.TempDir(), "waiting for usage to leave", "window-expiry")
	if len(workDirsOf(runID)) != 1 {
		t.Fatalf("run %s has work directories %v while running, want one", runID, workDirsOf(runID))
	}
	if _, _, code := quotaqual(t, 30*time.Second, "down", "--run-id", "kill9-none"); code != 0 {
		t.Fatalf("down of an unknown run: exit %d", code)
	}
	if len(workDirsOf(runID)) != 1 {
		t.Fatal("down of another run removed this live run's work directory")
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if len(workDirsOf(runID)) != 1 {
		t.Fatalf("after kill -9 the work directory is %v: the test cannot show down removing it\n%s", workDirsOf(runID), stderr)
	}
	out, derr, code := quotaqual(t, time.Minute, "down", "--run-id", runID)
	if code != 0 {
		t.Fatalf("down --run-id %s: exit %d: %s", runID, code, derr)
	}
	if left := workDirsOf(runID); len(left) != 0 {
		t.Errorf("down left the work directory %v", left)
	}
	if !strings.Contains(out, "removed work directory "+filepath.Join(os.TempDir(), "quotaqual-"+runID)) {
		t.Errorf("down did not say it removed the work directory:\n%s", out)
	}
	if left := topology.FindRunProcesses(runID); len(left) > 0 {
		t.Errorf("processes of run %s still running after down: %v", runID, left)
	}
}

func interruptRun(t *testing.T, sig syscall.Signal) {
	evDir := t.TempDir()
	runID := fmt.Sprintf("ctrlc-%d", time.Now().UnixNano()%1e6)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Interrupt once window-expiry is under way (it waits for a window to pass), beside
	// gateway-crash's wait for a lease; valkey-outage, a lever, waits for both.
	cmd, stdout, stderr := startRunUntil(ctx, t, runID, evDir, "waiting for usage to leave", "window-expiry", "gateway-crash", "valkey-outage")
	if err := cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != wire.ExitFailed {
		t.Fatalf("interrupted run: %v, want exit %d\nstderr: %s", err, wire.ExitFailed, stderr.String())
	}
	var out runJSON
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("no JSON after interrupt: %v\n%s", err, stdout.String())
	}
	var m evidence.Manifest
	b, err := os.ReadFile(filepath.Join(out.BundleDir, "manifest.json"))
	if err != nil {
		t.Fatalf("no manifest after interrupt: %v", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Outcome != "interrupted" {
		t.Errorf("manifest outcome %q, want interrupted", m.Outcome)
	}
	// window-expiry is cut short and valkey-outage never starts: neither may claim a pass.
	// gateway-crash, which handed the topology back before window-expiry started, is cut
	// short too unless its wait had already ended.
	if len(out.Results) != 3 {
		t.Fatalf("%d results, want 3", len(out.Results))
	}
	for _, r := range out.Results {
		if r.Name == "gateway-crash" && r.Status == evidence.Passed {
			continue
		}
		if r.Status != evidence.Skipped || !strings.Contains(r.Reason, "interrupted") {
			t.Errorf("%s after the interrupt: %s %q, want skipped as interrupted", r.Name, r.Status, r.Reason)
		}
	}
	if left := topology.FindRunProcesses(runID); len(left) > 0 {
		t.Errorf("processes of run %s still running after the interrupt: %v", runID, left)
	}
	if left := workDirsOf(runID); len(left) > 0 {
		t.Errorf("work directory %v left after the interrupt", left)
	}
}

func TestUpServesTheWalkthroughAndCtrlCTearsDown(t *testing.T) {
	runID := fmt.Sprintf("up-%d", time.Now().UnixNano()%1e6)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "up", "--run-id", runID)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Read until the curl lines: the gateway URLs come first.
	var printed strings.Builder
	dataURL := ""
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		printed.WriteString(line + "\n")
		if f := strings.Fields(line); dataURL == "" && len(f) >= 3 && f[0] == "gateway-a" && f[1] == "data" {
			dataURL = f[2]
		}
		if strings.Contains(line, "Ctrl-C") {
			break
		}
	}
	// The live view follows, as plain lines on a non-terminal.
	lines := make(chan string, 256)
	go func() {
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default: // nobody reads any more
			}
		}
		_, _ = io.Copy(io.Discard, out)
	}()
	if dataURL == "" {
		_ = cmd.Process.Kill()
		t.Fatalf("up printed no gateway-a data URL:\n%s\nstderr:\n%s", printed.String(), stderr.String())
	}
	// Standard output is not a terminal here, so no password may be printed.
	if strings.Contains(printed.String(), "application-a:") && !strings.Contains(printed.String(), "$QQ_PASSWORD_") {
		t.Errorf("up printed a credential to a non-terminal:\n%s", printed.String())
	}
	// ... but the credentials are in a 0600 env file whose path is printed, and they work.
	envFile := ""
	for _, l := range strings.Split(printed.String(), "\n") {
		if _, after, ok := strings.Cut(l, "credentials: "); ok {
			envFile = strings.Fields(after)[0]
		}
	}
	password := ""
	if envFile == "" {
		t.Errorf("up printed no credentials file on a non-terminal:\n%s", printed.String())
	} else if st, err := os.Stat(envFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("credentials file %s: %v, mode %v; want 0600", envFile, err, st.Mode().Perm())
	} else {
		b, _ := os.ReadFile(envFile)
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "export QQ_PASSWORD_1='"); ok {
				password = strings.TrimSuffix(v, "'")
			}
		}
		if password == "" || strings.Contains(printed.String(), password) {
			t.Errorf("credentials file lacks QQ_PASSWORD_1, or its password was printed:\n%s", b)
		}
	}
	// The forwarded port reaches a real gateway: no credentials is a 401 with WWW-Authenticate.
	resp, err := http.Post(dataURL+"/v1/chat/completions", "application/json",
		strings.NewReader(`{"model":"qwen3-0.6b","messages":[{"role":"user","content":"hi"}]}`))
	if err != nil {
		t.Errorf("POST through up's forward: %v", err)
	} else {
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
			t.Errorf("unauthenticated request through up: %s, WWW-Authenticate %q; want 401 with a challenge",
				resp.Status, resp.Header.Get("WWW-Authenticate"))
		}
	}
	// An admitted request with the file's credential appears in the live view as it happens:
	// once the view has shown its first state, send one and wait for its event.
	var live strings.Builder
	readLive := func(until func(string) bool, what string) {
		deadline := time.After(15 * time.Second)
		for {
			select {
			case l := <-lines:
				live.WriteString(l + "\n")
				if until(l) {
					return
				}
			case <-deadline:
				t.Errorf("the live view showed no %s within 15s:\n%s", what, live.String())
				return
			}
		}
	}
	if password != "" {
		readLive(func(l string) bool { return strings.Contains(l, "gateway-b: admitted ") }, "first state")
		req, _ := http.NewRequest(http.MethodPost, dataURL+"/v1/chat/completions",
			strings.NewReader(`{"model":"qwen3-0.6b","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
		req.SetBasicAuth("application-a", password)
		req.Header.Set("Content-Type", "application/json")
		if resp, err := http.DefaultClient.Do(req); err != nil {
			t.Errorf("authorized request through up: %v", err)
		} else {
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("authorized request with the env file's credential: %s, want 200", resp.Status)
			}
		}
		readLive(func(l string) bool { return strings.HasSuffix(l, "gateway-a: 1 admitted (200)") }, "'gateway-a: 1 admitted (200)' event")
		if !strings.Contains(live.String(), "application-a: 60/60 tokens remaining in the 4s window") {
			t.Errorf("the live view's first state lacks application-a's budget:\n%s", live.String())
		}
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("up after Ctrl-C: %v, want exit 0\nstderr:\n%s", err, stderr.String())
	}
	if envFile != "" {
		if _, err := os.Stat(envFile); !os.IsNotExist(err) {
			t.Errorf("credentials file %s still there after teardown (%v)", envFile, err)
		}
	}
	if left := topology.FindRunProcesses(runID); len(left) > 0 {
		t.Errorf("processes of run %s still running after up ended: %v", runID, left)
	}
	// down finds nothing left of this run and says so with exit 0.
	if _, derr, code := quotaqual(t, 30*time.Second, "down", "--run-id", runID); code != 0 {
		t.Errorf("down --run-id %s: exit %d: %s", runID, code, derr)
	}
}

// needDocker skips t where no Docker engine answers, else waits its turn at the engine
// (internal/testlock): one docker topology at a time on this machine.
func needDocker(t *testing.T) {
	t.Helper()
	if !dockerengine.Available() {
		t.Skip("no Docker engine answers (DOCKER_HOST or /var/run/docker.sock): the docker topology cannot be qualified here")
	}
	testlock.Docker(t)
}

// removeOwnImageAfterwards removes, when t ends, the quotaqual image built from this test's
// binary (quotaqual:bin-<digest>) unless it existed before: exactly that content-addressed
// image, never another test package's, which may be running at the same moment. The Valkey
// image is built from the host's valkey-server when missing and kept: it is the same for
// every run.
func removeOwnImageAfterwards(t *testing.T) {
	t.Helper()
	tag, err := images.QuotaqualImageTag(binary)
	if err != nil {
		t.Fatal(err)
	}
	hadImage := exec.Command("docker", "image", "inspect", tag).Run() == nil
	t.Cleanup(func() {
		if !hadImage {
			removeDockerImage(tag)
		}
	})
}

func runDockerTopologyPassesAllScenarios(t *testing.T) {
	needDocker(t)
	removeOwnImageAfterwards(t)
	evDir := t.TempDir()
	stdout, stderr, code := quotaqual(t, 5*time.Minute, "run", "--topology", "docker", "--json", "--evidence-dir", evDir)
	var out runJSON
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("run --json printed no JSON (%v)\nstderr:\n%s", err, stderr)
	}
	// lossy-store-link needs the loss and store-link levers, which the docker engine pulls
	// from the host in the containers' network namespaces: as root every scenario passes;
	// otherwise the run is partial with that one skip, named, and its reason says why.
	asRoot := os.Geteuid() == 0
	if asRoot && code != 0 {
		t.Errorf("exit code %d (%s), want 0\nstderr:\n%s", code, out.Error, stderr)
	}
	if !asRoot && (code != wire.ExitPartial || !strings.Contains(out.Error, "lossy-store-link (")) {
		t.Errorf("exit code %d (%s), want %d naming the skipped lossy-store-link\nstderr:\n%s", code, out.Error, wire.ExitPartial, stderr)
	}
	if out.Topology != topology.EngineDocker {
		t.Errorf("topology %q, want docker", out.Topology)
	}
	if want := len(quickDefault()); len(out.Results) != want {
		t.Fatalf("%d results, want all %d scenarios", len(out.Results), want)
	}
	// Every other scenario passes, valkey-failover included: the docker engine runs the
	// replicated store group and cuts its nodes off with nftables in their own namespaces.
	for _, r := range out.Results {
		switch {
		case r.Name == "lossy-store-link" && !asRoot:
			if r.Status != evidence.Skipped || !strings.Contains(r.Reason, "as root") {
				t.Errorf("%s: %s (%s), want skipped: the harness is not root", r.Name, r.Status, r.Reason)
			}
		case r.Status != evidence.Passed:
			t.Errorf("%s: %s (%s)", r.Name, r.Status, r.Reason)
		}
	}
	if _, verr, vcode := quotaqual(t, time.Minute, "evidence", "verify", out.BundleDir); vcode != 0 {
		t.Errorf("evidence verify: exit %d: %s", vcode, verr)
	}
	// Nothing labelled with the run id may be left.
	if dout, _, _ := quotaqual(t, time.Minute, "down", "--run-id", out.RunID); strings.Contains(dout, "stopped") {
		t.Errorf("the docker run left resources behind:\n%s", dout)
	}
}

// runDockerValkeyFailoverFailsWithAsyncReplication proves valkey-failover can fail on
// docker, as a user sees it: with `--store-replication async` the admissions gateway-a makes on
// the cut-off primary are lost in the promotion and handed out again, and the run fails (exit
// 1) on exactly that — tokens held beyond the capacity, the lost reservations named, porcupine
// Illegal.
func runDockerValkeyFailoverFailsWithAsyncReplication(t *testing.T) {
	needDocker(t)
	removeOwnImageAfterwards(t)
	stdout, stderr, code := quotaqual(t, 5*time.Minute, "run", "--topology", "docker", "--json",
		"--evidence-dir", t.TempDir(), "--scenario", "valkey-failover", "--store-replication", "async")
	var out runJSON
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("run --json printed no JSON (%v)\nstderr:\n%s", err, stderr)
	}
	if code != 1 || len(out.Results) != 1 || out.Results[0].Status != evidence.Failed {
		t.Fatalf("exit %d, results %+v, want exit 1 and valkey-failover failed\nstderr:\n%s", code, out.Results, stderr)
	}
	failed := map[string]bool{}
	for _, a := range out.Results[0].Assertions {
		if !a.OK {
			failed[a.Name] = true
		}
	}
	// porcupine decides: the history of admissions is not linearizable once the split's
	// admissions are lost. Tokens held twice at once and holds missing from the promoted primary
	// show only when the re-admissions and the inspection fall while the split's holds still run
	// (6 s); on docker the promotion's timing varies with the daemon (three runs on one machine
	// saw porcupine Illegal with neither showing), so those two are logged, not required here.
	if name := "the history is linearizable against the ledger model (porcupine)"; !failed[name] {
		t.Errorf("valkey-failover with async replication on docker did not fail %q: %+v", name, out.Results[0].Assertions)
	}
	for _, name := range []string{"no token admitted twice: tokens held at once ≤ capacity", "no acknowledged reservation lost in the promotion"} {
		t.Logf("%s: failed %v", name, failed[name])
	}
	for _, f := range out.Results[0].Facts {
		if f.Name == "readmitted_while_split_holds_ran" || f.Name == "lost_reservations" || f.Name == "peak_held_tokens" {
			t.Logf("%s: %v", f.Name, f.Value)
		}
	}
	if dout, _, _ := quotaqual(t, time.Minute, "down", "--run-id", out.RunID); strings.Contains(dout, "stopped") {
		t.Errorf("the docker run left resources behind:\n%s", dout)
	}
}

// removeDockerImage removes a quotaqual image this test built, after the netfilter sidecar
// images the store group built on it.
func removeDockerImage(tag string) {
	out, _ := exec.Command("docker", "image", "ls", "-q", "--filter", "label="+dockerengine.LabelNetfilterBase+"="+tag).Output()
	for _, id := range strings.Fields(string(out)) {
		_ = exec.Command("docker", "image", "rm", id).Run()
	}
	_ = exec.Command("docker", "image", "rm", tag).Run()
}

// checkReport checks the run's report.html end to end: a section per scenario, the fault
// windows the lever-pulling scenarios recorded, the ledger plot of concurrency and the
// reachability matrix; then regenerates it from the tarball and diffs the bundle against itself
// and against a copy where a scenario regressed.
func checkReport(t *testing.T, dir, tarball string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatalf("bundle has no report.html: %v", err)
	}
	page := string(b)
	for _, sc := range quickDefault() {
		if !strings.Contains(page, `<section class="scenario" id="scenario-`+sc.Name+`" data-scenario="`+sc.Name+`" data-status="passed">`) {
			t.Errorf("report.html has no passed section for %s", sc.Name)
		}
	}
	section := func(name string) string {
		i := strings.Index(page, `data-scenario="`+name+`" data-status`)
		if i < 0 {
			return ""
		}
		j := strings.Index(page[i:], "</section>")
		return page[i : i+j]
	}
	for name, wants := range map[string][]string{
		"valkey-outage":    {`data-plot="timeline"`, "outage: valkey", "503 store unavailable"},
		"gateway-restart":  {`data-plot="timeline"`, "restart: gateway-a", "429 denied"},
		"valkey-partition": {`data-plot="timeline"`, "partition: gateway-a→valkey"},
		"concurrency":      {`data-plot="tokens"`, "reserved (ledger samples)", "reserved (reconstructed)", "capacity 60", `data-plot="latency"`},
		"network-policy":   {`class="reachability"`, "allowed (control)", ">denied<"},
		"shared-budget":    {`data-plot="tokens"`, "settled (ledger samples)", "capacity 60"},
		"window-expiry":    {`data-plot="tokens"`, "settled (ledger samples)"},
		"valid-auth":       {`data-plot="remaining"`, "remaining, application-a"},
	} {
		sec := section(name)
		for _, w := range wants {
			if !strings.Contains(sec, w) {
				t.Errorf("report section %s lacks %q", name, w)
			}
		}
	}
	rout, rerr, rcode := quotaqual(t, time.Minute, "evidence", "report", tarball)
	if want := strings.TrimSuffix(tarball, ".tar.gz") + ".report.html"; rcode != 0 || strings.TrimSpace(rout) != want {
		t.Errorf("evidence report %s: exit %d, printed %q (want %q)\n%s", tarball, rcode, rout, want, rerr)
	}
	if dout, derr, dcode := quotaqual(t, time.Minute, "evidence", "diff", dir, tarball); dcode != 0 || !strings.Contains(dout, "verdicts: unchanged") || !strings.Contains(dout, "level: qualified (unchanged)") {
		t.Errorf("diff of a bundle with its own tarball: exit %d\n%s%s", dcode, dout, derr)
	}
	worse := filepath.Join(t.TempDir(), "worse")
	if err := os.CopyFS(worse, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	res := filepath.Join(worse, "results.json")
	rb, _ := os.ReadFile(res)
	if err := os.WriteFile(res, bytes.Replace(rb, []byte(`"status": "passed"`), []byte(`"status": "failed"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	if dout, derr, dcode := quotaqual(t, time.Minute, "evidence", "diff", dir, worse); dcode != 1 || !strings.Contains(dout, "REGRESSED") {
		t.Errorf("diff against a regressed copy: exit %d, want 1\n%s%s", dcode, dout, derr)
	}
}

func TestDemoWalksThroughTheStoryAndTearsDown(t *testing.T) {
	runID := fmt.Sprintf("demo-%d", time.Now().UnixNano()%1e6)
	stdout, stderr, code := quotaqual(t, 2*time.Minute, "demo", "--run-id", runID)
	if code != 0 {
		t.Fatalf("demo: exit %d\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	steps := []string{
		"Step 1/5: Admitted on both gateways", "gateway-a → 200 OK", "gateway-b → 200 OK",
		"Step 2/5: The shared budget runs out", "→ 429 Too Many Requests",
		"Step 3/5: A 429 with its headers", "Retry-After: ", "X-Ratelimit-Limit-Tokens: 60", "X-Quotaqual-Provider-Site: (absent)",
		"Step 4/5: Valkey stopped", "$ # lever: stop valkey-server", "gateway-a → 503 Service Unavailable", "gateway-b → 503 Service Unavailable", "quota_store_unavailable",
		"Step 5/5: Recovery", "$ # lever: start valkey-server", "admitted again",
	}
	at := 0
	for _, s := range steps {
		i := strings.Index(stdout[at:], s)
		if i < 0 {
			t.Fatalf("demo output lacks %q after position %d:\n%s", s, at, stdout)
		}
		at += i
	}
	if !strings.Contains(stdout, `$ curl -sS -i -u "application-a:$QQ_PASSWORD_1"`) {
		t.Errorf("the demo does not show the commands it runs:\n%s", stdout)
	}
	if left := topology.FindRunProcesses(runID); len(left) > 0 {
		t.Errorf("processes of run %s still running after the demo: %v", runID, left)
	}
}

// TestUpLiveViewOnATerminal runs up under a pseudo-terminal: the curl lines carry the
// passwords (no env file), and the live view is the redrawn box with a bar per subject window
// and the gateways' counters.
func TestUpLiveViewOnATerminal(t *testing.T) {
	runID := fmt.Sprintf("pty-%d", time.Now().UnixNano()%1e6)
	cmd := exec.Command(binary, "up", "--run-id", runID)
	cmd.Env = append(os.Environ(), "TERM=xterm-256color", "NO_COLOR=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 50, Cols: 140})
	if err != nil {
		t.Fatalf("starting up under a pty: %v", err)
	}
	defer ptmx.Close()
	screen := make(chan string, 1)
	go func() {
		var seen bytes.Buffer
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			seen.Write(buf[:n])
			// The second redraw of the box: the view refreshes on its own.
			if bytes.Count(seen.Bytes(), []byte("quotaqual live")) >= 2 {
				screen <- seen.String()
				return
			}
			if err != nil {
				screen <- seen.String()
				return
			}
		}
	}()
	var got string
	select {
	case got = <-screen:
	case <-time.After(45 * time.Second):
		got = "(nothing within 45s)"
	}
	// Ctrl-C as a person types it: the terminal signals the whole foreground process group.
	go func() { _, _ = io.Copy(io.Discard, ptmx) }()
	if _, err := ptmx.Write([]byte{3}); err != nil {
		t.Errorf("typing Ctrl-C: %v", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Errorf("up after Ctrl-C: %v\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("up did not end within 30s of Ctrl-C\nstderr:\n%s", stderr.String())
	}
	if c := strings.Count(got, "quotaqual live"); c < 2 {
		t.Fatalf("the live view was not redrawn (%d boxes):\n%s\nstderr:\n%s", c, got, stderr.String())
	}
	for _, want := range []string{"\x1b[H\x1b[2J", "╭", "Remaining tokens", "application-a", "60/60", strings.Repeat("█", 30), "Gateways", "denied 429", "Events"} {
		if !strings.Contains(got, want) {
			t.Errorf("terminal live view lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "$QQ_PASSWORD_") || strings.Contains(got, "credentials: ") {
		t.Errorf("on a terminal the curl lines carry the passwords and no env file is written:\n%s", got)
	}
	if left := topology.FindRunProcesses(runID); len(left) > 0 {
		t.Errorf("processes of run %s still running after up ended: %v", runID, left)
	}
}

// render shows the store group only when asked for, with its secrets as placeholders.
func TestRenderKindShowsTheStoreGroupOnlyWithTheFlag(t *testing.T) {
	without, stderr, code := quotaqual(t, time.Minute, "render", "--topology", "kind", "--run-id", "r1")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	with, stderr, code := quotaqual(t, time.Minute, "render", "--topology", "kind", "--run-id", "r1", "--store-group")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, h := range topology.StoreHosts {
		if strings.Contains(without, "name: "+h+"\n") || !strings.Contains(with, "name: "+h+"\n") {
			t.Errorf("%s: rendered without the flag or missing with it", h)
		}
	}
	if !strings.Contains(with, `sentinel auth-pass quotaqual "`+k8s.Placeholder+`"`) {
		t.Error("the Sentinels' auth-pass is not rendered as a placeholder")
	}
}

// quickDefault lists the scenarios of a quick-profile run without --scenario.
func quickDefault() []scenarios.Scenario {
	list, _ := scenarios.ForProfile("quick", nil)
	return list
}
