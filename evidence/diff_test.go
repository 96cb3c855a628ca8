package evidence

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

func diffBundle(runID string, version string, results []ScenarioResult, reqs []RequestRecord) *Bundle {
	m := sampleManifest(runID)
	m.QuotaqualVersion = version
	m.TopologyFacts = map[string]any{"namespaces": "qq-" + runID + "-client", "bridge": "qq-br"}
	return &Bundle{Path: runID, Manifest: m, Results: results, Requests: reqs, Files: map[string][]byte{
		"config/gateway-a.yaml": []byte("# gateway of run " + runID + "\nquota:\n  timeout: " + map[string]string{"v1": "500ms", "v2": "2s"}[version] + "\n  namespace: quotaqual:" + runID + "\n"),
	}}
}

func req(scenario string, status int, latency time.Duration) RequestRecord {
	return RequestRecord{Scenario: scenario, Status: status, Latency: latency}
}

func TestDiffFindsRegressionsMovesAndSettings(t *testing.T) {
	base := diffBundle("run-1", "v1", []ScenarioResult{
		{Name: "outage", Status: Passed, Facts: []Fact{
			{Name: "time_to_recovery_ms", Value: json.Number("300")},
			{Name: "time_to_decision_ms", Value: []any{json.Number("1"), json.Number("2")}},
			{Name: "recovery_statuses", Value: []any{json.Number("503"), json.Number("200")}},
			{Name: "same", Value: json.Number("7")},
			{Name: "noise_ms", Value: json.Number("100")}}},
		{Name: "partition", Status: Skipped},
		{Name: "restart", Status: Failed},
		{Name: "dropped", Status: Passed},
	}, []RequestRecord{req("outage", 503, 2*time.Millisecond), req("outage", 200, 40*time.Millisecond)})
	head := diffBundle("run-2", "v2", []ScenarioResult{
		{Name: "outage", Status: Passed, Facts: []Fact{
			{Name: "time_to_recovery_ms", Value: json.Number("450")},
			{Name: "time_to_decision_ms", Value: []any{json.Number("1"), json.Number("500")}},
			{Name: "recovery_statuses", Value: []any{json.Number("503"), json.Number("503"), json.Number("200")}},
			{Name: "same", Value: json.Number("7")},
			{Name: "noise_ms", Value: json.Number("110")}}},
		{Name: "partition", Status: Failed, Reason: "admitted while cut off\nmore"},
		{Name: "restart", Status: Passed},
		{Name: "new-one", Status: Skipped},
	}, []RequestRecord{req("outage", 503, 2*time.Millisecond), req("outage", 503, 2*time.Millisecond), req("outage", 200, 40*time.Millisecond)})

	d := Compare(base, head, DefaultThreshold)
	if !d.Regressed {
		t.Fatal("a skip that became a failure and a pass that disappeared did not count as a regression")
	}
	got := map[string]VerdictChange{}
	for _, v := range d.Verdicts {
		got[v.Scenario] = v
	}
	for name, want := range map[string]VerdictChange{
		"partition": {Scenario: "partition", Base: Skipped, Head: Failed, Regressed: true, Reason: "admitted while cut off"},
		"restart":   {Scenario: "restart", Base: Failed, Head: Passed},
		"dropped":   {Scenario: "dropped", Base: Passed, Head: "", Regressed: true, NotRun: true},
		"new-one":   {Scenario: "new-one", Base: "", Head: Skipped},
	} {
		if got[name] != want {
			t.Errorf("verdict change %s = %+v, want %+v", name, got[name], want)
		}
	}
	if d.Unchanged != 1 || d.Scenarios != 5 {
		t.Errorf("unchanged %d of %d scenarios, want 1 of 5", d.Unchanged, d.Scenarios)
	}
	moved := map[string]FactChange{}
	for _, m := range d.Moved {
		moved[m.Name] = m
	}
	rec := moved["time_to_recovery_ms"]
	if rec.Base != 300 || rec.Head != 450 || rec.Relative == nil || math.Abs(*rec.Relative-0.5) > 1e-9 {
		t.Errorf("recovery time change = %+v", rec)
	}
	if m := moved["time_to_decision_ms (max)"]; m.Base != 2 || m.Head != 500 {
		t.Errorf("decision time (max) change = %+v", m)
	}
	if m := moved["requests with status 503"]; m.Base != 1 || m.Head != 2 {
		t.Errorf("503 count change = %+v", m)
	}
	if d.Within != 1 {
		t.Errorf("%d measures moved by less than the threshold, want 1 (noise_ms +10%%)", d.Within)
	}
	for _, name := range []string{"same", "recovery_statuses (max)", "latency p50 ms, status 200", "noise_ms"} {
		if _, ok := moved[name]; ok {
			t.Errorf("%s did not move but is listed", name)
		}
	}
	settings := map[string]SettingChange{}
	for _, s := range d.Settings {
		settings[s.Name] = s
	}
	if s := settings["quotaqual version"]; s.Base != "v1" || s.Head != "v2" {
		t.Errorf("version change = %+v", s)
	}
	if s := settings["config/gateway-a.yaml"]; s.Base != "timeout: 500ms" || s.Head != "timeout: 2s" {
		t.Errorf("config change = %+v (want only the timeout line: run ids are normalised)", s)
	}
	if len(d.Settings) != 2 {
		t.Errorf("settings %+v, want the version and the config's timeout", d.Settings)
	}
	if _, ok := settings["topology namespaces"]; ok {
		t.Error("a name derived from the run id counted as a topology difference")
	}

	var out bytes.Buffer
	d.WriteText(&out)
	for _, s := range []string{"✗ REGRESSED partition: skipped → failed (admitted while cut off)", "✓ improved restart: failed → passed",
		"outage: time_to_recovery_ms 300 → 450 (+50.0%)", "quotaqual version: v1 → v2", "result: REGRESSED"} {
		if !strings.Contains(out.String(), s) {
			t.Errorf("text diff lacks %q:\n%s", s, out.String())
		}
	}
}

func TestDiffOfTwoEquivalentBundlesIsClean(t *testing.T) {
	root := t.TempDir()
	a := reportFixture(t, root, "run-a")
	b := reportFixture(t, root, "run-b")
	d, err := DiffBundles(a, b, DefaultThreshold)
	if err != nil {
		t.Fatal(err)
	}
	if d.Regressed || len(d.Verdicts) != 0 || len(d.Moved) != 0 || len(d.Settings) != 0 {
		t.Errorf("equivalent bundles differ: %+v", d)
	}
	if d.FactsAlike == 0 {
		t.Error("nothing was compared")
	}
	if _, err := DiffBundles(a, root+"/missing", DefaultThreshold); err == nil || !strings.Contains(err.Error(), "candidate") {
		t.Errorf("a missing candidate: %v", err)
	}
}

func TestDiffPassToFailIsARegressionAndFailToPassIsNot(t *testing.T) {
	for _, c := range []struct {
		base, head Status
		want       bool
	}{
		{Passed, Failed, true}, {Passed, Skipped, true}, {Passed, "", true}, {Skipped, Failed, true},
		{Failed, Passed, false}, {Skipped, Passed, false}, {Failed, Skipped, false}, {"", Failed, false}, {Passed, Passed, false},
	} {
		if got := regressed(c.base, c.head); got != c.want {
			t.Errorf("regressed(%q → %q) = %v, want %v", c.base, c.head, got, c.want)
		}
	}
}

// TestDiffSaysFirstWhenTheRunsQualifiedDifferentThings: a different gateway, profile or scenario
// set is said before the level and the verdicts, and a scenario the candidate did not select is
// "not run", never "passed → (none)" (issue 26).
func TestDiffSaysFirstWhenTheRunsQualifiedDifferentThings(t *testing.T) {
	base := diffBundle("run-1", "v1", []ScenarioResult{
		{Name: "shared-budget", Status: Passed}, {Name: "valkey-outage", Status: Passed}}, nil)
	head := diffBundle("run-2", "v1", []ScenarioResult{
		{Name: "shared-budget", Status: Passed}, {Name: "api-surface", Status: Passed}}, nil)
	head.Manifest.Profile = "reference"
	head.Manifest.TopologyFacts["gateway_profile"] = map[string]any{"name": "their-gateway", "status": "candidate"}

	d := Compare(base, head, DefaultThreshold)
	want := map[string]SettingChange{
		"gateway under test": {"gateway under test", "quotaqual's own gateway", "their-gateway"},
		"profile":            {"profile", "quick", "reference"},
		"scenario set": {"scenario set", "2 scenarios; not in the candidate: valkey-outage",
			"2 scenarios; not in the baseline: api-surface"},
	}
	if len(d.Mismatch) != len(want) {
		t.Errorf("mismatch %+v, want gateway, profile and scenario set", d.Mismatch)
	}
	for _, m := range d.Mismatch {
		if want[m.Name] != m {
			t.Errorf("mismatch %+v, want %+v", m, want[m.Name])
		}
	}
	for _, s := range d.Settings {
		if s.Name == "profile" {
			t.Errorf("the profile is listed again among the settings: %+v", s)
		}
	}
	var out bytes.Buffer
	d.WriteText(&out)
	text := out.String()
	first, level := strings.Index(text, "NOT LIKE FOR LIKE"), strings.Index(text, "level:")
	if first < 0 || level < 0 || first > level {
		t.Errorf("the mismatch is not said before the level:\n%s", text)
	}
	for _, s := range []string{"gateway under test: quotaqual's own gateway → their-gateway", "profile: quick → reference",
		"valkey-outage: passed → not run (the candidate did not select it)", "api-surface: not run → passed"} {
		if !strings.Contains(text, s) {
			t.Errorf("text diff lacks %q:\n%s", s, text)
		}
	}
	if strings.Contains(text, "(none)") {
		t.Errorf("text diff still says (none) for a scenario not run:\n%s", text)
	}

	// Like for like: nothing is said.
	same := Compare(base, diffBundle("run-3", "v1", base.Results, nil), DefaultThreshold)
	if len(same.Mismatch) != 0 {
		t.Errorf("two runs of the same gateway, profile and scenarios: mismatch %+v", same.Mismatch)
	}
}
