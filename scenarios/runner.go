package scenarios

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/topology"
)

// Run runs the scenarios and always returns one result per scenario, in list order. Scenarios
// that pull no lever run side by side (see schedule.go); each exclusive one has the topology to
// itself. A panic or an operational error fails that scenario (its partial facts kept); a
// scenario needing a lever the topology lacks is skipped with the reason; once ctx is
// cancelled the scenarios not yet started are skipped as "interrupted". env.Finished, when
// set, gets each result as soon as it is decided.
func Run(ctx context.Context, env *Env, list []Scenario) []evidence.ScenarioResult {
	out, _ := RunScheduled(ctx, env, list)
	return out
}

// Ran is how the scenarios of a run actually ran: side by side, alone (and why), or not at
// all (skipped before they started: a capability or lever missing, or interrupted).
type Ran struct {
	SideBySide int
	// Alone counts the scenarios that had the topology to themselves, by why: their own lever
	// or load, or the run's reason to run every scenario alone.
	Alone map[string]int
	// OwnTopology counts the scenarios that ran on a topology of their own (Env.OwnTopology),
	// side by side with the others.
	OwnTopology int
	NotRun      int
}

// aloneOwnLever is Ran.Alone's key for a scenario alone for its own lever or load.
const aloneOwnLever = "a lever or a load"

// String says it in the closing progress line's words: "10 side by side, 8 alone (a lever
// or a load)", "0 side by side, 18 alone (8 for a lever or a load, 10 because …)", or "17
// side by side, 13 on topologies of their own".
func (r Ran) String() string {
	alone := 0
	var whys []string
	for _, why := range slices.Sorted(maps.Keys(r.Alone)) {
		alone += r.Alone[why]
		if why == aloneOwnLever {
			whys = append([]string{fmt.Sprintf("%d for %s", r.Alone[why], why)}, whys...)
		} else {
			whys = append(whys, fmt.Sprintf("%d because %s", r.Alone[why], why))
		}
	}
	s := fmt.Sprintf("%d side by side", r.SideBySide)
	if r.OwnTopology > 0 {
		s += fmt.Sprintf(", %d on topologies of their own", r.OwnTopology)
	}
	if alone > 0 || r.OwnTopology == 0 {
		s += fmt.Sprintf(", %d alone", alone)
	}
	switch {
	case len(whys) == 1 && r.Alone[aloneOwnLever] > 0:
		s += " (" + aloneOwnLever + ")"
	case len(whys) > 0:
		s += " (" + strings.Join(whys, ", ") + ")"
	}
	if r.NotRun > 0 {
		s += fmt.Sprintf(", %d not run", r.NotRun)
	}
	return s
}

// RunScheduled is Run, and says how the scenarios ran (Ran).
func RunScheduled(ctx context.Context, env *Env, list []Scenario) ([]evidence.ScenarioResult, Ran) {
	out := make([]evidence.ScenarioResult, len(list))
	var caps topology.Capabilities
	if env != nil && env.Topo != nil {
		caps = env.Topo.Capabilities()
	}
	// Why each scenario must run alone: its own lever or load, or, below, the run's reason.
	// Those alone for their own lever or load run on a topology of their own when the run
	// brings such topologies up (Env.OwnTopology).
	why := make([]string, len(list))
	// A scenario that needs the whole machine runs after them all, alone on the run's topology.
	var own, onRun, last []int
	for i, sc := range list {
		if sc.Exclusive != "" {
			why[i] = aloneOwnLever
		}
		switch {
		case sc.Exclusive == "" || env == nil || env.OwnTopology == nil:
			onRun = append(onRun, i)
		case sc.WholeMachine:
			last = append(last, i)
		default:
			own = append(own, i)
		}
	}
	if !env.gateway().Caps.ForwardsScenarioHeader {
		reason := "gateway profile " + env.gateway().Name + " does not forward the scenario header"
		list = oneAtATime(list, reason+": provider calls cannot be told apart by scenario")
		for i := range why {
			if why[i] == "" {
				why[i] = reason
			}
		}
	}
	ran := Ran{Alone: map[string]int{}}
	var finishedMu sync.Mutex
	finished := func(i int, count func()) {
		finishedMu.Lock()
		defer finishedMu.Unlock()
		count()
		if env != nil && env.Finished != nil {
			env.Finished(out[i])
		}
	}
	var ownDone sync.WaitGroup
	ownDone.Add(1)
	go func() {
		defer ownDone.Done()
		if len(own) == 0 {
			return
		}
		// Longest first (Scenario.Lasts; the rest in catalogue order): the run ends when the
		// longest does, so it must not wait for a slot behind shorter ones.
		slices.SortStableFunc(own, func(a, b int) int { return cmp.Compare(list[b].Lasts, list[a].Lasts) })
		onOwnTopologies(env.OwnTopologies, own, func(i int) {
			var started bool
			out[i], started = runOnOwnTopology(ctx, env, list[i], caps)
			finished(i, func() {
				if started {
					ran.OwnTopology++
				} else {
					ran.NotRun++
				}
			})
		})
	}()
	onRunTopology := func(indices []int) {
		sub := make([]Scenario, len(indices))
		for j, i := range indices {
			sub[j] = list[i]
		}
		schedule(sub, func(j int, share func()) {
			i := indices[j]
			var started bool
			out[i], started = runScenario(ctx, env, list[i], caps, share)
			finished(i, func() {
				switch {
				case !started:
					ran.NotRun++
				case share == nil:
					ran.SideBySide++
				default:
					ran.Alone[why[i]]++
				}
			})
		})
	}
	onRunTopology(onRun)
	ownDone.Wait()
	onRunTopology(last)
	return out, ran
}

// OwnTopology is a topology brought up for one scenario (Env.OwnTopology): the scenario
// reads and pulls levers on Topo alone, and keeps its files in WorkDir.
type OwnTopology struct {
	Topo    topology.Topology
	WorkDir string
}

// runOnOwnTopology runs sc on a topology of its own: unless it is skipped before it starts
// (no topology is brought up for it then), Env.OwnTopology brings one up, sc runs on it, and
// the topology is collected and torn down once sc has finished. A topology that cannot be
// brought up skips sc with the reason; started is false then.
func runOnOwnTopology(ctx context.Context, env *Env, sc Scenario, caps topology.Capabilities) (_ evidence.ScenarioResult, started bool) {
	if res, skip := skippedBefore(ctx, env, sc, caps); skip {
		return res, false
	}
	own, done, err := env.OwnTopology(ctx, sc)
	if err != nil {
		res := newScenarioResult(sc)
		res.Status, res.Reason = evidence.Skipped, "its own topology could not be brought up: "+err.Error()
		if ctx.Err() != nil {
			res.Reason = "interrupted before it started (while its own topology came up)"
		}
		res.KeyFact = "skipped: " + firstLine(res.Reason)
		return env.progressed(sc.Name, res), false
	}
	defer done()
	e := *env
	e.Topo, e.WorkDir = own.Topo, own.WorkDir
	return runStarted(ctx, &e, sc, nil), true
}

// runScenario runs one scenario (or skips it before it starts: started is false) and turns its
// Result into the evidence's form.
func runScenario(ctx context.Context, env *Env, sc Scenario, caps topology.Capabilities, share func()) (_ evidence.ScenarioResult, started bool) {
	if res, skip := skippedBefore(ctx, env, sc, caps); skip {
		return res, false
	}
	return runStarted(ctx, env, sc, share), true
}

func newScenarioResult(sc Scenario) evidence.ScenarioResult {
	return evidence.ScenarioResult{Name: sc.Name, Summary: sc.Summary, Invariant: sc.Invariant,
		Started: time.Now().UTC(), Facts: []evidence.Fact{}, Assertions: []evidence.Assertion{}}
}

// skippedBefore is sc's result when it is skipped before it starts (skip true): ctx is
// cancelled, or the topology or gateway lacks what it needs.
func skippedBefore(ctx context.Context, env *Env, sc Scenario, caps topology.Capabilities) (_ evidence.ScenarioResult, skip bool) {
	res := newScenarioResult(sc)
	if err := ctx.Err(); err != nil {
		res.Status, res.Reason, res.KeyFact = evidence.Skipped, "interrupted before it started", "interrupted"
		return res, true
	}
	reason := missingNeed(sc.Needs, caps, env.gateway())
	if slices.Contains(sc.Needs, NeedScenarioRules) {
		if why := env.ownRulesWhy(sc.Name); why != "" {
			reason = strings.Join(slices.DeleteFunc([]string{reason, why}, func(s string) bool { return s == "" }), "; ")
		}
	}
	if reason != "" {
		res.Status, res.Reason, res.KeyFact = evidence.Skipped, reason, "skipped: "+reason
		return env.progressed(sc.Name, res), true
	}
	return res, false
}

// runStarted runs sc and turns its Result into the evidence's form.
func runStarted(ctx context.Context, env *Env, sc Scenario, share func()) evidence.ScenarioResult {
	res := newScenarioResult(sc)
	env.progress(sc.Name + ": running")
	start := time.Now()
	r := runOne(ctx, env, sc, share)
	res.Elapsed = time.Since(start)
	res.Facts = append(res.Facts, r.facts...)
	if len(r.faults) > 0 {
		res.Facts = append(res.Facts, evidence.Fact{Name: evidence.FaultWindowsFact, Value: r.faults})
	}
	res.Assertions = append(res.Assertions, r.assertions...)
	res.KeyFact = r.keyFact
	res.Status, res.Reason = r.verdict()
	res.Evidence = r.evidenceLevel(sc.BlackBox)
	if ctx.Err() != nil && res.Status != evidence.Skipped {
		// Cut short: the verdict was not reached, and checks that failed after the
		// interruption failed because of it. Everything recorded is kept.
		reason := "interrupted while running: partial facts and checks kept"
		if res.Status == evidence.Failed {
			reason += " (" + firstLine(res.Reason) + ")"
		}
		res.Status, res.Reason = evidence.Skipped, reason
	}
	if res.KeyFact == "" {
		res.KeyFact = string(res.Status)
		if res.Reason != "" {
			res.KeyFact = firstLine(res.Reason)
		}
	}
	if res.Evidence != "" {
		res.KeyFact = "[black-box] " + res.KeyFact
	}
	return env.progressed(sc.Name, res)
}

func (env *Env) progressed(name string, res evidence.ScenarioResult) evidence.ScenarioResult {
	msg := fmt.Sprintf("%s: %s (%s)", name, res.Status, res.Elapsed.Round(time.Millisecond))
	if res.Reason != "" {
		msg += ": " + firstLine(res.Reason)
	}
	env.progress(msg)
	return res
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}

// runOne runs one scenario under a deadline derived from the profile and turns a panic into
// a failure that keeps the partial facts.
func runOne(ctx context.Context, env *Env, sc Scenario, share func()) (r *Result) {
	e := env.forScenario(sc.Name)
	e.share = share
	sctx, cancel := context.WithTimeout(ctx, scenarioDeadline(e.Profile))
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			r = e.current
			if r == nil {
				r = NewResult()
			}
			r.Error(fmt.Errorf("panic: %v\n%s", p, trimStack(debug.Stack())))
		}
	}()
	if sc.Run == nil {
		return NewResult().Error(errors.New("scenario has no Run function"))
	}
	r = sc.Run(sctx, e)
	if r == nil {
		r = e.current
		if r == nil {
			r = NewResult()
		}
		r.Error(errors.New("scenario returned no result"))
	}
	if err := sctx.Err(); err != nil && ctx.Err() == nil && !r.Failed() {
		r.Error(fmt.Errorf("scenario deadline %s exceeded: %w", scenarioDeadline(e.Profile), err))
	}
	return r
}

func trimStack(b []byte) string {
	lines := strings.Split(string(b), "\n")
	if len(lines) > 24 {
		lines = lines[:24]
	}
	return strings.Join(lines, "\n")
}

// oneAtATime is list with every scenario exclusive for reason (those already exclusive keep
// theirs): the scenarios' provider-side evidence needs the topology to itself.
func oneAtATime(list []Scenario, reason string) []Scenario {
	out := slices.Clone(list)
	for i := range out {
		if out[i].Exclusive == "" {
			out[i].Exclusive = reason
		}
	}
	return out
}
