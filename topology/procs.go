package topology

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Deadlines of the process lifecycle. Nothing waits without one.
const (
	readyTimeout = 15 * time.Second       // a component must be ready within this
	readyPoll    = 20 * time.Millisecond  // readiness poll interval
	stopGrace    = 5 * time.Second        // SIGTERM to SIGKILL
	killWait     = 2 * time.Second        // SIGKILL to giving up
	ProbeTimeout = 1 * time.Second        // Probe's connect timeout
	httpPollWait = 500 * time.Millisecond // one readiness request
)

// Component is one gateway or provider process. Its argv and environment are fixed when it is
// created, so a restart runs exactly the same thing again.
type Component struct {
	host     string
	argv     []string // full argv including any namespace wrapper
	env      []string // full environment (secrets only here, never in argv)
	logPath  string
	readyURL string // polled until it answers 200
	dir      string // working directory ("" for the harness's)

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	started time.Time
}

// NewComponent is the process of host: argv (any namespace wrapper first) and env run as
// they are on every start, its output goes to logPath, and it is ready when readyURL answers 200.
func NewComponent(host string, argv, env []string, logPath, readyURL string) *Component {
	return &Component{host: host, argv: argv, env: env, logPath: logPath, readyURL: readyURL}
}

// start launches the process with its output appended to its log. The child gets SIGKILL if
// the thread that started it dies (Pdeathsig); on the netns engine the pid namespace also
// takes it down with the harness.
func (c *Component) start() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done != nil {
		select {
		case <-c.done:
		default:
			return fmt.Errorf("%s is already running", c.host)
		}
	}
	if err := os.MkdirAll(filepath.Dir(c.logPath), 0o700); err != nil {
		return fmt.Errorf("log directory of %s: %w", c.host, err)
	}
	log, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("log file of %s: %w", c.host, err)
	}
	cmd := exec.Command(c.argv[0], c.argv[1:]...)
	cmd.Env = c.env
	cmd.Dir = c.dir
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = ComponentAttr()
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("starting %s: %w", c.host, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(done)
	}()
	c.cmd, c.done, c.started = cmd, done, time.Now()
	return nil
}

// pid of the running process, 0 when none.
func (c *Component) pid() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cmd == nil || c.cmd.Process == nil {
		return 0
	}
	return c.cmd.Process.Pid
}

func (c *Component) exited() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return c.done
}

// waitReady polls readyURL with client until it answers 200, the process exits, or the
// deadline passes. A 200 counts only from a process that has been up long enough to have
// bound its ports (or failed to) and is still running: if another process holds the port we
// picked, it answers for us while ours exits on its failed bind.
func (c *Component) waitReady(ctx context.Context, client *http.Client) error {
	done := c.exited()
	err := ReadyPoll{
		Client: client, URL: c.readyURL, Within: readyTimeout, Every: readyPoll, Try: httpPollWait,
		Accept: func() bool {
			select {
			case <-done:
				return false
			default:
				return time.Since(c.startedAt()) >= minUpBeforeReady
			}
		},
		Exited:    done,
		ExitedErr: func() error { return &ExitedEarlyError{host: c.host, log: c.logPath, tail: logTail(c.logPath)} },
	}.Wait(ctx)
	var nr *NotReadyError
	if errors.As(err, &nr) {
		return fmt.Errorf("%s %w; see %s", c.host, err, c.logPath)
	}
	return err
}

// minUpBeforeReady is how long a component must have run before a 200 from its ready URL is
// believed: longer than a quotaqual or valkey process takes to start and bind.
const minUpBeforeReady = 150 * time.Millisecond

func (c *Component) startedAt() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.started
}

// ExitedEarlyError says the process ended before it was ready (for instance a port taken
// between picking and binding it).
type ExitedEarlyError struct{ host, log, tail string }

func (e *ExitedEarlyError) Error() string {
	return fmt.Sprintf("%s exited during start-up; see %s: %s", e.host, e.log, e.tail)
}

// Stop sends SIGTERM, waits up to stopGrace (or ctx), then SIGKILL and waits up to killWait. It
// returns the pid it stopped (0 when nothing was running).
func (c *Component) Stop(ctx context.Context) (int, error) { return c.halt(ctx, true) }

// kill sends SIGKILL at once (a crash: no drain) and waits up to killWait.
func (c *Component) kill(ctx context.Context) (int, error) { return c.halt(ctx, false) }

func (c *Component) halt(ctx context.Context, graceful bool) (int, error) {
	c.mu.Lock()
	cmd, done := c.cmd, c.done
	c.mu.Unlock()
	if cmd == nil || done == nil {
		return 0, nil
	}
	pid := cmd.Process.Pid
	select {
	case <-done:
		return 0, nil
	default:
	}
	if graceful {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		grace := time.NewTimer(stopGrace)
		defer grace.Stop()
		select {
		case <-done:
			return pid, nil
		case <-grace.C:
		case <-ctx.Done():
		}
	}
	_ = cmd.Process.Kill()
	kill := time.NewTimer(killWait)
	defer kill.Stop()
	select {
	case <-done:
		return pid, nil
	case <-kill.C:
		// Reaped late or a zombie whose parent reaps slowly: SIGKILL cannot be ignored, so
		// it is dead for our purposes.
		if ZombieOrGone(pid) {
			return pid, nil
		}
		return pid, fmt.Errorf("%s (pid %d) did not exit after SIGKILL", c.host, pid)
	}
}

// ZombieOrGone reports whether pid no longer exists or is a zombie.
func ZombieOrGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// Field 3 follows the command name in parentheses, which may contain spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	return s[i+2] == 'Z' || s[i+2] == 'X'
}

func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 5 {
		lines = lines[len(lines)-5:]
	}
	return strings.Join(lines, " | ")
}

// copyLogs copies every *.log of src into dst.
func copyLogs(src, dst string) error {
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	files, err := filepath.Glob(filepath.Join(src, "*.log"))
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := os.WriteFile(filepath.Join(dst, filepath.Base(f)), b, 0o600); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// ComponentEnv is the environment of every component: the harness's own minus the namespace
// marker, plus the run id (so `down` can find leftovers) and any extra variables.
func ComponentEnv(runID string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, envInside+"=") || strings.HasPrefix(kv, envFDs+"=") || strings.HasPrefix(kv, EnvRunID+"=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, EnvRunID+"="+runID)
	return append(env, extra...)
}
