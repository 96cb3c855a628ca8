package evidence

import (
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	testPassA  = "Xk3p9-QzL7mWv2Rt8sYb4n"
	testPassVK = "vK/9+q=Zr&t%2Fh\"w<>ey"
)

var testSecrets = []string{testPassA, testPassVK}

func sampleResults() []ScenarioResult {
	t0 := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	return []ScenarioResult{
		{Name: "valid-auth", Summary: "every subject admitted", Invariant: "admission: valid credentials are admitted on both gateways",
			Status: Passed, KeyFact: "6/6 admitted, 3 sites", Started: t0, Elapsed: 1200 * time.Millisecond,
			Facts:      []Fact{{Name: "admitted", Value: 6}},
			Assertions: []Assertion{{Name: "all admitted", Expected: 6, Observed: 6, OK: true}}},
		{Name: "shared-budget", Summary: "one budget across gateways", Invariant: "hard gate: peak reserved <= capacity",
			Status: Failed, Reason: "request 5 admitted on gateway-b", KeyFact: "5 admitted, capacity allows 4",
			Started: t0, Elapsed: 2 * time.Second,
			Assertions: []Assertion{{Name: "admitted count", Expected: 4, Observed: 5, OK: false}}},
		{Name: "network-policy", Summary: "policy holds", Invariant: "isolation: only gateways reach Valkey",
			Status: Skipped, Reason: "topology process has no network isolation", KeyFact: "skipped"},
	}
}

func sampleManifest(runID string) Manifest {
	return Manifest{RunID: runID, QuotaqualVersion: "dev", ValkeyVersion: "8.1.1", Topology: "netns",
		Profile: "quick", Started: time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC), Ended: time.Date(2026, 9, 1, 12, 0, 9, 0, time.UTC),
		Outcome: "failed", ConfigDigests: map[string]string{"config/gateway-a.yaml": "00"}}
}

// writeBundle writes a realistic bundle whose inputs are full of the test secrets.
func writeBundle(t *testing.T, root, runID string) *Writer {
	t.Helper()
	w, err := NewWriter(root, runID, testSecrets)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 50; j++ {
				w.Request(RequestRecord{Scenario: "valid-auth", Label: "req", Gateway: "gateway-a", Subject: "application-a",
					Credential: "valid", Method: "POST", Path: "/v1/chat/completions", Status: 200,
					Error: "dial redis://:" + testPassVK + "@10.0.0.7:6379 failed; Authorization: Basic " + b64("application-a:"+testPassA)})
			}
		}()
	}
	wg.Wait()
	mustAdd(t, w, "logs/gateway-a.log", "level=info msg=start password="+testPassA+"\n"+
		`{"level":"debug","headers":{"Authorization":"Basic `+b64("application-a:"+testPassA)+`"},"valkey":"rediss://default:`+jsonEsc(testPassVK)+`@valkey:6380/0"}`+"\n")
	mustAdd(t, w, "config/gateway-a.yaml", "store:\n  password_env: QQ_PASSWORD_1\n  password: "+testPassVK+"\n  password_sha256: 9f86d081884c7d65\n")
	mustAdd(t, w, "metrics/gateway-a.prom", "quota_admitted_total{gateway=\"a\"} 6\n")
	src := filepath.Join(t.TempDir(), "big.log")
	if err := os.WriteFile(src, []byte(strings.Repeat("GET /x token="+testPassA+" ok\n", 1000)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := w.AddFileFrom("logs/provider-west.log", src); err != nil {
		t.Fatal(err)
	}
	return w
}

func mustAdd(t *testing.T, w *Writer, rel, content string) {
	t.Helper()
	if err := w.AddFile(rel, []byte(content)); err != nil {
		t.Fatal(err)
	}
}

func TestFinishWritesACleanVerifiableBundle(t *testing.T) {
	root := t.TempDir()
	w := writeBundle(t, root, "run-1")
	out, err := w.Finish(sampleManifest("run-1"), sampleResults())
	if err != nil {
		t.Fatalf("Finish: %v (findings %v)", err, out.CanaryFindings)
	}
	if out.Passed != 1 || out.Failed != 1 || out.Skipped != 1 {
		t.Errorf("counts = %+v", out)
	}
	for _, f := range []string{ManifestFile, ResultsFile, RequestsFile, SummaryFile, JUnitFile, CanariesFile,
		"logs/gateway-a.log", "config/gateway-a.yaml", "metrics/gateway-a.prom", "logs/provider-west.log"} {
		if _, err := os.Stat(filepath.Join(w.Dir(), f)); err != nil {
			t.Errorf("bundle lacks %s: %v", f, err)
		}
	}
	cfg, _ := os.ReadFile(filepath.Join(w.Dir(), "config/gateway-a.yaml"))
	if !strings.Contains(string(cfg), "password_env: QQ_PASSWORD_1") || strings.Contains(string(cfg), "9f86d081884c7d65") {
		t.Errorf("config redaction wrong:\n%s", cfg)
	}
	reqs, _ := os.ReadFile(filepath.Join(w.Dir(), RequestsFile))
	lines := strings.Split(strings.TrimSuffix(string(reqs), "\n"), "\n")
	if len(lines) != 400 {
		t.Errorf("requests.jsonl has %d lines, want 400", len(lines))
	}
	for _, l := range lines {
		var rec RequestRecord
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("requests.jsonl line is not JSON: %v: %s", err, l)
		}
	}
	var res struct {
		SchemaVersion string           `json:"schema_version"`
		RunID         string           `json:"run_id"`
		Scenarios     []ScenarioResult `json:"scenarios"`
	}
	rb, _ := os.ReadFile(filepath.Join(w.Dir(), ResultsFile))
	if err := json.Unmarshal(rb, &res); err != nil || res.RunID != "run-1" || len(res.Scenarios) != 3 || !strings.HasSuffix(string(rb), "}\n") {
		t.Errorf("results.json = %v %+v", err, res)
	}
	jb, _ := os.ReadFile(filepath.Join(w.Dir(), JUnitFile))
	var suites struct {
		Suites []struct {
			Name     string `xml:"name,attr"`
			Tests    int    `xml:"tests,attr"`
			Failures int    `xml:"failures,attr"`
			Skipped  int    `xml:"skipped,attr"`
			Props    []struct {
				Name  string `xml:"name,attr"`
				Value string `xml:"value,attr"`
			} `xml:"properties>property"`
		} `xml:"testsuite"`
	}
	if err := xml.Unmarshal(jb, &suites); err != nil || len(suites.Suites) != 1 {
		t.Fatalf("junit.xml: %v\n%s", err, jb)
	}
	s := suites.Suites[0]
	if s.Name != "quotaqual" || s.Tests != 3 || s.Failures != 1 || s.Skipped != 1 || len(s.Props) != 3 {
		t.Errorf("junit suite = %+v", s)
	}
	sum, _ := os.ReadFile(filepath.Join(w.Dir(), SummaryFile))
	for _, want := range []string{"run-1", "netns", "| shared-budget | failed |", "request 5 admitted on gateway-b", "| admitted count | 4 | 5 |", "hard gate: peak reserved <= capacity"} {
		if !strings.Contains(string(sum), want) {
			t.Errorf("summary.md lacks %q:\n%s", want, sum)
		}
	}
	rep, err := Verify(w.Dir())
	if err != nil || !rep.OK() {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
	if rep.Canaries == 0 {
		t.Error("Verify checked no canaries")
	}
}

func TestNewWriterRefusesAnExistingRun(t *testing.T) {
	root := t.TempDir()
	if _, err := NewWriter(root, "r", nil); err != nil {
		t.Fatal(err)
	}
	if _, err := NewWriter(root, "r", nil); err == nil {
		t.Fatal("second NewWriter for the same run id succeeded")
	}
	for _, id := range []string{"", "..", "a/b", "/abs"} {
		if _, err := NewWriter(root, id, nil); err == nil {
			t.Errorf("NewWriter(%q) succeeded", id)
		}
	}
}

func TestAddFileRejectsPathsOutsideTheBundle(t *testing.T) {
	w, err := NewWriter(t.TempDir(), "r", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"../x", "/etc/x", "logs/../../x", "", "logs//a", `logs\a`, ManifestFile, CanariesFile, "./a"} {
		if err := w.AddFile(rel, []byte("x")); err == nil {
			t.Errorf("AddFile(%q) succeeded", rel)
		}
	}
	if err := w.AddFile("logs/a.log", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile("logs/a.log", []byte("x")); err == nil {
		t.Error("adding the same file twice succeeded")
	}
}
