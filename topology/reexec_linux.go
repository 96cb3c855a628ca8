//go:build linux

package topology

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Inside reports whether this process is the one ReexecIntoNamespace started: pid 1 of its
// own namespaces, with the marker set.
func Inside() bool {
	return os.Getenv(envInside) != "" && os.Getpid() == 1
}

// InsideRunID is the run id the outer process chose, when Inside.
func InsideRunID() string {
	if !Inside() {
		return ""
	}
	return os.Getenv(envInside)
}

// ReexecIntoNamespace runs the current command again inside fresh user, network, mount and pid
// namespaces (see reexec.go). Outside, it returns inside=false and the child's exit code (128+n
// when a signal n ended it) once the child has exited: the caller should exit with it. Inside,
// it prepares the mounts and returns inside=true at once. files are passed to the child as fds
// 3, 4, ... (listeners the outer host can reach, e.g. `up`'s port forwards): see
// InheritedListeners.
func ReexecIntoNamespace(runID string, files []*os.File) (inside bool, code int, err error) {
	if Inside() {
		return true, 0, PrepareInside()
	}
	if err := ValidateRunID(runID); err != nil {
		return false, 0, err
	}
	self, err := os.Executable()
	if err != nil {
		return false, 0, fmt.Errorf("finding the quotaqual binary to re-execute: %w", err)
	}
	cmd := exec.Command(self, os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.ExtraFiles = files
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, envInside+"=") || strings.HasPrefix(kv, envFDs+"=") || strings.HasPrefix(kv, EnvRunID+"=") {
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = append(env, envInside+"="+runID, EnvRunID+"="+runID, envFDs+"="+strconv.Itoa(len(files)))
	cmd.SysProcAttr = namespaceAttr()

	// Pdeathsig follows the thread that started the child: keep this goroutine on it until the
	// child is gone.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return false, 0, fmt.Errorf("cannot create a user+network namespace for the netns topology (%w); use --topology process", err)
	}
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()
	for {
		select {
		case s := <-sigs:
			// The terminal already sent Ctrl-C / Ctrl-\ to the whole foreground process
			// group, the child included; forward only what it did not get.
			if (s == syscall.SIGINT || s == syscall.SIGQUIT) && inForeground() {
				continue
			}
			_ = cmd.Process.Signal(s)
		case werr := <-waited:
			if cmd.ProcessState == nil {
				return false, 0, werr
			}
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				return false, 128 + int(ws.Signal()), nil
			}
			return false, cmd.ProcessState.ExitCode(), nil
		}
	}
}

func namespaceAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{
		Cloneflags:                 syscall.CLONE_NEWUSER | syscall.CLONE_NEWNET | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
		GidMappingsEnableSetgroups: false,
		Pdeathsig:                  syscall.SIGKILL,
	}
}

// inForeground reports whether our process group is the foreground group of the terminal on
// stdin (so the terminal delivers its signals to the child as well).
func inForeground() bool {
	pgrp, err := unix.IoctlGetInt(int(os.Stdin.Fd()), unix.TIOCGPGRP)
	if err != nil {
		return false
	}
	return pgrp == syscall.Getpgrp()
}

var (
	prepareOnce sync.Once
	prepareErr  error
)

// PrepareInside makes the mount namespace private, mounts a /proc of our pid namespace (so
// /proc/<pid> paths name our processes), a tmpfs on /run/netns for `ip netns` (on /run when
// /run/netns does not exist: creating it would write to the host's /run, since uid 0 inside
// is the caller outside) and brings loopback up. Idempotent.
func PrepareInside() error {
	prepareOnce.Do(func() {
		if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
			prepareErr = fmt.Errorf("making the mount namespace private: %w", err)
			return
		}
		if err := syscall.Mount("proc", "/proc", "proc", syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
			prepareErr = fmt.Errorf("mounting /proc for the pid namespace: %w", err)
			return
		}
		target := "/run/netns"
		if fi, err := os.Stat(target); err != nil || !fi.IsDir() {
			target = "/run"
		}
		if err := syscall.Mount("tmpfs", target, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "mode=0755,size=1m"); err != nil {
			prepareErr = fmt.Errorf("mounting a private tmpfs on %s: %w", target, err)
			return
		}
		if err := os.MkdirAll("/run/netns", 0o755); err != nil {
			prepareErr = fmt.Errorf("creating /run/netns in the private tmpfs: %w", err)
			return
		}
		// A new network namespace starts with loopback down; the process engine (and
		// anything else on 127.0.0.1) needs it.
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			prepareErr = fmt.Errorf("bringing up loopback: %v: %s", err, strings.TrimSpace(string(out)))
		}
	})
	return prepareErr
}

// InheritedListeners returns the listeners the outer process passed to ReexecIntoNamespace,
// in order. Outside the namespace it returns nil.
func InheritedListeners() ([]net.Listener, error) {
	if !Inside() {
		return nil, nil
	}
	n, _ := strconv.Atoi(os.Getenv(envFDs))
	var out []net.Listener
	for i := range n {
		f := os.NewFile(uintptr(3+i), "listener-"+strconv.Itoa(i))
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("inherited listener %d: %w", i, err)
		}
		out = append(out, l)
	}
	return out, nil
}

// Detect says which engine "auto" picks and why: netns when user, network, mount and pid
// namespaces can be created without privileges and ip, nft and nsenter are present; process
// otherwise, with the reason.
func Detect() (engine string, reason string) {
	if Inside() {
		return EngineNetns, "already inside the run's own user and network namespace"
	}
	for _, tool := range []struct{ bin, pkg string }{
		{"ip", "iproute2"}, {"nft", "nftables"}, {"nsenter", "util-linux"}, {"unshare", "util-linux"},
	} {
		if _, err := exec.LookPath(tool.bin); err != nil {
			return EngineProcess, fmt.Sprintf("netns needs %s (package %s), which is not on PATH: install it (.ci/install-deps)", tool.bin, tool.pkg)
		}
	}
	if err := probeNamespaces(); err != nil {
		return EngineProcess, "this host does not allow unprivileged user+network namespaces (" + err.Error() + ")"
	}
	return EngineNetns, "unprivileged user, network, mount and pid namespaces work; ip, nft and nsenter present"
}

// probeNamespaces tries what the netns engine needs, in a throw-away process:
// `unshare -Urnm --pid --fork --mount-proc true`.
func probeNamespaces() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "unshare", "--user", "--map-root-user", "--net", "--mount",
		"--pid", "--fork", "--mount-proc", "true").CombinedOutput()
	if err == nil {
		return nil
	}
	msg := strings.TrimSpace(string(out))
	if msg == "" {
		msg = err.Error()
	}
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		msg = "timed out"
	}
	return fmt.Errorf("`unshare -Urnm --pid --fork --mount-proc true`: %s", msg)
}
