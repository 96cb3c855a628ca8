package topology

import (
	"context"
	"strings"
	"testing"
)

func TestRegisterRefusesATakenName(t *testing.T) {
	newNothing := func(Spec) (Topology, error) { return nil, ErrUnsupported }
	Register("test-taken", Engine{New: newNothing})
	t.Cleanup(func() {
		enginesMu.Lock()
		delete(engines, "test-taken")
		enginesMu.Unlock()
	})
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), "registered twice") {
			t.Errorf("registering test-taken again: recovered %v, want a panic naming the duplicate", r)
		}
	}()
	Register("test-taken", Engine{New: newNothing})
}

// TestCleanupEnginesJoinsEveryEngine registers two throwaway engines and checks that their
// removals and failures (prefixed with the engine's name) all reach the one record.
func TestCleanupEnginesJoinsEveryEngine(t *testing.T) {
	for _, name := range []string{"test-cleanup-a", "test-cleanup-b"} {
		Register(name, Engine{
			New: func(Spec) (Topology, error) { return nil, ErrUnsupported },
			Cleanup: func(_ context.Context, runID string) (Teardown, error) {
				if name == "test-cleanup-b" {
					return Teardown{Errors: []string{"left " + runID}}, context.DeadlineExceeded
				}
				return Teardown{Removed: []string{"thing of " + runID}}, nil
			},
		})
	}
	t.Cleanup(func() {
		enginesMu.Lock()
		delete(engines, "test-cleanup-a")
		delete(engines, "test-cleanup-b")
		enginesMu.Unlock()
	})
	td := CleanupEngines(context.Background(), "q1")
	if strings.Join(td.Removed, ",") != "thing of q1" {
		t.Errorf("removed %v", td.Removed)
	}
	if strings.Join(td.Errors, ",") != "left q1,test-cleanup-b: context deadline exceeded" {
		t.Errorf("errors %v", td.Errors)
	}
}
