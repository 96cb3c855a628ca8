package topology

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestDeadRunsWorkDirectoriesAreRemovedLiveOnesKept(t *testing.T) {
	if !locksSupported {
		t.Skip("no file locks on this system: work directories are never judged dead")
	}
	live, err := NewWorkDir("quotaqual-", "wdtest-live")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Remove()
	dead, err := NewWorkDir("quotaqual-up-", "wdtest-dead")
	if err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(dead.Path, "valkey.pass")
	if err := os.WriteFile(secret, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Not made by NewWorkDir: never touched.
	foreign, err := os.MkdirTemp("", "quotaqual-wdtest-foreign-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(foreign)

	// "" is what the next run sweeps: every dead run's directory (other dead runs' too).
	RemoveDeadWorkDirs("")
	for _, keep := range []string{live.Path, dead.Path, foreign} {
		if _, err := os.Stat(keep); err != nil {
			t.Fatalf("%s was removed while its owner lives (or it has none): %v", keep, err)
		}
	}
	dead.lock.Close() // what the kernel does when the owner dies, kill -9 included
	if removed, _ := RemoveDeadWorkDirs("wdtest-live"); len(removed) != 0 {
		t.Fatalf("down of another run removed %v", removed)
	}
	removed, _ := RemoveDeadWorkDirs("")
	if !slices.Contains(removed, "work directory "+dead.Path) {
		t.Fatalf("removed %v, want %s among them", removed, dead.Path)
	}
	for _, keep := range []string{live.Path, foreign} {
		if _, err := os.Stat(keep); err != nil {
			t.Errorf("%s was removed: %v", keep, err)
		}
	}
	if _, err := os.Stat(secret); !os.IsNotExist(err) {
		t.Errorf("the dead run's password file is still there: %v", err)
	}
}
