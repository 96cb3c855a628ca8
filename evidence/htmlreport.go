package evidence

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ReportFile is the bundle's HTML report: one self-contained file (inline CSS and SVG, no
// script, no external resource) with the run-level page and one section per scenario.
const ReportFile = "report.html"

// Bundle is a finished bundle read back from its files: what the report and the diff use.
// It is read from the bundle alone (a directory or a .tar.gz), never from a live run.
type Bundle struct {
	Path     string
	Manifest Manifest
	Results  []ScenarioResult // facts decoded with json.Number for numbers
	// Qualification is the run's level as the bundle records it, or, for a version 1 bundle
	// that does not, as its verdicts give it (with no --require policy).
	Qualification Qualification
	Requests      []RequestRecord
	Files         map[string][]byte
}

// LoadBundle reads a bundle directory or a .tar.gz written by Pack.
func LoadBundle(p string) (*Bundle, error) {
	files, err := readBundle(p)
	if err != nil {
		return nil, err
	}
	b := &Bundle{Path: p, Files: map[string][]byte{}}
	for _, f := range files {
		b.Files[f.rel] = f.data
	}
	mb, ok := b.Files[ManifestFile]
	if !ok {
		return nil, fmt.Errorf("evidence: %s has no %s; is it an evidence bundle?", p, ManifestFile)
	}
	if err := json.Unmarshal(mb, &b.Manifest); err != nil {
		return nil, fmt.Errorf("evidence: %s: read %s: %w", p, ManifestFile, err)
	}
	rb, ok := b.Files[ResultsFile]
	if !ok {
		return nil, fmt.Errorf("evidence: %s has no %s; is it an evidence bundle?", p, ResultsFile)
	}
	var doc resultsDoc
	dec := json.NewDecoder(bytes.NewReader(rb))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("evidence: %s: read %s: %w", p, ResultsFile, err)
	}
	b.Results = doc.Scenarios
	switch {
	case doc.Qualification != nil:
		b.Qualification = *doc.Qualification
	case b.Manifest.Qualification != nil:
		b.Qualification = *b.Manifest.Qualification
	default:
		b.Qualification = Assess(b.Results, "", nil)
	}
	b.Requests, err = parseRequests(b.Files[RequestsFile])
	if err != nil {
		return nil, fmt.Errorf("evidence: %s: %w", p, err)
	}
	return b, nil
}

// parseRequests reads requests.jsonl; a line that is not a record is an error naming it.
func parseRequests(b []byte) ([]RequestRecord, error) {
	var out []RequestRecord
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 64<<10), maxLineLen+1)
	for n := 1; sc.Scan(); n++ {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var r RequestRecord
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", RequestsFile, n, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", RequestsFile, err)
	}
	return out, nil
}

// factAs decodes the first fact called name into v; false when there is none or it does not
// have v's shape.
func factAs(facts []Fact, name string, v any) bool {
	for _, f := range facts {
		if f.Name != name {
			continue
		}
		b, err := json.Marshal(f.Value)
		if err != nil {
			return false
		}
		return json.Unmarshal(b, v) == nil
	}
	return false
}

// RegenerateReport renders report.html again from a bundle's files. For a directory it replaces
// DIR/report.html and updates its checksum in manifest.json, then re-checks the bundle (every
// checksum and the canary scan) and fails when that finds a problem; a .tar.gz stays untouched
// and the report is written next to it as NAME.report.html. It returns the report's path.
func RegenerateReport(p string) (string, error) {
	b, err := LoadBundle(p)
	if err != nil {
		return "", err
	}
	html, err := RenderReport(b.Manifest, b.Results, b.Requests)
	if err != nil {
		return "", err
	}
	st, err := os.Stat(p)
	if err != nil {
		return "", fmt.Errorf("evidence: %w", err)
	}
	if !st.IsDir() {
		out := strings.TrimSuffix(strings.TrimSuffix(p, ".gz"), ".tar") + ".report.html"
		if err := os.WriteFile(out, html, 0o644); err != nil {
			return "", fmt.Errorf("evidence: write %s: %w", out, err)
		}
		return out, nil
	}
	out := filepath.Join(p, ReportFile)
	if err := os.WriteFile(out, html, 0o644); err != nil {
		return "", fmt.Errorf("evidence: write %s: %w", out, err)
	}
	m := b.Manifest
	if m.Files == nil {
		m.Files = map[string]string{}
	}
	m.Files[ReportFile] = sha256Hex(html)
	mb, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return "", fmt.Errorf("evidence: encode manifest: %w", err)
	}
	if err := os.WriteFile(filepath.Join(p, ManifestFile), append(mb, '\n'), 0o644); err != nil {
		return "", fmt.Errorf("evidence: write %s: %w", ManifestFile, err)
	}
	rep, err := Verify(p)
	if err != nil {
		return out, err
	}
	if !rep.OK() {
		return out, fmt.Errorf("evidence: %s no longer verifies after writing the report (missing %v, extra %v, changed %v, %d canary findings)",
			p, rep.Missing, rep.Extra, rep.Changed, len(rep.Findings))
	}
	return out, nil
}

// reportView is what the template renders.
type reportView struct {
	M         Manifest
	Q         Qualification
	Required  []Skip // skipped though required
	Outcome   string
	Duration  string
	Counts    map[string]int
	Topology  []kv
	Configs   []kv
	Scenarios []scenarioView
	Requests  int
	Generated string
}

type kv struct{ K, V string }

type scenarioView struct {
	ScenarioResult
	ID        string
	Elapsed   string
	Started   string
	Requests  int
	Timeline  template.HTML
	Tokens    template.HTML
	Remaining template.HTML
	Latency   template.HTML
	PlotErrs  []string
	Faults    []FaultWindow
	Matrix    *reachMatrix
	Facts     []kv
	Asserts   []assertView
}

type assertView struct {
	Name, Expected, Observed string
	OK                       bool
}

// RenderReport renders report.html from the manifest, the (redacted) results and the request
// log. It reads facts generically: a scenario's fault windows, ledger samples and probes are
// drawn when it recorded them under the names in types.go; every other fact is listed.
func RenderReport(m Manifest, results []ScenarioResult, reqs []RequestRecord) ([]byte, error) {
	q := qualificationOf(m, results)
	v := reportView{M: m, Q: q, Required: q.RequiredSkipped(), Outcome: outcomeWord(m, results), Counts: map[string]int{string(Passed): 0, string(Failed): 0, string(Skipped): 0}, Requests: len(reqs),
		Generated: time.Now().UTC().Format(time.RFC3339)}
	if !m.Started.IsZero() && !m.Ended.IsZero() {
		v.Duration = m.Ended.Sub(m.Started).Round(time.Millisecond).String()
	}
	for k, val := range m.TopologyFacts {
		v.Topology = append(v.Topology, kv{k, valueString(val)})
	}
	sort.Slice(v.Topology, func(i, j int) bool { return v.Topology[i].K < v.Topology[j].K })
	for k, val := range m.ConfigDigests {
		v.Configs = append(v.Configs, kv{k, val})
	}
	sort.Slice(v.Configs, func(i, j int) bool { return v.Configs[i].K < v.Configs[j].K })
	byScenario := map[string][]RequestRecord{}
	for _, r := range reqs {
		byScenario[r.Scenario] = append(byScenario[r.Scenario], r)
	}
	for _, r := range results {
		v.Counts[string(r.Status)]++
		v.Scenarios = append(v.Scenarios, scenarioSection(r, byScenario[r.Name]))
	}
	var b bytes.Buffer
	if err := reportTemplate.Execute(&b, v); err != nil {
		return nil, fmt.Errorf("evidence: render %s: %w", ReportFile, err)
	}
	return b.Bytes(), nil
}

func scenarioSection(r ScenarioResult, reqs []RequestRecord) scenarioView {
	sv := scenarioView{ScenarioResult: r, ID: "scenario-" + r.Name, Requests: len(reqs)}
	if r.Elapsed > 0 {
		sv.Elapsed = r.Elapsed.Round(time.Millisecond).String()
	}
	if !r.Started.IsZero() {
		sv.Started = r.Started.UTC().Format("15:04:05.000")
	}
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].Time.Before(reqs[j].Time) })
	origin := r.Started
	if origin.IsZero() && len(reqs) > 0 {
		origin = reqs[0].Time
	}
	// span is how long the scenario ran, in seconds: the x range of the lines drawn across it.
	span := r.Elapsed.Seconds()
	if len(reqs) > 0 {
		span = max(span, secondsSince(origin, lastRequestEnd(reqs, origin)))
	}
	factAs(r.Facts, FaultWindowsFact, &sv.Faults)
	plotInto := func(dst *template.HTML, svg string, err error) {
		if err != nil {
			sv.PlotErrs = append(sv.PlotErrs, err.Error())
			return
		}
		*dst = template.HTML(svg) // produced by gonum's SVG canvas from our own data
	}
	if len(reqs) > 0 {
		svg, err := timelinePlot(origin, reqs, sv.Faults)
		plotInto(&sv.Timeline, svg, err)
		svg, err = latencyPlot(reqs)
		plotInto(&sv.Latency, svg, err)
	}
	var ls LedgerSeries
	if factAs(r.Facts, LedgerSamplesFact, &ls) && (len(ls.Samples) > 0 || ls.Capacity > 0) {
		svg, err := tokensPlot(origin, span, ls, reqs)
		plotInto(&sv.Tokens, svg, err)
	} else if len(reqs) > 0 {
		svg, err := remainingPlot(origin, span, reqs)
		plotInto(&sv.Remaining, svg, err)
	}
	var probes []Probe
	if factAs(r.Facts, ProbesFact, &probes) && len(probes) > 0 {
		sv.Matrix = newReachMatrix(probes)
	}
	for _, f := range r.Facts {
		switch f.Name {
		case FaultWindowsFact, LedgerSamplesFact, ProbesFact:
			continue // drawn above
		}
		sv.Facts = append(sv.Facts, kv{f.Name, valueString(f.Value)})
	}
	for _, a := range r.Assertions {
		sv.Asserts = append(sv.Asserts, assertView{a.Name, valueString(a.Expected), valueString(a.Observed), a.OK})
	}
	return sv
}

// reachMatrix is the network-policy probes as a table: one row per source host, one column
// per target host:port.
type reachMatrix struct {
	Cols []string
	Rows []reachRow
}

type reachRow struct {
	From  string
	Cells []reachCell
}

type reachCell struct {
	Text  string // allowed, denied, or what went wrong
	Class string // css: allowed, denied, wrong, none
	Title string // details on hover
}

func newReachMatrix(probes []Probe) *reachMatrix {
	var cols, rows []string
	seenC, seenR := map[string]bool{}, map[string]bool{}
	cell := map[[2]string]Probe{}
	for _, p := range probes {
		c := fmt.Sprintf("%s:%d", p.To, p.Port)
		if !seenC[c] {
			seenC[c] = true
			cols = append(cols, c)
		}
		if !seenR[p.From] {
			seenR[p.From] = true
			rows = append(rows, p.From)
		}
		cell[[2]string{p.From, c}] = p
	}
	m := &reachMatrix{Cols: cols}
	for _, from := range rows {
		row := reachRow{From: from}
		for _, c := range cols {
			p, ok := cell[[2]string{from, c}]
			if !ok {
				row.Cells = append(row.Cells, reachCell{Text: "·", Class: "none", Title: "not probed"})
				continue
			}
			row.Cells = append(row.Cells, probeCell(p))
		}
		m.Rows = append(m.Rows, row)
	}
	return m
}

func probeCell(p Probe) reachCell {
	title := fmt.Sprintf("%s → %s:%d expected %s, %.1f ms", p.From, p.To, p.Port, p.Expected, p.ElapsedMS)
	if p.Error != "" {
		title += ": " + p.Error
	}
	switch {
	case !p.Supported:
		return reachCell{"not probed (unsupported)", "wrong", title}
	case p.Expected == "reached" && p.Reached:
		return reachCell{"allowed (control)", "allowed", title}
	case p.Expected == "denied" && !p.Reached:
		return reachCell{"denied", "denied", title}
	case p.Reached:
		return reachCell{"REACHED, policy says denied", "wrong", title}
	default:
		return reachCell{"NOT reached, policy says allowed", "wrong", title}
	}
}

var reportTemplate = template.Must(template.New(ReportFile).Funcs(template.FuncMap{
	"statusClass": func(s Status) string { return "st-" + string(s) },
	"fmtTime": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05.000 UTC")
	},
	"windowSpan": func(f FaultWindow, origin time.Time) string {
		if f.End.IsZero() {
			return fmt.Sprintf("from %.2f s, never released", f.Start.Sub(origin).Seconds())
		}
		return fmt.Sprintf("%.2f s – %.2f s (%s)", f.Start.Sub(origin).Seconds(), f.End.Sub(origin).Seconds(), f.End.Sub(f.Start).Round(time.Millisecond))
	},
}).Parse(reportHTML))

const reportHTML = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>quotaqual {{.M.RunID}}: {{.Q.Level}}</title>
<style>
body{font-family:"Liberation Sans",Arial,Helvetica,sans-serif;margin:0 auto;max-width:1100px;padding:1em 1.5em;color:#1b1b1b;background:#fff}
h1{font-size:1.5em;margin:.2em 0}h2{font-size:1.25em;margin:0}h3{font-size:1em;margin:1em 0 .3em}
table{border-collapse:collapse;margin:.4em 0;font-size:.9em}th,td{border:1px solid #ccc;padding:.25em .5em;text-align:left;vertical-align:top}
th{background:#f2f2f2}td.num{text-align:right}code,.mono{font-family:"Liberation Mono",monospace;font-size:.9em}
.st-passed{color:#1e7b34;font-weight:bold}.st-failed{color:#c62828;font-weight:bold}.st-skipped{color:#8a6d00;font-weight:bold}
.badge{display:inline-block;padding:.1em .6em;border-radius:.8em;color:#fff;font-size:.85em}
.st-qualified{color:#1e7b34;font-weight:bold}.st-partial{color:#8a6d00;font-weight:bold}
.badge.st-qualified{background:#2e9e44;color:#fff}.badge.st-partial{background:#b38f00;color:#fff}
.badge.st-passed{background:#2e9e44;color:#fff}.badge.st-failed{background:#d62728;color:#fff}.badge.st-skipped{background:#b38f00;color:#fff}
section.scenario{border-top:2px solid #ddd;margin-top:1.5em;padding-top:.8em}
.meta{color:#555;font-size:.9em}.reason{background:#fff4f4;border-left:4px solid #d62728;padding:.4em .6em;white-space:pre-wrap}
section.scenario[data-status=skipped] .reason{background:#fffbea;border-color:#b38f00}
tr.assertion.fail td{background:#fdecea}tr.assertion.ok td:first-child{color:#1e7b34}tr.assertion.fail td:first-child{color:#c62828;font-weight:bold}
figure{margin:.6em 0}figure svg{max-width:100%;height:auto}figcaption{font-size:.85em;color:#555}
td.allowed{background:#e3f4e6}td.denied{background:#eef0f5}td.wrong{background:#f9c9c9;font-weight:bold}td.none{color:#aaa;text-align:center}
td.val{max-width:46em;overflow-wrap:anywhere;font-family:"Liberation Mono",monospace;font-size:.85em}
nav a{margin-right:.6em}
.partial-banner{background:#fff4ce;border:1px solid #b38f00;padding:.5em .8em}
</style>
</head>
<body>
<header id="run">
<h1>quotaqual qualification <span class="badge st-{{.Q.Level}}" data-level="{{.Q.Level}}">{{.Q.Level}}</span></h1>
{{if .M.Partial}}<p class="partial-banner" role="alert"><strong>Partial bundle:</strong> {{.M.Partial}}.</p>
{{end}}<p class="meta">Run <code>{{.M.RunID}}</code> · {{.Counts.passed}} passed, {{.Counts.failed}} failed, {{.Counts.skipped}} skipped · {{.Requests}} requests recorded</p>
<table class="qualification">
<tr><th>level</th><td class="st-{{.Q.Level}}">{{.Q.Level}}: {{.Q.Counts}}</td></tr>
{{if .Q.Failed}}<tr><th>failed</th><td>{{range $i, $n := .Q.Failed}}{{if $i}}, {{end}}<a href="#scenario-{{$n}}">{{$n}}</a>{{end}}</td></tr>{{end}}
{{if .Q.Skipped}}<tr><th>not qualified (skipped)</th><td><ul class="skipped">{{range .Q.Skipped}}<li data-scenario="{{.Scenario}}"><a href="#scenario-{{.Scenario}}">{{.Scenario}}</a>: {{.Reason}}{{if .Required}} <strong>(required)</strong>{{end}}</li>{{end}}</ul></td></tr>{{end}}
{{if .Q.Require}}<tr><th>required (--require)</th><td>{{.Q.Require}}{{if .Required}} — <strong>{{len .Required}} required scenario(s) skipped: the run fails</strong>{{end}}</td></tr>{{end}}
</table>
<table class="run-facts">
<tr><th>topology</th><td>{{.M.Topology}}</td></tr>
<tr><th>profile</th><td>{{.M.Profile}}</td></tr>
<tr><th>quotaqual version</th><td>{{.M.QuotaqualVersion}}</td></tr>
<tr><th>Valkey version</th><td>{{.M.ValkeyVersion}}</td></tr>
<tr><th>started</th><td>{{fmtTime .M.Started}}</td></tr>
<tr><th>ended</th><td>{{fmtTime .M.Ended}}</td></tr>
<tr><th>duration</th><td>{{.Duration}}</td></tr>
<tr><th>outcome</th><td>{{.M.Outcome}}</td></tr>
</table>
<h3>Verdicts</h3>
<table class="verdicts">
<tr><th>scenario</th><th>verdict</th><th>time</th><th>key fact</th></tr>
{{range .Scenarios}}<tr class="verdict" data-scenario="{{.Name}}"><td><a href="#{{.ID}}">{{.Name}}</a></td><td class="{{statusClass .Status}}">{{.Status}}</td><td class="num">{{.Elapsed}}</td><td>{{.KeyFact}}</td></tr>
{{end}}</table>
{{if .Topology}}<h3>Topology</h3>
<table class="topology">{{range .Topology}}<tr><th>{{.K}}</th><td class="val">{{.V}}</td></tr>{{end}}</table>{{end}}
{{if .Configs}}<h3>Effective configs (SHA-256)</h3>
<table class="configs">{{range .Configs}}<tr><th>{{.K}}</th><td class="mono">{{.V}}</td></tr>{{end}}</table>{{end}}
</header>
<main>
{{range .Scenarios}}{{$origin := .ScenarioResult.Started}}
<section class="scenario" id="{{.ID}}" data-scenario="{{.Name}}" data-status="{{.Status}}">
<h2>{{.Name}} <span class="badge {{statusClass .Status}}">{{.Status}}</span></h2>
<p class="meta">{{.Summary}}{{if .Started}} · started {{.Started}}{{end}}{{if .Elapsed}} · took {{.Elapsed}}{{end}} · {{.Requests}} requests</p>
{{if .Invariant}}<p><strong>Invariant.</strong> {{.Invariant}}</p>{{end}}
{{if .Reason}}<p class="reason">{{.Reason}}</p>{{end}}
{{if .Evidence}}<p class="evidence"><strong>Evidence.</strong> {{.Evidence}}</p>{{end}}
{{if .Faults}}<h3>Fault windows</h3><table class="faults"><tr><th>lever</th><th>target</th><th>window (since the scenario started)</th></tr>
{{range .Faults}}<tr class="fault"><td>{{.Kind}}</td><td>{{.Target}}</td><td>{{windowSpan . $origin}}</td></tr>{{end}}</table>{{end}}
{{if .Timeline}}<figure class="plot" data-plot="timeline">{{.Timeline}}<figcaption>Every request: when it was sent, through which gateway, its status (colour) and the provider site that served it (shape); fault windows shaded.</figcaption></figure>{{end}}
{{if .Tokens}}<figure class="plot" data-plot="tokens">{{.Tokens}}<figcaption>Reserved and settled tokens sampled from the ledger and reconstructed from the request log (reserved: each admitted request's estimate while in flight; settled: its usage for one window after its answer — the ledger counts in buckets, so it may lag by one), and the capacity line.</figcaption></figure>{{end}}
{{if .Remaining}}<figure class="plot" data-plot="remaining">{{.Remaining}}<figcaption>Remaining tokens each response announced (x-ratelimit-remaining-tokens), per subject, against the announced limit.</figcaption></figure>{{end}}
{{if .Latency}}<figure class="plot" data-plot="latency">{{.Latency}}<figcaption>Cumulative latency distribution per status: admitted requests wait for the provider, denials are decided before any provider is called.</figcaption></figure>{{end}}
{{range .PlotErrs}}<p class="reason">plot unavailable: {{.}}</p>{{end}}
{{with .Matrix}}<h3>Reachability matrix</h3>
<table class="reachability"><tr><th>from \ to</th>{{range .Cols}}<th>{{.}}</th>{{end}}</tr>
{{range .Rows}}<tr><th>{{.From}}</th>{{range .Cells}}<td class="{{.Class}}" title="{{.Title}}">{{.Text}}</td>{{end}}</tr>
{{end}}</table>{{end}}
<h3>Assertions</h3>
{{if .Asserts}}<table class="assertions"><tr><th>assertion</th><th>expected</th><th>observed</th><th>ok</th></tr>
{{range .Asserts}}<tr class="assertion {{if .OK}}ok{{else}}fail{{end}}"><td>{{.Name}}</td><td class="val">{{.Expected}}</td><td class="val">{{.Observed}}</td><td>{{if .OK}}✓{{else}}✗{{end}}</td></tr>
{{end}}</table>{{else}}<p class="meta">No assertion was recorded.</p>{{end}}
{{if .Facts}}<details><summary>Facts ({{len .Facts}})</summary><table class="facts">{{range .Facts}}<tr><th>{{.K}}</th><td class="val">{{.V}}</td></tr>{{end}}</table></details>{{end}}
</section>
{{end}}
</main>
<footer class="meta"><p>Generated {{.Generated}} from the bundle's manifest.json, results.json and requests.jsonl. Plots: gonum.org/v1/plot.</p></footer>
</body>
</html>
`

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
