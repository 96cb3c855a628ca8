package evidence

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRequestsLogOnDiskHoldsOnlyWholeLines: whatever instant the run is killed at, what
// requests.jsonl holds on disk ends with a whole record — the buffer is flushed only at record
// boundaries (issue 26: a killed run's log was cut mid-line).
func TestRequestsLogOnDiskHoldsOnlyWholeLines(t *testing.T) {
	w, err := NewWriter(t.TempDir(), "whole-lines", testSecrets)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(w.Dir(), RequestsFile)
	flushed := 0
	for i := range 200 {
		// Records of 1.5 to 20 KiB: many do not fit what is left of the 64 KiB buffer, and
		// some are larger than a third of it.
		w.Request(RequestRecord{Scenario: "s", Label: strings.Repeat("x", 1500+(i*997)%19000)})
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			t.Fatalf("after record %d requests.jsonl on disk (%d bytes) ends mid-record", i, len(b))
		}
		if len(b) > flushed {
			flushed = len(b)
		}
		for n, line := range bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n")) {
			if len(line) > 0 && !json.Valid(line) {
				t.Fatalf("after record %d line %d on disk is not a whole record", i, n+1)
			}
		}
	}
	if flushed == 0 {
		t.Fatal("nothing reached the disk before Finish: the test shows nothing")
	}
}

// TestAnUnfinishedBundleSaysItIsPartial: until Finish, the manifest marks the bundle partial
// (a kill -9 leaves that); an interrupted run's finished bundle is partial too, with a banner in
// summary.md, report.html and `evidence verify`; a complete run's is not.
func TestAnUnfinishedBundleSaysItIsPartial(t *testing.T) {
	root := t.TempDir()
	w, err := NewWriter(root, "killed", testSecrets)
	if err != nil {
		t.Fatal(err)
	}
	w.Request(RequestRecord{Scenario: "s", Label: "before the kill"})
	var m Manifest
	b, err := os.ReadFile(filepath.Join(w.Dir(), ManifestFile))
	if err != nil {
		t.Fatalf("no provisional manifest before Finish: %v", err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if m.Partial != PartialUnfinished || m.Outcome != OutcomeUnfinished || m.RunID != "killed" {
		t.Errorf("provisional manifest: outcome %q, partial %q, run %q; want it marked unfinished", m.Outcome, m.Partial, m.RunID)
	}
	if rep, err := Verify(w.Dir()); err != nil || rep.OK() || rep.Partial != PartialUnfinished {
		t.Errorf("verify of an unfinished bundle: %v, ok %v, partial %q; want not ok and partial", err, rep.OK(), rep.Partial)
	}

	for _, c := range []struct {
		outcome, partial string
	}{{OutcomeInterrupted, PartialInterrupted}, {"failed", ""}} {
		w := writeBundle(t, root, "fin-"+c.outcome)
		m := sampleManifest("fin-" + c.outcome)
		m.Outcome = c.outcome
		if _, err := w.Finish(m, sampleResults()); err != nil {
			t.Fatal(err)
		}
		var got Manifest
		b, _ := os.ReadFile(filepath.Join(w.Dir(), ManifestFile))
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatal(err)
		}
		if got.Partial != c.partial {
			t.Errorf("%s: manifest partial %q, want %q", c.outcome, got.Partial, c.partial)
		}
		summary, _ := os.ReadFile(filepath.Join(w.Dir(), SummaryFile))
		report, _ := os.ReadFile(filepath.Join(w.Dir(), ReportFile))
		rep, err := Verify(w.Dir())
		if err != nil || !rep.OK() {
			t.Errorf("%s: the finished bundle does not verify: %v %+v", c.outcome, err, rep)
		}
		marked := strings.Contains(string(summary), "**Partial bundle:**") && strings.Contains(string(report), `class="partial-banner"`) && rep.Partial != ""
		if marked != (c.partial != "") {
			t.Errorf("%s: summary, report and verify mark the bundle partial: %v, want %v", c.outcome, marked, c.partial != "")
		}
	}
}

// TestFinishDropsACutOffLastRecord: a record cut short on disk (a full disk, a write cut by a
// signal) is dropped at Finish, so the log ends with a whole line.
func TestFinishDropsACutOffLastRecord(t *testing.T) {
	path := filepath.Join(t.TempDir(), RequestsFile)
	if err := os.WriteFile(path, []byte("{\"a\":1}\n{\"b\":"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := truncateToLastNewline(path); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "{\"a\":1}\n" {
		t.Errorf("after truncation: %q, want the whole first record only", b)
	}
}
