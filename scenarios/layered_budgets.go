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

func layeredBudgets() Scenario {
	return Scenario{
		Name: "layered-budgets",
		Summary: "one subject under a rule with a short and a long window: the short one fills first and empties; the long one " +
			"then refuses a request the short one alone would admit; the quota headers speak for the window that decides",
		Invariant: "hard gate: admitted iff settled + estimate ≤ capacity in every window of the rule (replayed on the responses' " +
			"usage); a 429's Retry-After and remaining are the refusing window's, an admitted response's remaining the least of its windows'",
		// Its rule is the only one with two windows: without the scenarios' rules there is
		// nothing to qualify. Without inspection, the responses' usage stands for the ledger's.
		Needs:   []Need{NeedScenarioRules},
		Prefers: []Need{NeedQuotaInspection},
		BlackBox: "sees every decision against the rule's two windows replayed on the responses' own usage, and the quota headers " +
			"of each answer; cannot see the ledger's settled usage per window (it replays the responses' usage instead and labels it so)",
		Run: runLayeredBudgets,
	}
}

// layeredStep is one request of layered-budgets with what the rule, replayed on the usage the
// responses reported, says of it.
type layeredStep struct {
	o              Outcome
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
	capShort, capLong := p.LayeredCapacities()
	ws, wl := deployment.LayeredShortWindow, deployment.LayeredLongWindow
	bs, bl := env.bucketWidth(ws), env.bucketWidth(wl)
	r.Fact("rule", fmt.Sprintf("%s: %d tokens per %s and %d per %s, %d reserved per request", deployment.LayeredBudgetsRule, capShort, ws, capLong, wl, est))
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
			st := layeredStep{short: shortSettled, long: longSettled, round: n, inRound: i + 1}
			st.fitsShort, st.fitsLong = shortSettled+est <= capShort, longSettled+est <= capLong
			st.o = env.Chat(ctx, ChatCall{Gateway: gw, Label: fmt.Sprintf("%s-%d", label, i+1), Subject: appA})
			if !st.o.Admitted() {
				steps = append(steps, st)
				return nil
			}
			q, err := env.waitIdleOf(ctx, gw, deployment.LayeredBudgetsRule, appA)
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
		q, err := env.QuotaOf(ctx, gwA, deployment.LayeredBudgetsRule, appA)
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
	end := time.Now()

	// The replay: every decision as the rule says, with both windows weighed.
	var wrong, admittedOverLong []string
	admitted := 0
	for _, s := range steps {
		if s.o.Admitted() {
			admitted++
		}
		if s.predicted() != s.o.Admitted() || (s.o.Status != http.StatusOK && s.o.Status != http.StatusTooManyRequests) {
			wrong = append(wrong, fmt.Sprintf("round %d #%d: short %d + %d ≤ %d %v, long %d + %d ≤ %d %v; status %d",
				s.round, s.inRound, s.short, est, capShort, s.fitsShort, s.long, est, capLong, s.fitsLong, s.o.Status))
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
	r.Key("%d admitted; round 1's request %d (the short window's to refuse) answered %d, round 2's request %d (the long window's) answered %d",
		admitted, d1.inRound, d1.o.Status, d2.inRound, d2.o.Status)
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
				want = max(0, min(capShort-s.short-est, capLong-s.long-est))
			case !s.fitsShort:
				want = max(0, capShort-s.short)
			default:
				want = max(0, capLong-s.long)
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
		if !s.fitsShort {
			hi := int64((ws + bs + time.Second - 1) / time.Second)
			r.Check(fmt.Sprintf("round %d's 429 (short window): Retry-After within the short window + bucket", s.round),
				fmt.Sprintf("1..%d", hi), raw, err == nil && ra >= 1 && ra <= hi)
			continue
		}
		// The long window frees when round 1's first charge leaves it: at the earliest its
		// window after that request was sent, at the latest a bucket after its answer.
		lo := int64((wl - s.o.End.Sub(firstSent)) / time.Second)
		hi := int64((wl + bl + time.Second - 1) / time.Second)
		r.Check(fmt.Sprintf("round %d's 429 (long window): Retry-After is the long window's wait, not the short one's", s.round),
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
