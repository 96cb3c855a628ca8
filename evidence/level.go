package evidence

import (
	"fmt"
	"strings"
)

// Level is what a run qualified. A skipped scenario's clause is not qualified, so a run with
// skips is never "qualified", whatever its exit code.
type Level string

const (
	// LevelQualified: every selected scenario passed.
	LevelQualified Level = "qualified"
	// LevelPartial: none failed, but some were skipped (Qualification.Skipped names them and
	// what each lacked).
	LevelPartial Level = "partial"
	// LevelFailed: a scenario failed.
	LevelFailed Level = "failed"
)

// levelRank orders the levels from worst to best, for the diff.
var levelRank = map[Level]int{LevelFailed: 0, LevelPartial: 1, LevelQualified: 2}

// Qualification is a run's level and what lowered it.
type Qualification struct {
	Level     Level    `json:"level"`
	Scenarios int      `json:"scenarios"` // selected
	Passed    int      `json:"passed"`
	Failed    []string `json:"failed,omitempty"`
	// Skipped is every skipped scenario with its reason: the capability of the gateway
	// profile or the lever of the topology it lacked (or "interrupted").
	Skipped []Skip `json:"skipped,omitempty"`
	// Require is the run's --require policy as given ("all", "none", or scenario names,
	// comma-separated); empty in a bundle written before it existed.
	Require string `json:"require,omitempty"`
}

// Skip is one skipped scenario: why, and whether the run required it (its skip then fails
// the run with wire.ExitPartial).
type Skip struct {
	Scenario string `json:"scenario"`
	Reason   string `json:"reason"`
	Required bool   `json:"required,omitempty"`
}

// Assess computes the qualification of results. required says which scenarios the run
// requires (nil: none), policy is how the user said it (Qualification.Require).
func Assess(results []ScenarioResult, policy string, required func(scenario string) bool) Qualification {
	q := Qualification{Scenarios: len(results), Require: policy}
	for _, r := range results {
		switch r.Status {
		case Passed:
			q.Passed++
		case Failed:
			q.Failed = append(q.Failed, r.Name)
		default:
			q.Skipped = append(q.Skipped, Skip{Scenario: r.Name, Reason: firstLineOf(r.Reason),
				Required: required != nil && required(r.Name)})
		}
	}
	switch {
	case len(q.Failed) > 0:
		q.Level = LevelFailed
	case len(q.Skipped) > 0 || len(results) == 0:
		q.Level = LevelPartial
	default:
		q.Level = LevelQualified
	}
	return q
}

// RequiredSkipped lists the skipped scenarios the run required.
func (q Qualification) RequiredSkipped() []Skip {
	var out []Skip
	for _, s := range q.Skipped {
		if s.Required {
			out = append(out, s)
		}
	}
	return out
}

// Worse reports whether going from base to q lowers the level.
func (q Qualification) Worse(base Qualification) bool {
	return levelRank[q.Level] < levelRank[base.Level]
}

// Counts is "16 of 18 passed, 2 skipped" (failures first when there are any).
func (q Qualification) Counts() string {
	s := fmt.Sprintf("%d of %d passed", q.Passed, q.Scenarios)
	if len(q.Failed) > 0 {
		s += fmt.Sprintf(", %d failed", len(q.Failed))
	}
	if len(q.Skipped) > 0 {
		s += fmt.Sprintf(", %d skipped", len(q.Skipped))
	}
	return s
}

// String is the level with its counts, the failed scenarios and each skipped one with what it
// lacked: "partial: 16 of 18 passed, 2 skipped — not qualified: network-policy (needs …),
// valkey-partition (needs …)".
func (q Qualification) String() string {
	s := string(q.Level) + ": " + q.Counts()
	if len(q.Failed) > 0 {
		s += " — failed: " + strings.Join(q.Failed, ", ")
	}
	if len(q.Skipped) > 0 {
		s += " — not qualified (skipped): " + SkipList(q.Skipped)
	}
	return s
}

// SkipList names each skip with its reason: "a (needs …), b (needs …)".
func SkipList(skips []Skip) string {
	parts := make([]string, len(skips))
	for i, s := range skips {
		parts[i] = s.Scenario + " (" + orDash(s.Reason) + ")"
	}
	return strings.Join(parts, ", ")
}
