package evidence

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func benchRecord(i int) RequestRecord {
	return RequestRecord{Time: time.Now(), Scenario: "shared-budget", Label: fmt.Sprintf("exhaust-%d", i), Gateway: "gateway-a",
		Subject: "application-a", Credential: "valid", Method: "POST", Path: "/v1/chat/completions", Status: 200,
		ProviderSite: "west", RequestID: "req-0123456789", QuotaHeaders: map[string]string{"x-ratelimit-limit-tokens": "60", "x-ratelimit-remaining-tokens": "45"},
		Usage: &Usage{PromptTokens: 10, CompletionTokens: 5, TotalTokens: 15}, Latency: 3 * time.Millisecond}
}

// generatedSecrets are shaped like a run's: three subject passwords and the Valkey password.
var generatedSecrets = []string{"Zk3p9QzL7mWv2Rt8sYb4nXa1", "Qm8r2VtL0pXs7NcY4wKe6HaJ", "Lp4xW9sT2qRv7MnB3cZk8YdF", "Ht6nC1vX8bQz3LpR5sWm0JkG"}

// BenchmarkRequest measures one requests.jsonl record: marshal, redact, buffered write.
func BenchmarkRequest(b *testing.B) {
	w, err := NewWriter(b.TempDir(), "bench", generatedSecrets)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		w.Request(benchRecord(i))
	}
}

// benchLog is a realistic gateway log: JSON lines and text lines, a few with credentials.
func benchLog(size int) []byte {
	var sb strings.Builder
	for i := 0; sb.Len() < size; i++ {
		switch i % 4 {
		case 0:
			fmt.Fprintf(&sb, `{"time":"2026-09-01T12:00:00.%06dZ","level":"INFO","msg":"admitted","subject":"c2hhMjU2LXN1YmplY3Q","rule":"per-subject","estimate":15,"reserved":45,"site":"west","latency_ms":3}`+"\n", i)
		case 1:
			fmt.Fprintf(&sb, "2026-09-01T12:00:00Z INFO provider-west served request id=req-%d tokens=15 status=200 path=/v1/chat/completions\n", i)
		case 2:
			fmt.Fprintf(&sb, `{"time":"2026-09-01T12:00:00Z","level":"WARN","msg":"store error","err":"dial tcp 10.0.0.7:6379: i/o timeout","retry":%d}`+"\n", i)
		default:
			fmt.Fprintf(&sb, "# HELP quota_admitted_total admitted requests\nquota_admitted_total{gateway=\"a\",site=\"west\"} %d\n", i)
		}
	}
	return []byte(sb.String())
}

func BenchmarkRedactLog(b *testing.B) {
	r := NewRedactor(generatedSecrets)
	log := benchLog(4 << 20)
	b.SetBytes(int64(len(log)))
	for b.Loop() {
		r.Bytes(log)
	}
}

// BenchmarkVerifyScan measures Verify (checksums + salted-hash canary scan + generic patterns)
// over a bundle holding 4 MiB of logs.
func BenchmarkVerifyScan(b *testing.B) {
	root := b.TempDir()
	w, err := NewWriter(root, "bench", generatedSecrets)
	if err != nil {
		b.Fatal(err)
	}
	log := benchLog(4 << 20)
	if err := os.WriteFile(filepath.Join(b.TempDir(), "x"), nil, 0o644); err != nil {
		b.Fatal(err)
	}
	if err := w.AddFile("logs/gateway-a.log", log); err != nil {
		b.Fatal(err)
	}
	if _, err := w.Finish(sampleManifest("bench"), sampleResults()); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(log)))
	for b.Loop() {
		rep, err := Verify(w.Dir())
		if err != nil || !rep.OK() {
			b.Fatal(rep, err)
		}
	}
}

// BenchmarkScanLiteral measures Scan with the run's secrets (what Finish runs).
func BenchmarkScanLiteral(b *testing.B) {
	dir := filepath.Join(b.TempDir(), "bundle")
	os.MkdirAll(dir, 0o755)
	log := benchLog(4 << 20)
	os.WriteFile(filepath.Join(dir, "a.log"), log, 0o644)
	secrets := generatedSecrets
	b.SetBytes(int64(len(log)))
	for b.Loop() {
		if _, err := Scan(dir, secrets); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHashedScan measures only the salted-hash canary scan of 4 MiB, with four generated
// 24-character secrets (three subject passwords and the Valkey password, as a run has).
func BenchmarkHashedScan(b *testing.B) {
	cf, err := NewCanaryFile(generatedSecrets)
	if err != nil {
		b.Fatal(err)
	}
	hs, err := newHashedScanner(cf)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("%d forms in %d length groups", len(cf.Forms), len(hs.lengths))
	f := bundleFile{rel: "a.log", data: benchLog(4 << 20)}
	b.SetBytes(int64(len(f.data)))
	for b.Loop() {
		if fs := hs.scan(f); len(fs) != 0 {
			b.Fatal(fs)
		}
	}
}

// benchRun is a run of ten scenarios, 100 requests each, one with a ledger trace.
func benchRun() (Manifest, []ScenarioResult, []RequestRecord) {
	var results []ScenarioResult
	var reqs []RequestRecord
	t0 := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	for s := 0; s < 10; s++ {
		name := fmt.Sprintf("scenario-%d", s)
		r := ScenarioResult{Name: name, Status: Passed, Started: t0, Elapsed: 2 * time.Second}
		for i := 0; i < 100; i++ {
			rec := benchRecord(i)
			rec.Scenario, rec.Time = name, t0.Add(time.Duration(i)*20*time.Millisecond)
			if i%3 == 0 {
				rec.Status, rec.ProviderSite = 429, ""
			}
			reqs = append(reqs, rec)
			r.Assertions = append(r.Assertions, Assertion{Name: fmt.Sprintf("check %d", i), Expected: 1, Observed: 1, OK: true})
		}
		if s == 0 {
			var samples []LedgerSample
			for i := 0; i < 200; i++ {
				samples = append(samples, LedgerSample{At: t0.Add(time.Duration(i) * 10 * time.Millisecond), Reserved: int64(i % 60), Settled: int64(i / 4)})
			}
			r.Facts = append(r.Facts, Fact{Name: LedgerSamplesFact, Value: LedgerSeries{Subject: "application-a", Capacity: 60, Estimate: 15, Samples: samples}})
		}
		results = append(results, r)
	}
	return sampleManifest("bench"), results, reqs
}

// BenchmarkRenderReport draws report.html; compare with BenchmarkRenderSummary (summary.md of
// the same run) as the baseline.
func BenchmarkRenderReport(b *testing.B) {
	m, results, reqs := benchRun()
	for b.Loop() {
		if _, err := RenderReport(m, results, reqs); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRenderSummary(b *testing.B) {
	m, results, _ := benchRun()
	for b.Loop() {
		renderSummary(m, results)
	}
}
