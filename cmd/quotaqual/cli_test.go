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
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/testbin"
	"github.com/quotaqual/quotaqual/scenarios"
	"github.com/quotaqual/quotaqual/topology"
)

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "quotaqual-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "quotaqual")
	if err := testbin.Build(binary); err != nil {
		fmt.Fprintln(os.Stderr, "build quotaqual:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type runJSON struct {
	RunID     string                    `json:"run_id"`
	Topology  string                    `json:"topology"`
	ExitCode  int                       `json:"exit_code"`
	Error     string                    `json:"error"`
	BundleDir string                    `json:"bundle_dir"`
	BundleTar string                    `json:"bundle_tar"`
	Results   []evidence.ScenarioResult `json:"results"`
}

// quotaqual runs the binary with a deadline and returns stdout, stderr and the exit code.
func quotaqual(t *testing.T, timeout time.Duration, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
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
	if want := len(scenarios.All()); len(out.Results) != want {
		t.Fatalf("%d results, want all %d scenarios", len(out.Results), want)
	}
	for _, r := range out.Results {
		if r.Status != evidence.Passed {
			t.Errorf("%s: %s (%s)", r.Name, r.Status, r.Reason)
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
		{[]string{"run", "--no-such-flag"}, "unknown flag"},
		{[]string{"run", "extra-argument"}, "unknown command"},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			_, stderr, code := quotaqual(t, 30*time.Second, c.args...)
			if code != ExitUsage {
				t.Errorf("exit %d, want %d; stderr: %s", code, ExitUsage, stderr)
			}
			if !strings.Contains(stderr, c.want) {
				t.Errorf("stderr %q does not name %q", stderr, c.want)
			}
		})
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
	if !errors.As(err, &ee) || ee.ExitCode() != ExitTopology {
		t.Fatalf("run without valkey-server: %v, want exit %d\nstderr: %s", err, ExitTopology, stderr.String())
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
	evDir := t.TempDir()
	runID := fmt.Sprintf("ctrlc-%d", time.Now().UnixNano()%1e6)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "run", "--topology", "process", "--json",
		"--evidence-dir", evDir, "--run-id", runID, "--scenario", "window-expiry", "--scenario", "gateway-restart")
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Interrupt once window-expiry is under way (it waits for a window to pass).
	started := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(errPipe)
		signalled := false
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
			if !signalled && strings.Contains(sc.Text(), "waiting for usage to leave") {
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
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != ExitFailed {
		t.Fatalf("interrupted run: %v, want exit %d\nstderr: %s", err, ExitFailed, stderr.String())
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
	// Scenarios run in canonical order: window-expiry is cut short, gateway-restart never
	// starts; neither may claim a pass.
	if len(out.Results) != 2 {
		t.Fatalf("%d results, want 2", len(out.Results))
	}
	for _, r := range out.Results {
		if r.Status != evidence.Skipped || !strings.Contains(r.Reason, "interrupted") {
			t.Errorf("%s after the interrupt: %s %q, want skipped as interrupted", r.Name, r.Status, r.Reason)
		}
	}
	if left := topology.FindRunProcesses(runID); len(left) > 0 {
		t.Errorf("processes of run %s still running after the interrupt: %v", runID, left)
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
	go func() { _, _ = io.Copy(io.Discard, out) }()
	if dataURL == "" {
		_ = cmd.Process.Kill()
		t.Fatalf("up printed no gateway-a data URL:\n%s\nstderr:\n%s", printed.String(), stderr.String())
	}
	// Standard output is not a terminal here, so no password may be printed.
	if strings.Contains(printed.String(), "application-a:") && !strings.Contains(printed.String(), "$QQ_PASSWORD_") {
		t.Errorf("up printed a credential to a non-terminal:\n%s", printed.String())
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
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("up after Ctrl-C: %v, want exit 0\nstderr:\n%s", err, stderr.String())
	}
	if left := topology.FindRunProcesses(runID); len(left) > 0 {
		t.Errorf("processes of run %s still running after up ended: %v", runID, left)
	}
	// down finds nothing left of this run and says so with exit 0.
	if _, derr, code := quotaqual(t, 30*time.Second, "down", "--run-id", runID); code != 0 {
		t.Errorf("down --run-id %s: exit %d: %s", runID, code, derr)
	}
}

func TestRunDockerTopologyPassesAllScenarios(t *testing.T) {
	if !topology.DockerAvailable() {
		t.Skip("no Docker engine answers (DOCKER_HOST or /var/run/docker.sock): the docker topology cannot be qualified here")
	}
	// The quotaqual image is built from this test's binary (quotaqual:bin-<digest>); remove it
	// afterwards unless it existed before. The Valkey image is built from the host's
	// valkey-server when missing and kept: it is the same for every run.
	// Remove exactly the image this test's binary produced (content-addressed), never another
	// test package's, which may be running at the same moment.
	tag, err := topology.QuotaqualImageTag(binary)
	if err != nil {
		t.Fatal(err)
	}
	hadImage := exec.Command("docker", "image", "inspect", tag).Run() == nil
	t.Cleanup(func() {
		if !hadImage {
			_ = exec.Command("docker", "image", "rm", tag).Run()
		}
	})
	evDir := t.TempDir()
	stdout, stderr, code := quotaqual(t, 5*time.Minute, "run", "--topology", "docker", "--json", "--evidence-dir", evDir)
	var out runJSON
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("run --json printed no JSON (%v)\nstderr:\n%s", err, stderr)
	}
	if code != 0 {
		t.Errorf("exit code %d (%s), want 0\nstderr:\n%s", code, out.Error, stderr)
	}
	if out.Topology != topology.EngineDocker {
		t.Errorf("topology %q, want docker", out.Topology)
	}
	if want := len(scenarios.All()); len(out.Results) != want {
		t.Fatalf("%d results, want all %d scenarios", len(out.Results), want)
	}
	for _, r := range out.Results {
		// The docker engine runs no replicated store group: valkey-failover must say so.
		if why, ok := map[string]string{"valkey-failover": "no replicated store group"}[r.Name]; ok {
			if r.Status != evidence.Skipped || !strings.Contains(r.Reason, why) {
				t.Errorf("%s: %s (%s), want skipped: %s", r.Name, r.Status, r.Reason, why)
			}
			continue
		}
		if r.Status != evidence.Passed {
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
