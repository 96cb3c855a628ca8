// Package testlock lets tests in different test binaries take turns at one machine-wide
// resource. `go test ./...` runs the packages' test binaries side by side; two docker
// topologies brought up at once on a 2-core machine slow the daemon's container starts (a
// gateway restart measured 7–17 s instead of under 1 s) past the quick profile's 4 s window, so
// the scenarios that time a restart against it fail for the machine, not the gateway. Tests that
// drive the Docker daemon hold the Docker lock for their whole run.
package testlock

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Docker blocks until no other test on this machine holds the Docker lock, then holds it until
// t ends. It is an advisory lock on a file (flock), released by the kernel if the test binary
// dies.
func Docker(t testing.TB) {
	t.Helper()
	hold(t, filepath.Join(os.TempDir(), "quotaqual-docker-tests.lock"))
}

func hold(t testing.TB, path string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("opening the test lock %s: %v", path, err)
	}
	start := time.Now()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("taking the test lock %s: %v", path, err)
	}
	if waited := time.Since(start); waited > time.Second {
		t.Logf("waited %s for the Docker lock (another package's docker test held it)", waited.Round(time.Second))
	}
	t.Cleanup(func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	})
}
