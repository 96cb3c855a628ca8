package testlock

import (
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestHoldExcludesAnotherProcess: while a test holds the lock, another process cannot take it
// (flock -n fails), and once the test ends it can.
func TestHoldExcludesAnotherProcess(t *testing.T) {
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("flock(1) (util-linux) is not installed")
	}
	path := filepath.Join(t.TempDir(), "lock")
	t.Run("held", func(t *testing.T) {
		hold(t, path)
		if err := exec.Command("flock", "-n", path, "true").Run(); err == nil {
			t.Fatal("another process took the lock while this test held it")
		}
	})
	deadline := time.Now().Add(5 * time.Second)
	for exec.Command("flock", "-n", path, "true").Run() != nil {
		if time.Now().After(deadline) {
			t.Fatal("the lock was not released when the test holding it ended")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
