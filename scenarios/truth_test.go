package scenarios

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/evidence"

	"github.com/quotaqual/quotaqual/providerstub"
)

func denial(start time.Time, retryAfter string) Outcome {
	h := http.Header{}
	h.Set("Retry-After", retryAfter)
	h.Set("X-Ratelimit-Reset-Tokens", retryAfter+"s")
	return Outcome{Status: http.StatusTooManyRequests, Headers: h, Start: start, End: start.Add(5 * time.Millisecond)}
}

// failedChecks runs fn on a fresh result and returns the names of the checks that failed.
func failedChecks(fn func(r *Result)) []string {
	r := NewResult()
	fn(r)
	var out []string
	for _, a := range r.assertions {
		if !a.OK {
			out = append(out, a.Name)
		}
	}
	return out
}

// TestRetryAfterTruth: a wait whose 429s said when capacity frees passes; Retry-After 1 s
// while capacity frees after ~3 s (a client waiting 1 s is denied again) fails; a Retry-After
// far longer than the actual wait fails.
func TestRetryAfterTruth(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	recoveredAt := t0.Add(3100 * time.Millisecond)
	recovered := Outcome{Status: http.StatusOK, Start: recoveredAt, End: recoveredAt.Add(5 * time.Millisecond)}
	polls := func(hint func(i int, at time.Time) string) []Outcome {
		var out []Outcome
		for i := 0; i < 31; i++ { // every 100 ms until 3.1 s
			at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
			out = append(out, denial(at, hint(i, at)))
		}
		return out
	}
	truthful := polls(func(i int, at time.Time) string {
		left := recoveredAt.Sub(at)
		return strconv.FormatInt(int64((left+time.Second-1)/time.Second), 10)
	})
	if f := failedChecks(func(r *Result) { checkRetryAfterTruth(r, truthful, recovered) }); len(f) != 0 {
		t.Errorf("truthful hints failed %v", f)
	}
	oneSecond := polls(func(int, time.Time) string { return "1" })
	if f := failedChecks(func(r *Result) { checkRetryAfterTruth(r, oneSecond, recovered) }); len(f) != 1 {
		t.Errorf("Retry-After always 1 s: failed %v, want the 'waits Retry-After' check only", f)
	}
	tooLong := polls(func(int, time.Time) string { return "60" })
	if f := failedChecks(func(r *Result) { checkRetryAfterTruth(r, tooLong, recovered) }); len(f) != 1 {
		t.Errorf("Retry-After 60 s: failed %v, want the 'retries earlier' check only", f)
	}
}

// TestRemainingTruth: remaining = capacity − settled − own estimate on admitted responses and
// capacity − settled on the 429; a header stuck at the limit fails.
func TestRemainingTruth(t *testing.T) {
	resp := func(status int, remaining string) Outcome {
		h := http.Header{}
		h.Set("X-Ratelimit-Remaining-Tokens", remaining)
		return Outcome{Status: status, Headers: h}
	}
	ex := exhaustion{
		Outcomes: []Outcome{resp(200, "45"), resp(200, "40"), resp(200, "35"), resp(429, "5")},
		Settled:  []int64{5, 10, 55},
	}
	if f := failedChecks(func(r *Result) { (&Env{}).checkRemainingTruth(r, ex, 60, 15) }); len(f) != 0 {
		t.Errorf("truthful remaining failed %v", f)
	}
	ex.Outcomes[1] = resp(200, "60")
	if f := failedChecks(func(r *Result) { (&Env{}).checkRemainingTruth(r, ex, 60, 15) }); len(f) != 1 {
		t.Errorf("remaining stuck at the limit: failed %v, want one check", f)
	}
}

// TestHeldInFlight: samples that see every certainly-in-flight request pass; samples that see
// none after the lease ran out (no renewal) fail.
func TestHeldInFlight(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	hold := 3500 * time.Millisecond
	var outs []Outcome
	for range 4 {
		outs = append(outs, Outcome{Status: http.StatusOK, Start: t0, End: t0.Add(hold + 20*time.Millisecond)})
	}
	outs = append(outs, Outcome{Status: http.StatusTooManyRequests, Start: t0, End: t0.Add(5 * time.Millisecond)})
	sample := func(at time.Duration, active int64) evidence.LedgerSample {
		return evidence.LedgerSample{Sent: t0.Add(at), At: t0.Add(at + 5*time.Millisecond), Active: active, Reserved: 15 * active}
	}
	renewed := []evidence.LedgerSample{sample(time.Second, 4), sample(3200*time.Millisecond, 4), sample(3600*time.Millisecond, 0)}
	if f := failedChecks(func(r *Result) { checkHeldInFlight(r, renewed, outs, hold) }); len(f) != 0 {
		t.Errorf("renewed holds failed %v", f)
	}
	expired := []evidence.LedgerSample{sample(time.Second, 4), sample(3200*time.Millisecond, 0)}
	if f := failedChecks(func(r *Result) { checkHeldInFlight(r, expired, outs, hold) }); len(f) != 1 {
		t.Errorf("holds lost at the lease: failed %v, want one check", f)
	}
}

// TestClockDisagreementNamesTheSkewAndTheFix: a provider arrival outside the span the harness
// sent and read a request in is the providers' clock disagreeing with the harness's, and the
// release instant's failure names it, the metadata field and the fix; arrivals inside it name
// nothing.
func TestClockDisagreementNamesTheSkewAndTheFix(t *testing.T) {
	sent := time.Date(2026, 12, 1, 3, 0, 0, 0, time.UTC)
	o := Outcome{Start: sent, End: sent.Add(250 * time.Millisecond), Attempts: 1}
	at := func(d time.Duration) providerstub.CallRecord { return providerstub.CallRecord{Time: sent.Add(d)} }

	var agree clockDisagreement
	agree.add(o, at(time.Millisecond))
	agree.add(o, at(250*time.Millisecond))
	if agree != (clockDisagreement{}) || agree.cause() != "" {
		t.Fatalf("arrivals within the request's span: %+v, cause %q", agree, agree.cause())
	}

	var ahead clockDisagreement
	ahead.add(o, at(time.Second+250*time.Millisecond))
	ahead.add(o, at(10*time.Millisecond))
	if ahead.ahead != time.Second || ahead.behind != 0 {
		t.Fatalf("arrival 1 s after the answer: %+v, want 1s ahead", ahead)
	}
	for _, want := range []string{"at least 1s ahead of the harness's", "metadata.quotaqual_release_at", "synchronise the clocks"} {
		if !strings.Contains(ahead.cause(), want) {
			t.Errorf("cause %q does not say %q", ahead.cause(), want)
		}
	}

	var behind clockDisagreement
	behind.add(o, at(-2*time.Second))
	if behind.behind != 2*time.Second || !strings.Contains(behind.cause(), "at least 2s behind the harness's") {
		t.Fatalf("arrival 2 s before the send: %+v, cause %q", behind, behind.cause())
	}
	// A retried request's log entry may be its first attempt's, sent before o.Start.
	var retried clockDisagreement
	retried.add(Outcome{Start: sent, End: sent.Add(time.Second), Attempts: 2}, at(-2*time.Second))
	if retried != (clockDisagreement{}) {
		t.Fatalf("a retried request's earlier arrival counted as a clock behind: %+v", retried)
	}
}
