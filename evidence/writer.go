package evidence

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/wire"
)

// Bundle file names the writer owns.
const (
	ManifestFile = "manifest.json"
	ResultsFile  = "results.json"
	RequestsFile = "requests.jsonl"
	SummaryFile  = "summary.md"
	JUnitFile    = "junit.xml"
	CanariesFile = "canaries.json"
)

var reserved = map[string]bool{
	ManifestFile: true, ResultsFile: true, RequestsFile: true,
	SummaryFile: true, JUnitFile: true, CanariesFile: true, ReportFile: true,
}

// maxLineLen bounds one redacted line in AddFileFrom; a longer line is redacted in pieces of this
// size (cut after the last separator when there is one). The canary scan over the finished bundle
// does not depend on lines, so a secret split across two pieces still fails the run.
const maxLineLen = 1 << 20

// Outcome is what Finish reports.
type Outcome struct {
	Dir            string    // the bundle directory
	Files          int       // files in the manifest
	Passed         int       // scenario counts
	Failed         int       //
	Skipped        int       //
	CanaryFindings []Finding // credentials found in the finished bundle; non-empty means Finish failed
}

// Writer writes one run's evidence bundle. Every byte it writes goes through the run's Redactor.
// Request is safe for concurrent use; the other methods are meant for the run's main goroutine
// but are also serialized.
type Writer struct {
	root, runID, dir string
	secrets          []string
	red              *Redactor

	mu       sync.Mutex
	reqFile  *os.File
	reqBuf   *bufio.Writer
	reqErr   error
	reqCount int
	added    map[string]bool
	finished bool
}

// NewWriter creates <root>/<runID>/ (and root if needed) for a new bundle. It fails if the
// directory already exists: runs never share a bundle.
func NewWriter(root, runID string, secrets []string) (*Writer, error) {
	if runID == "" || !filepath.IsLocal(runID) || strings.ContainsAny(runID, `/\`) {
		return nil, fmt.Errorf("evidence: run id %q is not a plain directory name", runID)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("evidence: create evidence root %s: %w", root, err)
	}
	dir := filepath.Join(root, runID)
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil, fmt.Errorf("evidence: bundle %s already exists; every run needs a fresh run id: %w", dir, err)
		}
		return nil, fmt.Errorf("evidence: create bundle %s: %w", dir, err)
	}
	f, err := os.OpenFile(filepath.Join(dir, RequestsFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("evidence: create %s: %w", RequestsFile, err)
	}
	// Until Finish replaces it, the manifest says the bundle is partial: a run killed before
	// it finished (kill -9, a crash) leaves a bundle that says so instead of looking empty.
	provisional, _ := json.MarshalIndent(Manifest{SchemaVersion: wire.BundleSchemaVersion, RunID: runID,
		Outcome: OutcomeUnfinished, Partial: PartialUnfinished, Files: map[string]string{}}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, ManifestFile), append(provisional, '\n'), 0o644); err != nil {
		f.Close()
		return nil, fmt.Errorf("evidence: write the provisional %s: %w", ManifestFile, err)
	}
	return &Writer{
		root: root, runID: runID, dir: dir,
		secrets: append([]string(nil), secrets...),
		red:     NewRedactor(secrets),
		reqFile: f,
		reqBuf:  bufio.NewWriterSize(f, 64<<10),
		added:   map[string]bool{},
	}, nil
}

// Dir returns the bundle directory.
func (w *Writer) Dir() string { return w.dir }

// Redactor returns the redactor the writer uses, for callers that print run output elsewhere.
func (w *Writer) Redactor() *Redactor { return w.red }

// Request appends one redacted record to requests.jsonl. It never blocks on the disk for long
// (the file is buffered) and never fails the caller: a write error is reported by Finish.
// Records arriving after Finish are dropped.
func (w *Writer) Request(rec RequestRecord) {
	b, err := json.Marshal(rec)
	if err == nil {
		b = w.red.Bytes(b)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finished {
		return
	}
	if err != nil {
		if w.reqErr == nil {
			w.reqErr = fmt.Errorf("evidence: encode request record %q: %w", rec.Label, err)
		}
		return
	}
	b = append(b, '\n')
	// Only whole records reach the file: the buffer is flushed before a record that does not
	// fit (a record larger than the buffer goes out in one write), so whatever ends the run,
	// requests.jsonl ends with a whole line.
	if w.reqBuf.Buffered() > 0 && w.reqBuf.Available() < len(b) {
		if err := w.reqBuf.Flush(); err != nil && w.reqErr == nil {
			w.reqErr = fmt.Errorf("evidence: write %s: %w", RequestsFile, err)
		}
	}
	if _, err := w.reqBuf.Write(b); err != nil && w.reqErr == nil {
		w.reqErr = fmt.Errorf("evidence: write %s: %w", RequestsFile, err)
	}
	w.reqCount++
}

// cleanRel validates a bundle-relative path: forward slashes, local, not a file the writer owns.
func (w *Writer) cleanRel(rel string) (string, error) {
	if rel == "" || strings.Contains(rel, `\`) || path.IsAbs(rel) {
		return "", fmt.Errorf("evidence: %q is not a relative bundle path", rel)
	}
	c := path.Clean(rel)
	if !filepath.IsLocal(filepath.FromSlash(c)) || c != rel {
		return "", fmt.Errorf("evidence: %q escapes or is not a clean bundle path", rel)
	}
	if reserved[c] {
		return "", fmt.Errorf("evidence: %q is written by the evidence writer itself", rel)
	}
	if w.added[c] {
		return "", fmt.Errorf("evidence: %q was already added", rel)
	}
	return c, nil
}

func (w *Writer) create(rel string) (*os.File, error) {
	dst := filepath.Join(w.dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return nil, fmt.Errorf("evidence: create directory for %s: %w", rel, err)
	}
	f, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("evidence: create %s: %w", rel, err)
	}
	return f, nil
}

// AddFile writes content, redacted, to rel ("logs/gateway-a.log", "metrics/gateway-a.prom",
// "config/gateway-a.yaml"). rel must stay inside the bundle and not name a file the writer owns.
func (w *Writer) AddFile(rel string, content []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finished {
		return fmt.Errorf("evidence: AddFile(%q) after Finish", rel)
	}
	c, err := w.cleanRel(rel)
	if err != nil {
		return err
	}
	f, err := w.create(c)
	if err != nil {
		return err
	}
	w.added[c] = true
	if isGzip(content) {
		err = redactStream(w.red, f, bytes.NewReader(content))
	} else {
		_, err = f.Write(w.red.Bytes(content)) // whole: a multi-line document stays one
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("evidence: write %s: %w", c, err)
	}
	return nil
}

// AddFileFrom copies srcPath to rel, redacting it line by line as it streams, so a large log
// never sits in memory whole. Lines longer than 1 MiB are redacted in pieces.
func (w *Writer) AddFileFrom(rel, srcPath string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.finished {
		return fmt.Errorf("evidence: AddFileFrom(%q) after Finish", rel)
	}
	c, err := w.cleanRel(rel)
	if err != nil {
		return err
	}
	src, err := os.Open(srcPath)
	if err != nil {
		return fmt.Errorf("evidence: open %s for %s: %w", srcPath, c, err)
	}
	defer src.Close()
	f, err := w.create(c)
	if err != nil {
		return err
	}
	w.added[c] = true
	err = redactStream(w.red, f, src)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("evidence: copy %s to %s: %w", srcPath, c, err)
	}
	return nil
}

// redactStream copies src to dst redacted. A gzip-compressed source is redacted inside:
// decompressed, redacted and compressed again, so a credential cannot ride in compressed.
func redactStream(red *Redactor, dst io.Writer, src io.Reader) error {
	br := bufio.NewReaderSize(src, 64<<10)
	if magic, _ := br.Peek(2); isGzip(magic) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("a gzip-compressed file that cannot be read cannot be redacted: %w", err)
		}
		zw := gzip.NewWriter(dst)
		if err := redactLines(red, zw, zr); err != nil {
			return err
		}
		return zw.Close()
	}
	return redactLines(red, dst, br)
}

func isGzip(b []byte) bool { return len(b) >= 2 && b[0] == 0x1f && b[1] == 0x8b }

// redactLines copies src to dst redacted line by line.
func redactLines(red *Redactor, dst io.Writer, src io.Reader) error {
	br := bufio.NewReaderSize(src, 64<<10)
	bw := bufio.NewWriterSize(dst, 64<<10)
	var line []byte
	flush := func(piece []byte) error {
		_, err := bw.Write(red.Bytes(piece))
		return err
	}
	for {
		chunk, err := br.ReadSlice('\n')
		line = append(line, chunk...)
		if len(line) > maxLineLen {
			// Cut after the last separator so a token is less likely to be split.
			cut := bytes.LastIndexAny(line[:maxLineLen], " \t,;")
			if cut < maxLineLen/2 {
				cut = maxLineLen - 1
			}
			if ferr := flush(line[:cut+1]); ferr != nil {
				return ferr
			}
			line = append(line[:0], line[cut+1:]...)
		}
		switch {
		case err == nil:
			if ferr := flush(line); ferr != nil {
				return ferr
			}
			line = line[:0]
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(line) > 0 {
				if ferr := flush(line); ferr != nil {
					return ferr
				}
			}
			return bw.Flush()
		default:
			return err
		}
	}
}

// Finish writes results.json, summary.md, junit.xml, canaries.json and finally manifest.json
// (the SHA-256 of every other file), then scans the finished bundle for the run's secrets. A
// finding fails Finish with an error that names the files, never the secret; Outcome lists the
// findings. Finish may be called once.
func (w *Writer) Finish(m Manifest, results []ScenarioResult) (Outcome, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := Outcome{Dir: w.dir}
	if w.finished {
		return out, errors.New("evidence: Finish called twice")
	}
	w.finished = true

	var errs []error
	if w.reqErr != nil {
		errs = append(errs, w.reqErr)
	}
	if err := w.reqBuf.Flush(); err != nil {
		errs = append(errs, fmt.Errorf("evidence: flush %s: %w", RequestsFile, err))
	}
	if err := w.reqFile.Close(); err != nil {
		errs = append(errs, fmt.Errorf("evidence: close %s: %w", RequestsFile, err))
	}
	// A write cut short (a full disk) may have left half a record: drop it.
	if err := truncateToLastNewline(filepath.Join(w.dir, RequestsFile)); err != nil {
		errs = append(errs, err)
	}
	if m.Outcome == OutcomeInterrupted && m.Partial == "" {
		m.Partial = PartialInterrupted
	}

	if m.SchemaVersion == "" {
		m.SchemaVersion = wire.BundleSchemaVersion
	}
	if m.RunID == "" {
		m.RunID = w.runID
	}
	if m.Verdicts == nil {
		m.Verdicts = map[string]Status{}
	}
	if m.Qualification == nil {
		q := Assess(results, "", nil)
		m.Qualification = &q
	}
	for _, r := range results {
		if _, ok := m.Verdicts[r.Name]; !ok {
			m.Verdicts[r.Name] = r.Status
		}
		switch r.Status {
		case Passed:
			out.Passed++
		case Failed:
			out.Failed++
		default:
			out.Skipped++
		}
	}

	// Everything below is rendered from the redacted results, so summary.md and junit.xml never
	// see a credential a scenario put into a reason or a fact.
	resJSON, err := json.MarshalIndent(resultsDoc{SchemaVersion: wire.BundleSchemaVersion, RunID: m.RunID, Qualification: m.Qualification, Scenarios: nonNil(results)}, "", "  ")
	if err != nil {
		return out, fmt.Errorf("evidence: encode results: %w", err)
	}
	resJSON = w.red.Bytes(append(resJSON, '\n'))
	var red resultsDoc
	dec := json.NewDecoder(bytes.NewReader(resJSON))
	dec.UseNumber()
	if err := dec.Decode(&red); err != nil {
		return out, fmt.Errorf("evidence: re-read redacted results: %w", err)
	}
	// The renderings below read the qualification's reasons redacted, as the results'.
	m.Qualification = red.Qualification
	errs = append(errs, w.writeOwned(ResultsFile, resJSON))
	errs = append(errs, w.writeOwned(SummaryFile, w.red.Bytes(renderSummary(m, red.Scenarios))))
	junitXML, err := renderJUnit(m, red.Scenarios)
	if err != nil {
		errs = append(errs, err)
	} else {
		errs = append(errs, w.writeOwned(JUnitFile, w.red.Bytes(junitXML)))
	}
	// The HTML report is drawn from the same redacted results and the request log as written.
	if html, err := w.renderReport(m, red.Scenarios); err != nil {
		errs = append(errs, err)
	} else {
		errs = append(errs, w.writeOwned(ReportFile, w.red.Bytes(html)))
	}
	canaries, err := NewCanaryFile(w.secrets)
	if err != nil {
		errs = append(errs, err)
	} else {
		cb, _ := json.MarshalIndent(canaries, "", "  ")
		errs = append(errs, w.writeOwned(CanariesFile, append(cb, '\n')))
	}

	files, err := checksumDir(w.dir)
	if err != nil {
		errs = append(errs, err)
	}
	delete(files, ManifestFile)
	m.Files = files
	out.Files = len(files)
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		errs = append(errs, fmt.Errorf("evidence: encode manifest: %w", err))
	} else {
		errs = append(errs, w.writeOwned(ManifestFile, w.red.Bytes(append(mb, '\n'))))
	}
	if err := errors.Join(errs...); err != nil {
		return out, err
	}

	findings, err := Scan(w.dir, w.secrets)
	if err != nil {
		return out, err
	}
	out.CanaryFindings = findings
	if len(findings) > 0 {
		return out, fmt.Errorf("evidence: canary scan found credentials in the bundle, in %s: %s",
			strings.Join(findingFiles(findings), ", "), "fix the redaction before sharing this bundle")
	}
	return out, nil
}

// How a bundle that does not cover the whole run is marked (Manifest.Outcome and Partial).
const (
	OutcomeInterrupted = "interrupted"
	OutcomeUnfinished  = "unfinished"
	PartialInterrupted = "the run was interrupted (Ctrl-C, SIGTERM or a hang-up): scenarios that had not finished are skipped as interrupted"
	PartialUnfinished  = "the run ended before it finished this bundle (kill -9, a crash, the machine going down): only requests.jsonl, up to its last whole line, and what was added before then are here"
)

// truncateToLastNewline cuts path after its last newline, so a record cut short is not read as
// one; a file that ends with a newline (or is empty) is left as it is.
func truncateToLastNewline(path string) error {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 || b[len(b)-1] == '\n' {
		return err
	}
	if err := os.Truncate(path, int64(bytes.LastIndexByte(b, '\n')+1)); err != nil {
		return fmt.Errorf("evidence: drop the cut-off last line of %s: %w", RequestsFile, err)
	}
	return nil
}

type resultsDoc struct {
	SchemaVersion string           `json:"schema_version"`
	RunID         string           `json:"run_id"`
	Qualification *Qualification   `json:"qualification,omitempty"` // schema 2
	Scenarios     []ScenarioResult `json:"scenarios"`
}

func (w *Writer) renderReport(m Manifest, results []ScenarioResult) ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(w.dir, RequestsFile))
	if err != nil {
		return nil, fmt.Errorf("evidence: read %s for the report: %w", RequestsFile, err)
	}
	reqs, err := parseRequests(b)
	if err != nil {
		return nil, fmt.Errorf("evidence: the report: %w", err)
	}
	return RenderReport(m, results, reqs)
}

func nonNil(r []ScenarioResult) []ScenarioResult {
	if r == nil {
		return []ScenarioResult{}
	}
	return r
}

func (w *Writer) writeOwned(name string, b []byte) error {
	if err := os.WriteFile(filepath.Join(w.dir, name), b, 0o644); err != nil {
		return fmt.Errorf("evidence: write %s: %w", name, err)
	}
	return nil
}

func findingFiles(fs []Finding) []string {
	seen := map[string]bool{}
	var out []string
	for _, f := range fs {
		if !seen[f.File] {
			seen[f.File] = true
			out = append(out, f.File)
		}
	}
	sort.Strings(out)
	return out
}

// checksumDir returns the SHA-256 of every regular file under dir, keyed by slash path.
func checksumDir(dir string) (map[string]string, error) {
	files := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		files[filepath.ToSlash(rel)] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("evidence: checksum %s: %w", dir, err)
	}
	return files, nil
}

// Pack writes <root>/<runID>.tar.gz holding the finished bundle under <runID>/, entries in sorted
// order with fixed ownership and the manifest's timestamps zeroed, so packing the same bundle twice
// gives the same bytes.
func (w *Writer) Pack() (string, error) {
	w.mu.Lock()
	finished := w.finished
	w.mu.Unlock()
	if !finished {
		return "", errors.New("evidence: Pack before Finish")
	}
	dst := filepath.Join(w.root, w.runID+".tar.gz")
	if err := PackDir(w.dir, dst); err != nil {
		return "", err
	}
	return dst, nil
}

// PackDir packs bundle directory dir into a deterministic tar.gz at dst.
func PackDir(dir, dst string) error {
	files, err := checksumDir(dir)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	tmp := dst + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("evidence: create %s: %w", tmp, err)
	}
	defer os.Remove(tmp)
	gz, _ := gzip.NewWriterLevel(f, gzip.BestCompression)
	tw := tar.NewWriter(gz)
	base := filepath.Base(dir)
	epoch := time.Unix(0, 0).UTC()
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(n)))
		if err != nil {
			f.Close()
			return fmt.Errorf("evidence: pack %s: %w", n, err)
		}
		hdr := &tar.Header{
			Typeflag: tar.TypeReg, Name: base + "/" + n, Mode: 0o644, Size: int64(len(b)),
			ModTime: epoch, Format: tar.FormatPAX,
		}
		if err := tw.WriteHeader(hdr); err != nil {
			f.Close()
			return fmt.Errorf("evidence: pack %s: %w", n, err)
		}
		if _, err := tw.Write(b); err != nil {
			f.Close()
			return fmt.Errorf("evidence: pack %s: %w", n, err)
		}
	}
	err = errors.Join(tw.Close(), gz.Close(), f.Close())
	if err != nil {
		return fmt.Errorf("evidence: write %s: %w", dst, err)
	}
	if err := os.Rename(tmp, dst); err != nil {
		return fmt.Errorf("evidence: write %s: %w", dst, err)
	}
	return nil
}
