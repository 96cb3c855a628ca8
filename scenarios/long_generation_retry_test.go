package scenarios

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestHeldRetryAfterJudgement: the 429s a long generation's hold causes are judged against the
// earliest the hold can end (max(send + lease, the 429 − renewal period + lease)), one short
// in four let pass; and an admission well before a 429's send + Retry-After − 1 s shows that
// Retry-After too long. Quick's long-generation lease: 2.5 s renewed every 833 ms.
func TestHeldRetryAfterJudgement(t *testing.T) {
	lease, period := 2500*time.Millisecond, 2500*time.Millisecond/3
	from := time.Unix(1000, 0)
	until := from.Add(5 * time.Second)
	probes := func(values ...int) []concurrentProbe {
		var out []concurrentProbe
		for i, v := range values {
			sent := from.Add(time.Duration(i+1) * 250 * time.Millisecond)
			out = append(out, concurrentProbe{sent: sent, end: sent.Add(5 * time.Millisecond), status: http.StatusTooManyRequests,
				retryAfter: strconv.Itoa(v)})
		}
		return out
	}
	for _, c := range []struct {
		name   string
		values []int
		ok     bool
	}{
		{"ours: the earliest lease deadline, 2 or 3", []int{3, 3, 3, 3, 3, 3, 2, 3, 2, 2}, true},
		{"blind 62: a second for every hold", []int{1, 1, 1, 1, 1, 1, 1, 1}, false},
		{"one late renewal among eight", []int{3, 2, 1, 3, 2, 3, 2, 2}, true},
		{"a quarter and more short", []int{3, 1, 1, 3, 2, 1, 2, 2}, false},
		{"too few 429s to judge", []int{3, 3}, false},
	} {
		j := judgeHeldRetryAfters("Retry-After", probes(c.values...), from, until, lease, period)
		if j.ok() != c.ok {
			t.Errorf("%s: ok %v, want %v (%d judged, %d short: %v)", c.name, j.ok(), c.ok, j.judged, j.short, j.bad)
		}
	}
	// A 429 100 ms after the hold's send must not send its client back before send + lease
	// (2.5 s in, less the tolerance): 2 s is short, 3 s is not.
	early := func(v string) []concurrentProbe {
		sent := from.Add(100 * time.Millisecond)
		return []concurrentProbe{{sent: sent, end: sent.Add(5 * time.Millisecond), status: http.StatusTooManyRequests, retryAfter: v}}
	}
	if j := judgeHeldRetryAfters("Retry-After", early("2"), from, until, lease, period); j.short != 1 {
		t.Errorf("a 2 s Retry-After 100 ms after the hold's send (lease 2.5 s): %d short, want 1", j.short)
	}
	if j := judgeHeldRetryAfters("Retry-After", early("3"), from, until, lease, period); j.short != 0 {
		t.Errorf("a 3 s Retry-After 100 ms after the hold's send (lease 2.5 s): %d short, want 0 (%v)", j.short, j.bad)
	}
	// A 429 sent after the generation ended, or a 200, is not judged; an absent header is short.
	late := concurrentProbe{sent: until, end: until, status: http.StatusTooManyRequests, retryAfter: "1"}
	admitted := concurrentProbe{sent: from.Add(time.Second), status: http.StatusOK}
	absent := concurrentProbe{sent: from.Add(time.Second), end: from.Add(time.Second), status: http.StatusTooManyRequests}
	if j := judgeHeldRetryAfters("Retry-After", []concurrentProbe{late, admitted, absent}, from, until, lease, period); j.judged != 1 || j.short != 1 {
		t.Errorf("late, admitted, absent: %d judged, %d short; want 1, 1", j.judged, j.short)
	}

	// Too long: 10 s said 1 s before the end; an admission 2 s after the end shows it a lie,
	// one 9.5 s after it does not.
	long := []concurrentProbe{{sent: until.Add(-time.Second), end: until.Add(-time.Second), status: http.StatusTooManyRequests, retryAfter: "10"}}
	j := judgeHeldRetryAfters("Retry-After", long, from, until, lease, period)
	if got := j.tooLong("Retry-After", until.Add(2*time.Second), until); len(got) != 1 {
		t.Errorf("admitted 2 s after the end, Retry-After 10 sent 1 s before it: %v, want one too long", got)
	}
	if got := j.tooLong("Retry-After", until.Add(9500*time.Millisecond), until); len(got) != 0 {
		t.Errorf("admitted 9.5 s after the end: %v, want none too long", got)
	}
	if !j.latest.Equal(until.Add(8 * time.Second)) {
		t.Errorf("latest %v, want the 429's send + 10 s − 1 s", j.latest.Sub(until))
	}
}
