package evidence

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"encoding/json"
	"encoding/xml"
	"io"
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
	if s.Name != "quotaqual" || s.Tests != 3 || s.Failures != 1 || s.Skipped != 1 || len(s.Props) != 5 {
		t.Errorf("junit suite = %+v", s)
	}
	if s.Props[3].Name != "qualification" || s.Props[3].Value != "failed" {
		t.Errorf("junit qualification property = %+v, want failed", s.Props[3])
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

func TestPlantedSecretFailsFinishAndVerifyNamesTheFile(t *testing.T) {
	forms := SecretForms(testPassVK)
	for _, f := range forms {
		t.Run(f.Name+"/"+f.Value[:3], func(t *testing.T) {
			root := t.TempDir()
			w := writeBundle(t, root, "run-leak")
			// A component that wrote into the bundle behind the writer's back.
			leak := filepath.Join(w.Dir(), "logs", "leaky.log")
			if err := os.WriteFile(leak, []byte("line one\nvalue "+f.Value+" end\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := w.Finish(sampleManifest("run-leak"), sampleResults())
			if err == nil {
				t.Fatal("Finish succeeded with a planted secret")
			}
			if !strings.Contains(err.Error(), "logs/leaky.log") {
				t.Errorf("Finish error does not name the file: %v", err)
			}
			if strings.Contains(err.Error(), testPassVK) || strings.Contains(err.Error(), f.Value) {
				t.Errorf("Finish error holds the secret: %v", err)
			}
			if len(out.CanaryFindings) == 0 || out.CanaryFindings[0].File != "logs/leaky.log" || out.CanaryFindings[0].Line != 2 {
				t.Errorf("findings = %v", out.CanaryFindings)
			}
			rep, err := Verify(w.Dir())
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() || len(rep.Findings) == 0 {
				t.Fatalf("Verify passed a bundle holding %s: %+v", f.Name, rep)
			}
			for _, fd := range rep.Findings {
				if fd.File != "logs/leaky.log" || fd.Line != 2 {
					t.Errorf("Verify finding %v, want logs/leaky.log:2", fd)
				}
			}
		})
	}
}

func TestVerifyFindsGenericCredentialsWithoutCanaries(t *testing.T) {
	root := t.TempDir()
	w, err := NewWriter(root, "r", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Finish(sampleManifest("r"), nil); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ content, form string }{
		{"Authorization: Basic Zm9vOmJhcg==\n", "authorization-header"},
		{`{"headers":{"authorization":"Bearer abc"}}` + "\n", "authorization-header"},
		{"redis://:pw@h:6379\n", "url-userinfo"},
		{`{"password": "hunter2"}` + "\n", "json-secret-field"},
		{`{"body":"{\"client_secret\":\"x\"}"}` + "\n", "json-secret-field"},
	} {
		p := filepath.Join(w.Dir(), "logs", "g.log")
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(c.content), 0o644)
		fs, err := Scan(w.Dir(), nil)
		if err != nil || len(fs) == 0 || fs[0].Form != c.form || fs[0].File != "logs/g.log" {
			t.Errorf("Scan(%q) = %v, %v; want %s first", c.content, fs, err, c.form)
		}
	}
	for _, clean := range []string{"Authorization: [REDACTED]\n", `{"password":"[REDACTED]","password_env":"QQ_PASSWORD_1","token":""}` + "\n", "redis://[REDACTED]@h\n", "http://h:80/x\n"} {
		p := filepath.Join(w.Dir(), "logs", "g.log")
		os.WriteFile(p, []byte(clean), 0o644)
		if fs, _ := Scan(w.Dir(), nil); len(fs) != 0 {
			t.Errorf("Scan(%q) = %v, want nothing", clean, fs)
		}
	}
}

func TestVerifyFailsOnTampering(t *testing.T) {
	cases := []struct {
		name   string
		tamper func(dir string)
		check  func(r VerifyReport) bool
	}{
		{"changed file", func(d string) { os.WriteFile(filepath.Join(d, "metrics/gateway-a.prom"), []byte("x 1\n"), 0o644) },
			func(r VerifyReport) bool { return len(r.Changed) == 1 && r.Changed[0] == "metrics/gateway-a.prom" }},
		{"missing file", func(d string) { os.Remove(filepath.Join(d, SummaryFile)) },
			func(r VerifyReport) bool { return len(r.Missing) == 1 && r.Missing[0] == SummaryFile }},
		{"extra file", func(d string) { os.WriteFile(filepath.Join(d, "logs/new.log"), []byte("hi\n"), 0o644) },
			func(r VerifyReport) bool { return len(r.Extra) == 1 && r.Extra[0] == "logs/new.log" }},
		{"edited results", func(d string) {
			b, _ := os.ReadFile(filepath.Join(d, ResultsFile))
			os.WriteFile(filepath.Join(d, ResultsFile), []byte(strings.Replace(string(b), `"failed"`, `"passed"`, 1)), 0o644)
		}, func(r VerifyReport) bool { return len(r.Changed) == 1 && r.Changed[0] == ResultsFile }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := writeBundle(t, t.TempDir(), "run-t")
			if _, err := w.Finish(sampleManifest("run-t"), sampleResults()); err != nil {
				t.Fatal(err)
			}
			c.tamper(w.Dir())
			rep, err := Verify(w.Dir())
			if err != nil {
				t.Fatal(err)
			}
			if rep.OK() || !c.check(rep) {
				t.Errorf("report = %+v", rep)
			}
		})
	}
}

func TestPackedBundleVerifies(t *testing.T) {
	root := t.TempDir()
	w := writeBundle(t, root, "run-p")
	if _, err := w.Finish(sampleManifest("run-p"), sampleResults()); err != nil {
		t.Fatal(err)
	}
	tgz, err := w.Pack()
	if err != nil {
		t.Fatal(err)
	}
	if tgz != filepath.Join(root, "run-p.tar.gz") {
		t.Errorf("Pack wrote %s", tgz)
	}
	rep, err := Verify(tgz)
	if err != nil || !rep.OK() || rep.Files != 10 { // report.html joined the bundle
		t.Fatalf("Verify(tar.gz) = %+v, %v", rep, err)
	}
	first, _ := os.ReadFile(tgz)
	if _, err := w.Pack(); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(tgz)
	if string(first) != string(second) {
		t.Error("packing twice gave different bytes")
	}
	// A secret planted in a packed bundle is found inside the tarball too.
	os.WriteFile(filepath.Join(w.Dir(), "logs/leak.log"), []byte(b64("x:"+testPassA)+"\n"), 0o644)
	if err := PackDir(w.Dir(), tgz); err != nil {
		t.Fatal(err)
	}
	fs, err := Scan(tgz, testSecrets)
	if err != nil || len(fs) != 1 || fs[0].File != "logs/leak.log" {
		t.Errorf("Scan(tar.gz) = %v, %v", fs, err)
	}
	rep, err = Verify(tgz)
	if err != nil || rep.OK() || len(rep.Findings) != 1 || len(rep.Extra) != 1 {
		t.Errorf("Verify(tampered tar.gz) = %+v, %v", rep, err)
	}
}

func TestVerifyRejectsWhatIsNotABundle(t *testing.T) {
	if _, err := Verify(t.TempDir()); err == nil {
		t.Error("Verify of an empty directory succeeded")
	}
	f := filepath.Join(t.TempDir(), "x.tar.gz")
	os.WriteFile(f, []byte("not gzip"), 0o644)
	if _, err := Verify(f); err == nil {
		t.Error("Verify of a non-tarball succeeded")
	}
}

func TestVerifyFindsBase64OfASecretAtEveryAlignment(t *testing.T) {
	for k := 0; k < 3; k++ {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			w, err := NewWriter(t.TempDir(), "r", testSecrets)
			if err != nil {
				t.Fatal(err)
			}
			blob := enc.EncodeToString([]byte(strings.Repeat("u", 3+k) + ":" + testPassVK + "..."))
			os.WriteFile(filepath.Join(w.Dir(), "blob.txt"), []byte("data "+blob+"\n"), 0o644)
			if _, err := w.Finish(sampleManifest("r"), nil); err == nil {
				t.Errorf("offset %d: Finish passed a bundle holding base64 of a secret", k)
			}
			rep, err := Verify(w.Dir())
			if err != nil || len(rep.Findings) == 0 || rep.Findings[0].File != "blob.txt" {
				t.Errorf("offset %d: Verify = %+v, %v", k, rep, err)
			}
		}
	}
}

func TestAddFileFromRedactsLongLinesAndBigFiles(t *testing.T) {
	w, err := NewWriter(t.TempDir(), "r", testSecrets)
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for sb.Len() < 3*maxLineLen {
		sb.WriteString("k=v password=" + testPassA + " x " + testPassVK + ", ")
	}
	sb.WriteString("\nlast line token=abc")
	src := filepath.Join(t.TempDir(), "long.log")
	os.WriteFile(src, []byte(sb.String()), 0o644)
	if err := w.AddFileFrom("logs/long.log", src); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(w.Dir(), "logs/long.log"))
	if strings.Contains(string(got), testPassA) || strings.Contains(string(got), testPassVK) {
		t.Error("secret left in a streamed long line")
	}
	if !strings.HasSuffix(string(got), "last line token=[REDACTED]") {
		t.Errorf("last line = %q", string(got[len(got)-40:]))
	}
	if _, err := w.Finish(sampleManifest("r"), nil); err != nil {
		t.Fatal(err)
	}
}

// TestScanLooksInsideGzipAndWrappedBase64: a run secret in a gzip-compressed file, or in base64
// wrapped at 64 or 76 columns, is found by Finish's scan and by Verify (issue 10, defect 11).
func TestScanLooksInsideGzipAndWrappedBase64(t *testing.T) {
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		return buf.Bytes()
	}
	wrap := func(width int) []byte {
		blob := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("u", 50) + testPassVK + strings.Repeat("v", 200)))
		var out []byte
		for len(blob) > width {
			out = append(out, blob[:width]+"\n"...)
			blob = blob[width:]
		}
		return append(out, blob+"\n"...)
	}
	for name, content := range map[string][]byte{
		"gzip":            gz([]byte("line one\nvalue " + testPassVK + " end\n")),
		"wrapped at 64":   wrap(64),
		"wrapped at 76":   wrap(76),
		"gzip of wrapped": gz(wrap(76)),
	} {
		t.Run(name, func(t *testing.T) {
			w, err := NewWriter(t.TempDir(), "r", testSecrets)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(w.Dir(), "leak.bin"), content, 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Finish(sampleManifest("r"), nil); err == nil || !strings.Contains(err.Error(), "leak.bin") {
				t.Errorf("Finish passed a bundle holding the secret (%s): %v", name, err)
			}
			rep, err := Verify(w.Dir())
			if err != nil || len(rep.Findings) == 0 || !strings.HasPrefix(rep.Findings[0].File, "leak.bin") {
				t.Errorf("Verify = %+v, %v", rep.Findings, err)
			}
		})
	}
}

// TestAddFileRedactsInsideGzip: a compressed log added to the bundle is redacted inside and
// stays compressed.
func TestAddFileRedactsInsideGzip(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte("connecting with password=" + testPassVK + "\n"))
	zw.Close()
	w, err := NewWriter(t.TempDir(), "r", testSecrets)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.AddFile("logs/old.log.gz", buf.Bytes()); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(t.TempDir(), "x.gz")
	os.WriteFile(src, buf.Bytes(), 0o600)
	if err := w.AddFileFrom("logs/streamed.log.gz", src); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"logs/old.log.gz", "logs/streamed.log.gz"} {
		b, _ := os.ReadFile(filepath.Join(w.Dir(), rel))
		zr, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("%s is no longer gzip: %v", rel, err)
		}
		plain, _ := io.ReadAll(zr)
		if strings.Contains(string(plain), testPassVK) || !strings.Contains(string(plain), "password=[REDACTED]") {
			t.Errorf("%s: %q", rel, plain)
		}
	}
	if _, err := w.Finish(sampleManifest("r"), nil); err != nil {
		t.Errorf("Finish: %v", err)
	}
}
