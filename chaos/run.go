// Package chaos is `quotaqual chaos`: open-loop traffic from many subjects across every
// gateway while a seeded random schedule of faults runs, judged afterwards from the recorded
// history alone (the client's requests, the faults as pulled and released, the providers' call
// logs) — never from what a scenario expected a fault to break. A failing schedule is shrunk
// to a few faults that still fail, by re-running the qualification for each candidate.
//
// Files: schedule.go draws a seed's schedule, levers.go is the fault catalogue (topology.Lever
// values), traffic.go the client and its load, history.go what is recorded, checker.go the
// judgement, shrink.go delta debugging, bundle.go the evidence; this file runs it all.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
	_ "github.com/quotaqual/quotaqual/topology/dockerengine" // the engines chaos runs on
	_ "github.com/quotaqual/quotaqual/topology/netnsengine"
	"github.com/quotaqual/quotaqual/undertest"
)

// Options are what `quotaqual chaos` takes.
type Options struct {
	Seed     int64
	Duration time.Duration // the span the schedule's faults lie in
	Gateways int           // 0: topology.DefaultGateways
	Rate     int           // requests per second of the load; 0: DefaultRate
	Levers   []string      // lever names; empty: the whole catalogue
	// StoreReplication is how the gateways write to the replicated store group in a run that
	// names the store-failover lever (which puts them on the group): acknowledged (default) or
	// async.
	StoreReplication string
	// ShrinkRuns bounds the candidate runs spent shrinking a failing schedule; 0: DefaultShrinkRuns,
	// negative: do not shrink.
	ShrinkRuns  int
	Engine      string // the topology engine: netns or docker (Engines)
	Binary      string // the quotaqual binary to run as gateway and provider; default os.Executable
	RunID       string // empty: generated
	EvidenceDir string // default ./quotaqual-evidence
	Progress    func(string)

	// Gateway is the gateway under test (--gateway, loaded by qualify.Prepare); nil:
	// quotaqual's own. Its profile decides which levers the run can pull (Plan.Gateway), the
	// answers the checker reads as a denial or a store failure, and the request id it echoes.
	Gateway *undertest.Profile
	// GatewayRef is what --gateway named (a profile file or a shipped name), for reproducing.
	GatewayRef string
	// Rule is the rule the subjects share (RuleFor the gateway); zero: Profile().
	Rule deployment.Profile

	// GatewayTestEnv is added to the gateways' environment: tests arm a mutant with it (see
	// internal/mutant). Empty in every real run.
	GatewayTestEnv []string
}

// Defaults and limits.
const (
	DefaultRate       = 40
	DefaultShrinkRuns = 10
	MinDuration       = 3 * time.Second
	MaxDuration       = 5 * time.Minute
	// tail is how long the load goes on after the schedule's span, so the last release is
	// followed by traffic that shows the recovery.
	tail = 3 * time.Second
	// activeSubjects are the subjects in use at once; each group of them takes a slice of
	// the load, and every subject gets about perSubject requests, enough to spend its budget
	// several times over.
	activeSubjects = 8
	perSubject     = 16
	// loadSubjects is how many load subjects (deployment.LoadSubject) the chaos run's users
	// include besides the three applications: as many as sustained-load's, so a random fault
	// schedule meets an open-loop load of many budgets at once.
	loadSubjects = 200
	// recoveryBound is how soon after a fault's release every gateway it touched must decide
	// again (a 200 or a 429).
	recoveryBound = 10 * time.Second
)

// Validate checks the options before anything starts, naming the flag and the fix.
func (o *Options) Validate() error {
	if o.Duration < MinDuration || o.Duration > MaxDuration {
		return fmt.Errorf("--duration %s is out of range: use %s to %s", o.Duration, MinDuration, MaxDuration)
	}
	if o.Rate == 0 {
		o.Rate = DefaultRate
	}
	if o.Rate < 5 || o.Rate > 200 {
		return fmt.Errorf("--rate %d is out of range: use 5 to 200 requests a second", o.Rate)
	}
	if _, err := topology.ValidateGateways(o.Gateways); err != nil {
		return err
	}
	if _, err := kindsOf(o.Levers); err != nil {
		return err
	}
	mode, err := topology.StoreReplication(o.StoreReplication)
	if err != nil {
		return fmt.Errorf("--store-replication: %w", err)
	}
	o.StoreReplication = mode
	if o.StoreReplication == deployment.ReplicationAsync && !o.storeGroup() {
		return fmt.Errorf("--store-replication async needs the replicated store group: add --lever %s", topology.StoreFailover.Name())
	}
	if o.ShrinkRuns == 0 {
		o.ShrinkRuns = DefaultShrinkRuns
	}
	if !slices.Contains(Engines, o.Engine) {
		return fmt.Errorf("--topology %s: chaos runs on the %s topologies only (their levers and the many fresh topologies a shrink needs are proven there); use --topology %s",
			o.Engine, strings.Join(Engines, " and "), strings.Join(Engines, " or --topology "))
	}
	if o.EvidenceDir == "" {
		o.EvidenceDir = "quotaqual-evidence"
	}
	return nil
}

// scenarioName labels the chaos run's users ("<subject>@chaos") and its provider calls.
const scenarioName = "chaos"

// newDeployment is the chaos run's deployment: one scenario, scenarioName, with its own
// subjects, declared here as a scenario declares its own (scenarios' Scenario.Subjects).
func newDeployment(runID string, p deployment.Profile) (*deployment.Deployment, error) {
	return deployment.NewDeployment(runID, p, []deployment.ScenarioSubjects{{Name: scenarioName, Subjects: deployment.LoadSubjects(loadSubjects)}})
}

// Engines are the topology engines chaos runs on. A lever an engine cannot host in a run is
// left out of its schedule with the engine's reason (Unhosted), never dropped silently.
var Engines = []string{topology.EngineNetns, topology.EngineDocker}

// Unhosted asks each catalogue lever whether the run's engine can host it (Lever.Available on
// a topology built for spec, not brought up: docker answers from the spec and the host — root,
// nsenter, nft — so the answer is known before the schedule is drawn and the same for every
// attempt). A lever it cannot host maps to the engine's reason. netns is not asked: it hosts
// every catalogue lever on the run's single store or store group (the first attempt's check
// after Up still guards it), and building a netns topology opens the harness's namespace,
// which nothing would close.
func Unhosted(engine string, spec topology.Spec) (map[string]string, error) {
	if engine == topology.EngineNetns {
		return nil, nil
	}
	topo, err := topology.New(engine, spec)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, k := range Catalogue {
		if ok, why := k.Lever.Available(topo); !ok {
			out[k.Lever.Name()] = "the " + engine + " engine cannot host it: " + why
		}
	}
	return out, nil
}

// Profile is the rule the chaos run's subjects share: the quick profile's capacity, reservation,
// lease and store timeout, with a window longer than any run, so that nothing leaves a window
// while the checker judges it (the ledger model's assumption) and each subject's budget is
// spent once and for all.
func Profile() deployment.Profile {
	p, _ := deployment.ProfileByName("quick")
	p.Name = "chaos"
	p.Window = 10 * time.Minute
	return p
}

// RuleFor is the chaos rule for gateway gw (nil: quotaqual's own): Profile(), its window
// replaced, when gw's engine cannot express ten minutes, by the shortest window it expresses
// that is as long (an envoy ratelimit unit: an hour). A gateway that expresses none is refused.
func RuleFor(gw *undertest.Profile) (deployment.Profile, error) {
	p := Profile()
	if gw == nil || gw.ExpressesWindow(p.Window) {
		return p, nil
	}
	var best time.Duration
	for _, s := range gw.Expect.Admission.Windows {
		if d, err := time.ParseDuration(s); err == nil && d >= p.Window && (best == 0 || d < best) {
			best = d
		}
	}
	if best == 0 {
		return p, fmt.Errorf("chaos needs a window of at least %s (nothing may leave a window while the checker judges it), and the profile's engine expresses only %s",
			p.Window, strings.Join(gw.Expect.Admission.Windows, ", "))
	}
	p.Window = best
	return p, nil
}

// rule is the rule the run's subjects share.
func (o Options) rule() deployment.Profile {
	if o.Rule.Name == "" {
		return Profile()
	}
	return o.Rule
}

// Bounds are the checker's bounds for profile p.
func BoundsOf(p deployment.Profile) Bounds {
	return Bounds{Capacity: p.Capacity, Estimate: p.Estimate, Window: p.Window, Recovery: recoveryBound,
		LinearizeTimeout: 5 * time.Second}
}

// Attempt is one run of one schedule on a topology of its own.
type Attempt struct {
	RunID    string        `json:"run_id"`
	Schedule Schedule      `json:"schedule"`
	History  History       `json:"history"`
	Verdict  Verdict       `json:"verdict"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	Subjects int           `json:"subjects"`
}

// Report is what a chaos run produced.
type Report struct {
	Seed     int64    `json:"seed"`
	Schedule Schedule `json:"schedule"`
	First    *Attempt `json:"first"`
	Shrunk   *Shrunk  `json:"shrunk,omitempty"`
	Final    *Attempt `json:"shrunk_attempt,omitempty"` // the last failing run of the shrunk schedule
	// FaultChecks, when the schedule shrank to no fault, names the checks that failed only
	// with faults and the schedule shrunk for them.
	FaultChecks *FaultChecks  `json:"fault_checks,omitempty"`
	Elapsed     time.Duration `json:"elapsed_ns"`
	BundleDir   string        `json:"bundle_dir"`
	// What else the command was given that a reproduction needs: the load's rate, the number
	// of gateways, the gateway profile as --gateway named it.
	Rate       int    `json:"rate_per_s"`
	Gateways   int    `json:"gateways"`
	GatewayRef string `json:"gateway_ref,omitempty"`
	Engine     string `json:"engine,omitempty"`
}

// Failed reports whether the seed's schedule failed the checker.
func (r Report) Failed() bool { return r.First != nil && r.First.Verdict.Failed }

// Run draws the seed's schedule, runs it, judges it and, when it fails, shrinks it; the
// bundle gets the schedule, the history, the verdict and the shrunk schedule. The topology is
// brought up afresh for every run (the first and each shrinking candidate), so no run sees
// another's budgets or faults.
func Run(ctx context.Context, o Options) (Report, error) {
	if err := o.Validate(); err != nil {
		return Report{}, err
	}
	started := time.Now()
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return Report{}, fmt.Errorf("find the quotaqual binary to run as gateway and provider: %w", err)
		}
		o.Binary = exe
	}
	if o.RunID == "" {
		o.RunID = topology.NewRunID()
	}
	gateways := topology.GatewayNames(o.Gateways)
	if o.Gateways == 0 {
		gateways = topology.GatewayNames(topology.DefaultGateways)
	}
	// One set of secrets for the whole chaos run (every attempt's deployment shares it), so
	// the bundle's redaction and canary scan cover every attempt.
	secrets, err := newDeployment(o.RunID, o.rule())
	if err != nil {
		return Report{}, err
	}
	unhosted, err := Unhosted(o.Engine, o.spec(o.RunID, os.TempDir(), secrets, o.storeGroup()))
	if err != nil {
		return Report{}, err
	}
	sched, err := Generate(Plan{Seed: o.Seed, Duration: o.Duration, Gateways: gateways, Levers: o.Levers, StoreGroup: o.storeGroup(),
		Replication: replicationOf(o), Gateway: o.Gateway, Unhosted: unhosted})
	if err != nil {
		return Report{}, err
	}
	rep := Report{Seed: o.Seed, Schedule: sched, Rate: o.Rate, Gateways: len(gateways), GatewayRef: o.GatewayRef, Engine: o.Engine}
	b, err := newBundle(o, secrets)
	if err != nil {
		return rep, err
	}
	rep.BundleDir = b.w.Dir()
	o.progress("seed %d: %s", o.Seed, sched)

	first, err := attempt(ctx, o, secrets, o.RunID, sched, b)
	if err != nil {
		rep.Elapsed = time.Since(started)
		_ = b.finish(rep, err)
		return rep, err
	}
	rep.First = &first
	o.progress("seed %d: %s in %s", o.Seed, verdictLine(first.Verdict), first.Elapsed.Round(time.Millisecond))

	if first.Verdict.Failed && o.ShrinkRuns > 0 && len(sched.Faults) > 0 {
		var bare *Attempt // the run without any fault, when shrinking made one
		// tester runs a candidate, judged failing when fails says so of its verdict; last
		// keeps the smallest failing attempt.
		tester := func(last **Attempt, fails func(Verdict) bool) Tester {
			return func(c Schedule) (bool, error) {
				a, err := attempt(ctx, o, secrets, topology.NewRunID(), c, nil)
				if err != nil {
					return false, err
				}
				o.progress("shrinking: %d faults: %s (%s)", len(c.Faults), verdictLine(a.Verdict), a.Elapsed.Round(time.Millisecond))
				if len(c.Faults) == 0 {
					bare = &a
				}
				failed := fails(a.Verdict)
				if failed && (*last == nil || len(c.Faults) <= len((*last).Schedule.Faults)) {
					*last = &a
				}
				return failed, nil
			}
		}
		var last *Attempt
		shrunk := Shrink(sched, first.Verdict.Exposing(), o.ShrinkRuns, tester(&last, func(v Verdict) bool { return v.Failed }))
		rep.Shrunk = &shrunk
		if last != nil && keyOf(last.Schedule.Faults) == keyOf(shrunk.Schedule.Faults) {
			rep.Final = last
		}
		o.progress("seed %d shrunk in %d runs to %s", o.Seed, shrunk.Runs, shrunk.Schedule)
		if bare != nil && bare.Verdict.Failed {
			rep.faultNeeded(ctx, o, first, *bare, tester)
		}
	}
	rep.Elapsed = time.Since(started)
	return rep, b.finish(rep, nil)
}

// FaultChecks is what a history that fails on a whole topology still owes its faults: the
// checks it failed only with them, and the schedule shrunk to the faults those checks need.
type FaultChecks struct {
	// WithoutFaults are the checks the run without any fault failed.
	WithoutFaults []string `json:"failed_without_faults"`
	// Checks are the first run's failed checks that the run without faults passed, each with
	// the faults the first run named for it.
	Checks []Check `json:"need_a_fault"`
	// Shrunk is the schedule shrunk to a run that fails one of Checks (nil: every failed
	// check fails without a fault, or no run was left in the budget).
	Shrunk *Shrunk  `json:"shrunk,omitempty"`
	Final  *Attempt `json:"shrunk_attempt,omitempty"`
}

// faultNeeded: the schedule shrank to no fault, so the seed's failure is not the faults' —
// but some of its checks may still have needed them (a 200 while the store was down needs the
// store down). Those checks are named with their faults, and the schedule is shrunk again, on
// the budget left, to what fails one of them. The run without faults is known: not run again.
func (rep *Report) faultNeeded(ctx context.Context, o Options, first Attempt, bare Attempt, tester func(**Attempt, func(Verdict) bool) Tester) {
	fc := &FaultChecks{WithoutFaults: bare.Verdict.FailedChecks()}
	var exposing []int
	for _, c := range first.Verdict.Checks {
		if !c.OK && !slices.Contains(fc.WithoutFaults, c.Name) {
			fc.Checks = append(fc.Checks, c)
			for _, n := range c.ExposedBy {
				if !slices.Contains(exposing, n) {
					exposing = append(exposing, n)
				}
			}
		}
	}
	rep.FaultChecks = fc
	left := o.ShrinkRuns - rep.Shrunk.Runs
	if len(fc.Checks) == 0 || left <= 0 || ctx.Err() != nil {
		return
	}
	needs := func(v Verdict) bool {
		for _, c := range v.Checks {
			if !c.OK && slices.ContainsFunc(fc.Checks, func(n Check) bool { return n.Name == c.Name }) {
				return true
			}
		}
		return false
	}
	sort.Ints(exposing)
	var last *Attempt
	s := shrinkKnowing(rep.Schedule, exposing, left, map[string]bool{keyOf(nil): false}, tester(&last, needs))
	fc.Shrunk = &s
	if last != nil && keyOf(last.Schedule.Faults) == keyOf(s.Schedule.Faults) {
		fc.Final = last
	}
	o.progress("seed %d: the checks that need a fault shrunk in %d runs to %s", o.Seed, s.Runs, s.Schedule)
}

// storeGroup: the run's gateways decide on the replicated store group, which a run gets when
// its levers name the store failover (the default set does not, and leaves the failover out
// with that reason).
func (o Options) storeGroup() bool { return slices.Contains(o.Levers, topology.StoreFailover.Name()) }

func replicationOf(o Options) string {
	if !o.storeGroup() {
		return ""
	}
	return o.StoreReplication
}

func (o Options) progress(format string, args ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, args...))
	}
}

func verdictLine(v Verdict) string {
	if !v.Failed {
		return "passed"
	}
	return fmt.Sprintf("FAILED %v (faults %v)", v.FailedChecks(), v.Exposing())
}

// attempt brings a topology up, runs sched on it with the load, tears it down and judges the
// history. b, when set, receives the requests and the component logs.
func attempt(ctx context.Context, o Options, secrets *deployment.Deployment, runID string, sched Schedule, b *bundle) (Attempt, error) {
	start := time.Now()
	a := Attempt{RunID: runID, Schedule: sched}
	p := o.rule()
	dep, err := newDeployment(runID, p)
	if err != nil {
		return a, err
	}
	dep.ValkeyPassword, dep.Credentials = secrets.ValkeyPassword, secrets.Credentials
	dep.GatewayTestEnv = o.GatewayTestEnv
	wd, err := topology.NewWorkDir("quotaqual-chaos-", runID)
	if err != nil {
		return a, err
	}
	defer wd.Remove()
	topo, err := topology.New(o.Engine, o.spec(runID, wd.Path, dep, sched.StoreGroup))
	if err != nil {
		return a, err
	}
	upCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	err = topo.Up(upCtx)
	cancel()
	defer func() { _, _ = topo.Down(context.Background()) }()
	if err != nil {
		return a, fmt.Errorf("bring the %s topology up: %w", o.Engine, err)
	}
	for _, f := range sched.Faults {
		k, _ := KindByName(f.Lever)
		if ok, why := k.Lever.Available(topo); !ok {
			return a, fmt.Errorf("lever %s is not available on %s: %s: %w", f.Lever, topo.Engine(), why, topology.ErrUnsupported)
		}
	}
	if sched.StoreGroup {
		if err := onStoreGroup(ctx, topo); err != nil {
			return a, err
		}
	}
	loadFor := sched.Duration + tail
	if !waitOutEpochBoundary(ctx, o, p.Window, loadFor+drainSpan) {
		return a, ctx.Err()
	}
	subjects := subjectsFor(o.Rate, loadFor)
	a.Subjects = len(subjects)
	c := newClient(topo, dep, o.Gateway)
	a.History = execute(ctx, topo, c, sched, Load{Rate: o.Rate, For: loadFor, Subjects: subjects})
	if sched.StoreGroup {
		a.History.StoreGroup, a.History.Replication = true, o.StoreReplication
	}
	if b != nil {
		b.collect(topo, wd.Path)
	}
	a.Verdict = Judge(a.History, BoundsOf(p))
	a.Elapsed = time.Since(start)
	return a, nil
}

// spec is the topology of one attempt (and of the engine's answers to Unhosted).
func (o Options) spec(runID, workDir string, dep *deployment.Deployment, storeGroup bool) topology.Spec {
	return topology.Spec{RunID: runID, WorkDir: workDir, Binary: o.Binary, Deployment: dep,
		Gateway: o.Gateway, Gateways: o.Gateways, WithoutStoreGroup: !storeGroup, StoreReplication: o.StoreReplication}
}

// drainSpan bounds how long the drain and the call-log reads take after the load.
const drainSpan = time.Minute

// waitOutEpochBoundary: a gateway whose fixed window starts at multiples of the window since
// the epoch (envoy ratelimit's hour) resets every budget at the boundary, and a history that
// straddles it is one the ledger model (nothing leaves a window) cannot judge. So a run that
// would cross the next boundary waits until it has passed, saying so. False: ctx ended.
func waitOutEpochBoundary(ctx context.Context, o Options, window, span time.Duration) bool {
	boundary, wait := epochBoundaryWithin(o.Gateway, window, span, time.Now())
	if !wait {
		return true
	}
	o.progress("waiting %s for the %s window boundary at %s to pass (gateway %s's fixed window starts at multiples of %s since the epoch)",
		time.Until(boundary).Round(time.Second), window, boundary.UTC().Format("15:04:05"), o.Gateway.Name, window)
	return sleepUntil(ctx, boundary.Add(time.Second))
}

// epochBoundaryWithin reports the next boundary of gw's epoch-anchored fixed window, and
// whether it falls within span from now (never for a sliding or first-hit window, or ours).
func epochBoundaryWithin(gw *undertest.Profile, window, span time.Duration, now time.Time) (time.Time, bool) {
	if gw == nil || gw.Expect.Admission.Window != undertest.WindowFixed ||
		(gw.Expect.Admission.Anchor != "" && gw.Expect.Admission.Anchor != undertest.AnchorEpoch) {
		return time.Time{}, false
	}
	boundary := now.Truncate(window).Add(window)
	return boundary, !now.Add(span).Before(boundary)
}

// onStoreGroup moves every gateway onto the replicated store group (topology.UseStoreGroup,
// not undone: the topology is torn down after the run), once the Sentinels know every node.
func onStoreGroup(ctx context.Context, topo topology.Topology) error {
	if ok, why := topology.UseStoreGroup.Available(topo); !ok {
		return fmt.Errorf("the %s lever needs the replicated store group: %s: %w", topology.StoreFailover.Name(), why, topology.ErrUnsupported)
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := topo.(topology.StoreGroup).WaitStoreReady(sctx); err != nil {
		return fmt.Errorf("waiting for the store group's Sentinels: %w", err)
	}
	gateways := topo.Gateways()
	errs := make([]error, len(gateways))
	var wg sync.WaitGroup
	for i, g := range gateways {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := topology.UseStoreGroup.Inject(sctx, topo, topology.Target{Host: g}); err != nil {
				errs[i] = fmt.Errorf("restarting %s on the replicated store group: %w", g, err)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// subjectsFor is how many subjects a load of rate for d spreads over: about perSubject
// requests each, in groups of activeSubjects, within the deployment's load subjects.
func subjectsFor(rate int, d time.Duration) []string {
	n := int(float64(rate)*d.Seconds()) / perSubject
	n = max(activeSubjects, min(n-n%activeSubjects, loadSubjects))
	out := make([]string, n)
	for i := range out {
		out[i] = deployment.LoadSubject(i)
	}
	return out
}

// execute runs the load and the schedule side by side, then drains every subject, then reads
// the providers' call logs.
func execute(ctx context.Context, topo topology.Topology, c *client, sched Schedule, l Load) History {
	gateways := topo.Gateways()
	h := History{Gateways: gateways, Start: time.Now().Add(200 * time.Millisecond)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c.loadGroups(ctx, l, gateways, h.Start)
	}()
	events := make([]FaultEvent, len(sched.Faults))
	locks := newLocks()
	for i, f := range sched.Faults {
		wg.Add(1)
		go func() {
			defer wg.Done()
			events[i] = pull(ctx, topo, gateways, locks, h.Start, f)
		}()
	}
	wg.Wait()
	h.Faults = events
	h.Limits = limitSpans(events)

	capacity := c.dep.Profile.Capacity
	c.drain(ctx, l.Subjects, gateways, int(capacity)+2, 5)
	h.Requests = c.requests()
	h.RequestIDHeader, h.StoreFailure = c.requestID, c.gw.Expect.StoreFailure.Status
	all := !c.gw.Caps.ForwardsScenarioHeader
	h.ProviderScope = "the calls labelled " + scenarioName
	if all {
		h.ProviderScope = "every call (the gateway forwards no scenario header; the topology is this run's alone)"
	}
	calls, total, dropped, err := readProviders(ctx, topo, all)
	h.Providers, h.ProviderCalls, h.ProviderDropped = calls, total, dropped
	if err != nil {
		// Without the providers' counts the checks on them cannot pass: say why.
		h.Faults = append(h.Faults, FaultEvent{Fault: Fault{Lever: "provider-call-logs"}, Err: err.Error()})
	}
	return h
}

// pull injects one fault at its time, holds it and releases it, recording when each happened.
// It first takes the fault's shared things (Kind.Holds), so a fault whose neighbour is late in
// releasing them (a slow restart) waits instead of overlapping it.
func pull(ctx context.Context, topo topology.Topology, gateways []string, locks *locks, t0 time.Time, f Fault) FaultEvent {
	k, _ := KindByName(f.Lever)
	ev := FaultEvent{Fault: f, CutsOff: k.CutsOff(f.Target, gateways)}
	if k.Touches != nil {
		ev.Touches = k.Touches(f.Target, gateways)
	}
	if !sleepUntil(ctx, t0.Add(f.At)) {
		ev.Err = "interrupted before the fault"
		return ev
	}
	release := locks.take(k.Holds(f.Target))
	defer release()
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	ev.Pulled = time.Now()
	undo, err := k.Lever.Inject(lctx, topo, f.Target)
	ev.Held = time.Now()
	if err != nil {
		ev.Err = "inject: " + err.Error()
		ev.Held = time.Time{}
		return ev
	}
	switch {
	case k.Takes > 0: // held for Hold once it took hold (a failover: after the promotion)
		sleepUntil(ctx, ev.Held.Add(f.Hold))
	case f.Hold > 0:
		sleepUntil(ctx, t0.Add(f.At+f.Hold))
	}
	ev.Releasing = time.Now()
	if err := undo(lctx); err != nil {
		ev.Err = "release: " + err.Error()
	}
	ev.Released = time.Now()
	return ev
}

// locks are named mutexes, taken in name order so two faults never deadlock.
type locks struct {
	mu sync.Mutex
	m  map[string]*sync.Mutex
}

func newLocks() *locks { return &locks{m: map[string]*sync.Mutex{}} }

func (l *locks) take(names []string) (release func()) {
	names = append([]string(nil), names...)
	sort.Strings(names)
	var held []*sync.Mutex
	for _, n := range names {
		l.mu.Lock()
		m, ok := l.m[n]
		if !ok {
			m = &sync.Mutex{}
			l.m[n] = m
		}
		l.mu.Unlock()
		m.Lock()
		held = append(held, m)
	}
	return func() {
		for _, m := range held {
			m.Unlock()
		}
	}
}

// ErrFailed is returned (wrapped) by callers that turn a failing verdict into an error.
var ErrFailed = errors.New("the chaos checker failed the history")
