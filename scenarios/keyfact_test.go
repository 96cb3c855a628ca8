package scenarios

import (
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
)

func TestBoundsAreWrittenByTheNumbers(t *testing.T) {
	for got, want := range map[string]string{
		atMost(int64(60), "capacity", 60):                                                          "60 ≤ capacity 60",
		atMost(int64(110), "capacity", 90):                                                         "110 > capacity 90 (over by 20)",
		atMost(3, "reservation", 4):                                                                "3 ≤ reservation 4",
		durAtMost(2*time.Millisecond, "SLO", 1500*time.Millisecond):                                "2ms ≤ SLO 1.5s",
		durAtMost(5207*time.Millisecond, "SLO", 1500*time.Millisecond):                             "5.207s > SLO 1.5s (over by 3.707s)",
		tally([]int{503, 503, 200, 503, 0}):                                                        "503×3, 200×1, no answer×1",
		tally(nil):                                                                                 "no request",
		answeredOn([]string{gwA, gwB}, []Outcome{{Status: 429}, {Status: 429}}, 429):               "429 on A and B",
		answeredOn([]string{gwA, gwB}, []Outcome{{Status: 200}, {Status: 429}}, 429):               "gateway-a 200, gateway-b 429",
		partitionRecovery(true, recovery{elapsed: 365 * time.Millisecond}, 420*time.Millisecond):   "recovered in 365ms (stable in 420ms)",
		partitionRecovery(false, recovery{statuses: []int{503, 503}, elapsed: 5 * time.Second}, 0): "recovery failed its checks: after the heal gateway-a answered 503×2 in 5s",
	} {
		if got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestPassedSinceRestsOnTheChecksAfterTheMark(t *testing.T) {
	r := NewResult()
	r.Check("before", 1, 2, false)
	m := r.mark()
	if r.passedSince(m) {
		t.Error("no check after the mark: nothing held")
	}
	r.Check("after", 1, 1, true)
	if !r.passedSince(m) {
		t.Error("the one check after the mark passed: held (the failed one before it is not this step's)")
	}
	r.Check("after, failed", 1, 2, false)
	if r.passedSince(m) {
		t.Error("a check after the mark failed: not held")
	}
}

// failedCheck is a failed assertion as the evidence records one.
func failedCheck(name string, expected, observed any) evidence.Assertion {
	return evidence.Assertion{Name: name, Expected: expected, Observed: observed}
}

// The key facts the scenarios wrote before this rule, from the failing runs that showed them,
// each caught; the same observations in today's words pass.
func TestKeyFactContradictionsCatchTheKnownOffenders(t *testing.T) {
	all200 := []int{200, 200, 200, 200, 200, 200}
	outageFails := []evidence.Assertion{failedCheck("gateway-a request 1 → 503", 503, 200)}
	cutFails := []evidence.Assertion{failedCheck("cut-off gateway-a request 1 → 503", 503, 200),
		failedCheck("cut-off gateway-a request 1 decided within store timeout + margin", "≤ 1.5s", "5.207s")}
	for _, c := range []struct {
		name     string
		key      string
		checks   []evidence.Assertion
		statuses []int
		lie      bool
	}{
		{"valkey-outage, fail-open, before", "503 within 2ms (SLO 1.5s), recovered", outageFails, all200, true},
		{"valkey-outage, fail-open, now", "answered 200×6 during the outage, slowest " + durAtMost(2*time.Millisecond, "SLO", 1500*time.Millisecond) + "; recovered", outageFails, all200, false},
		{"valkey-partition, fail-open, before", "cut-off replica 503 within 5.207s (SLO 1.5s), other replicas admitted 2/2, recovered in 300ms", cutFails, all200, true},
		{"valkey-partition, fail-open, now", "cut-off replica answered " + tally([]int{200, 200, 200}) + ", slowest " + durAtMost(5207*time.Millisecond, "SLO", 1500*time.Millisecond) + "; other replicas admitted 2/2; recovered in 300ms", cutFails, all200, false},
		{"rolling-upgrade, before", "peak held 110 ≤ 90 (from the request history), 3+2 admitted",
			[]evidence.Assertion{failedCheck("tokens held at once ≤ the larger capacity", "≤ 90", 110)}, nil, true},
		{"rolling-upgrade, now", "peak held (from the request history) " + atMost(int64(110), "capacity", 90) + ", 3+2 admitted",
			[]evidence.Assertion{failedCheck("tokens held at once ≤ the larger capacity", "≤ 90", 110)}, nil, false},
		{"gateway-restart, before", "restart 300ms; denied on A and B after; settled 0 → 0",
			[]evidence.Assertion{failedCheck("still denied on the restarted gateway-a", 429, 200)}, []int{200, 429}, true},
		{"gateway-restart, now", "restart 300ms; after it " + answeredOn([]string{gwA, gwB}, []Outcome{{Status: 200}, {Status: 429}}, 429) + "; settled 0 → 0",
			[]evidence.Assertion{failedCheck("still denied on the restarted gateway-a", 429, 200)}, []int{200, 429}, false},
		{"shared-budget, before", "7 admitted (predicted 5), denied on both, sites [central east west]",
			[]evidence.Assertion{failedCheck("next request on gateway-b denied", 429, 200)}, []int{200, 429}, true},
		{"shared-budget, a 429's error type wrong, now", "5 admitted (predicted 5), the next request " + answeredOn([]string{gwA, gwB}, []Outcome{{Status: 429}, {Status: 429}}, 429) + ", sites [central east west]",
			[]evidence.Assertion{failedCheck("next request on gateway-a: error.type is the denial's", "rate_limit_exceeded", "insufficient_quota")}, []int{200, 429}, false},
		{"valkey-outage, recovery failed, before", "503 within 2ms (SLO 1.5s), recovered",
			[]evidence.Assertion{failedCheck("admission recovered on gateway-b within RecoveryMax", "≤ 5s", "5.1s after 50 tries")}, []int{503, 200}, true},
		{"window-expiry, before", "recovered 2.10s after the last charge (theory 3.95–5.81s)",
			[]evidence.Assertion{failedCheck("recovered within RecoveryMax", "5s", "6s")}, nil, true},
		{"a comparison that holds, passed", "4/24 admitted, peak reserved 60 sampled / 60 reconstructed (cap 60)", nil, nil, false},
	} {
		status := evidence.Passed
		if len(c.checks) > 0 {
			status = evidence.Failed
		}
		got := KeyFactContradictions(evidence.ScenarioResult{Name: c.name, Status: status, KeyFact: c.key, Assertions: c.checks}, c.statuses)
		if (len(got) > 0) != c.lie {
			t.Errorf("%s: %q: contradictions %q, want a contradiction: %v", c.name, c.key, got, c.lie)
		}
	}
}

// The rules apply to what any key fact writes, also a passing scenario's: a comparison that does
// not hold, a status no request got.
func TestKeyFactContradictionsReadEveryComparison(t *testing.T) {
	for key, lie := range map[string]bool{
		"slowest 6s ≤ 1.5s":            true,
		"slowest 6s ≤ SLO 1.5s":        true,
		"peak 110 ≤ capacity 90":       true,
		"peak 90 ≤ capacity 90":        false,
		"slowest 1.2s ≤ 1.5s":          false,
		"1m30s > 2m":                   true,
		"within 5.2s (SLO 1.5s)":       true,
		"within 520ms (SLO 1.5s)":      false,
		"answered 429×3":               true, // statuses below have no 429
		"answered 503×3, 200×1":        false,
		"settled 50 → 50, 60 ≤ 60":     false,
		"largest request 20 ≥ 15":      false,
		"over-admission 0 tokens, 5<6": false, // not written as a comparison
	} {
		got := KeyFactContradictions(evidence.ScenarioResult{Status: evidence.Passed, KeyFact: key}, []int{503, 200})
		if (len(got) > 0) != lie {
			t.Errorf("%q: contradictions %q, want one: %v", key, got, lie)
		}
	}
}

// checkKeyFacts holds the key fact of every result of a real run to KeyFactContradictions,
// with the statuses each scenario's requests got (recs).
func checkKeyFacts(t *testing.T, results []evidence.ScenarioResult, recs []evidence.RequestRecord) {
	t.Helper()
	byScenario := map[string][]int{}
	for _, q := range recs {
		byScenario[q.Scenario] = append(byScenario[q.Scenario], q.Status)
	}
	for _, r := range results {
		if r.Status == evidence.Skipped {
			continue
		}
		statuses := byScenario[r.Name]
		if statuses == nil {
			statuses = []int{}
		}
		if lies := KeyFactContradictions(r, statuses); len(lies) > 0 {
			t.Errorf("%s (%s): its key fact %q states what its evidence contradicts: %s", r.Name, r.Status, r.KeyFact, strings.Join(lies, "; "))
		}
	}
}
