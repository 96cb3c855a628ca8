package evidence

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestAssessGivesTheLevelAndNamesEachSkip(t *testing.T) {
	pass := ScenarioResult{Name: "a", Status: Passed}
	skip := ScenarioResult{Name: "b", Status: Skipped, Reason: "needs partitions: the process topology has no network to cut\nmore"}
	fail := ScenarioResult{Name: "c", Status: Failed, Reason: "x"}
	requireB := func(n string) bool { return n == "b" }
	for _, c := range []struct {
		name    string
		results []ScenarioResult
		want    Level
	}{
		{"every scenario passed", []ScenarioResult{pass}, LevelQualified},
		{"one skipped", []ScenarioResult{pass, skip}, LevelPartial},
		{"one failed beside a skip", []ScenarioResult{pass, skip, fail}, LevelFailed},
		{"nothing ran", nil, LevelPartial},
	} {
		q := Assess(c.results, "b", requireB)
		if q.Level != c.want {
			t.Errorf("%s: level %s, want %s", c.name, q.Level, c.want)
		}
	}
	q := Assess([]ScenarioResult{pass, skip}, "b", requireB)
	if len(q.Skipped) != 1 || q.Skipped[0] != (Skip{Scenario: "b", Reason: "needs partitions: the process topology has no network to cut", Required: true}) {
		t.Errorf("skipped = %+v", q.Skipped)
	}
	if rs := q.RequiredSkipped(); len(rs) != 1 || rs[0].Scenario != "b" {
		t.Errorf("required skipped = %+v", rs)
	}
	if s := q.String(); !strings.Contains(s, "partial: 1 of 2 passed, 1 skipped") || !strings.Contains(s, "b (needs partitions: the process topology has no network to cut)") {
		t.Errorf("String() = %q", s)
	}
	if q := Assess([]ScenarioResult{pass, skip}, "none", func(string) bool { return false }); len(q.RequiredSkipped()) != 0 || q.Level != LevelPartial {
		t.Errorf("--require none: %+v, want partial with nothing required", q)
	}
}

// partialBundle writes a bundle whose one skip was required: level partial, outcome
// required-skipped.
func partialBundle(t *testing.T) string {
	t.Helper()
	w, err := NewWriter(t.TempDir(), "run-p", nil)
	if err != nil {
		t.Fatal(err)
	}
	results := []ScenarioResult{
		{Name: "valid-auth", Status: Passed, KeyFact: "6/6 admitted", Assertions: []Assertion{{Name: "ok", Expected: 1, Observed: 1, OK: true}}},
		{Name: "valkey-partition", Status: Skipped, Reason: "needs partitions: the process topology has no network to cut", KeyFact: "skipped"},
	}
	q := Assess(results, "all", func(string) bool { return true })
	m := sampleManifest("run-p")
	m.Outcome, m.Qualification = "required-skipped", &q
	if _, err := w.Finish(m, results); err != nil {
		t.Fatal(err)
	}
	return w.Dir()
}

// Every rendering of the bundle states the level and each skip with what it lacked; the
// JUnit keeps the skip a skip and fails a testcase of its own for the required one.
func TestEveryRenderingStatesTheLevel(t *testing.T) {
	dir := partialBundle(t)
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	why := "valkey-partition (needs partitions: the process topology has no network to cut)"
	sum := read(SummaryFile)
	for _, want := range []string{"# quotaqual qualification: partial", "- Level: **partial** — 1 of 2 passed, 1 skipped",
		"- Not qualified (skipped): " + why, "- Required (`--require`): all — skipped though required: " + why, "- Outcome: required-skipped"} {
		if !strings.Contains(sum, want) {
			t.Errorf("summary.md lacks %q:\n%s", want, sum)
		}
	}
	html := read(ReportFile)
	for _, want := range []string{`data-level="partial">partial</span>`, `<li data-scenario="valkey-partition">`, "needs partitions: the process topology has no network to cut <strong>(required)</strong>", "1 required scenario(s) skipped: the run fails"} {
		if !strings.Contains(html, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	var suites struct {
		Suites []struct {
			Props []struct {
				Name  string `xml:"name,attr"`
				Value string `xml:"value,attr"`
			} `xml:"properties>property"`
			Cases []struct {
				Name    string    `xml:"name,attr"`
				Skipped *struct{} `xml:"skipped"`
				Failure *struct {
					Message string `xml:"message,attr"`
					Data    string `xml:",chardata"`
				} `xml:"failure"`
			} `xml:"testcase"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal([]byte(read(JUnitFile)), &suites); err != nil || len(suites.Suites) != 1 {
		t.Fatalf("junit.xml: %v", err)
	}
	s := suites.Suites[0]
	props := map[string]string{}
	for _, p := range s.Props {
		props[p.Name] = p.Value
	}
	if props["qualification"] != "partial" || props["require"] != "all" || !strings.Contains(props["qualification.detail"], why) {
		t.Errorf("junit properties %v, want qualification partial, require all, the skip named", props)
	}
	cases := map[string]int{}
	for i, c := range s.Cases {
		cases[c.Name] = i
	}
	if c := s.Cases[cases["valkey-partition"]]; c.Skipped == nil || c.Failure != nil {
		t.Errorf("the skipped scenario's testcase is %+v, want <skipped/> (a skip is never a pass, nor a failure of its own)", c)
	}
	i, ok := cases[RequiredTestcase]
	if !ok || s.Cases[i].Failure == nil || !strings.Contains(s.Cases[i].Failure.Message, "--require all") || !strings.Contains(s.Cases[i].Failure.Data, why) {
		t.Errorf("junit has no failed %q testcase naming the skip: %+v", RequiredTestcase, s.Cases)
	}
	var res struct {
		Qualification Qualification `json:"qualification"`
	}
	if err := json.Unmarshal([]byte(read(ResultsFile)), &res); err != nil || res.Qualification.Level != LevelPartial || len(res.Qualification.RequiredSkipped()) != 1 {
		t.Errorf("results.json qualification = %+v (%v)", res.Qualification, err)
	}
	var m Manifest
	if err := json.Unmarshal([]byte(read(ManifestFile)), &m); err != nil || m.Qualification == nil || m.Qualification.Level != LevelPartial || m.SchemaVersion != "2" {
		t.Errorf("manifest.json qualification %+v, schema %q (%v)", m.Qualification, m.SchemaVersion, err)
	}
	b, err := LoadBundle(dir)
	if err != nil || b.Qualification.Level != LevelPartial || b.Qualification.Require != "all" {
		t.Errorf("LoadBundle qualification %+v (%v)", b.Qualification, err)
	}
	if _, err := RegenerateReport(dir); err != nil {
		t.Fatal(err)
	}
	if html := read(ReportFile); !strings.Contains(html, `data-level="partial"`) {
		t.Error("the regenerated report lost the level")
	}
}

// A passing run with nothing skipped is qualified everywhere; without --require no JUnit
// testcase is added.
func TestAQualifiedRunSaysQualified(t *testing.T) {
	w, err := NewWriter(t.TempDir(), "run-q", nil)
	if err != nil {
		t.Fatal(err)
	}
	results := sampleResults()[:1]
	if _, err := w.Finish(sampleManifest("run-q"), results); err != nil {
		t.Fatal(err)
	}
	sum, _ := os.ReadFile(filepath.Join(w.Dir(), SummaryFile))
	jb, _ := os.ReadFile(filepath.Join(w.Dir(), JUnitFile))
	if !bytes.Contains(sum, []byte("# quotaqual qualification: qualified")) || !bytes.Contains(jb, []byte(`name="qualification" value="qualified"`)) || bytes.Contains(jb, []byte(RequiredTestcase)) {
		t.Errorf("summary:\n%s\njunit:\n%s", sum, jb)
	}
}

// A version 1 bundle (no qualification in manifest.json or results.json) is still read, its
// level computed from its verdicts, and the diff compares it.
func TestAVersion1BundleIsReadWithItsLevelComputed(t *testing.T) {
	dir := partialBundle(t)
	for _, name := range []string{ManifestFile, ResultsFile} {
		p := filepath.Join(dir, name)
		var doc map[string]any
		b, _ := os.ReadFile(p)
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		delete(doc, "qualification")
		doc["schema_version"] = "1"
		out, _ := json.Marshal(doc)
		if err := os.WriteFile(p, out, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := LoadBundle(dir)
	if err != nil {
		t.Fatal(err)
	}
	if q := b.Qualification; q.Level != LevelPartial || q.Require != "" || len(q.Skipped) != 1 || q.Skipped[0].Required {
		t.Errorf("computed qualification %+v, want partial, no policy, the skip not marked required", q)
	}
}

// The diff reports each side's level and counts a lower one as a regression.
func TestDiffSaysWhenTheLevelRegressed(t *testing.T) {
	qualified := diffBundle("run-1", "v1", []ScenarioResult{{Name: "a", Status: Passed}, {Name: "b", Status: Passed}}, nil)
	qualified.Qualification = Assess(qualified.Results, "all", nil)
	partial := diffBundle("run-2", "v1", []ScenarioResult{{Name: "a", Status: Passed}, {Name: "b", Status: Skipped, Reason: "needs partitions"}}, nil)
	partial.Qualification = Assess(partial.Results, "none", nil)

	d := Compare(qualified, partial, DefaultThreshold)
	if !d.Regressed || !d.Level.Regressed || d.Level.Base != LevelQualified || d.Level.Head != LevelPartial {
		t.Fatalf("qualified → partial: %+v", d.Level)
	}
	var text bytes.Buffer
	d.WriteText(&text)
	for _, want := range []string{"level: ✗ REGRESSED qualified → partial; the candidate did not qualify (skipped): b (needs partitions)", "result: REGRESSED (level qualified → partial)"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("diff text lacks %q:\n%s", want, text.String())
		}
	}
	if d := Compare(partial, qualified, DefaultThreshold); d.Regressed || d.Level.Regressed {
		t.Errorf("partial → qualified counted as a regression: %+v", d.Level)
	}
	var same bytes.Buffer
	Compare(qualified, qualified, DefaultThreshold).WriteText(&same)
	if !strings.Contains(same.String(), "level: qualified (unchanged)") {
		t.Errorf("diff of a bundle with itself:\n%s", same.String())
	}
}
