package topology

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A run's work directory (component configs, logs, the Valkey password file) lives in the
// temporary directory as <prefix><run-id>-<random>. The run holds an exclusive lock on the
// directory's ownerFile for its whole life; the kernel releases it when the run's process ends
// however it ends (kill -9 included). A work directory whose lock can be taken belongs to a
// dead run: `quotaqual down` and the next run remove it and say so.
//
// Inside the netns engine's mount namespace the directory's contents are a private tmpfs
// mounted over it (privateTmpfs): from outside only the directory and its owner file are
// visible, and after kill -9 nothing else is left of it, on disk or in memory.
const ownerFile = ".quotaqual-owner"

// Work directory prefixes: `quotaqual run` and `quotaqual up`.
var workDirPrefixes = []string{"quotaqual-up-", "quotaqual-"}

// WorkDir is a run's locked work directory.
type WorkDir struct {
	Path string
	// InMemory is true when the contents live on a tmpfs private to the run's mount namespace.
	InMemory bool
	lock     *os.File
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
	// Mounted after the lock is taken: the lock stays on the owner file outside the tmpfs,
	// where `down` and other runs' sweeps look for it.
	mounted, err := privateTmpfs(dir)
	if err != nil {
		f.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	return &WorkDir{Path: dir, InMemory: mounted, lock: f}, nil
}

// Remove deletes the work directory and releases its lock.
func (w *WorkDir) Remove() error {
	var err error
	if w.InMemory {
		err = unmountTmpfs(w.Path)
	}
	if rerr := os.RemoveAll(w.Path); err == nil {
		err = rerr
	}
	w.lock.Close()
	return err
}

// RemoveDeadWorkDirs removes what runs that are no longer alive left in the temporary
// directories: their work directories and `up`'s credentials files, those of runID or of every
// run when runID is empty. A directory or file whose owner still runs, or that has no owner
// lock (not made by NewWorkDir or NewCredentialsFile), is left alone. It returns what it removed.
func RemoveDeadWorkDirs(runID string) (removed []string, errs []string) {
	removed, errs = removeDeadCredentialFiles(runID)
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
			dead, err := ownerDeadAfter(filepath.Join(dir, ownerFile), runID)
			if err != nil {
				continue
			}
			if !dead {
				if runID != "" {
					errs = append(errs, fmt.Sprintf("kept the work directory %s: a live process still holds its lock after %s", dir, exitingOwnerGrace))
				}
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

// exitingOwnerGrace is how long `down --run-id` waits for a lock to be let go: a process killed
// a moment ago (by down itself, or kill -9 before it) holds its locks until the kernel has
// closed its files, which comes after it has left the process list.
const exitingOwnerGrace = 5 * time.Second

// ownerDeadAfter reports whether path's owner lock can be taken. For one named run (runID not
// empty) it waits up to exitingOwnerGrace for an exiting owner; a sweep of every run does not
// wait: a live run's lock is the normal case there.
func ownerDeadAfter(path, runID string) (bool, error) {
	deadline := time.Now().Add(exitingOwnerGrace)
	for {
		dead, err := fileOwnerDead(path)
		if err != nil || dead || runID == "" || time.Now().After(deadline) {
			return dead, err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// fileOwnerDead reports whether the lock on path can be taken: the run that held it has ended.
func fileOwnerDead(path string) (bool, error) {
	if !locksSupported {
		return false, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false, err // no such file: not ours to judge
	}
	defer f.Close()
	if err := lockFile(f); err != nil {
		return false, nil // held: the run is alive
	}
	return true, nil
}

// CredentialsFile is a file of a run's credentials that the user's own shell must read (`up` on
// a non-terminal: the curl lines take the passwords from it). Unlike the work directory it
// cannot live in the run's mount namespace, so it lives in memory-backed storage outside
// (credentialDirs) where there is one, mode 0600, and is locked like the work directory's
// owner file: a file whose lock can be taken belongs to a dead run and is swept with the work
// directories.
type CredentialsFile struct {
	Path string
	f    *os.File
}

// credentialsPrefix and credentialsSuffix frame <run-id> in a credentials file's name.
const credentialsPrefix, credentialsSuffix = "quotaqual-up-", ".env"

// credentialDirs are where credentials files go, best first: the user's runtime directory
// (a per-user tmpfs), /dev/shm when it is a tmpfs, the temporary directory as a last resort.
// A directory this process cannot see (inside the run's namespaces /run is private) is
// skipped; the sweep looks in all of them.
func credentialDirs() []string {
	var dirs []string
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) && isTmpfs(d) {
		dirs = append(dirs, d)
	}
	if isTmpfs("/dev/shm") {
		dirs = append(dirs, "/dev/shm")
	}
	return append(dirs, os.TempDir())
}

// NewCredentialsFile writes content to runID's credentials file (created, never replaced, mode
// 0600) and keeps it locked until Remove.
func NewCredentialsFile(runID string, content []byte) (*CredentialsFile, error) {
	var lastErr error
	for _, dir := range credentialDirs() {
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		path := filepath.Join(dir, credentialsPrefix+runID+credentialsSuffix)
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o600)
		if err != nil {
			lastErr = err
			if os.IsExist(err) {
				return nil, fmt.Errorf("writing the credentials file %s: it exists: `quotaqual down --run-id %s` removes a dead run's", path, runID)
			}
			continue
		}
		if err = lockFile(f); err == nil {
			_, err = f.Write(content)
		}
		if err == nil {
			err = f.Sync()
		}
		if err != nil {
			f.Close()
			os.Remove(path)
			return nil, fmt.Errorf("writing the credentials file %s: %w", path, err)
		}
		return &CredentialsFile{Path: path, f: f}, nil
	}
	return nil, fmt.Errorf("writing the credentials file: no writable directory among %v: %v", credentialDirs(), lastErr)
}

// Remove deletes the file and releases its lock.
func (c *CredentialsFile) Remove() error {
	err := os.Remove(c.Path)
	c.f.Close()
	return err
}

// removeDeadCredentialFiles removes the credentials files of dead runs (runID's, or every
// run's when runID is empty).
func removeDeadCredentialFiles(runID string) (removed []string, errs []string) {
	seen := map[string]bool{}
	for _, dir := range credentialDirs() {
		pattern := filepath.Join(dir, credentialsPrefix+"*"+credentialsSuffix)
		if runID != "" {
			pattern = filepath.Join(dir, credentialsPrefix+runID+credentialsSuffix)
		}
		files, _ := filepath.Glob(pattern)
		for _, path := range files {
			if seen[path] {
				continue
			}
			seen[path] = true
			id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), credentialsPrefix), credentialsSuffix)
			if ValidateRunID(id) != nil {
				continue // not a name a run gives its file
			}
			dead, err := ownerDeadAfter(path, runID)
			if err != nil {
				continue
			}
			if !dead {
				if runID != "" {
					errs = append(errs, fmt.Sprintf("kept the credentials file %s: a live process still holds its lock after %s", path, exitingOwnerGrace))
				}
				continue
			}
			if err := os.Remove(path); err != nil {
				errs = append(errs, fmt.Sprintf("removing the dead run's credentials file %s: %v", path, err))
				continue
			}
			removed = append(removed, "credentials file "+path)
		}
	}
	return removed, errs
}
