package mutant

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
)

// RunOptions say how to run the qualification against a mutant.
type RunOptions struct {
	Binary   string // a quotaqual binary built with -tags quotaqual_mutants
	Topology string // the engine (default netns)
	// Gateway is the gateway profile of every run (`quotaqual run --gateway`): a shipped
	// name or a file; "" is quotaqual's own. A profile that launches quotaqual's gateway
	// with fewer capabilities declared shows what the scenarios' black-box paths catch.
	Gateway     string
	Scenarios   []string // only these scenarios (default: all)
	EvidenceDir string   // bundle root; "" = a temporary directory, removed afterwards
	Log         io.Writer
}

// Row is one qualification run: the control (no mutant) or one mutant.
type Row struct {
	Mutant  Name // "" for the control
	Status  map[string]evidence.Status
	Reasons map[string]string // why each failed scenario failed (first assertion)
	// Evidence is each scenario's evidence level ("" the full one, else "black-box: …").
	Evidence map[string]string
	ExitCode int
	Error    string // the run's own error (topology, usage), not a scenario's
	Elapsed  time.Duration
}

// Caught lists the scenarios that failed against the row's mutant, in the given order.
func (r Row) Caught(order []string) []string {
	var out []string
	for _, s := range order {
		if r.Status[s] == evidence.Failed {
			out = append(out, s)
		}
	}
	return out
}

// Matrix is the control row and one row per mutant.
type Matrix struct {
	Started   time.Time
	Wall      time.Duration
	Topology  string
	Gateway   string   // the gateway profile of every run; "" = quotaqual's own
	Scenarios []string // in the qualification's order
	Control   Row
	Rows      []Row
}

// RunOne runs `quotaqual run --json` with QUOTAQUAL_MUTANT=name (no mutant for ""), and
// returns each scenario's status. A run that produced no JSON is an error.
func RunOne(ctx context.Context, o RunOptions, name Name) (Row, error) {
	row := Row{Mutant: name, Status: map[string]evidence.Status{}, Reasons: map[string]string{}, Evidence: map[string]string{}}
	if o.Binary == "" {
		return row, errors.New("no binary: build one with -tags quotaqual_mutants (make mutants does)")
	}
	dir := o.EvidenceDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "quotaqual-mutants-")
		if err != nil {
			return row, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	topo := o.Topology
	if topo == "" {
		topo = "netns"
	}
	// --require none: the matrix lists a skip as such ("s"), and a skip must not make the
	// control's exit (ControlPassed) or a mutant's row read as a failure.
	args := []string{"run", "--json", "--topology", topo, "--evidence-dir", dir, "--require", "none"}
	if o.Gateway != "" {
		args = append(args, "--gateway", o.Gateway)
	}
	for _, s := range o.Scenarios {
		args = append(args, "--scenario", s)
	}
	cmd := exec.CommandContext(ctx, o.Binary, args...)
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvVar+"=") {
			env = append(env, kv)
		}
	}
	if name != "" {
		env = append(env, EnvVar+"="+string(name))
	}
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	row.Elapsed = time.Since(start)
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		row.ExitCode = ee.ExitCode()
	default:
		return row, fmt.Errorf("running %s: %w", o.Binary, err)
	}
	var out struct {
		ExitCode int                       `json:"exit_code"`
		Error    string                    `json:"error"`
		Results  []evidence.ScenarioResult `json:"results"`
	}
	if jerr := json.Unmarshal(stdout.Bytes(), &out); jerr != nil {
		return row, fmt.Errorf("mutant %q: no JSON result (exit %d): %v; stderr: %s", name, row.ExitCode, jerr, tail(stderr.String(), 600))
	}
	row.Error = out.Error
	for _, r := range out.Results {
		row.Status[r.Name] = r.Status
		row.Evidence[r.Name] = r.Evidence
		if r.Status != evidence.Passed {
			row.Reasons[r.Name] = firstClause(r.Reason)
		}
	}
	return row, nil
}

// Run runs the control and then every named mutant (all of the catalogue when names is
// empty), one after the other: the runs share the machine's cores, and a parallel run would
// turn load into failures that are not the mutant's.
func Run(ctx context.Context, o RunOptions, names []Name, scenarioOrder []string) (Matrix, error) {
	m := Matrix{Started: time.Now().UTC(), Topology: o.Topology, Gateway: o.Gateway, Scenarios: scenarioOrder}
	if m.Topology == "" {
		m.Topology = "netns"
	}
	if len(names) == 0 {
		for _, c := range Catalogue {
			names = append(names, c.Name)
		}
	}
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", args...)
		}
	}
	var err error
	logf("control (no mutant) …")
	if m.Control, err = RunOne(ctx, o, ""); err != nil {
		return m, err
	}
	logf("control: exit %d in %s", m.Control.ExitCode, m.Control.Elapsed.Round(time.Millisecond))
	for i, n := range names {
		logf("[%d/%d] %s …", i+1, len(names), n)
		row, err := RunOne(ctx, o, n)
		if err != nil {
			return m, err
		}
		logf("[%d/%d] %s: caught by %v (%s)", i+1, len(names), n, row.Caught(scenarioOrder), row.Elapsed.Round(time.Millisecond))
		m.Rows = append(m.Rows, row)
	}
	m.Wall = time.Since(m.Started)
	return m, nil
}

// ControlPassed reports whether the unmutated binary passed every scenario that ran (a skip
// is not a pass, but neither is it a failure: it is listed).
func (m Matrix) ControlPassed() bool {
	for _, s := range m.Scenarios {
		if m.Control.Status[s] == evidence.Failed {
			return false
		}
	}
	return m.Control.ExitCode == 0
}

// Markdown renders MUTANTS.md.
func (m Matrix) Markdown(command string, buildTime time.Duration) string {
	var b strings.Builder
	caught := 0
	for _, r := range m.Rows {
		if len(r.Caught(m.Scenarios)) > 0 {
			caught++
		}
	}
	fmt.Fprintf(&b, "# Mutation matrix\n\n")
	fmt.Fprintf(&b, "Which qualification scenario catches which deliberately broken gateway or ledger (the\n")
	fmt.Fprintf(&b, "catalogue is `internal/mutant`; the broken code is compiled only with `-tags quotaqual_mutants`).\n")
	gw := ""
	if m.Gateway != "" {
		gw = " --gateway " + m.Gateway
	}
	fmt.Fprintf(&b, "Each row is one `quotaqual run --json --require none --topology %s%s` (profile quick) with `%s=<mutant>` in\n", m.Topology, gw, EnvVar)
	fmt.Fprintf(&b, "the gateways' environment; **✗** = that scenario failed (caught), `·` = passed, `s` = skipped.\n\n")
	fmt.Fprintf(&b, "Generated by `%s` at %s: %d of %d mutants caught by at least one scenario; control passed: %v.\n",
		command, m.Started.Format(time.RFC3339), caught, len(m.Rows), m.ControlPassed())
	fmt.Fprintf(&b, "Wall time %s for %d qualification runs", m.Wall.Round(time.Second), len(m.Rows)+1)
	if buildTime > 0 {
		fmt.Fprintf(&b, " (plus %s to build the tagged binary)", buildTime.Round(time.Second))
	}
	b.WriteString(".\n\n")

	b.WriteString("| mutant | class |")
	for i := range m.Scenarios {
		fmt.Fprintf(&b, " %s |", colName(i))
	}
	b.WriteString(" caught by | run |\n|---|---|")
	for range m.Scenarios {
		b.WriteString(":-:|")
	}
	b.WriteString("---|--:|\n")
	rows := append([]Row{m.Control}, m.Rows...)
	for _, r := range rows {
		name, class := "**control** (no mutant)", ""
		if r.Mutant != "" {
			name = "`" + string(r.Mutant) + "`"
			if c, ok := Lookup(string(r.Mutant)); ok {
				class = c.Class
			}
		}
		fmt.Fprintf(&b, "| %s | %s |", name, class)
		for _, s := range m.Scenarios {
			switch r.Status[s] {
			case evidence.Failed:
				b.WriteString(" ✗ |")
			case evidence.Passed:
				b.WriteString(" · |")
			case evidence.Skipped:
				b.WriteString(" s |")
			default:
				b.WriteString(" – |")
			}
		}
		by := r.Caught(m.Scenarios)
		verdict := strings.Join(by, ", ")
		switch {
		case r.Mutant == "" && m.ControlPassed():
			verdict = "nothing (all pass)"
		case r.Mutant == "":
			verdict = "**control failed: " + verdict + "**"
		case len(by) == 0:
			verdict = "**not caught**"
		}
		fmt.Fprintf(&b, " %s | %.1fs |\n", verdict, r.Elapsed.Seconds())
	}
	b.WriteString("\nColumns: ")
	for i, s := range m.Scenarios {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s = `%s`", colName(i), s)
	}
	b.WriteString(".\n\n## The mutants\n\n| mutant | layer | breaks | expected to be caught by | measured |\n|---|---|---|---|---|\n")
	byName := map[Name]Row{}
	for _, r := range m.Rows {
		byName[r.Mutant] = r
	}
	for _, c := range Catalogue {
		r, ran := byName[c.Name]
		measured := "not run"
		if ran {
			measured = strings.Join(r.Caught(m.Scenarios), ", ")
			if measured == "" {
				measured = "**not caught**"
			}
			if missed := missing(c.CaughtBy, r.Caught(m.Scenarios), m.Scenarios); len(missed) > 0 {
				measured += "; expected but passed: " + strings.Join(missed, ", ")
			}
		}
		exp := strings.Join(c.CaughtBy, ", ")
		if exp == "" {
			exp = "—"
		}
		if c.Note != "" {
			exp += " (" + c.Note + ")"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", c.Name, c.Layer, c.Breaks, exp, measured)
	}
	b.WriteString("\n## Why each caught mutant failed (first reason per scenario)\n\n")
	for _, r := range m.Rows {
		by := r.Caught(m.Scenarios)
		if len(by) == 0 {
			continue
		}
		fmt.Fprintf(&b, "- `%s`:", r.Mutant)
		for _, s := range by {
			fmt.Fprintf(&b, " **%s**: %s.", s, r.Reasons[s])
		}
		b.WriteString("\n")
	}
	return b.String()
}

// missing lists the expected scenarios that ran and did not fail.
func missing(expected, caught, ran []string) []string {
	var out []string
	for _, e := range expected {
		if slices.Contains(ran, e) && !slices.Contains(caught, e) {
			out = append(out, e)
		}
	}
	sort.Strings(out)
	return out
}

// colName is a short column header: S1, S2, …
func colName(i int) string { return fmt.Sprintf("S%d", i+1) }

// firstClause is the first failed assertion of a verdict reason, shortened.
func firstClause(s string) string {
	if i := strings.Index(s, "; "); i >= 0 {
		s = s[:i]
	}
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	s = strings.ReplaceAll(s, "|", "/")
	if len(s) > 220 {
		s = s[:217] + "..."
	}
	return s
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
