package chaos

import (
	"slices"
	"time"
)

// Shrinking: a failing schedule is cut down to a few faults that still fail, by delta
// debugging (Zeller's ddmin) over the fault list, each candidate judged by a whole new run —
// there is no cheaper oracle for a distributed system. Candidates keep their faults' relative
// timing but start at the warm-up, so a short candidate costs a short run.

// Tester runs one candidate schedule and reports whether it still fails.
type Tester func(s Schedule) (failed bool, err error)

// Shrunk is the outcome of shrinking.
type Shrunk struct {
	Schedule Schedule `json:"schedule"` // the smallest schedule seen failing
	Runs     int      `json:"runs"`     // candidate runs made
	// Minimal: no single fault can be removed and still fail (ddmin's 1-minimality), as far as
	// the run budget let it find out.
	Minimal bool   `json:"minimal"`
	Budget  int    `json:"budget"`
	Err     string `json:"error,omitempty"` // a candidate run that could not be made
}

// Shrink cuts s (which failed) down. The faults in first (the ones the checker named) are
// tried alone before anything else: often one of them is the whole story, for one run; when
// the checker named none, the schedule without any fault is tried first, and a schedule cut
// to one fault is tried without it too (1-minimality: is that fault needed at all?). At most budget
// candidate runs are made.
func Shrink(s Schedule, first []int, budget int, fails Tester) Shrunk {
	return shrinkKnowing(s, first, budget, nil, fails)
}

// shrinkKnowing is Shrink with the outcomes of some candidates already known (by keyOf their
// faults): those are not run again, and cost no run.
func shrinkKnowing(s Schedule, first []int, budget int, known map[string]bool, fails Tester) Shrunk {
	out := Shrunk{Schedule: s, Budget: budget}
	tried := map[string]bool{}
	starved := false // a candidate went untried for the budget: no claim of minimality then
	try := func(c []Fault) bool {
		key := keyOf(c)
		if tried[key] {
			return false
		}
		if failed, ok := known[key]; ok {
			tried[key] = true
			if failed && len(c) <= len(out.Schedule.Faults) {
				out.Schedule = rebase(s.Only(c))
			}
			return failed
		}
		if out.Runs >= budget || out.Err != "" {
			starved = true
			return false
		}
		tried[key] = true
		out.Runs++
		cand := rebase(s.Only(c))
		failed, err := fails(cand)
		if err != nil {
			out.Err = err.Error()
			return false
		}
		if failed && len(c) <= len(out.Schedule.Faults) {
			out.Schedule = cand
		}
		return failed
	}
	c := s.Faults
	if len(first) == 0 && try(nil) {
		// The checker named no fault, and the history fails without any: say so.
		out.Minimal = true
		return out
	}
	for _, n := range first {
		i := slices.IndexFunc(c, func(f Fault) bool { return f.N == n })
		if i >= 0 && len(c) > 1 && try([]Fault{c[i]}) {
			c = []Fault{c[i]}
			break
		}
	}
	n := 2
	for len(c) >= 2 && out.Runs < budget && out.Err == "" {
		chunks := split(c, n)
		reduced := false
		for _, ch := range chunks {
			if try(ch) {
				c, n, reduced = ch, 2, true
				break
			}
		}
		if !reduced && n > 2 {
			for i := range chunks {
				comp := complement(chunks, i)
				if try(comp) {
					c, n, reduced = comp, max(n-1, 2), true
					break
				}
			}
		}
		if !reduced {
			if n >= len(c) {
				out.Minimal = !starved
				break
			}
			n = min(2*n, len(c))
		}
	}
	// One fault left: whether it is needed at all is one more run. A history that fails
	// without any fault (a gateway that over-admits on a whole topology) was exposed by no
	// fault, and the report must not name one.
	if len(c) == 1 && try(nil) {
		c = nil
	}
	if len(c) < 2 && !starved && (len(c) == 0 || tried[keyOf(nil)]) {
		out.Minimal = true
	}
	return out
}

// rebase moves a candidate so that its first fault starts at the warm-up, keeping the
// faults' offsets from one another, and shortens its duration to match.
func rebase(s Schedule) Schedule {
	if len(s.Faults) == 0 {
		s.Duration = warmUp + time.Second
		return s
	}
	shift := s.Faults[0].At - warmUp
	faults := make([]Fault, len(s.Faults))
	for i, f := range s.Faults {
		f.At -= shift
		faults[i] = f
	}
	s.Faults = faults
	s.Duration = max(s.End(), warmUp+time.Second)
	return s
}

func split(c []Fault, n int) [][]Fault {
	var out [][]Fault
	size := len(c) / n
	rest := len(c) % n
	start := 0
	for i := range n {
		end := start + size
		if i < rest {
			end++
		}
		if end > start {
			out = append(out, c[start:end])
		}
		start = end
	}
	return out
}

func complement(chunks [][]Fault, skip int) []Fault {
	var out []Fault
	for i, ch := range chunks {
		if i != skip {
			out = append(out, ch...)
		}
	}
	return out
}

func keyOf(c []Fault) string {
	b := make([]byte, 0, 4*len(c))
	for _, f := range c {
		b = append(b, byte(f.N), byte(f.N>>8), ',')
	}
	return string(b)
}
