package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// What valkey-outage and valkey-partition share: a request answered while the store is out of
// reach must fail closed in bounded time, and once the store is back admission must recover.

// decisions collects how long each fail-closed answer took, and what each was.
type decisions struct {
	ms       []float64
	worst    time.Duration
	statuses []int
}

// checkFailClosed checks one answer given while the store was out of reach: the gateway's
// store-failure answer (quotaqual's: a 503 of the store's error type), decided within slo
// (the store timeout plus a margin).
func (d *decisions) checkFailClosed(env *Env, r *Result, what string, o Outcome, slo time.Duration) {
	d.ms = append(d.ms, ms(o.Latency))
	d.worst = max(d.worst, o.Latency)
	d.statuses = append(d.statuses, o.Status)
	env.checkStoreFailure(r, what, o)
	r.Check(what+" decided within store timeout + margin", "≤ "+slo.String(), o.Latency.Round(time.Millisecond).String(), o.Status != 0 && o.Latency <= slo)
}

// checkStoreFailure checks o is the gateway's store-failure answer: its status (503 for
// quotaqual) and, when its profile names one, its error type (quota_store_unavailable).
func (env *Env) checkStoreFailure(r *Result, what string, o Outcome) {
	want := env.gateway().Expect.StoreFailure
	r.Check(fmt.Sprintf("%s → %d", what, want.Status), want.Status, o.Status, o.Status == want.Status)
	if want.ErrorType == "" {
		r.NotMade(what+" error type", "the profile names no store-failure error type")
		return
	}
	r.Check(what+" error type", want.ErrorType, o.ErrorType, o.ErrorType == want.ErrorType)
}

// key is the key fact of the answers given while the store was out of reach (while: "Valkey
// was stopped"), saying what was observed: how many were admitted anyway (the gateway fails
// open), the statuses when they were not the store-failure answer, else the worst time taken.
func (d *decisions) key(env *Env, while string, slo time.Duration) string {
	want := env.gateway().Expect.StoreFailure.Status
	admitted, other := 0, 0
	for _, s := range d.statuses {
		switch s {
		case http.StatusOK:
			admitted++
		case want:
		default:
			other++
		}
	}
	switch {
	case admitted > 0:
		return fmt.Sprintf("admitted %d of %d requests while %s: the gateway fails open (answered %s)", admitted, len(d.statuses), while, tally(d.statuses))
	case other > 0:
		return fmt.Sprintf("answered %s while %s, not its store-failure %d", tally(d.statuses), while, want)
	}
	return fmt.Sprintf("answered %s while %s, slowest %s", tally(d.statuses), while, durAtMost(d.worst, "SLO", slo))
}

// record adds the decision times to the result's facts.
func (d *decisions) record(r *Result) {
	r.Fact("time_to_decision_ms", d.ms)
	r.Fact("worst_time_to_decision_ms", ms(d.worst))
}

// recovery is how admission came back on one gateway after the store did.
type recovery struct {
	got      Outcome // the last answer: admitted when it recovered
	statuses []int   // every answer's status, in order
	tries    int
	err      error
	elapsed  time.Duration // from the store's return to the last answer
}

// stableReads store reads in a row through a gateway make its recovery stable.
const stableReads = 10

// checkStaysRecovered reads the store through gw (its quota inspection) every interval until
// stableReads reads in a row answer, and checks that this happened within RecoveryMax of since
// (what: the event since is, e.g. "the heal"). Recovered means recovered for good, not one
// lucky answer: a connection a store lever left behind — one to a Valkey that is gone, which on
// Kubernetes may never be reset, or one still backing off after a partition — can fail a read
// after the first admission. The time it takes is the recovery clients actually see, and the
// next scenario starts from a settled gateway. It returns that time.
func (env *Env) checkStaysRecovered(ctx context.Context, r *Result, gw, what string, since time.Time, interval time.Duration) time.Duration {
	p := env.Profile
	var unanswered []string
	streak := 0
	_, err := poll(ctx, interval, p.RecoveryMax, func(ctx context.Context) (bool, error) {
		start := time.Now()
		if _, err := env.Quotas().Read(ctx, gw, Key{Rule: RuleName, Subject: appA}); err != nil {
			streak = 0
			unanswered = append(unanswered, fmt.Sprintf("a read %s after %s failed after %s: %v",
				time.Since(since).Round(time.Millisecond), what, time.Since(start).Round(time.Millisecond), firstLine(err.Error())))
			return false, nil
		}
		streak++
		return streak >= stableReads, nil
	})
	stable := time.Since(since)
	suffix := ""
	if gw != gwA {
		suffix = "_" + gw
	}
	r.Fact("time_to_stable_recovery_ms"+suffix, ms(stable))
	r.Fact("store_reads_unanswered_after_recovery"+suffix, unanswered)
	r.Check(fmt.Sprintf("%s stays recovered: %d store reads in a row answer within RecoveryMax of %s", gw, stableReads, what),
		"≤ "+p.RecoveryMax.String(), fmt.Sprintf("%s (%v); %d unanswered before", stable.Round(time.Millisecond), err, len(unanswered)),
		err == nil && stable <= p.RecoveryMax)
	return stable
}

// awaitRecovery sends subject's requests to gw every 100 ms until one is answered as awaited
// (Outcome.Admitted; Outcome.Decided for a subject whose budget is spent: the 429 that shows gw
// decides from the store again) or the profile's RecoveryMax has passed, timing the recovery
// from since.
func (env *Env) awaitRecovery(ctx context.Context, gw, subject string, since time.Time, awaited func(Outcome) bool) recovery {
	var rec recovery
	rec.tries, rec.err = poll(ctx, 100*time.Millisecond, env.Profile.RecoveryMax, func(ctx context.Context) (bool, error) {
		rec.got = env.Chat(ctx, ChatCall{Gateway: gw, Label: "recover", Subject: subject})
		rec.statuses = append(rec.statuses, rec.got.Status)
		return awaited(rec.got), nil
	})
	rec.elapsed = time.Since(since)
	return rec
}

// check checks that admission recovered within RecoveryMax.
func (rec recovery) check(r *Result, what string, limit time.Duration) {
	r.Check(what, "≤ "+limit.String(),
		fmt.Sprintf("%s after %d tries (%v)", rec.elapsed.Round(time.Millisecond), rec.tries, rec.err), rec.got.Admitted() && rec.elapsed <= limit)
}

// beforeFaultTries bounds admitBeforeFault's attempts.
const beforeFaultTries = 3

// admitBeforeFault sends the request that shows gw healthy before a fault is pulled. A 5xx or
// no answer while nothing is broken yet is the machine's load (a fail-closed peer's rate-limit
// call outlasting its timeout), not the fault under test: it is retried, at most
// beforeFaultTries times in all, 250 ms apart, and each unhealthy answer is kept as a fact. A
// gateway that never admits still fails the caller's check on the last answer.
func (env *Env) admitBeforeFault(ctx context.Context, r *Result, c ChatCall) Outcome {
	label := c.Label
	var unhealthy []int
	for try := 1; ; try++ {
		o := env.Chat(ctx, c)
		if (o.Status != 0 && o.Status < 500) || try == beforeFaultTries || ctx.Err() != nil {
			if len(unhealthy) > 0 {
				r.Fact("unhealthy_before_fault_"+c.Gateway, fmt.Sprintf("%v, then %d", unhealthy, o.Status))
			}
			return o
		}
		unhealthy = append(unhealthy, o.Status)
		c.Label = label + "/retry"
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
}
