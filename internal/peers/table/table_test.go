package table

import (
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/evidence"
)

// TestDecidingFact checks a failure reads from the scenario's key and its first failed check,
// as observed; a skip gives its reason; a pass its key.
func TestDecidingFact(t *testing.T) {
	failed := evidence.ScenarioResult{Status: evidence.Failed, KeyFact: "[black-box] over-admitted 180 tokens in one window under concurrency",
		Reason:     "admitted: expected 4, observed 24",
		Assertions: []evidence.Assertion{{Name: "fine", OK: true}, {Name: "tokens admitted at once ≤ capacity", Expected: "≤ 60", Observed: 240}}}
	got := DecidingFact(failed)
	for _, want := range []string{"over-admitted 180 tokens", "first failed check: tokens admitted at once ≤ capacity — observed 240, expected ≤ 60"} {
		if !strings.Contains(got, want) {
			t.Errorf("DecidingFact = %q, want it to contain %q", got, want)
		}
	}
	if got := DecidingFact(evidence.ScenarioResult{Status: evidence.Skipped, Reason: "needs x; needs y"}); got != "skipped: needs x" {
		t.Errorf("skip: %q", got)
	}
	if got := DecidingFact(evidence.ScenarioResult{Status: evidence.Passed, KeyFact: "[black-box] 4/24 admitted"}); got != "4/24 admitted" {
		t.Errorf("pass: %q", got)
	}
}
