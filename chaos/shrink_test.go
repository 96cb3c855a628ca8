package chaos

import (
	"testing"
	"time"
)

func numbers(fs []Fault) []int {
	out := make([]int, len(fs))
	for i, f := range fs {
		out[i] = f.N
	}
	return out
}

func has(fs []Fault, n int) bool {
	for _, f := range fs {
		if f.N == n {
			return true
		}
	}
	return false
}

func longSchedule(t *testing.T) Schedule {
	t.Helper()
	s, err := Generate(Plan{Seed: 7, Duration: 40 * time.Second, Gateways: twoGateways})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Faults) < 8 {
		t.Fatalf("want a long schedule, got %s", s)
	}
	return s
}

// Delta debugging finds a failure that needs two faults together, and only those two.
func TestShrinkFindsTheInteractingPair(t *testing.T) {
	s := longSchedule(t)
	a, b := s.Faults[2].N, s.Faults[len(s.Faults)-2].N
	sh := Shrink(s, nil, 40, func(c Schedule) (bool, error) { return has(c.Faults, a) && has(c.Faults, b), nil })
	if got := numbers(sh.Schedule.Faults); len(got) != 2 || got[0] != a || got[1] != b || !sh.Minimal {
		t.Fatalf("shrunk %d faults to %v (minimal %v) in %d runs; want [%d %d]", len(s.Faults), got, sh.Minimal, sh.Runs, a, b)
	}
	// The candidate is rebased: its first fault at the warm-up, the offsets between kept.
	f := sh.Schedule.Faults
	if f[0].At != warmUp || f[1].At-f[0].At != s.Faults[len(s.Faults)-2].At-s.Faults[2].At {
		t.Fatalf("rebased wrongly: %s", sh.Schedule)
	}
	t.Logf("%d faults → %v in %d runs", len(s.Faults), numbers(f), sh.Runs)
}

// A fault the checker named is tried alone first: two runs when it is the whole story (it
// alone, then none, which passes: the fault is needed).
func TestShrinkTriesTheExposingFaultFirst(t *testing.T) {
	s := longSchedule(t)
	culprit := s.Faults[5].N
	sh := Shrink(s, []int{culprit}, 40, func(c Schedule) (bool, error) { return has(c.Faults, culprit), nil })
	if got := numbers(sh.Schedule.Faults); len(got) != 1 || got[0] != culprit || sh.Runs != 2 || !sh.Minimal {
		t.Fatalf("got %v in %d runs (minimal %v); want [%d] in 2, minimal", got, sh.Runs, sh.Minimal, culprit)
	}
}

// A history that fails on a whole topology is shrunk to no fault at all, even when the
// checker named faults around the violation: none of them exposed it.
func TestShrinkToNoFaultWhenNoneIsNeeded(t *testing.T) {
	s := longSchedule(t)
	sh := Shrink(s, []int{s.Faults[0].N}, 40, func(Schedule) (bool, error) { return true, nil })
	if len(sh.Schedule.Faults) != 0 || sh.Runs != 2 || !sh.Minimal {
		t.Fatalf("got %v in %d runs (minimal %v); want no fault in 2, minimal", numbers(sh.Schedule.Faults), sh.Runs, sh.Minimal)
	}
}

// The run budget is a hard stop, and what was found so far is kept.
func TestShrinkStopsAtItsBudget(t *testing.T) {
	s := longSchedule(t)
	runs := 0
	sh := Shrink(s, nil, 3, func(c Schedule) (bool, error) { runs++; return len(c.Faults) > 0, nil })
	if runs != 3 || sh.Runs != 3 || len(sh.Schedule.Faults) >= len(s.Faults) {
		t.Fatalf("ran %d (reported %d) candidates, kept %d of %d faults", runs, sh.Runs, len(sh.Schedule.Faults), len(s.Faults))
	}
}

// A shrink cut short by its budget does not claim to be minimal.
func TestShrinkOutOfBudgetIsNotMinimal(t *testing.T) {
	s := longSchedule(t)
	a, b := s.Faults[1].N, s.Faults[len(s.Faults)-1].N
	sh := Shrink(s, nil, 4, func(c Schedule) (bool, error) { return has(c.Faults, a) && has(c.Faults, b), nil })
	if sh.Minimal || sh.Runs != 4 {
		t.Fatalf("budget 4: %d runs, minimal %v, %v", sh.Runs, sh.Minimal, numbers(sh.Schedule.Faults))
	}
}

// A candidate whose outcome is known costs no run: the second shrink of a history that fails
// on a whole topology knows the run without faults passed the checks it shrinks for.
func TestShrinkKnowingSkipsKnownCandidates(t *testing.T) {
	s := longSchedule(t)
	culprit := s.Faults[3].N
	sh := shrinkKnowing(s, []int{culprit}, 40, map[string]bool{keyOf(nil): false}, func(c Schedule) (bool, error) {
		if len(c.Faults) == 0 {
			t.Fatal("the known candidate was run")
		}
		return has(c.Faults, culprit), nil
	})
	if got := numbers(sh.Schedule.Faults); len(got) != 1 || got[0] != culprit || sh.Runs != 1 || !sh.Minimal {
		t.Fatalf("got %v in %d runs (minimal %v); want [%d] in 1, minimal", got, sh.Runs, sh.Minimal, culprit)
	}
}
