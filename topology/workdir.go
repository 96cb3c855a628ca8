package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// A run's work directory (component configs, logs, the Valkey password file) lives in the
// temporary directory as <prefix><run-id>-<random>. The run holds an exclusive lock on the
// directory's ownerFile for its whole life; the kernel releases it when the run's process ends
// however it ends (kill -9 included). A work directory whose lock can be taken belongs to a
// dead run: `quotaqual down` and the next run remove it and say so.
const ownerFile = ".quotaqual-owner"

// Work directory prefixes: `quotaqual run` and `quotaqual up`.
var workDirPrefixes = []string{"quotaqual-up-", "quotaqual-"}

// WorkDir is a run's locked work directory.
type WorkDir struct {
	Path string
	lock *os.File
}

// NewWorkDir creates the work directory of runID (prefix "quotaqual-" for run,
// "quotaqual-up-" for up) and locks it for the life of this process.
func NewWorkDir(prefix, runID string) (*WorkDir, error) {
	dir, err := os.MkdirTemp("", prefix+runID+"-")
	if err != nil {
		return nil, fmt.Errorf("create the run's work directory: %w", err)
	}
	// Locked before it appears under its name, so a sweep never sees it unlocked.
	tmp := filepath.Join(dir, ownerFile+".new")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_RDWR, 0o600)
	if err == nil {
		err = lockFile(f)
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, ownerFile))
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("lock the run's work directory %s: %w", dir, err)
	}
	return &WorkDir{Path: dir, lock: f}, nil
}

// Remove deletes the work directory and releases its lock.
func (w *WorkDir) Remove() error {
	err := os.RemoveAll(w.Path)
	w.lock.Close()
	return err
}

// RemoveDeadWorkDirs removes the work directories of runs that are no longer alive: those of
// runID, or of every run when runID is empty. A directory whose owner still runs, or that has
// no owner file (not made by NewWorkDir), is left alone. It returns what it removed.
func RemoveDeadWorkDirs(runID string) (removed []string, errs []string) {
	seen := map[string]bool{}
	for _, prefix := range workDirPrefixes {
		pattern := filepath.Join(os.TempDir(), prefix+"*")
		if runID != "" {
			pattern = filepath.Join(os.TempDir(), prefix+runID+"-*")
		}
		dirs, _ := filepath.Glob(pattern)
		for _, dir := range dirs {
			if seen[dir] {
				continue
			}
			seen[dir] = true
			if runID != "" && !strings.HasPrefix(filepath.Base(dir), prefix+runID+"-") {
				continue
			}
			dead, err := ownerDead(dir)
			if err != nil || !dead {
				continue
			}
			if err := os.RemoveAll(dir); err != nil {
				errs = append(errs, fmt.Sprintf("removing the dead run's work directory %s: %v", dir, err))
				continue
			}
			removed = append(removed, "work directory "+dir)
		}
	}
	return removed, errs
}

// ownerDead reports whether dir's owner lock can be taken (its run has ended). The lock taken
// to find out is released at once.
func ownerDead(dir string) (bool, error) {
	if !locksSupported {
		return false, nil
	}
	f, err := os.OpenFile(filepath.Join(dir, ownerFile), os.O_RDWR, 0)
	if err != nil {
		return false, err // no owner file: not ours to judge
	}
	defer f.Close()
	if err := lockFile(f); err != nil {
		return false, nil // held: the run is alive
	}
	return true, nil
}
