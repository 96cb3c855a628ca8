package evidence

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/html"
)

// reportFixture writes a finished bundle with three scenarios shaped like the real ones: a
// fault scenario (fault window, 200/503 on both gateways, ledger samples), a failed one, and a
// network-policy one with probes. It returns the bundle directory.
func reportFixture(t *testing.T, root, runID string) string {
	t.Helper()
	w, err := NewWriter(root, runID, testSecrets)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 9, 1, 12, 0, 1, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	sites := []string{"west", "central", "east"}
	for i := 0; i < 6; i++ {
		gw := []string{"gateway-a", "gateway-b"}[i%2]
		w.Request(RequestRecord{Time: at(100 * i), Scenario: "outage", Label: fmt.Sprintf("before-%d", i), Gateway: gw,
			Subject: "application-a", Credential: "valid", Status: 200, ProviderSite: sites[i%3], Latency: 40 * time.Millisecond,
			QuotaHeaders: map[string]string{"x-ratelimit-limit-tokens": "60", "x-ratelimit-remaining-tokens": fmt.Sprint(45 - 15*(i%3))},
			Usage:        &Usage{TotalTokens: 12}})
	}
	for i := 0; i < 4; i++ {
		gw := []string{"gateway-a", "gateway-b"}[i%2]
		w.Request(RequestRecord{Time: at(1000 + 50*i), Scenario: "outage", Label: fmt.Sprintf("outage-%d", i), Gateway: gw,
			Subject: "application-a", Credential: "valid", Status: 503, ErrorType: "quota_store_unavailable", Latency: 2 * time.Millisecond})
	}
	w.Request(RequestRecord{Time: at(1500), Scenario: "outage", Label: "denied", Gateway: "gateway-b", Subject: "application-a",
		Credential: "valid", Status: 429, Latency: time.Millisecond,
		QuotaHeaders: map[string]string{"retry-after": "3", "x-ratelimit-limit-tokens": "60", "x-ratelimit-remaining-tokens": "0"}})
	w.Request(RequestRecord{Time: at(2000), Scenario: "broken", Label: "x", Gateway: "gateway-a", Subject: "application-b",
		Credential: "valid", Status: 200, ProviderSite: "west", Latency: 30 * time.Millisecond})

	samples := []LedgerSample{{At: at(0), Reserved: 15}, {At: at(50), Reserved: 0, Settled: 12}, {At: at(600), Reserved: 15, Settled: 60}}
	probes := []Probe{
		{From: "gateway-a", To: "valkey", Port: 6379, Expected: "reached", Reached: true, Supported: true},
		{From: "client", To: "valkey", Port: 6379, Expected: "denied", Reached: false, Supported: true, Error: "connection refused"},
		{From: "provider-west", To: "valkey", Port: 6379, Expected: "denied", Reached: true, Supported: true},
	}
	results := []ScenarioResult{
		{Name: "outage", Summary: "store stopped", Invariant: "fail closed", Status: Passed, KeyFact: "503 within 2ms",
			Started: t0, Elapsed: 2 * time.Second,
			Facts: []Fact{
				{Name: "time_to_decision_ms", Value: []float64{2, 2}},
				{Name: LedgerSamplesFact, Value: LedgerSeries{Subject: "application-a", Capacity: 60, Estimate: 15, WindowMS: 4000, Samples: samples}},
				{Name: FaultWindowsFact, Value: []FaultWindow{{Kind: "outage", Target: "valkey", Start: at(950), End: at(1400)}}},
			},
			Assertions: []Assertion{
				{Name: "gateway-a request 1 → 503", Expected: 503, Observed: 503, OK: true},
				{Name: "admission recovered", Expected: "≤ 10s", Observed: "310ms", OK: true},
			}},
		{Name: "broken", Summary: "a failing one", Status: Failed, Reason: "peak reserved ≤ capacity: expected ≤ 60, observed 75",
			Started: at(1900), Elapsed: time.Second, KeyFact: "over-admitted",
			Assertions: []Assertion{{Name: "peak reserved ≤ capacity", Expected: "≤ 60", Observed: 75, OK: false}}},
		{Name: "network-policy", Summary: "isolation", Status: Failed, Started: at(3000), Elapsed: 100 * time.Millisecond,
			Facts:      []Fact{{Name: ProbesFact, Value: probes}},
			Assertions: []Assertion{{Name: "negative control provider-west → valkey:6379 denied", Expected: "denied", Observed: "reached", OK: false}}},
		{Name: "partition", Summary: "cut", Status: Skipped, Reason: "needs partitions: process topology has none"},
	}
	m := sampleManifest(runID)
	m.TopologyFacts = map[string]any{"engine": "netns", "bridge": "qq-br"}
	if _, err := w.Finish(m, results); err != nil {
		t.Fatal(err)
	}
	return w.Dir()
}

func parseHTML(t *testing.T, b []byte) *html.Node {
	t.Helper()
	doc, err := html.Parse(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("report.html does not parse: %v", err)
	}
	return doc
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// findAll returns every element under n that match reports true for.
func findAll(n *html.Node, match func(*html.Node) bool) []*html.Node {
	var out []*html.Node
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.ElementNode && match(n) {
			out = append(out, n)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return out
}

func hasClass(n *html.Node, class string) bool {
	for _, c := range strings.Fields(attr(n, "class")) {
		if c == class {
			return true
		}
	}
	return false
}

func textOf(n *html.Node) string {
	var b strings.Builder
	var walk func(*html.Node)
	walk = func(n *html.Node) {
		if n.Type == html.TextNode {
			b.WriteString(n.Data)
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c)
		}
	}
	walk(n)
	return b.String()
}

func sectionOf(t *testing.T, doc *html.Node, name string) *html.Node {
	t.Helper()
	s := findAll(doc, func(n *html.Node) bool { return n.Data == "section" && attr(n, "data-scenario") == name })
	if len(s) != 1 {
		t.Fatalf("want one section for scenario %s, found %d", name, len(s))
	}
	return s[0]
}

// plotText returns the text inside the <svg> of the section's figure data-plot=kind, or fails.
func plotText(t *testing.T, sec *html.Node, kind string) string {
	t.Helper()
	figs := findAll(sec, func(n *html.Node) bool { return n.Data == "figure" && attr(n, "data-plot") == kind })
	if len(figs) != 1 {
		t.Fatalf("section %s: want one %s plot, found %d", attr(sec, "data-scenario"), kind, len(figs))
	}
	svgs := findAll(figs[0], func(n *html.Node) bool { return n.Data == "svg" })
	if len(svgs) != 1 {
		t.Fatalf("section %s: %s plot holds %d <svg>, want 1", attr(sec, "data-scenario"), kind, len(svgs))
	}
	if len(findAll(svgs[0], func(n *html.Node) bool { return n.Data == "path" })) == 0 {
		t.Errorf("section %s: %s plot draws no path", attr(sec, "data-scenario"), kind)
	}
	return textOf(svgs[0])
}

func TestReportShowsEveryScenarioItsAssertionsAndPlots(t *testing.T) {
	dir := reportFixture(t, t.TempDir(), "run-html")
	b, err := os.ReadFile(filepath.Join(dir, ReportFile))
	if err != nil {
		t.Fatal(err)
	}
	doc := parseHTML(t, b)

	// The run-level page: every verdict, topology and versions.
	verdicts := findAll(doc, func(n *html.Node) bool { return n.Data == "tr" && hasClass(n, "verdict") })
	want := map[string]string{"outage": "passed", "broken": "failed", "network-policy": "failed", "partition": "skipped"}
	if len(verdicts) != len(want) {
		t.Errorf("verdict rows: %d, want %d", len(verdicts), len(want))
	}
	for _, v := range verdicts {
		name := attr(v, "data-scenario")
		if !strings.Contains(textOf(v), want[name]) {
			t.Errorf("verdict row %s = %q, want %s", name, textOf(v), want[name])
		}
	}
	head := textOf(findAll(doc, func(n *html.Node) bool { return n.Data == "header" })[0])
	if !strings.Contains(head, "1 passed, 2 failed, 1 skipped · 12 requests recorded") {
		t.Errorf("run page counts wrong:\n%s", head)
	}
	for _, s := range []string{"netns", "8.1.1", "quick", "qq-br", "config/gateway-a.yaml", "9s"} {
		if !strings.Contains(head, s) {
			t.Errorf("run page lacks %q", s)
		}
	}

	// Every scenario has a section with its status and every assertion with expected/observed.
	for name, status := range want {
		if got := attr(sectionOf(t, doc, name), "data-status"); got != status {
			t.Errorf("section %s status %q, want %q", name, got, status)
		}
	}
	rows := findAll(sectionOf(t, doc, "broken"), func(n *html.Node) bool { return n.Data == "tr" && hasClass(n, "assertion") })
	if len(rows) != 1 || !hasClass(rows[0], "fail") {
		t.Fatalf("broken: assertion rows %d (want 1, class fail)", len(rows))
	}
	cells := findAll(rows[0], func(n *html.Node) bool { return n.Data == "td" })
	if got := []string{textOf(cells[0]), textOf(cells[1]), textOf(cells[2])}; got[0] != "peak reserved ≤ capacity" || got[1] != "≤ 60" || got[2] != "75" {
		t.Errorf("broken assertion row = %q", got)
	}
	if !strings.Contains(textOf(sectionOf(t, doc, "broken")), "observed 75") {
		t.Error("the failure reason is not shown")
	}
	okRows := findAll(sectionOf(t, doc, "outage"), func(n *html.Node) bool { return n.Data == "tr" && hasClass(n, "assertion") && hasClass(n, "ok") })
	if len(okRows) != 2 {
		t.Errorf("outage: %d passing assertion rows, want 2", len(okRows))
	}

	// The plots, with the series the data holds.
	out := sectionOf(t, doc, "outage")
	tl := plotText(t, out, "timeline")
	for _, s := range []string{"gateway-a", "gateway-b", "200 admitted", "503 store unavailable", "429 denied", "outage: valkey", "site west", "site central", "site east", "no provider"} {
		if !strings.Contains(tl, s) {
			t.Errorf("timeline lacks %q", s)
		}
	}
	tok := plotText(t, out, "tokens")
	for _, s := range []string{"reserved (ledger samples)", "reserved (reconstructed)", "settled (ledger samples)", "settled (reconstructed)", "capacity 60"} {
		if !strings.Contains(tok, s) {
			t.Errorf("tokens plot lacks %q", s)
		}
	}
	lat := plotText(t, out, "latency")
	for _, s := range []string{"200 admitted (n=6", "503 store unavailable (n=4", "429 denied (n=1"} {
		if !strings.Contains(lat, s) {
			t.Errorf("latency plot lacks %q", s)
		}
	}
	// A scenario without ledger samples shows what the clients were told instead.
	if rem := findAll(out, func(n *html.Node) bool { return attr(n, "data-plot") == "remaining" }); len(rem) != 0 {
		t.Error("a scenario with ledger samples also drew the remaining-tokens plot")
	}
	fw := findAll(out, func(n *html.Node) bool { return n.Data == "tr" && hasClass(n, "fault") })
	if len(fw) != 1 || !strings.Contains(textOf(fw[0]), "0.95 s – 1.40 s (450ms)") {
		t.Errorf("fault window rows = %d %q", len(fw), textOf(out))
	}

	// The reachability matrix: positive control, denial, and a wrong reach called out.
	np := sectionOf(t, doc, "network-policy")
	tbl := findAll(np, func(n *html.Node) bool { return n.Data == "table" && hasClass(n, "reachability") })
	if len(tbl) != 1 {
		t.Fatal("network-policy has no reachability matrix")
	}
	cellAt := map[string]string{}
	for _, tr := range findAll(tbl[0], func(n *html.Node) bool { return n.Data == "tr" }) {
		th := findAll(tr, func(n *html.Node) bool { return n.Data == "th" })
		for _, td := range findAll(tr, func(n *html.Node) bool { return n.Data == "td" }) {
			cellAt[textOf(th[0])+"|"+attr(td, "class")] = textOf(td)
		}
	}
	for k, v := range map[string]string{"gateway-a|allowed": "allowed (control)", "client|denied": "denied", "provider-west|wrong": "REACHED, policy says denied"} {
		if cellAt[k] != v {
			t.Errorf("matrix cell %s = %q, want %q (cells %v)", k, cellAt[k], v, cellAt)
		}
	}

	// Self-contained: no script, no external resource of any kind.
	low := strings.ToLower(string(b))
	for _, bad := range []string{"<script", "src=", "@import", "url(", "<link", "http://", "https://"} {
		if bad == "http://" || bad == "https://" {
			// SVG namespaces are identifiers, not fetches; anything else is not allowed.
			low = strings.NewReplacer(`xmlns="http://www.w3.org/2000/svg"`, "", `xmlns:xlink="http://www.w3.org/1999/xlink"`, "").Replace(low)
		}
		if strings.Contains(low, bad) {
			t.Errorf("report.html contains %q: it must not load anything", bad)
		}
	}
}

func TestReportIsChecksummedScannedAndRegenerated(t *testing.T) {
	root := t.TempDir()
	dir := reportFixture(t, root, "run-regen")
	rep, err := Verify(dir)
	if err != nil || !rep.OK() {
		t.Fatalf("fresh bundle: %+v, %v", rep, err)
	}
	b, _ := LoadBundle(dir)
	if b.Manifest.Files[ReportFile] == "" {
		t.Fatal("report.html is not checksummed in the manifest")
	}
	// A credential a scenario put into a reason is redacted in the report like everywhere else.
	if bytes.Contains(b.Files[ReportFile], []byte(testPassA)) {
		t.Fatal("a secret reached report.html")
	}

	// Regenerating a directory: the report is replaced, its checksum updated, the bundle verifies.
	os.Remove(filepath.Join(dir, ReportFile))
	out, err := RegenerateReport(dir)
	if err != nil || out != filepath.Join(dir, ReportFile) {
		t.Fatalf("RegenerateReport(dir) = %s, %v", out, err)
	}
	if rep, err := Verify(dir); err != nil || !rep.OK() {
		t.Fatalf("after regeneration: %+v, %v", rep, err)
	}
	doc, _ := os.ReadFile(out)
	sectionOf(t, parseHTML(t, doc), "outage")

	// A tarball stays untouched; the report lands next to it.
	tgz := filepath.Join(root, "run-regen.tar.gz")
	if err := PackDir(dir, tgz); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(tgz)
	out, err = RegenerateReport(tgz)
	if err != nil || out != filepath.Join(root, "run-regen.report.html") {
		t.Fatalf("RegenerateReport(tgz) = %s, %v", out, err)
	}
	after, _ := os.ReadFile(tgz)
	if !bytes.Equal(before, after) {
		t.Error("regenerating from a tarball changed the tarball")
	}
	if _, err := RegenerateReport(filepath.Join(root, "nothing-here")); err == nil {
		t.Error("a missing bundle gave no error")
	}
}

func TestReportPlantedSecretInAFactIsRedacted(t *testing.T) {
	w, err := NewWriter(t.TempDir(), "run-leak", testSecrets)
	// (one failed scenario only: the run page must still say "0 passed")
	if err != nil {
		t.Fatal(err)
	}
	res := []ScenarioResult{{Name: "leaky", Status: Failed, Reason: "dial redis://:" + testPassVK + "@valkey:6379",
		Facts:      []Fact{{Name: "header", Value: "Authorization: Basic " + b64("application-a:"+testPassA)}},
		Assertions: []Assertion{{Name: "x", Expected: testPassA, Observed: 1, OK: false}}}}
	if _, err := w.Finish(sampleManifest("run-leak"), res); err != nil {
		t.Fatalf("Finish: %v", err)
	}
	b, _ := os.ReadFile(filepath.Join(w.Dir(), ReportFile))
	for _, s := range []string{testPassA, testPassVK, b64("application-a:" + testPassA)} {
		if bytes.Contains(b, []byte(s)) {
			t.Errorf("report.html holds a secret form %q", s)
		}
	}
	if !bytes.Contains(b, []byte("0 passed, 1 failed, 0 skipped")) {
		t.Error("the run page does not count zero passes and skips")
	}
	if !bytes.Contains(b, []byte(`data-scenario="leaky"`)) {
		t.Error("the leaky scenario has no section")
	}
}

func TestPlotsDrawDegenerateData(t *testing.T) {
	now := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	one := []RequestRecord{{Scenario: "s", Gateway: "gateway-a", Status: 200, Time: now, Latency: 500 * time.Microsecond,
		QuotaHeaders: map[string]string{"x-ratelimit-remaining-tokens": "3", "x-ratelimit-limit-tokens": "60"}}}
	zero := []RequestRecord{{Scenario: "s", Gateway: "gateway-a", Status: 0, Time: now, Error: "connection refused"}}
	for name, draw := range map[string]func() (string, error){
		"latency of one request":      func() (string, error) { return latencyPlot(one) },
		"latency of a zero duration":  func() (string, error) { return latencyPlot(zero) },
		"timeline of one request":     func() (string, error) { return timelinePlot(now, one, nil) },
		"remaining of one request":    func() (string, error) { return remainingPlot(now, 0, one) },
		"tokens without samples":      func() (string, error) { return tokensPlot(now, 0, LedgerSeries{Capacity: 10}, nil) },
		"timeline with an open fault": func() (string, error) { return timelinePlot(now, one, []FaultWindow{{Kind: "outage", Start: now}}) },
	} {
		svg, err := draw()
		if err != nil || !strings.HasPrefix(svg, "<svg") {
			t.Errorf("%s: %v (svg %d bytes)", name, err, len(svg))
		}
	}
}

func TestReconstructionFromTheRequestLog(t *testing.T) {
	t0 := time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)
	ls := LedgerSeries{Subject: "application-a", Capacity: 60, Estimate: 15, WindowMS: 4000}
	reqs := []RequestRecord{
		{Subject: "application-a", Status: 200, Time: t0, Latency: time.Second, Usage: &Usage{TotalTokens: 12}},
		{Subject: "application-a", Status: 200, Time: t0.Add(500 * time.Millisecond), Latency: time.Second}, // no usage: the estimate
		{Subject: "application-a", Status: 429, Time: t0.Add(600 * time.Millisecond)},
		{Subject: "application-b", Status: 200, Time: t0, Latency: time.Second, Usage: &Usage{TotalTokens: 99}},
	}
	steps := func(xys interface {
		Len() int
		XY(int) (float64, float64)
	}) string {
		var b strings.Builder
		for i := 0; i < xys.Len(); i++ {
			x, y := xys.XY(i)
			fmt.Fprintf(&b, "%.1f:%g ", x, y)
		}
		return strings.TrimSpace(b.String())
	}
	// Reserved: 15 in flight from 0 s, 30 from 0.5 s, 15 from 1 s, 0 from 1.5 s.
	if got, want := steps(reconstructReserved(t0, ls, reqs)), "0.0:0 0.0:15 0.5:30 1.0:15 1.5:0"; got != want {
		t.Errorf("reserved = %s, want %s", got, want)
	}
	// Settled: 12 charged at 1 s, +15 (the estimate) at 1.5 s, each for one 4 s window.
	if got, want := steps(reconstructSettled(t0, ls, reqs)), "1.0:0 1.0:12 1.5:27 5.0:15 5.5:0"; got != want {
		t.Errorf("settled = %s, want %s", got, want)
	}
	if got, want := steps(clipX(reconstructSettled(t0, ls, reqs), 5.2)), "1.0:0 1.0:12 1.5:27 5.0:15 5.2:15"; got != want {
		t.Errorf("settled clipped at 5.2 s = %s, want %s", got, want)
	}
	ls.WindowMS = 0
	if got := reconstructSettled(t0, ls, reqs); got != nil {
		t.Errorf("settled without a window = %v, want nothing drawn", got)
	}
}
