package scenarios

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/topology"
)

// Result collects one scenario's facts and checks. Build it with env.NewResult so that a
// scenario that panics still hands its partial facts to the evidence.
type Result struct {
	facts      []evidence.Fact
	assertions []evidence.Assertion
	keyFact    string
	errs       []error
	skip       string
	faults     []evidence.FaultWindow // recorded by Env.Fault
	notMade    []string               // checks the gateway under test could not support
	decidedBy  []string               // the black-box evidence that decided instead (DecidedBy)
}

// NewResult returns an empty result (unit tests; scenarios use env.NewResult).
func NewResult() *Result { return &Result{} }

// Fact records one named observation.
func (r *Result) Fact(name string, value any) {
	r.facts = append(r.facts, evidence.Fact{Name: name, Value: value})
}

// Check records one assertion and returns ok. Every check is kept, passing or not; callers
// must not use the return value to skip later checks or recordings.
func (r *Result) Check(name string, expected, observed any, ok bool) bool {
	r.assertions = append(r.assertions, evidence.Assertion{Name: name, Expected: expected, Observed: observed, OK: ok})
	return ok
}

// Key sets the one-line key fact shown in the closing table.
func (r *Result) Key(format string, args ...any) { r.keyFact = fmt.Sprintf(format, args...) }

// Error records an operational error (a lever or an observation that could not be made). The
// scenario fails; what was recorded before stays in the evidence.
func (r *Result) Error(err error) *Result {
	if err != nil {
		r.errs = append(r.errs, err)
	}
	return r
}

// NotMade records a check that could not be made because the gateway under test lacks a
// capability, and why. The result keeps its other checks but is marked with the lower,
// black-box evidence level: it never passes as if the check had been made.
func (r *Result) NotMade(check, why string) {
	r.notMade = append(r.notMade, check+" ("+why+")")
}

// DecidedBy names the black-box evidence that decided the verdict in place of the checks
// not made: "admissions probed from outside", "the providers' call logs", … The result is
// marked with the black-box evidence level even when every check was made another way.
func (r *Result) DecidedBy(evidence ...string) {
	for _, e := range evidence {
		if !slices.Contains(r.decidedBy, e) {
			r.decidedBy = append(r.decidedBy, e)
		}
	}
}

// evidenceLevel is "" for the full evidence, or what decided the verdict instead and what
// that evidence can and cannot see (the scenario's BlackBox).
func (r *Result) evidenceLevel(blackBox string) string {
	if len(r.notMade) == 0 && len(r.decidedBy) == 0 {
		return ""
	}
	by := "provider-side counts and the request history"
	if len(r.decidedBy) > 0 {
		by = strings.Join(r.decidedBy, ", ")
	}
	s := "black-box: decided by " + by
	if len(r.notMade) > 0 {
		s += "; not made: " + strings.Join(r.notMade, "; ")
	}
	if blackBox != "" {
		s += "; its black-box path " + blackBox
	}
	return s
}

// Skip marks the result skipped with a reason (a missing lever). A skip is never a pass.
func (r *Result) Skip(reason string) *Result {
	r.skip = reason
	return r
}

// Failed reports whether any check failed or any operational error was recorded so far.
func (r *Result) Failed() bool {
	if len(r.errs) > 0 {
		return true
	}
	for _, a := range r.assertions {
		if !a.OK {
			return true
		}
	}
	return false
}

func (r *Result) anyCheckFailed() bool {
	for _, a := range r.assertions {
		if !a.OK {
			return true
		}
	}
	return false
}

// verdict computes status and reason. A result with no assertion cannot pass.
func (r *Result) verdict() (evidence.Status, string) {
	var reasons []string
	unsupported := 0
	for _, e := range r.errs {
		reasons = append(reasons, e.Error())
		if errors.Is(e, topology.ErrUnsupported) {
			unsupported++
		}
	}
	if unsupported > 0 && unsupported == len(r.errs) && !r.anyCheckFailed() {
		// A lever this topology lacks: skipped with the reason, never passed.
		return evidence.Skipped, strings.Join(reasons, "; ")
	}
	for _, a := range r.assertions {
		if !a.OK {
			reasons = append(reasons, fmt.Sprintf("%s: expected %v, observed %v", a.Name, short(a.Expected), short(a.Observed)))
		}
	}
	if len(reasons) > 0 {
		return evidence.Failed, strings.Join(reasons, "; ")
	}
	if r.skip != "" {
		return evidence.Skipped, r.skip
	}
	if len(r.assertions) == 0 {
		return evidence.Failed, "the scenario made no assertion: a verdict needs at least one check"
	}
	return evidence.Passed, ""
}

func short(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

// prefixSince prefixes the names of the checks and facts recorded since there were a checks
// and f facts: a scenario that runs the same checks once per phase tells its phases apart.
func (r *Result) prefixSince(a, f int, prefix string) {
	for i := a; i < len(r.assertions); i++ {
		r.assertions[i].Name = prefix + r.assertions[i].Name
	}
	for i := f; i < len(r.facts); i++ {
		r.facts[i].Name = prefix + r.facts[i].Name
	}
}
