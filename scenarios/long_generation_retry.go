package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// heldRetryAfterTolerance absorbs a renewal a little late on a loaded machine (the store's
// deadline then lags the stated schedule); whole seconds, ceiled, absorb the rest.
const heldRetryAfterTolerance = 250 * time.Millisecond

// afterGenerationPollEvery is how often the subject is asked again once the generation ended.
const afterGenerationPollEvery = 100 * time.Millisecond

// checkRetryAfterWhileHeld judges, from what a client sees, the Retry-After of every 429 the
// long generation's hold caused (contract §4: a 429 caused by in-flight holds announces when
// the earliest hold can end, its lease deadline — the gateway cannot know when a hold will
// settle, nor what it will then charge, so that deadline is the earliest capacity can free
// unless a hold settles first):
//
//   - not too short: the client knows its holds are in flight (its requests have not been
//     answered) and when it sent them; the profile states the lease and how often a live hold
//     is renewed. So no hold can end, short of settling, before max(its send + lease, the 429
//     − one renewal period + lease), and a client obeying Retry-After must not be sent back
//     before that (blind 62: "Retry-After: 1" for every hold-caused 429). One short 429 in
//     four is let pass: a renewal a second late on a loaded machine shortens that one.
//   - not too long, against what was observed: once the generation ended the subject is asked
//     again until the latest moment a Retry-After sent a client back (less the second of
//     rounding); an admission answered before a 429's Start + Retry-After − 1 s shows that
//     Retry-After was longer than the true wait. Judged only where the generation alone fills
//     the capacity (the scenario's own rule): its usage exceeds the capacity, so nothing frees
//     until that usage leaves the window, later than any lease a 429 could announce; on the
//     run's rule the held fills' settlements free room no gateway could foresee.
//
// heldFrom is when the first hold was sent, until when the generation still ran at the
// provider. The probes after until are not judged. It returns the Retry-After values seen,
// for the key fact.
func (env *Env) checkRetryAfterWhileHeld(ctx context.Context, r *Result, probes []concurrentProbe, heldFrom, until time.Time,
	lease time.Duration, ownRule bool) (seen string) {
	const name = "every 429 while the generation's hold fills the budget carries a Retry-After no earlier than that hold can end " +
		"(its send, or its last renewal at most one stated renewal period before the 429, + lease)"
	h := env.gateway().Expect.QuotaHeaders.RetryAfter
	switch {
	case h == "":
		r.NotMade(name, "the gateway sends no Retry-After")
		return "no Retry-After judged"
	case !env.gateway().Caps.Leases:
		r.NotMade(name, "the gateway has no leases: a 429 while the generation runs is its admission charge's, not a hold's")
		return "no Retry-After judged"
	}
	period := lease
	if n := env.gateway().Caps.RenewalsPerLease; n > 0 {
		period = lease / time.Duration(n)
	}
	j := judgeHeldRetryAfters(h, probes, heldFrom, until, lease, period)
	r.Fact("retry_after_while_held", j.values)
	seen = "429s while held said " + h + " " + describeCounts(j.values)
	r.Fact("renewal_period_stated", period.Round(time.Millisecond).String())
	r.Check(name, fmt.Sprintf("≥ 3 judged, each back ≥ %.3fs after it was sent (lease %s − renewal period %s) and ≥ the hold's send + lease; at most a quarter short",
		seconds(lease-period), lease, period.Round(time.Millisecond)),
		fmt.Sprintf("%d judged, %d short %v", j.judged, j.short, firstFew(j.bad, 4)), j.ok())

	const longName = "no 429 while the generation's hold filled the budget sent its client back more than a second after the subject was in fact admitted again"
	if !ownRule {
		r.NotMade(longName, "the run's rule: the held fills' settlements free room the gateway could not foresee")
		return seen
	}
	latest := j.latest
	if latest.IsZero() {
		r.NotMade(longName, "no 429 with a Retry-After to judge")
		return seen
	}
	// By then the generation's usage has left the window on any gateway: asking longer is
	// window-expiry's business, not this check's.
	p := env.Profile
	if limit := until.Add(p.Window + env.bucketWidth(p.Window) + lease + time.Second); latest.After(limit) {
		latest = limit
	}
	var again Outcome
	var tries int
	_, err := poll(ctx, afterGenerationPollEvery, time.Until(latest), func(ctx context.Context) (bool, error) {
		tries++
		again = env.Chat(ctx, ChatCall{Gateway: env.alternate(tries), Label: fmt.Sprintf("after-generation-%d", tries), Subject: appA})
		return again.Admitted(), nil
	})
	if err != nil && !errors.Is(err, errPollDeadline) {
		r.Error(err)
		return seen
	}
	var tooLong []string
	observed := fmt.Sprintf("not admitted in %d tries until %.3fs after the generation ended", tries, seconds(again.End.Sub(until)))
	if again.Admitted() {
		observed = fmt.Sprintf("admitted %.3fs after the generation ended (try %d)", seconds(again.End.Sub(until)), tries)
		tooLong = j.tooLong(h, again.End, until)
	}
	r.Fact("after_generation", observed)
	r.Check(longName, "none (an admission no earlier than each 429's send + Retry-After − 1 s)",
		fmt.Sprintf("%s; %v", observed, firstFew(tooLong, 4)), len(tooLong) == 0)
	return seen + "; " + observed
}

// heldJudgement is what the 429s sent while the hold filled the budget said, judged against
// the earliest moment the hold could end.
type heldJudgement struct {
	judged, short int
	bad           []string       // the short ones (and the unreadable), described
	values        map[string]int // each Retry-After as answered, how often
	latest        time.Time      // the latest judged 429's send + Retry-After − 1 s
	probes        []concurrentProbe
}

// judgeHeldRetryAfters judges each 429 sent before until against max(heldFrom + lease, its
// send − period + lease): the client back at its answer + Retry-After must not come earlier.
func judgeHeldRetryAfters(h string, probes []concurrentProbe, heldFrom, until time.Time, lease, period time.Duration) heldJudgement {
	j := heldJudgement{values: map[string]int{}}
	for i, pb := range probes {
		if pb.status != http.StatusTooManyRequests || !pb.sent.Before(until) {
			continue
		}
		j.judged++
		j.values[pb.retryAfter]++
		n, err := strconv.ParseInt(pb.retryAfter, 10, 64)
		if err != nil || n < 1 {
			j.short++
			j.bad = append(j.bad, fmt.Sprintf("#%d %s %q", i+1, h, pb.retryAfter))
			continue
		}
		j.probes = append(j.probes, pb)
		earliest := heldFrom.Add(lease)
		if e := pb.sent.Add(lease - period); e.After(earliest) {
			earliest = e
		}
		back := pb.end.Add(time.Duration(n) * time.Second)
		if back.Before(earliest.Add(-heldRetryAfterTolerance)) {
			j.short++
			j.bad = append(j.bad, fmt.Sprintf("#%d %s %d: back %.3fs after it was sent, the hold could end no earlier than %.3fs",
				i+1, h, n, seconds(back.Sub(pb.sent)), seconds(earliest.Sub(pb.sent))))
		}
		if l := pb.sent.Add(time.Duration(n)*time.Second - time.Second); l.After(j.latest) {
			j.latest = l
		}
	}
	return j
}

// ok: enough judged, and at most one in four short (a renewal late on a loaded machine).
func (j heldJudgement) ok() bool { return j.judged >= 3 && j.short*4 <= j.judged }

// tooLong lists the judged 429s whose Retry-After sent the client back more than a second (the
// whole-second rounding) after an admission answered at admitted.
func (j heldJudgement) tooLong(h string, admitted, until time.Time) []string {
	var out []string
	for _, pb := range j.probes {
		n, _ := strconv.ParseInt(pb.retryAfter, 10, 64)
		if admitted.Before(pb.sent.Add(time.Duration(n)*time.Second - time.Second - retryAfterTolerance)) {
			out = append(out, fmt.Sprintf("%s %d sent %.3fs before the end", h, n, seconds(until.Sub(pb.sent))))
		}
	}
	return out
}

// describeCounts lists how often each value was seen, in order: "2 ×12, 3 ×8".
func describeCounts(counts map[string]int) string {
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		v := k
		if v == "" {
			v = "(absent)"
		}
		parts = append(parts, fmt.Sprintf("%s ×%d", v, counts[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
