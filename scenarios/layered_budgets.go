package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { register(1600, layeredBudgets) }

func layeredBudgets() Scenario {
	return Scenario{
		Name: "layered-budgets",
		Summary: "one subject under a rule with a short and a long window: the short one fills first and empties; the long one " +
			"then refuses a request the short one alone would admit; the quota headers speak for the window that decides",
		Invariant: "hard gate: admitted iff settled + estimate ≤ capacity in every window of the rule (replayed on the responses' " +
			"usage); a 429's Retry-After and remaining are the refusing window's (the latest to free when both refuse), a Retry-After waited out " +
			"admits, an admitted response's remaining the least of its windows'",
		// Its rule is the only one with two windows: without the scenarios' rules there is
		// nothing to qualify. Without inspection, the responses' usage stands for the ledger's.
		Needs:   []Need{NeedScenarioRules},
		Prefers: []Need{NeedQuotaInspection},
		BlackBox: "sees every decision against the rule's two windows replayed on the responses' own usage, and the quota headers " +
			"of each answer; cannot see the ledger's settled usage per window (it replays the responses' usage instead and labels it so)",
		Rules: layeredBudgetsRules,
		Run:   runLayeredBudgets,
	}
}

// layeredBudgetsRule holds its subjects to two windows at once (layeredCapacities): a short one
// that fills first and frees within the scenario, and a long one that outlasts the run and then
// refuses a request the short one alone would admit.
const (
	layeredBudgetsRule = "layered-budgets"
	layeredShortWindow = 3 * time.Second
	layeredLongWindow  = 10 * time.Minute
)

// layeredCapacities are the rule's capacities: two estimates in the short window, two and a
// half in the long one. With a usage per request between half and three quarters of the
// estimate (the stub's default request: 10 of 15), the short window refuses the third request
// while the long one has room for it, and once the short window is empty again the long one
// refuses the second request after it, which the short one would admit.
func layeredCapacities(p deployment.Profile) (short, long int64) {
	return 2 * p.Estimate, 5 * p.Estimate / 2
}

func layeredBudgetsRules(p deployment.Profile) []deployment.ScenarioRule {
	short, long := layeredCapacities(p)
	return []deployment.ScenarioRule{{Name: layeredBudgetsRule, Window: deployment.FormatDuration(layeredShortWindow), Capacity: short,
		Lease: deployment.FormatDuration(p.Lease), Estimate: p.Estimate,
		MoreBudgets: []deployment.Budget{{Window: deployment.FormatDuration(layeredLongWindow), Capacity: long}}}}
}

// layeredStep is one request of layered-budgets with what the rule, replayed on the usage the
// responses reported, says of it.
type layeredStep struct {
	o              Outcome
	est            int64 // the request's estimate: the rule's, times its n
	short, long    int64 // settled in each window before the request (replayed)
	fitsShort      bool  // settled + estimate ≤ capacity in the short window
	fitsLong       bool
	ledger         *wire.QuotaState // after the request settled (inspection only)
	settledAt      time.Time        // when an admitted request was seen settled
	round, inRound int
}

func (s layeredStep) predicted() bool { return s.fitsShort && s.fitsLong }

// layeredMaxPerRound bounds one round's requests: the capacities hold at most three.
const layeredMaxPerRound = 6

func runLayeredBudgets(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	est := p.Estimate
	capShort, capLong := layeredCapacities(p)
	ws, wl := layeredShortWindow, layeredLongWindow
	bs, bl := env.bucketWidth(ws), env.bucketWidth(wl)
	r.Fact("rule", fmt.Sprintf("%s: %d tokens per %s and %d per %s, %d reserved per request", layeredBudgetsRule, capShort, ws, capLong, wl, est))
	before, ok := env.startReplay(ctx, r, "the ledger's settled usage per window against the responses'")
	if !ok {
		return r
	}

	var steps []layeredStep
	var longSettled int64 // everything admitted so far: nothing leaves the long window in this run
	// round sends requests alternating over the gateways until the first non-200, each after
	// the previous one settled, and checks that it ended before anything it charged could
	// leave the short window (which starts each round empty), or the replay would be wrong.
	round := func(n int, label string) error {
		var shortSettled int64
		start := len(steps)
		defer func() {
			if len(steps) > start {
				first, last := steps[start].o, steps[len(steps)-1].o
				span := last.End.Sub(first.Start)
				r.Check(fmt.Sprintf("round %d within the short window less a bucket (nothing left it mid-round)", n), fmt.Sprintf("< %s", ws-bs),
					span.Round(time.Millisecond).String(), span < ws-bs)
			}
		}()
		for i := 0; i < layeredMaxPerRound; i++ {
			gw := env.alternate(len(steps))
			st := layeredStep{est: est, short: shortSettled, long: longSettled, round: n, inRound: i + 1}
			st.fitsShort, st.fitsLong = shortSettled+est <= capShort, longSettled+est <= capLong
			st.o = env.Chat(ctx, ChatCall{Gateway: gw, Label: fmt.Sprintf("%s-%d", label, i+1), Subject: appA})
			if !st.o.Admitted() {
				steps = append(steps, st)
				return nil
			}
			q, err := env.Quotas().WaitIdle(ctx, gw, Key{Rule: layeredBudgetsRule, Subject: appA})
			if err != nil {
				steps = append(steps, st)
				return err
			}
			st.settledAt = time.Now()
			c := charge(st.o, est)
			shortSettled += c
			longSettled += c
			if env.inspects() {
				st.ledger = &q
			}
			steps = append(steps, st)
		}
		return fmt.Errorf("round %d: %d requests admitted in a row, more than both capacities hold", n, layeredMaxPerRound)
	}

	// Round 1 fills the short window.
	if err := round(1, "short-round"); err != nil {
		return r.Error(err)
	}
	first := steps[0].o

	// Wait until every charge of round 1 has left the short window (usage leaves at most one
	// bucket late), read from the ledger where it can be.
	var lastCharge time.Time
	for _, s := range steps {
		if s.o.Admitted() {
			lastCharge = s.settledAt
		}
	}
	emptyBy := lastCharge.Add(ws + bs)
	env.Progressf("waiting for the short window (%s) to empty, until %s", ws, emptyBy.Format("15:04:05.000"))
	if err := waitUntil(ctx, emptyBy); err != nil {
		return r.Error(fmt.Errorf("waiting for the short window to empty: %w", err))
	}
	if env.inspects() {
		q, err := env.Quotas().Read(ctx, gwA, Key{Rule: layeredBudgetsRule, Subject: appA})
		if err != nil {
			return r.Error(fmt.Errorf("reading the ledger after the short window: %w", err))
		}
		short, long := windowSettled(q, ws), windowSettled(q, wl)
		r.Check("the ledger's short window empty one window and bucket after round 1, its long window not",
			fmt.Sprintf("short 0, long %d", longSettled), fmt.Sprintf("short %d, long %d", short, long), short == 0 && long == longSettled)
	}

	// Round 2: the short window is empty, the long one holds round 1.
	if err := round(2, "long-round"); err != nil {
		return r.Error(err)
	}
	both, honoured := env.refuseInBothWindows(ctx, r, steps, capShort, capLong, est, ws)
	steps = append(steps, both)
	end := time.Now()

	// The replay: every decision as the rule says, with both windows weighed.
	var wrong, admittedOverLong []string
	admitted := 0
	if honoured.Admitted() {
		admitted++
	}
	for _, s := range steps {
		if s.o.Admitted() {
			admitted++
		}
		if s.predicted() != s.o.Admitted() || (s.o.Status != http.StatusOK && s.o.Status != http.StatusTooManyRequests) {
			wrong = append(wrong, fmt.Sprintf("round %d #%d: short %d + %d ≤ %d %v, long %d + %d ≤ %d %v; status %d",
				s.round, s.inRound, s.short, s.est, capShort, s.fitsShort, s.long, s.est, capLong, s.fitsLong, s.o.Status))
		}
		if s.o.Admitted() && !s.fitsLong {
			admittedOverLong = append(admittedOverLong, fmt.Sprintf("round %d #%d (long window held %d)", s.round, s.inRound, s.long))
		}
	}
	r.Fact("statuses", statuses(outcomesOf(steps, func(s layeredStep) Outcome { return s.o })))
	r.Fact("admitted", admitted)
	r.Fact("settled_long_window_from_responses", longSettled)
	r.Check("every decision as the rule replayed on the responses' usage says (settled + estimate ≤ capacity in every window)",
		"no mismatch", wrong, len(wrong) == 0)
	r.Check("nothing admitted past the long window (the short one alone does not decide)", "none", admittedOverLong, len(admittedOverLong) == 0)

	// Not vacuous: round 1 sent a request only the short window refuses, and round 2 one
	// only the long window refuses (by the replay, whatever the gateway answered).
	decisive := func(n int, shortRefuses bool) (layeredStep, bool) {
		for _, s := range steps {
			if s.round == n && s.fitsShort != shortRefuses && s.fitsLong == shortRefuses {
				return s, true
			}
		}
		return layeredStep{}, false
	}
	d1, ok1 := decisive(1, true)
	d2, ok2 := decisive(2, false)
	if !ok1 || !ok2 {
		return r.Error(fmt.Errorf("not decided: the responses' usage (%d tokens settled in all) did not bring round 1 a request only the "+
			"short window refuses and round 2 one only the long window refuses, which the capacities %d/%d assume (a usage per request "+
			"between half and three quarters of the estimate %d)", longSettled, capShort, capLong, est))
	}

	env.checkLayeredHeaders(r, steps, capShort, capLong, est, ws, wl, bs, bl, first.Start)

	if env.inspects() {
		var differ []string
		var short int64
		for _, s := range steps {
			if s.inRound == 1 {
				short = 0
			}
			if s.ledger == nil {
				continue
			}
			short += charge(s.o, est)
			gs, gl := windowSettled(*s.ledger, ws), windowSettled(*s.ledger, wl)
			if gs != short || gl != s.long+charge(s.o, est) {
				differ = append(differ, fmt.Sprintf("round %d #%d: ledger short %d long %d, responses %d and %d", s.round, s.inRound, gs, gl, short, s.long+charge(s.o, est)))
			}
		}
		r.Check("the ledger's settled usage per window == the responses' usage", "equal after every admission", differ, len(differ) == 0)
	}

	if err := env.checkDenialsReachedNoProvider(ctx, r, before, admitted); err != nil {
		return r.Error(err)
	}
	r.Fact("span_ms", ms(end.Sub(first.Start)))
	r.Key("%d admitted; round 1's request %d (the short window's to refuse) answered %d, round 2's request %d (the long window's) answered %d, "+
		"the request both refuse %d (Retry-After %q)", admitted, d1.inRound, d1.o.Status, d2.inRound, d2.o.Status,
		both.o.Status, both.o.Headers.Get(env.gateway().Expect.QuotaHeaders.RetryAfter))
	return r
}

// checkLayeredHeaders checks the quota headers a client acts on against the replay: an
// admitted response's remaining is the least room any window has left after it; a 429's
// remaining is its refusing window's room, and its Retry-After that window's wait — a
// few seconds for the short window, most of the long window for the long one.
func (env *Env) checkLayeredHeaders(r *Result, steps []layeredStep, capShort, capLong, est int64, ws, wl, bs, bl time.Duration, firstSent time.Time) {
	h := env.gateway().Expect.QuotaHeaders
	if h.Remaining == "" {
		r.NotMade("the remaining header speaks for the deciding window", "the gateway sends none")
	} else {
		var wrong []string
		for _, s := range steps {
			var want int64
			switch {
			case s.o.Admitted():
				want = max(0, min(capShort-s.short-s.est, capLong-s.long-s.est))
			case !s.fitsLong: // the long window's wait is the later: it decides when both refuse
				want = max(0, capLong-s.long)
			default:
				want = max(0, capShort-s.short)
			}
			if got := s.o.Headers.Get(h.Remaining); got != strconv.FormatInt(want, 10) {
				wrong = append(wrong, fmt.Sprintf("round %d #%d (%d): %q, truthful %d", s.round, s.inRound, s.o.Status, got, want))
			}
		}
		r.Check(strings.ToLower(h.Remaining)+" is the deciding window's room on every response (the least after an admission, the refusing window's on a 429)",
			"all exact", wrong, len(wrong) == 0)
	}
	if h.RetryAfter == "" {
		r.NotMade("Retry-After is the refusing window's wait", "the gateway sends none")
		return
	}
	for _, s := range steps {
		if s.o.Admitted() {
			continue
		}
		env.checkErrorBody(r, fmt.Sprintf("round %d's 429", s.round), s.o)
		raw := s.o.Headers.Get(h.RetryAfter)
		ra, err := strconv.ParseInt(raw, 10, 64)
		if s.fitsLong {
			hi := int64((ws + bs + time.Second - 1) / time.Second)
			r.Check(fmt.Sprintf("round %d's 429 (short window): Retry-After within the short window + bucket", s.round),
				fmt.Sprintf("1..%d", hi), raw, err == nil && ra >= 1 && ra <= hi)
			continue
		}
		// The long window frees when round 1's first charge leaves it: at the earliest its
		// window after that request was sent, at the latest a bucket after its answer. When
		// the short window refuses too, the long one's wait is still the one to report: a
		// client told the short one's is refused again when it retries.
		lo := int64((wl - s.o.End.Sub(firstSent)) / time.Second)
		hi := int64((wl + bl + time.Second - 1) / time.Second)
		which := "long window"
		if !s.fitsShort {
			which = "both windows"
		}
		r.Check(fmt.Sprintf("round %d's 429 (%s): Retry-After is the long window's wait, not the short one's", s.round, which),
			fmt.Sprintf("%d..%d", lo, hi), raw, err == nil && ra >= lo && ra <= hi)
	}
}

// windowSettled is the settled usage of q's window of length w (-1 when q has none).
func windowSettled(q wire.QuotaState, w time.Duration) int64 {
	for _, win := range q.Windows {
		if win.WindowMS == w.Milliseconds() {
			return win.Settled
		}
	}
	return -1
}

// layeredHonourMax is the longest Retry-After layered-budgets waits out to retry its
// both-windows request: the short window's wait fits, the long one's (minutes) does not.
const layeredHonourMax = 2 * layeredShortWindow

// refuseInBothWindows sends, right after round 2, one request that both windows refuse: n = 2
// doubles the rule's estimate, more than the short window's room beside round 2's charges and
// more than the long window's beside everything. Its 429 must speak for the long window, whose
// wait is the later (checkLayeredHeaders checks it with the others). And a client that takes
// its Retry-After at its word must not be refused again: when the wait is one the run can
// afford (a short window's, which only a gateway reporting the wrong window gives here), the
// request is sent again once it has passed and must be admitted — no inspection needed.
func (env *Env) refuseInBothWindows(ctx context.Context, r *Result, steps []layeredStep, capShort, capLong, est int64, ws time.Duration) (layeredStep, Outcome) {
	var short, long int64
	var round2 time.Time // when round 2's first charge was sent: it stays in the short window a window after
	for _, s := range steps {
		if !s.o.Admitted() {
			continue
		}
		long += charge(s.o, est)
		if s.round == 2 {
			short += charge(s.o, est)
			if round2.IsZero() {
				round2 = s.o.Start
			}
		}
	}
	call := ChatCall{Gateway: env.alternate(len(steps)), Label: "both-windows", Subject: appA, Fields: map[string]any{"n": 2}}
	st := layeredStep{est: 2 * est, short: short, long: long, round: 3, inRound: 1}
	st.fitsShort, st.fitsLong = short+st.est <= capShort, long+st.est <= capLong
	st.o = env.Chat(ctx, call)
	if round2.IsZero() || st.fitsShort || st.fitsLong {
		r.Error(fmt.Errorf("not decided: the both-windows request (n = 2, %d reserved) fits a window by the replay (short %d of %d, long %d of %d): "+
			"round 2 must leave a charge in the short window", st.est, short, capShort, long, capLong))
		return st, Outcome{}
	}
	r.Check("the both-windows request decided while round 2's charge was in the short window", fmt.Sprintf("< %s after it", ws),
		st.o.End.Sub(round2).Round(time.Millisecond).String(), st.o.End.Sub(round2) < ws)
	h := env.gateway().Expect.QuotaHeaders
	ra, err := strconv.ParseInt(st.o.Headers.Get(h.RetryAfter), 10, 64)
	wait := time.Duration(ra) * time.Second
	switch {
	case st.o.Status != http.StatusTooManyRequests || h.RetryAfter == "" || err != nil:
		return st, Outcome{} // the replay and the header checks say what is wrong
	case wait > layeredHonourMax:
		r.Fact("both_windows_retry_after_honoured", fmt.Sprintf("not waited: Retry-After %ds outlasts the run (its bounds are checked)", ra))
		return st, Outcome{}
	}
	env.Progressf("waiting out the both-windows 429's Retry-After of %ds", ra)
	if err := waitUntil(ctx, st.o.End.Add(wait+retryAfterTolerance)); err != nil {
		r.Error(fmt.Errorf("waiting out the both-windows Retry-After: %w", err))
		return st, Outcome{}
	}
	call.Label = "both-windows-after-retry-after"
	again := env.Chat(ctx, call)
	r.Check(fmt.Sprintf("a client that waited the both-windows 429's Retry-After (%ds) is admitted, not refused again", ra),
		http.StatusOK, again.Status, again.Admitted())
	return st, again
}
