package topology

import (
	"bytes"
	"context"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// FindRunProcesses lists the processes (other than this one) whose environment carries
// EnvRunID=runID or the id of one of runID's own topologies (OwnTopologyRunID): what a run
// started, and nothing else. Processes whose environment cannot be read (other users') are
// not ours and are skipped.
func FindRunProcesses(runID string) []int {
	if ValidateRunID(runID) != nil {
		return nil
	}
	var out []int
	for pid, id := range runIDsOfProcesses() {
		if OfRun(id, runID) {
			out = append(out, pid)
		}
	}
	return out
}

// runIDsOfProcesses scans /proc once: each readable process (other than this one) whose
// environment carries EnvRunID maps to the run id it names. Processes whose environment
// cannot be read (other users') are not ours and are skipped.
func runIDsOfProcesses() iter.Seq2[int, string] {
	return func(yield func(int, string) bool) {
		prefix := []byte(EnvRunID + "=")
		self := os.Getpid()
		dirs, _ := filepath.Glob("/proc/[0-9]*")
		for _, d := range dirs {
			pid, err := strconv.Atoi(filepath.Base(d))
			if err != nil || pid == self {
				continue
			}
			env, err := os.ReadFile(filepath.Join(d, "environ"))
			if err != nil {
				continue
			}
			for _, kv := range bytes.Split(env, []byte{0}) {
				if id, ok := bytes.CutPrefix(kv, prefix); ok {
					if !yield(pid, string(id)) {
						return
					}
					break
				}
			}
		}
	}
}

// KillRunProcesses stops every process FindRunProcesses finds for runID: SIGTERM, then SIGKILL
// after grace; zombies count as gone (their parent reaps them). It records each in the
// teardown.
func KillRunProcesses(ctx context.Context, runID string, grace time.Duration) Teardown {
	start := time.Now()
	var td Teardown
	pids := FindRunProcesses(runID)
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGTERM)
	}
	deadline := time.Now().Add(grace)
	alive := func() []int {
		var a []int
		for _, p := range pids {
			if !ZombieOrGone(p) {
				a = append(a, p)
			}
		}
		return a
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for len(alive()) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	for _, p := range alive() {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	killDeadline := time.Now().Add(killWait)
	for len(alive()) > 0 && time.Now().Before(killDeadline) {
		<-tick.C
	}
	still := map[int]bool{}
	for _, p := range alive() {
		still[p] = true
	}
	for _, p := range pids {
		if still[p] {
			td.Errors = append(td.Errors, fmt.Sprintf("process pid %d of run %s survived SIGKILL", p, runID))
		} else {
			td.Removed = append(td.Removed, fmt.Sprintf("process pid %d (run %s)", p, runID))
		}
	}
	td.Elapsed = ElapsedSince(start)
	return td
}

// FindRuns maps each run id found in the environment of a readable process (other than this
// one) to its processes: what `quotaqual down` without --run-id lists.
func FindRuns() map[string][]int {
	out := map[string][]int{}
	for pid, id := range runIDsOfProcesses() {
		if ValidateRunID(id) == nil && !ZombieOrGone(pid) {
			out[id] = append(out[id], pid)
		}
	}
	return out
}
