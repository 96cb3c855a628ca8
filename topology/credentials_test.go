package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCredentialsFileIsPrivateAndSweptOnlyWhenItsRunIsDead: up's credentials file is 0600 in
// memory-backed storage where there is one; a sweep keeps it while its run holds the lock and
// removes (and names) it once no run does — the file a killed `up` leaves (issue 26).
func TestCredentialsFileIsPrivateAndSweptOnlyWhenItsRunIsDead(t *testing.T) {
	runID := fmt.Sprintf("cred-%d", time.Now().UnixNano()%1e6)
	cf, err := NewCredentialsFile(runID, []byte("export QQ_PASSWORD_1='s3cret-for-the-test'\n"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(cf.Path) })
	st, err := os.Stat(cf.Path)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file %s: %v; want mode 0600", cf.Path, err)
	}
	if isTmpfs("/dev/shm") && filepath.Dir(cf.Path) != "/dev/shm" && !isTmpfs(filepath.Dir(cf.Path)) {
		t.Errorf("credentials file %s is on disk though /dev/shm is a tmpfs", cf.Path)
	}
	if _, err := NewCredentialsFile(runID, nil); err == nil || !strings.Contains(err.Error(), "quotaqual down --run-id "+runID) {
		t.Errorf("a second file for the same run: %v, want a refusal naming down", err)
	}
	if removed, errs := RemoveDeadWorkDirs(runID); len(removed) != 0 || len(errs) != 1 || !strings.Contains(errs[0], "kept the credentials file "+cf.Path) {
		t.Errorf("the sweep of a live run: removed %v, errors %v; want the file kept and named", removed, errs)
	}
	// The run dies while down waits: a process killed a moment ago holds its locks until the
	// kernel has closed its files (after it has left the process list — the race a CI run hit).
	// Its lock goes with its open file; the file stays, as after kill -9.
	time.AfterFunc(exitingOwnerGrace/5, func() { cf.f.Close() })
	removed, errs := RemoveDeadWorkDirs(runID)
	if len(errs) != 0 || len(removed) != 1 || removed[0] != "credentials file "+cf.Path {
		t.Errorf("sweep of the dead run: removed %v, errors %v; want its credentials file", removed, errs)
	}
	if _, err := os.Stat(cf.Path); !os.IsNotExist(err) {
		t.Errorf("credentials file still there: %v", err)
	}
}
