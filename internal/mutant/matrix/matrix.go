// Package matrix runs the qualification against deliberately broken gateways and writes the
// mutation matrix (MUTANTS.md): which scenario catches which defect, seen white-box (quotaqual's
// gateway with its quota inspection) and black-box (the same gateway through a profile that
// offers none, as a foreign gateway would be qualified).
//
// The mutants come from two places, kept apart by origin because they measure different things:
//   - the catalogue (package mutant): defects written beside the scenarios, compiled into a
//     binary built with -tags quotaqual_mutants and armed by QUOTAQUAL_MUTANT in the gateway
//     process; they measure what the scenarios' authors thought of;
//   - the blind set (internal/mutant/blind): defects written as patches against the gateway and
//     ledger code by a reviewer who had read only the contract and that code — never the
//     scenarios or the catalogue. Each is built into a gateway binary of its own and qualified
//     through a gateway profile that launches it, by an unpatched harness, exactly as a foreign
//     gateway is; they measure what the qualification catches of defects nobody here listed.
//
// It lives apart from package mutant, which the gateway imports for its switch, so that the
// gateway never links the evidence package this runner reads results with.
package matrix

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/mutant"
	"github.com/quotaqual/quotaqual/topology"
)

// Origin says who wrote a mutant.
type Origin string

const (
	// OriginCatalogue: written beside the scenarios (package mutant's hooks).
	OriginCatalogue Origin = "catalogue"
	// OriginBlind: written from the contract alone, as a patch (internal/mutant/blind).
	OriginBlind Origin = "blind"
)

// Mutant is one broken variant of either origin.
type Mutant struct {
	Name   string
	Origin Origin
	Layer  string // where the broken code sits: gateway or ledger
	Class  string // the promise it breaks
	Breaks string // what it does wrong, one sentence
	// CaughtBy names the scenarios expected to fail against it (catalogue mutants only: the
	// blind set's writer did not know the scenarios).
	CaughtBy []string
	Note     string
	// Patch is the patch file of a blind mutant (a path the runner can read).
	Patch string
}

// Catalogue is package mutant's catalogue as matrix mutants.
func Catalogue() []Mutant {
	out := make([]Mutant, 0, len(mutant.Catalogue))
	for _, c := range mutant.Catalogue {
		out = append(out, Mutant{Name: string(c.Name), Origin: OriginCatalogue, Layer: c.Layer, Class: c.Class,
			Breaks: c.Breaks, CaughtBy: c.CaughtBy, Note: c.Note})
	}
	return out
}

// View is how the gateway is qualified: through which gateway profile.
type View struct {
	Name string // white-box or black-box
	// Profile is the gateway profile file of the runs ("" = quotaqual's shipped default).
	Profile string
}

// The two views the matrix reports.
const (
	WhiteBox = "white-box"
	BlackBox = "black-box"
)

// DefaultBlackBoxProfile is quotaqual's own gateway declared without quota inspection.
const DefaultBlackBoxProfile = "undertest/testdata/quotaqual-blackbox.yaml"

// RunOptions say how to run the qualification against a mutant.
type RunOptions struct {
	// Tagged is a quotaqual binary built with -tags quotaqual_mutants: the harness (and the
	// gateway) of every catalogue run.
	Tagged string
	// Plain is an unmutated quotaqual binary: the harness of every blind run, whose gateway is
	// the patched binary a generated profile launches.
	Plain string
	// PlainGateway is the gateway of the patch path's control run (default Plain): the same
	// binary as Plain where Plain is a wrapper around it (say, one that takes a lock first).
	PlainGateway string
	Topology     string   // the engine (default netns)
	Views        []View   // default: white-box and black-box
	Scenarios    []string // only these scenarios (default: all)
	// Root is the repository the blind patches apply to (default: the working directory).
	Root        string
	EvidenceDir string // bundle root; "" = a temporary directory, removed afterwards
	Log         io.Writer
}

func (o RunOptions) views() []View {
	if len(o.Views) > 0 {
		return o.Views
	}
	return []View{{Name: WhiteBox}, {Name: BlackBox, Profile: DefaultBlackBoxProfile}}
}

// Run is one qualification run: the control (no mutant) or one mutant, in one view.
type Run struct {
	Status  map[string]evidence.Status
	Reasons map[string]string // why each scenario that did not pass failed or skipped (first clause)
	// Evidence is each scenario's evidence level ("" the full one, else "black-box: …").
	Evidence map[string]string
	ExitCode int
	Error    string // the run's own error (topology, usage, build), not a scenario's
	Elapsed  time.Duration
}

// Caught lists the scenarios that failed, in the given order.
func (r Run) Caught(order []string) []string {
	var out []string
	for _, s := range order {
		if r.Status[s] == evidence.Failed {
			out = append(out, s)
		}
	}
	return out
}

// Row is one mutant (or the control, Mutant.Name "") and its run in each view.
type Row struct {
	Mutant Mutant
	Runs   map[string]Run // by view name
}

// Matrix is the controls and one row per mutant.
type Matrix struct {
	Started   time.Time
	Wall      time.Duration
	Topology  string
	Views     []View
	Scenarios []string // in the qualification's order
	// Controls: the unmutated gateway in each view, launched both ways a mutant is (the
	// tagged harness's own gateway; the plain harness with a generated profile).
	Controls map[string]Run // by "<view>" and "<view> (patch path)"
	Rows     []Row
}

// controlKey names a control run.
func controlKey(view string, patchPath bool) string {
	if patchPath {
		return view + " (patch path)"
	}
	return view
}

// runQualification runs `bin run --json` with the extra environment and gateway profile and
// reads each scenario's result. A run that produced no JSON is an error.
func runQualification(ctx context.Context, o RunOptions, bin, gatewayProfile string, env []string) (Run, error) {
	run := Run{Status: map[string]evidence.Status{}, Reasons: map[string]string{}, Evidence: map[string]string{}}
	dir := o.EvidenceDir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "quotaqual-mutants-")
		if err != nil {
			return run, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	topo := o.Topology
	if topo == "" {
		topo = topology.EngineNetns
	}
	// --require none: the matrix lists a skip as such ("s"), and a skip must not make a
	// control's or a mutant's run read as a failure.
	args := []string{"run", "--json", "--topology", topo, "--evidence-dir", dir, "--require", "none"}
	if gatewayProfile != "" {
		args = append(args, "--gateway", gatewayProfile)
	}
	for _, s := range o.Scenarios {
		args = append(args, "--scenario", s)
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(withoutMutant(os.Environ()), env...)
	if o.Root != "" {
		cmd.Dir = o.Root
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	run.Elapsed = time.Since(start)
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		run.ExitCode = ee.ExitCode()
	default:
		return run, fmt.Errorf("running %s: %w", bin, err)
	}
	var out struct {
		Error   string                    `json:"error"`
		Results []evidence.ScenarioResult `json:"results"`
	}
	if jerr := json.Unmarshal(stdout.Bytes(), &out); jerr != nil {
		return run, fmt.Errorf("no JSON result (exit %d): %v; stderr: %s", run.ExitCode, jerr, tail(stderr.String(), 600))
	}
	run.Error = out.Error
	for _, r := range out.Results {
		run.Status[r.Name] = r.Status
		run.Evidence[r.Name] = r.Evidence
		if r.Status != evidence.Passed {
			run.Reasons[r.Name] = firstClause(r.Reason)
		}
	}
	return run, nil
}

func withoutMutant(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if !strings.HasPrefix(kv, mutant.EnvVar+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// RunCatalogued runs the qualification against a catalogue mutant (name "" for none) in view:
// the tagged binary is harness and gateway, the mutant armed in the gateway processes only.
func RunCatalogued(ctx context.Context, o RunOptions, name string, v View) (Run, error) {
	if o.Tagged == "" {
		return Run{}, errors.New("no tagged binary: build one with -tags quotaqual_mutants (make mutants does)")
	}
	var env []string
	if name != "" {
		env = []string{mutant.EnvVar + "=" + name}
	}
	return runQualification(ctx, o, o.Tagged, v.Profile, env)
}

// RunPatched qualifies gateway binary gw (a patched build, or the plain binary for the
// control) in view v: the plain harness launches it through v's profile with the binary
// replaced, so nothing of the patch runs in the harness.
func RunPatched(ctx context.Context, o RunOptions, gw string, v View, workDir string) (Run, error) {
	if o.Plain == "" {
		return Run{}, errors.New("no plain binary: build bin/quotaqual (make build) to be the harness of the blind runs")
	}
	profile, err := ProfileLaunching(o.Root, v.Profile, gw, workDir)
	if err != nil {
		return Run{}, err
	}
	return runQualification(ctx, o, o.Plain, profile, nil)
}

// Run runs the controls, then every mutant in every view, one run after another: the runs
// share the machine's cores, and a parallel run would turn load into failures that are not
// the mutant's. A blind mutant whose patch no longer applies or builds is a row with that
// error in every view (the patch must be ported), never a silent skip.
func RunAll(ctx context.Context, o RunOptions, mutants []Mutant, scenarioOrder []string) (Matrix, error) {
	m := Matrix{Started: time.Now().UTC(), Topology: o.Topology, Views: o.views(), Scenarios: scenarioOrder,
		Controls: map[string]Run{}}
	if m.Topology == "" {
		m.Topology = topology.EngineNetns
	}
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", args...)
		}
	}
	work, err := os.MkdirTemp("", "quotaqual-matrix-")
	if err != nil {
		return m, err
	}
	defer os.RemoveAll(work)
	hasBlind := false
	for _, mu := range mutants {
		hasBlind = hasBlind || mu.Origin == OriginBlind
	}
	for _, v := range m.Views {
		logf("control (%s) …", v.Name)
		c, err := RunCatalogued(ctx, o, "", v)
		if err != nil {
			return m, fmt.Errorf("control (%s): %w", v.Name, err)
		}
		m.Controls[controlKey(v.Name, false)] = c
		logf("control (%s): caught %v, exit %d in %s", v.Name, c.Caught(scenarioOrder), c.ExitCode, c.Elapsed.Round(time.Millisecond))
		if hasBlind {
			logf("control (%s, patch path) …", v.Name)
			gw := o.PlainGateway
			if gw == "" {
				gw = o.Plain
			}
			c, err := RunPatched(ctx, o, gw, v, work)
			if err != nil {
				return m, fmt.Errorf("control (%s, patch path): %w", v.Name, err)
			}
			m.Controls[controlKey(v.Name, true)] = c
			logf("control (%s, patch path): caught %v, exit %d in %s", v.Name, c.Caught(scenarioOrder), c.ExitCode, c.Elapsed.Round(time.Millisecond))
		}
	}
	for i, mu := range mutants {
		row := Row{Mutant: mu, Runs: map[string]Run{}}
		var gw string
		var buildErr error
		if mu.Origin == OriginBlind {
			gw = fmt.Sprintf("%s/gateway-%02d", work, i)
			t0 := time.Now()
			buildErr = BuildPatched(ctx, o.Root, mu.Patch, gw)
			logf("[%d/%d] %s: built in %s", i+1, len(mutants), mu.Name, time.Since(t0).Round(time.Second))
		}
		for _, v := range m.Views {
			logf("[%d/%d] %s (%s) …", i+1, len(mutants), mu.Name, v.Name)
			var run Run
			switch {
			case buildErr != nil:
				run = Run{Error: buildErr.Error()}
			case mu.Origin == OriginBlind:
				run, err = RunPatched(ctx, o, gw, v, work)
			default:
				run, err = RunCatalogued(ctx, o, mu.Name, v)
			}
			if err != nil {
				run = Run{Error: err.Error()}
			}
			if ctx.Err() != nil {
				return m, ctx.Err()
			}
			row.Runs[v.Name] = run
			logf("[%d/%d] %s (%s): caught by %v (%s)%s", i+1, len(mutants), mu.Name, v.Name, run.Caught(scenarioOrder),
				run.Elapsed.Round(time.Millisecond), errorSuffix(run.Error))
		}
		if gw != "" {
			os.Remove(gw)
		}
		m.Rows = append(m.Rows, row)
	}
	m.Wall = time.Since(m.Started)
	return m, nil
}

func errorSuffix(e string) string {
	if e == "" {
		return ""
	}
	return "; error: " + firstClause(e)
}

// ControlsPassed reports whether every control run failed no scenario and had no error of its
// own (a skip is not a pass, but neither is it a failure: it is listed).
func (m Matrix) ControlsPassed() bool {
	for _, c := range m.Controls {
		if c.Error != "" || len(c.Caught(m.Scenarios)) > 0 {
			return false
		}
	}
	return len(m.Controls) > 0
}

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
