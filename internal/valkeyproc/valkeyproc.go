// Package valkeyproc starts and stops a real valkey-server process: on a chosen address, in its
// own directory, with the append-only file on by default so that state survives a restart.
// The topology engines and the tests share it, so every Valkey quotaqual talks to is started
// the same way.
package valkeyproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure a server.
type Options struct {
	Binary     string // default: valkey-server from PATH
	Host       string // bind address, default 127.0.0.1
	Port       int    // 0: pick a free port on Host
	Dir        string // data directory (required): AOF, logs
	Password   string // requirepass; empty: none (and protected mode off for non-loopback binds)
	MasterAuth string // masterauth: the password of the primary this node replicates from
	AppendOnly *bool  // default true
	// FsyncAlways sets appendfsync always (an fsync per write, 1-3 ms each here). The default,
	// everysec, is Valkey's own default and what production runs: a graceful stop (SIGTERM)
	// still flushes everything; a crash (SIGKILL) may lose the last second.
	FsyncAlways bool
	Wrap        []string // command prefix, e.g. ["nsenter", "--net=/run/netns/valkey", "--"]
	ExtraArgs   []string
	// LogFile receives the server's output; default Dir/valkey.log.
	LogFile string
	// Sentinel, when set, runs the server as a Sentinel (`valkey-server FILE --sentinel`) with
	// these configuration lines (`sentinel monitor ...`). Sentinel rewrites its file with what it
	// learns, so a restart keeps that state.
	Sentinel string
	// SysProcAttr for the child; default (on Linux) sets Pdeathsig so the server dies with its
	// parent thread.
	SysProcAttr *syscall.SysProcAttr
}

// Server is one valkey-server process that can be stopped and started again on the same port
// and directory.
type Server struct {
	opts Options

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// Binary returns the valkey-server path, or an error telling how to install it.
func Binary() (string, error) {
	p, err := exec.LookPath("valkey-server")
	if err != nil {
		return "", errors.New("valkey-server not found on PATH: install it with `apt-get install -t bookworm-backports valkey-server` (see .ci/install-deps)")
	}
	return p, nil
}

// Start launches a server and waits until it answers PING.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Dir == "" {
		return nil, errors.New("valkeyproc: Options.Dir is required")
	}
	if opts.Binary == "" {
		b, err := Binary()
		if err != nil {
			return nil, err
		}
		opts.Binary = b
	}
	if opts.Host == "" {
		opts.Host = "127.0.0.1"
	}
	if opts.AppendOnly == nil {
		on := true
		opts.AppendOnly = &on
	}
	if opts.LogFile == "" {
		opts.LogFile = filepath.Join(opts.Dir, "valkey.log")
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("valkeyproc: data dir: %w", err)
	}
	s := &Server{opts: opts}
	// A free port picked by listening can be taken by someone else before the server binds it;
	// try a few times.
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		if opts.Port == 0 {
			p, err := freePort(opts.Host)
			if err != nil {
				return nil, err
			}
			s.opts.Port = p
		}
		if lastErr = s.Restart(ctx); lastErr == nil {
			return s, nil
		}
		if opts.Port != 0 {
			break
		}
	}
	return nil, lastErr
}

// Addr is host:port.
func (s *Server) Addr() string {
	return net.JoinHostPort(s.opts.Host, strconv.Itoa(s.opts.Port))
}

// Host is the server's bind address.
func (s *Server) Host() string { return s.opts.Host }

// Port is the server's TCP port.
func (s *Server) Port() int { return s.opts.Port }

// URL is the redis:// URL clients use, with the password as userinfo when one is set.
func (s *Server) URL() string {
	if s.opts.Password != "" {
		return "redis://:" + s.opts.Password + "@" + s.Addr()
	}
	return "redis://" + s.Addr()
}

// Dir is the server's data directory.
func (s *Server) Dir() string { return s.opts.Dir }

// PID of the running server, 0 when stopped.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Running reports whether the process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return false
	default:
		return true
	}
}

func (s *Server) args() []string {
	aof := "no"
	if *s.opts.AppendOnly {
		aof = "yes"
	}
	fsync := "everysec"
	if s.opts.FsyncAlways {
		fsync = "always"
	}
	args := []string{
		"--port", strconv.Itoa(s.opts.Port),
		"--bind", s.opts.Host,
		"--dir", s.opts.Dir,
		"--save", "",
		"--appendonly", aof,
		"--appendfsync", fsync,
		"--daemonize", "no",
		"--loglevel", "notice",
	}
	if s.opts.Password == "" {
		args = append(args, "--protected-mode", "no")
	}
	return append(args, s.opts.ExtraArgs...)
}

// writeConfig returns how the server gets the settings that must not appear on a command line
// (the passwords): a plain server reads them from its standard input (`valkey-server -`), so
// they are never written to a file; a Sentinel must have a file it can rewrite with what it
// learns, written 0600 (and rewritten 0600 too: the server runs under umask 077, see
// restrictiveUmask). arg is the server's first argument, stdin what to feed it.
func (s *Server) writeConfig() (arg, stdin string, err error) {
	if s.opts.Sentinel != "" {
		path := filepath.Join(s.opts.Dir, "sentinel.conf")
		if _, err := os.Stat(path); err == nil {
			return path, "", nil // keep what this Sentinel learnt before a restart
		}
		if err := os.WriteFile(path, []byte(s.opts.Sentinel), 0o600); err != nil {
			return "", "", fmt.Errorf("valkeyproc: write sentinel config: %w", err)
		}
		return path, "", nil
	}
	var body string
	if s.opts.Password != "" {
		body = "requirepass \"" + s.opts.Password + "\"\n"
	}
	if s.opts.MasterAuth != "" {
		body += "masterauth \"" + s.opts.MasterAuth + "\"\n"
	}
	return "-", body, nil
}

// restrictiveUmask runs argv under umask 077: every file the server creates or rewrites (a
// Sentinel's config with the password, the AOF) is readable by its owner only. Valkey creates
// them with mode 0644 less its umask.
func restrictiveUmask(argv []string) []string {
	return append([]string{"/bin/sh", "-c", `umask 077 && exec "$@"`, "sh"}, argv...)
}

// Restart starts the server if it is stopped and waits until it answers PING.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	if s.done != nil {
		select {
		case <-s.done:
		default:
			s.mu.Unlock()
			return nil
		}
	}
	conf, stdin, err := s.writeConfig()
	if err != nil {
		s.mu.Unlock()
		return err
	}
	argv := restrictiveUmask(append(append([]string{}, s.opts.Wrap...), s.opts.Binary, conf))
	if s.opts.Sentinel != "" {
		argv = append(argv, "--sentinel")
	}
	argv = append(argv, s.args()...)
	log, err := os.OpenFile(s.opts.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("valkeyproc: log file: %w", err)
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Stdin = strings.NewReader(stdin)
	cmd.SysProcAttr = s.opts.SysProcAttr
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = dieWithParent()
	}
	if err := cmd.Start(); err != nil {
		log.Close()
		s.mu.Unlock()
		return fmt.Errorf("valkeyproc: start %s: %w", s.opts.Binary, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		log.Close()
		close(done)
	}()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	if err := s.waitReady(ctx, done); err != nil {
		_ = s.Stop()
		return err
	}
	return nil
}

func (s *Server) waitReady(ctx context.Context, done <-chan struct{}) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := ping(ctx, s.Addr(), s.opts.Password); err == nil {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("valkeyproc: valkey-server on %s exited during start-up; see %s: %s", s.Addr(), s.opts.LogFile, tail(s.opts.LogFile))
		case <-ctx.Done():
			return fmt.Errorf("valkeyproc: valkey-server on %s not ready: %w", s.Addr(), ctx.Err())
		case <-tick.C:
		}
	}
}

// Stop shuts the server down gracefully (SIGTERM, which flushes the AOF), killing it after
// five seconds, and waits for it to exit.
func (s *Server) Stop() error { return s.stop(syscall.SIGTERM) }

// Kill stops the server abruptly (SIGKILL), as a crash would.
func (s *Server) Kill() error { return s.stop(syscall.SIGKILL) }

func (s *Server) stop(sig syscall.Signal) error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil || done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	return nil
}

// ping sends a RESP PING (after AUTH when a password is set) and expects +PONG.
func ping(ctx context.Context, addr, password string) error {
	d := net.Dialer{Timeout: 500 * time.Millisecond}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	r := bufio.NewReader(conn)
	if password != "" {
		if _, err := fmt.Fprintf(conn, "*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n", len(password), password); err != nil {
			return err
		}
		line, err := r.ReadString('\n')
		if err != nil {
			return err
		}
		if !strings.HasPrefix(line, "+OK") {
			return errors.New("valkeyproc: AUTH refused")
		}
	}
	if _, err := conn.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "+PONG") {
		return fmt.Errorf("valkeyproc: PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// Version runs `valkey-server --version` and returns the v= field, e.g. "8.0.1".
func Version(binary string) string {
	if binary == "" {
		b, err := Binary()
		if err != nil {
			return "unknown"
		}
		binary = b
	}
	out, err := exec.Command(binary, "--version").Output()
	if err != nil {
		return "unknown"
	}
	for _, f := range strings.Fields(string(out)) {
		if strings.HasPrefix(f, "v=") {
			return strings.TrimPrefix(f, "v=")
		}
	}
	return strings.TrimSpace(string(out))
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("valkeyproc: pick a free port on %s: %w", host, err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > 3 {
		lines = lines[len(lines)-3:]
	}
	return strings.Join(lines, " | ")
}
