package topology

import (
	"sync"
	"sync/atomic"
	"testing"
)

func TestDownGuardRunsTheTeardownOnce(t *testing.T) {
	var g DownGuard
	var runs atomic.Int32
	teardown := func(td *Teardown) {
		runs.Add(1)
		td.Removed = append(td.Removed, "process gateway-a pid 1")
		td.Errors = append(td.Errors, "valkey: still running", "netns: busy")
	}
	td, err := g.Do(teardown)
	if err == nil || err.Error() != "teardown: valkey: still running; netns: busy" {
		t.Errorf("first call: error %v, want both failures joined", err)
	}
	if len(td.Removed) != 1 || len(td.Errors) != 2 {
		t.Errorf("first call recorded %+v", td)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			again, err := g.Do(teardown)
			if err != nil || len(again.Removed) != 1 || again.Removed[0] != td.Removed[0] {
				t.Errorf("later call: %+v, %v; want the first record and no error", again, err)
			}
		}()
	}
	wg.Wait()
	if n := runs.Load(); n != 1 {
		t.Errorf("teardown ran %d times, want once", n)
	}
}
