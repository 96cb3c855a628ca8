package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/undertest"
)

func init() { register(700, windowExpiry) }

func windowExpiry() Scenario {
	return Scenario{
		Name:      "window-expiry",
		Summary:   "after exhaustion, admission returns once usage leaves the window and not before",
		Invariant: "usage leaves the window no earlier than one window after it was charged and at most one accounting bucket late",
		Prefers:   []Need{NeedQuotaInspection},
		BlackBox: "sees the first admission after the subject's charges may leave the window (polled from outside) against the " +
			"earliest and latest the rule allows, and every 429's Retry-After and reset against it; cannot see the ledger's settled " +
			"usage leaving bucket by bucket (the report's ledger trace is empty without inspection)",
		Rules: windowExpiryRules,
		Run:   runWindowExpiry,
	}
}

// windowExpiryRuleName is the scenario's own rule: the run's budget over windowExpiryWindow.
// The scenario waits one window out, so a window shorter than the run's (on quick) shortens
// the run by the difference and proves the same thing.
const windowExpiryRuleName = "window-expiry"

// windowExpiryWindows is the window of the scenario's own rule on each profile: on quick two of
// the ledger's 1 s buckets, waited out in about 2–3 s instead of 4–5 s; a profile without an
// entry (reference) waits out the run's window on its own rule too.
var windowExpiryWindows = map[string]time.Duration{"quick": 2 * time.Second}

// windowExpiryWindow is the window of the scenario's own rule on p.
func windowExpiryWindow(p deployment.Profile) time.Duration {
	if w, ok := windowExpiryWindows[p.Name]; ok {
		return w
	}
	return p.Window
}

func windowExpiryRules(p deployment.Profile) []deployment.ScenarioRule {
	return []deployment.ScenarioRule{runBudgetRule(windowExpiryRuleName, p, windowExpiryWindow(p), p.Lease)}
}

// recoveryPlan says when admission may return after an exhaustion, from the admitted requests'
// times and charges.
type recoveryPlan struct {
	Index    int       // the admitted request whose charge must leave the window first
	Earliest time.Time // its send time + window: admission before this means usage left early
	Latest   time.Time // its receive time + window + bucket + margin
	// Expected is the bucket-aligned leave time range when buckets align to the epoch.
	ExpectedLo, ExpectedHi time.Time
}

// planRecovery finds the first charge whose departure makes room for one more estimate: the
// smallest k such that the charges after k plus the estimate fit the capacity.
func planRecovery(starts, ends []time.Time, charges []int64, capacity, estimate int64, window, bucket, margin time.Duration) (recoveryPlan, bool) {
	var total int64
	for _, c := range charges {
		total += c
	}
	left := total
	for k := range charges {
		left -= charges[k]
		if left+estimate <= capacity {
			align := func(t time.Time) time.Time {
				return time.Unix(0, (t.UnixNano()/int64(bucket))*int64(bucket)).Add(bucket + window)
			}
			return recoveryPlan{
				Index:      k,
				Earliest:   starts[k].Add(window),
				Latest:     ends[k].Add(window + bucket + margin),
				ExpectedLo: align(starts[k]),
				ExpectedHi: align(ends[k]),
			}, true
		}
	}
	return recoveryPlan{}, false
}

// windowExpiryRule is the rule window-expiry's subjects are under and its window: the
// scenario's own (windowExpiryWindow) when the gateway renders scenario rules, else the run's
// rule and window.
func windowExpiryRule(env *Env) (string, time.Duration) {
	if env.hasOwnRule(windowExpiryRuleName) {
		return windowExpiryRuleName, windowExpiryWindow(env.Profile)
	}
	return RuleName, env.Profile.Window
}

func runWindowExpiry(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	rule, window := windowExpiryRule(env)
	bucket := env.bucketWidth(window)
	interval := min(100*time.Millisecond, max(10*time.Millisecond, window/40))
	margin := interval + p.StoreTimeout + 250*time.Millisecond
	r.Fact("rule", fmt.Sprintf("%s: capacity %d per %s, %d tokens reserved", rule, p.Capacity, window, p.Estimate))

	// The ledger's trace for the report: settled usage rising, then leaving the window.
	defer env.sampleLedger(ctx, Key{Rule: rule, Subject: appA}, window, ledgerTraceInterval).Stop(env, r, appA)
	// On a fixed window the charges land mid-window: usage that leaves at the next boundary
	// then leaves half a window early, far beyond the poll's resolution.
	if err := env.fixedWindowStart(ctx, r, window, window/2); err != nil {
		return r.Error(err)
	}
	ex, err := env.exhaust(ctx, Key{Rule: rule, Subject: appA}, "exhaust", env.gateways(), exhaustCap)
	if err != nil {
		return r.Error(err)
	}
	r.Fact("exhaust_statuses", statuses(ex.Outcomes))
	r.Check("exhausted (ended with 429)", http.StatusTooManyRequests, ex.Outcomes[len(ex.Outcomes)-1].Status, ex.Denied)
	var starts, ends []time.Time
	var charges []int64
	for _, o := range ex.Outcomes {
		if o.Admitted() {
			starts, ends = append(starts, o.Start), append(ends, o.End)
			charges = append(charges, charge(o, env.admitCost(env.Profile)))
		}
	}
	if len(charges) == 0 || !ex.Denied {
		return r.Error(errors.New("could not exhaust the budget: nothing to wait out"))
	}
	exhaustedAt := ex.Outcomes[len(ex.Outcomes)-1].End
	r.Check("exhausted within one window of the first charge", fmt.Sprintf("< %s", window),
		exhaustedAt.Sub(starts[0]).Round(time.Millisecond).String(), exhaustedAt.Sub(starts[0]) < window)
	// Every gateway counts every charge of the window: a replica on its own clock, ahead by
	// more than the window, never sees the others' charges and admits past the budget.
	env.checkPredictedAdmissions(r, ex, p)
	plan, ok := planRecovery(starts, ends, charges, p.Capacity, env.admitCost(env.Profile), window, bucket, margin)
	if !ok {
		return r.Error(fmt.Errorf("charges %v never leave room for an admission of %d in a capacity of %d", charges, env.admitCost(env.Profile), p.Capacity))
	}
	lastCharge := ends[len(ends)-1]
	rel := func(t time.Time) float64 { return seconds(t.Sub(lastCharge)) }
	r.Fact("charges", charges)
	r.Fact("charge_that_must_leave", plan.Index+1)
	r.Fact("bucket", bucket.String())
	r.Fact("poll_interval", interval.String())
	r.Fact("theoretical_earliest_s_after_last_charge", rel(plan.Earliest))
	r.Fact("theoretical_latest_s_after_last_charge", rel(plan.Latest))
	r.Fact("expected_bucket_aligned_s_after_last_charge", []float64{rel(plan.ExpectedLo), rel(plan.ExpectedHi)})

	env.Progressf("waiting for usage to leave the %s window (up to %s)", window, p.RecoveryMax)
	var recovered Outcome
	var polls, denials int
	var unexpected []int
	denied := []Outcome{ex.Outcomes[len(ex.Outcomes)-1]} // every 429, to check its Retry-After
	_, perr := poll(ctx, interval, p.RecoveryMax, func(ctx context.Context) (bool, error) {
		polls++
		o := env.Chat(ctx, ChatCall{Gateway: gwA, Label: fmt.Sprintf("recover-%d", polls), Subject: appA})
		switch o.Status {
		case http.StatusOK:
			recovered = o
			return true, nil
		case http.StatusTooManyRequests:
			denials++
			denied = append(denied, o)
		default:
			unexpected = append(unexpected, o.Status)
		}
		return false, nil
	})
	r.Fact("polls", polls)
	r.Fact("denied_polls", denials)
	r.Check("every poll before recovery answered 429", "only 429", unexpected, len(unexpected) == 0)
	if !recovered.Admitted() {
		r.Check("admission recovered within RecoveryMax", p.RecoveryMax.String(), fmt.Sprintf("not after %d polls: %v", polls, perr), false)
		r.Key("not admitted again within %s: %d polls answered %s", p.RecoveryMax, polls, tally(append(statuses(denied), unexpected...)))
		return r
	}
	observed := recovered.End.Sub(lastCharge)
	r.Fact("observed_recovery_s_after_last_charge", seconds(observed))
	r.Fact("observed_recovery_request_sent_s_after_last_charge", rel(recovered.Start))
	// Not before: the admitting decision happened no later than its response; if even that
	// precedes the earliest departure, usage provably left early.
	r.Check("not admitted before the charge could leave (response ≥ charge sent + window)",
		fmt.Sprintf("≥ %.3fs after the last charge", rel(plan.Earliest)), fmt.Sprintf("%.3fs", rel(recovered.End)),
		!recovered.End.Before(plan.Earliest))
	if recovered.Start.Before(plan.Earliest) {
		r.Fact("note", "the admitting request was sent before the earliest departure and answered after it: consistent, not provably on time")
	}
	r.Check("admitted within window + bucket + margin of the charge",
		fmt.Sprintf("≤ %.3fs after the last charge", rel(plan.Latest)), fmt.Sprintf("sent %.3fs", rel(recovered.Start)),
		!recovered.Start.After(plan.Latest))
	r.Check("recovered within RecoveryMax", p.RecoveryMax.String(), observed.Round(time.Millisecond).String(), observed <= p.RecoveryMax)
	if h := env.gateway().Expect.QuotaHeaders; h.RetryAfter != "" {
		retryAfterTruth(r, h.RetryAfter, h.Reset, denied, recovered)
	} else {
		r.NotMade("every 429's Retry-After is true", "the gateway sends no Retry-After")
	}
	// Said against the theory as the checks above compare it: the answer with the earliest
	// departure, the sending with the latest.
	when := fmt.Sprintf("%.2fs after the last charge", seconds(observed))
	switch {
	case recovered.End.Before(plan.Earliest):
		why := ""
		if env.gateway().Expect.Admission.Window == undertest.WindowFixed {
			why = ": a fixed window forgets all its usage at once, at its end"
		}
		r.Key("forgot usage %.1fs early: admitted again %s, answered before a %s window's theory of %.2f–%.2fs%s",
			seconds(plan.Earliest.Sub(recovered.End)), when, window, rel(plan.Earliest), rel(plan.Latest), why)
		return r
	case recovered.Start.After(plan.Latest):
		when += fmt.Sprintf(", sent %.2fs, after the theory's %.2f–%.2fs", rel(recovered.Start), rel(plan.Earliest), rel(plan.Latest))
	default:
		when += fmt.Sprintf(" (theory %.2f–%.2fs)", rel(plan.Earliest), rel(plan.Latest))
	}
	r.Key("admitted again %s", when)
	return r
}

// retryAfterTolerance absorbs clock reading differences between the harness and the store
// (one kernel clock on netns and process; the host's on docker and kind).
const retryAfterTolerance = 50 * time.Millisecond

// checkRetryAfterTruth checks every 429 of a wait for recovery against when admission actually
// returned, so that a client acting on Retry-After is told the truth:
//   - sufficient: a request sent Retry-After or later after a 429 was answered must be
//     admitted (its decision came after the capacity freed), so no 429 may follow another
//     429's answer by its Retry-After or more;
//   - not too long: Retry-After S is ceil(wait), so the capacity freed more than S−1 seconds
//     after that 429's decision, and the first admission cannot be answered earlier.
//
// x-ratelimit-reset-tokens must say the same as Retry-After ("<S>s").
func checkRetryAfterTruth(r *Result, denied []Outcome, recovered Outcome) {
	retryAfterTruth(r, "Retry-After", "X-Ratelimit-Reset-Tokens", denied, recovered)
}

// retryAfterTruth is checkRetryAfterTruth with the gateway's header names; an empty reset
// name means the gateway sends no reset header (a check not made).
func retryAfterTruth(r *Result, retryAfter, reset string, denied []Outcome, recovered Outcome) {
	type hint struct {
		o Outcome
		s time.Duration
	}
	var hints []hint
	var unparsable, resetMismatch []string
	for i, o := range denied {
		v := o.Headers.Get(retryAfter)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			unparsable = append(unparsable, fmt.Sprintf("#%d %q", i+1, v))
			continue
		}
		if got := headerOf(o.Headers, reset); reset != "" && got != v+"s" {
			resetMismatch = append(resetMismatch, fmt.Sprintf("#%d Retry-After %s, reset %q", i+1, v, got))
		}
		hints = append(hints, hint{o, time.Duration(n) * time.Second})
	}
	var tooShort, tooLong []string
	for _, h := range hints {
		freeBy := h.o.End.Add(h.s + retryAfterTolerance)
		for _, later := range denied {
			if !later.Start.Before(freeBy) {
				tooShort = append(tooShort, fmt.Sprintf("Retry-After %s answered at +0s, yet a request sent %.3fs later was denied",
					h.o.Headers.Get(retryAfter), seconds(later.Start.Sub(h.o.End))))
				break
			}
		}
		if h.s >= 2*time.Second && recovered.Admitted() && !recovered.End.After(h.o.Start.Add(h.s-time.Second-retryAfterTolerance)) {
			tooLong = append(tooLong, fmt.Sprintf("Retry-After %s, yet admitted again %.3fs after that request was sent",
				h.o.Headers.Get(retryAfter), seconds(recovered.End.Sub(h.o.Start))))
		}
	}
	tooShort, tooLong = firstFew(tooShort, 5), firstFew(tooLong, 5)
	r.Fact("retry_after_hints_checked", len(hints))
	r.Check("every 429 carries Retry-After in whole seconds ≥ 1", "all", unparsable, len(unparsable) == 0 && len(denied) > 0)
	if reset != "" {
		r.Check(strings.ToLower(reset)+" says the same as Retry-After", "reset == Retry-After + \"s\"", resetMismatch, len(resetMismatch) == 0)
	} else {
		r.NotMade("the reset header says the same as Retry-After", "the gateway sends none")
	}
	r.Check("a client that waits Retry-After is admitted (no 429 to a request sent Retry-After after a 429)", "none", tooShort, len(tooShort) == 0)
	r.Check("a client that retries more than a second before Retry-After is not admitted (recovery no earlier than Retry-After − 1 s)", "none", tooLong, len(tooLong) == 0)
}

// firstFew keeps the first n entries of a violation list and says how many more there were.
func firstFew(list []string, n int) []string {
	if len(list) <= n {
		return list
	}
	return append(list[:n:n], fmt.Sprintf("… and %d more", len(list)-n))
}
