package evidence

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jstemmer/go-junit-report/v2/junit"
)

// renderSummary writes summary.md: a verdict table, the reasons and failing assertions of every
// scenario that did not pass, and what the run proves (each scenario's invariant).
func renderSummary(m Manifest, results []ScenarioResult) []byte {
	var b bytes.Buffer
	q := qualificationOf(m, results)
	fmt.Fprintf(&b, "# quotaqual qualification: %s\n\n", q.Level)
	if m.Partial != "" {
		fmt.Fprintf(&b, "> **Partial bundle:** %s.\n\n", m.Partial)
	}
	fmt.Fprintf(&b, "- Level: **%s** — %s\n", q.Level, q.Counts())
	if len(q.Failed) > 0 {
		fmt.Fprintf(&b, "- Failed: %s\n", mdCell(strings.Join(q.Failed, ", ")))
	}
	if len(q.Skipped) > 0 {
		fmt.Fprintf(&b, "- Not qualified (skipped): %s\n", mdCell(SkipList(q.Skipped)))
	}
	if q.Require != "" {
		fmt.Fprintf(&b, "- Required (`--require`): %s", q.Require)
		if rs := q.RequiredSkipped(); len(rs) > 0 {
			fmt.Fprintf(&b, " — skipped though required: %s", mdCell(SkipList(rs)))
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "- Outcome: %s\n", outcomeWord(m, results))
	fmt.Fprintf(&b, "- Run id: `%s`\n", m.RunID)
	fmt.Fprintf(&b, "- Topology: %s\n", orDash(m.Topology))
	fmt.Fprintf(&b, "- Profile: %s\n", orDash(m.Profile))
	if m.QuotaqualVersion != "" || m.ValkeyVersion != "" {
		fmt.Fprintf(&b, "- Versions: quotaqual %s, Valkey %s\n", orDash(m.QuotaqualVersion), orDash(m.ValkeyVersion))
	}
	if !m.Started.IsZero() && !m.Ended.IsZero() {
		fmt.Fprintf(&b, "- Started %s, took %s\n", m.Started.UTC().Format(time.RFC3339), m.Ended.Sub(m.Started).Round(time.Millisecond))
	}
	b.WriteString("\n| scenario | verdict | key fact |\n|---|---|---|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", mdCell(r.Name), r.Status, mdCell(r.KeyFact))
	}
	var bad []ScenarioResult
	for _, r := range results {
		if r.Status != Passed {
			bad = append(bad, r)
		}
	}
	if len(bad) > 0 {
		b.WriteString("\n## Not passed\n")
		for _, r := range bad {
			fmt.Fprintf(&b, "\n### %s (%s)\n\n", r.Name, r.Status)
			fmt.Fprintf(&b, "Reason: %s\n", orDash(r.Reason))
			if r.Evidence != "" {
				fmt.Fprintf(&b, "Evidence: %s\n", r.Evidence)
			}
			var failing []Assertion
			for _, a := range r.Assertions {
				if !a.OK {
					failing = append(failing, a)
				}
			}
			if len(failing) > 0 {
				b.WriteString("\n| assertion | expected | observed |\n|---|---|---|\n")
				for _, a := range failing {
					fmt.Fprintf(&b, "| %s | %s | %s |\n", mdCell(a.Name), mdCell(valueString(a.Expected)), mdCell(valueString(a.Observed)))
				}
			}
		}
	}
	b.WriteString("\n## What this run proves\n\n")
	for _, r := range results {
		what := r.Invariant
		if what == "" {
			what = r.Summary
		}
		note := ""
		switch r.Status {
		case Failed:
			note = " — **not proven: failed**"
		case Skipped:
			note = " — **not proven: skipped**"
		}
		fmt.Fprintf(&b, "- `%s`: %s%s\n", r.Name, orDash(what), note)
	}
	return b.Bytes()
}

// qualificationOf is the manifest's qualification, or the one results give (a version 1
// manifest has none).
func qualificationOf(m Manifest, results []ScenarioResult) Qualification {
	if m.Qualification != nil {
		return *m.Qualification
	}
	return Assess(results, "", nil)
}

func outcomeWord(m Manifest, results []ScenarioResult) string {
	if m.Outcome != "" {
		return m.Outcome
	}
	for _, r := range results {
		if r.Status == Failed {
			return "failed"
		}
	}
	return "passed"
}

func orDash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "-"
	}
	return s
}

func mdCell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	s = strings.ReplaceAll(s, "\r", "")
	return strings.ReplaceAll(s, "\n", " ")
}

func valueString(v any) string {
	switch x := v.(type) {
	case nil:
		return "null"
	case string:
		return x
	case json.Number:
		return x.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// RequiredTestcase is the JUnit testcase that fails when a scenario the run required was
// skipped.
const RequiredTestcase = "required scenarios ran"

// renderJUnit writes junit.xml: one testsuite "quotaqual" with the run's properties (its
// qualification level among them) and one testcase per scenario; a failure carries the reason
// as message and the failing assertions as body, a skip carries its reason. A run whose
// required scenario was skipped has one more testcase, RequiredTestcase, failed.
func renderJUnit(m Manifest, results []ScenarioResult) ([]byte, error) {
	suite := junit.Testsuite{Name: "quotaqual"}
	suite.AddProperty("run_id", m.RunID)
	suite.AddProperty("topology", m.Topology)
	suite.AddProperty("profile", m.Profile)
	q := qualificationOf(m, results)
	suite.AddProperty("qualification", string(q.Level))
	suite.AddProperty("qualification.detail", q.String())
	if q.Require != "" {
		suite.AddProperty("require", q.Require)
	}
	if !m.Started.IsZero() {
		suite.SetTimestamp(m.Started)
	}
	var total time.Duration
	for _, r := range results {
		total += r.Elapsed
		tc := junit.Testcase{Name: r.Name, Classname: "quotaqual", Time: seconds(r.Elapsed)}
		if r.Evidence != "" {
			suite.AddProperty("evidence."+r.Name, r.Evidence)
		}
		switch r.Status {
		case Passed:
		case Skipped:
			tc.Skipped = &junit.Result{Message: orDash(r.Reason)}
		default:
			var body strings.Builder
			for _, a := range r.Assertions {
				if !a.OK {
					fmt.Fprintf(&body, "%s: expected %s, observed %s\n", a.Name, valueString(a.Expected), valueString(a.Observed))
				}
			}
			tc.Failure = &junit.Result{Message: orDash(r.Reason), Type: string(r.Status), Data: body.String()}
		}
		suite.AddTestcase(tc)
	}
	// A required scenario's skip fails the run (exit 4) although no scenario failed: a
	// testcase of its own says so, so a CI's JUnit view fails where the job does. Each skipped
	// scenario stays a skipped testcase.
	if rs := q.RequiredSkipped(); len(rs) > 0 {
		suite.AddTestcase(junit.Testcase{Name: RequiredTestcase, Classname: "quotaqual", Time: seconds(0),
			Failure: &junit.Result{Message: "partial: a required scenario was skipped (--require " + q.Require + ")",
				Type: "required-skipped", Data: SkipList(rs) + "\n"}})
	}
	suite.Time = seconds(total)
	suites := junit.Testsuites{Name: "quotaqual"}
	suites.AddSuite(suite)
	var b bytes.Buffer
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>` + "\n")
	if err := suites.WriteXML(&b); err != nil {
		return nil, fmt.Errorf("evidence: encode junit: %w", err)
	}
	return b.Bytes(), nil
}

func seconds(d time.Duration) string { return fmt.Sprintf("%.3f", d.Seconds()) }
