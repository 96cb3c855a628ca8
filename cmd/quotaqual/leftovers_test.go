package main

// Leftover tests (issue 26): however a run or `up` ends — kill -9, a hang-up, Ctrl-C with its
// standard output gone — within a few seconds no process of it is left, no file under the
// temporary directories holds one of its passwords, and what `down` must still remove it
// removes and names. Each test starts the real binary on the netns topology and learns the
// run's passwords from its own gateways' environments while they run.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/topology"
)

// leftoverWait is how long an ended run may take to leave nothing behind.
const leftoverWait = 5 * time.Second

// needNetns skips where the netns topology cannot run.
func needNetns(t *testing.T) {
	t.Helper()
	if engine, why := topology.Detect(); engine != topology.EngineNetns {
		t.Skipf("netns topology unavailable: %s", why)
	}
}

// privateTmp gives the test (and the binaries it starts) a temporary directory of its own, so
// another run's start-up sweep cannot remove what this test looks for.
func privateTmp(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "qqleft")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	t.Setenv("TMPDIR", dir)
	return dir
}

// runSecrets reads the passwords the run's processes hold in their environments (the Valkey
// password, every subject's): what must not outlive the run.
func runSecrets(t *testing.T, runID string) []string {
	t.Helper()
	seen := map[string]bool{}
	var out []string
	for _, pid := range topology.FindRunProcesses(runID) {
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(env, []byte{0}) {
			k, v, ok := strings.Cut(string(kv), "=")
			if ok && len(v) >= 12 && strings.Contains(k, "PASSWORD") && !seen[v] {
				seen[v] = true
				out = append(out, v)
			}
		}
	}
	return out
}

// filesHolding lists the files under dirs that contain one of secrets.
func filesHolding(dirs []string, secrets []string) []string {
	var hits []string
	for _, root := range dirs {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return nil
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			for _, s := range secrets {
				if bytes.Contains(b, []byte(s)) {
					hits = append(hits, p)
					break
				}
			}
			return nil
		})
	}
	return hits
}

// secretDirs are where a run could leave a file: the temporary directory and the
// memory-backed ones the credentials file may go to.
func secretDirs(tmp string) []string {
	dirs := []string{tmp, "/dev/shm"}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	return dirs
}

// assertNothingLeft waits up to leftoverWait for the run's processes to go and no file to hold
// its secrets, then reports what is left.
func assertNothingLeft(t *testing.T, runID, tmp string, secrets []string) {
	t.Helper()
	deadline := time.Now().Add(leftoverWait)
	for {
		procs := topology.FindRunProcesses(runID)
		files := filesHolding(secretDirs(tmp), secrets)
		if len(procs) == 0 && len(files) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("%s after the run ended: processes %v, files holding a password %v", leftoverWait, procs, files)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestLeftoversKill9OfANetnsRun: kill -9 of `quotaqual run` on netns leaves no process and no
// password on disk — the work directory's contents were a tmpfs in the run's own mount
// namespace — and its bundle says it is partial, with whole lines only; `down` removes the empty
// mount point and says so.
func TestLeftoversKill9OfANetnsRun(t *testing.T) {
	needNetns(t)
	tmp := privateTmp(t)
	runID := fmt.Sprintf("left9-%d", time.Now().UnixNano()%1e6)
	evDir := filepath.Join(tmp, "evidence")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "run", "--topology", "netns", "--run-id", runID,
		"--evidence-dir", evDir, "--scenario", "window-expiry", "--scenario", "shared-budget")
	stderr := waitForLine(t, cmd, "waiting for usage to leave")
	secrets := runSecrets(t, runID)
	if len(secrets) < 2 {
		_ = cmd.Process.Kill()
		t.Fatalf("found %d passwords in the run's processes, want the Valkey one and the subjects': the test shows nothing\n%s", len(secrets), stderr)
	}
	// While it runs, nothing outside its namespace holds a password.
	if files := filesHolding(secretDirs(tmp), secrets); len(files) > 0 {
		t.Errorf("while the run is up these files outside its namespace hold a password: %v", files)
	}
	// The run's, and shared-budget's own topology's while it is up (it pulls a lever).
	wds := workDirsOf(runID)
	if len(wds) == 0 || len(wds) > 2 {
		t.Fatalf("work directories %v, want the run's (and shared-budget's own topology's)", wds)
	}
	for _, wd := range wds {
		if entries, _ := os.ReadDir(wd); len(entries) != 1 || entries[0].Name() != ".quotaqual-owner" {
			t.Errorf("outside the run's namespace its work directory %s shows %v, want only its owner file", wd, entries)
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	assertNothingLeft(t, runID, tmp, secrets)

	// The bundle so far says it is partial, and its request log ends with a whole line.
	bundle := filepath.Join(evDir, runID)
	var m evidence.Manifest
	if b, err := os.ReadFile(filepath.Join(bundle, evidence.ManifestFile)); err != nil {
		t.Errorf("the killed run's bundle has no manifest: %v", err)
	} else if err := json.Unmarshal(b, &m); err != nil || m.Partial == "" {
		t.Errorf("the killed run's manifest (%v) does not say it is partial: %s", err, b)
	}
	if b, err := os.ReadFile(filepath.Join(bundle, evidence.RequestsFile)); err != nil {
		t.Error(err)
	} else if len(b) > 0 && b[len(b)-1] != '\n' {
		t.Errorf("the killed run's %s ends mid-line", evidence.RequestsFile)
	}

	out, derr, code := quotaqual(t, time.Minute, "down", "--run-id", runID)
	for _, wd := range wds {
		if code != 0 || !strings.Contains(out, "removed work directory "+wd) {
			t.Errorf("down --run-id %s: exit %d, did not say it removed %s:\n%s%s", runID, code, wd, out, derr)
		}
	}
	if left := workDirsOf(runID); len(left) != 0 {
		t.Errorf("down left %v", left)
	}
}

// waitForLine starts cmd with its stderr scanned and returns once a line contains marker; the
// returned buffer keeps collecting stderr.
func waitForLine(t *testing.T, cmd *exec.Cmd, marker string) *syncBuffer {
	t.Helper()
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := &syncBuffer{}
	seen := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pipe)
		found := false
		for sc.Scan() {
			buf.WriteLine(sc.Text())
			if !found && strings.Contains(sc.Text(), marker) {
				found = true
				close(seen)
			}
		}
		if !found {
			close(seen)
		}
	}()
	select {
	case <-seen:
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("no %q within 90s:\n%s", marker, buf)
	}
	return buf
}

// upSession is a running `quotaqual up` on netns with its standard output a pipe.
type upSession struct {
	cmd     *exec.Cmd
	stdout  io.ReadCloser
	stderr  *syncBuffer
	header  string
	envFile string
	dataURL string
	secrets []string
}

func startUp(t *testing.T, runID string) *upSession {
	t.Helper()
	cmd := exec.Command(binary, "up", "--topology", "netns", "--run-id", runID)
	s := &upSession{cmd: cmd}
	var err error
	if s.stdout, err = cmd.StdoutPipe(); err != nil {
		t.Fatal(err)
	}
	s.stderr = waitForLine(t, cmd, "topology up in")
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	r := bufio.NewReader(s.stdout)
	var h strings.Builder
	for !strings.Contains(h.String(), "Ctrl-C tears everything down") {
		line, err := r.ReadString('\n')
		h.WriteString(line)
		if err != nil {
			t.Fatalf("up's header ended early (%v):\n%s\nstderr:\n%s", err, h.String(), s.stderr)
		}
	}
	s.header = h.String()
	for _, l := range strings.Split(s.header, "\n") {
		if _, after, ok := strings.Cut(l, "credentials: "); ok {
			s.envFile = strings.Fields(after)[0]
		}
		if f := strings.Fields(l); s.dataURL == "" && len(f) >= 3 && f[0] == "gateway-a" && f[1] == "data" {
			s.dataURL = f[2]
		}
	}
	if s.envFile == "" || s.dataURL == "" {
		t.Fatalf("up printed no credentials file or gateway URL:\n%s", s.header)
	}
	if st, err := os.Stat(s.envFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file %s: %v; want mode 0600", s.envFile, err)
	}
	s.secrets = runSecrets(t, runID)
	if len(s.secrets) < 2 || len(filesHolding([]string{s.envFile}, s.secrets)) != 1 {
		t.Fatalf("passwords %d, credentials file holding one: the test shows nothing", len(s.secrets))
	}
	// Keep draining the live view unless a test cuts the pipe.
	go func() { _, _ = io.Copy(io.Discard, r) }()
	return s
}

// waitExit waits for the outer up to end, up to limit.
func (s *upSession) waitExit(t *testing.T, limit time.Duration) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("up still running %s after the signal:\n%s", limit, s.stderr)
		return nil
	}
}

// admit sends one authorized request through up's forward, so the live view writes an event.
func (s *upSession) admit(t *testing.T, password string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, s.dataURL+"/v1/chat/completions",
		strings.NewReader(`{"model":"qwen3-0.6b","max_tokens":8,"messages":[{"role":"user","content":"hi"}]}`))
	req.SetBasicAuth("application-a", password)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("request through up: %v", err)
	}
	resp.Body.Close()
}

func envPassword(t *testing.T, envFile, name string) string {
	t.Helper()
	b, err := os.ReadFile(envFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "export "+name+"='"); ok {
			return strings.TrimSuffix(v, "'")
		}
	}
	t.Fatalf("%s has no %s", envFile, name)
	return ""
}

// TestLeftoversUpHangUp: a closed terminal (SIGHUP) tears `up` down like Ctrl-C: nothing left.
func TestLeftoversUpHangUp(t *testing.T) {
	needNetns(t)
	tmp := privateTmp(t)
	runID := fmt.Sprintf("lefthup-%d", time.Now().UnixNano()%1e6)
	s := startUp(t, runID)
	_ = s.cmd.Process.Signal(syscall.SIGHUP)
	if err := s.waitExit(t, 30*time.Second); err != nil {
		t.Errorf("up after SIGHUP: %v, want exit 0\n%s", err, s.stderr)
	}
	assertNothingLeft(t, runID, tmp, s.secrets)
	if len(workDirsOf("up-"+runID)) != 0 {
		t.Errorf("work directories left: %v", workDirsOf("up-"+runID))
	}
}

// TestLeftoversUpCtrlCWithADeadStdoutPipe: `up | tee` and Ctrl-C, tee gone first — up's live view
// writes into a dead pipe during the run and its teardown; it must still tear down completely.
func TestLeftoversUpCtrlCWithADeadStdoutPipe(t *testing.T) {
	needNetns(t)
	tmp := privateTmp(t)
	runID := fmt.Sprintf("leftpipe-%d", time.Now().UnixNano()%1e6)
	s := startUp(t, runID)
	password := envPassword(t, s.envFile, "QQ_PASSWORD_1")
	s.stdout.Close() // the reader (tee) is gone
	s.admit(t, password)
	time.Sleep(2 * time.Second) // the live view writes the event into the dead pipe
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	if err := s.waitExit(t, 30*time.Second); err != nil {
		t.Errorf("up after Ctrl-C with its stdout gone: %v, want exit 0\n%s", err, s.stderr)
	}
	if !strings.Contains(s.stderr.String(), "torn down in") {
		t.Errorf("up did not finish its teardown:\n%s", s.stderr)
	}
	assertNothingLeft(t, runID, tmp, s.secrets)
}

// TestLeftoversUpKill9: kill -9 of `up` leaves no process and no work directory contents; its
// credentials file (memory-backed, 0600) cannot be removed by a dead process: `down --run-id`
// removes it and names it.
func TestLeftoversUpKill9(t *testing.T) {
	needNetns(t)
	tmp := privateTmp(t)
	runID := fmt.Sprintf("leftk9up-%d", time.Now().UnixNano()%1e6)
	s := startUp(t, runID)
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.waitExit(t, 10*time.Second)
	// Only the credentials file may hold a password now.
	deadline := time.Now().Add(leftoverWait)
	for len(topology.FindRunProcesses(runID)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if p := topology.FindRunProcesses(runID); len(p) > 0 {
		t.Errorf("processes left after kill -9: %v", p)
	}
	if files := filesHolding(secretDirs(tmp), s.secrets); len(files) != 1 || files[0] != s.envFile {
		t.Errorf("files holding a password after kill -9: %v, want only the credentials file %s", files, s.envFile)
	}
	out, derr, code := quotaqual(t, time.Minute, "down", "--run-id", runID)
	if code != 0 || !strings.Contains(out, "removed credentials file "+s.envFile) {
		t.Errorf("down --run-id %s: exit %d, did not say it removed %s:\n%s%s", runID, code, s.envFile, out, derr)
	}
	assertNothingLeft(t, runID, tmp, s.secrets)
}

// syncBuffer collects lines from one goroutine while the test reads them.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) WriteLine(l string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.WriteString(l + "\n")
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLeftoversRunCtrlCWithItsOutputGone: `quotaqual run … 2>&1 | tee` and Ctrl-C, tee gone
// first — the run's progress and summary go into a dead pipe; it must still tear down and write
// its bundle, marked partial, and leave nothing.
func TestLeftoversRunCtrlCWithItsOutputGone(t *testing.T) {
	needNetns(t)
	tmp := privateTmp(t)
	runID := fmt.Sprintf("leftrunpipe-%d", time.Now().UnixNano()%1e6)
	evDir := filepath.Join(tmp, "evidence")
	cmd := exec.Command(binary, "run", "--topology", "netns", "--run-id", runID,
		"--evidence-dir", evDir, "--scenario", "window-expiry", "--scenario", "shared-budget")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	found := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			if strings.Contains(sc.Text(), "waiting for usage to leave") {
				found <- true
				return
			}
		}
		found <- false
	}()
	select {
	case ok := <-found:
		if !ok {
			t.Fatal("the run ended before its scenario waited")
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the scenario did not start within 90s")
	}
	secrets := runSecrets(t, runID)
	if len(secrets) < 2 {
		t.Fatalf("found %d passwords in the run's processes: the test shows nothing", len(secrets))
	}
	pr.Close() // the reader (tee) is gone: every later write to stdout or stderr fails
	_ = cmd.Process.Signal(syscall.SIGINT)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 {
			t.Errorf("interrupted run with its output gone: %v, want exit 1 (interrupted, bundle written)", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the run did not end within 60s of Ctrl-C")
	}
	assertNothingLeft(t, runID, tmp, secrets)
	if left := workDirsOf(runID); len(left) != 0 {
		t.Errorf("work directories left: %v", left)
	}
	var m evidence.Manifest
	b, err := os.ReadFile(filepath.Join(evDir, runID, evidence.ManifestFile))
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil || m.Outcome != evidence.OutcomeInterrupted || m.Partial != evidence.PartialInterrupted {
		t.Errorf("bundle manifest (%v): outcome %q, partial %q; want interrupted and marked partial", err, m.Outcome, m.Partial)
	}
}

// TestLeftoversOfANetnsRunWithOwnTopologies: a lever scenario on netns runs on a topology of
// its own, with a work directory of its own under the run's id and processes carrying its own
// run id (<run-id>--<letter>), which FindRunProcesses finds under the run's. Ctrl-C tears it
// down with the run, its teardown in the partial bundle; after kill -9 nothing of it is left
// running and `down --run-id` removes its work directory with the run's.
func TestLeftoversOfANetnsRunWithOwnTopologies(t *testing.T) {
	needNetns(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			tmp := privateTmp(t)
			runID := fmt.Sprintf("own%d-%d", sig, time.Now().UnixNano()%1e6)
			evDir := filepath.Join(tmp, "evidence")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, "run", "--topology", "netns", "--run-id", runID,
				"--evidence-dir", evDir, "--scenario", "window-expiry", "--scenario", "gateway-pause")
			stderr := waitForLine(t, cmd, "gateway-pause: running")
			secrets := runSecrets(t, runID)
			wds := workDirsOf(runID)
			if len(wds) != 2 {
				_ = cmd.Process.Kill()
				t.Fatalf("work directories %v, want the run's and gateway-pause's own\n%s", wds, stderr)
			}
			own := 0
			for _, pid := range topology.FindRunProcesses(runID) {
				if env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid)); err == nil && bytes.Contains(env, []byte(topology.EnvRunID+"="+runID+"--")) {
					own++
				}
			}
			if own == 0 {
				t.Errorf("no process of gateway-pause's own topology found under run %s", runID)
			}
			_ = cmd.Process.Signal(sig)
			_ = cmd.Wait()
			assertNothingLeft(t, runID, tmp, secrets)
			if sig == syscall.SIGINT {
				var m evidence.Manifest
				if b, err := os.ReadFile(filepath.Join(evDir, runID, evidence.ManifestFile)); err != nil || json.Unmarshal(b, &m) != nil {
					t.Fatalf("the interrupted run's manifest: %v", err)
				}
				if o := m.OwnTopologies["gateway-pause"]; o.Teardown == nil || !topology.OfRun(o.RunID, runID) || o.RunID == runID {
					t.Errorf("the interrupted run's manifest has gateway-pause's own topology as %+v: want its run id and teardown", o)
				}
				if left := workDirsOf(runID); len(left) != 0 {
					t.Errorf("the interrupted run left %v", left)
				}
				return
			}
			out, derr, code := quotaqual(t, time.Minute, "down", "--run-id", runID)
			for _, wd := range wds {
				if code != 0 || !strings.Contains(out, "removed work directory "+wd) {
					t.Errorf("down --run-id %s: exit %d, did not say it removed %s:\n%s%s", runID, code, wd, out, derr)
				}
			}
			if left := workDirsOf(runID); len(left) != 0 {
				t.Errorf("down left %v", left)
			}
		})
	}
}
