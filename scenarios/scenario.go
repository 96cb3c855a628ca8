// Package scenarios holds the qualification scenarios (All lists them). Each is a pure function of a
// topology (reached only through its HTTP endpoints and fault levers) and a request recorder,
// returning a verdict with the facts and assertions that decided it. A scenario never talks to
// a process directly.
//
// Rules every scenario follows:
//   - every check is recorded with what was expected and what was observed; nothing
//     short-circuits, so a failed check never hides the requests or checks after it;
//   - every HTTP exchange is recorded (Env.Chat), a real HTTP response is never retried, and a
//     transport failure is retried at most once with both attempts recorded;
//   - every wait has a deadline derived from the profile; nothing sleeps unbounded;
//   - provider attribution and "reached no provider" are counted at the providers, never
//     inferred from the gateway's answers.
package scenarios

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
)

// Need is a capability a scenario cannot run without: of the topology (its levers) or of the
// gateway under test (its profile's capabilities, package undertest).
type Need string

const (
	NeedNetworkPolicy Need = "network-policy"
	NeedPartition     Need = "partition"

	// NeedRestart: a gateway restarted (or killed) by the topology comes back on the same
	// config; every topology and every profile provides it, declared so a reader sees it.
	NeedRestart Need = "restart"
	// NeedQuotaInspection: the gateway reports a subject's quota state (settled, reserved).
	// A scenario that only prefers it (Scenario.Prefers) uses black-box evidence without it.
	NeedQuotaInspection Need = "quota-inspection"
	// NeedSharedStore: the gateway keeps its quota state in the run's Valkey, so the store
	// levers (stop, partition) are levers on the gateway's quota.
	NeedSharedStore Need = "shared-store"
	// NeedStoreGroup: the gateway can be put on the replicated store group.
	NeedStoreGroup Need = "store-group"
	// NeedScenarioRules: the gateway renders the scenario's own rule — every feature of it
	// (undertest.RuleFeature) its profile's capabilities.rules can express; a skip names the
	// features it lacks. A scenario that only prefers it runs on the run's rule without it.
	NeedScenarioRules Need = "scenario-rules"
	// NeedPolicyChange: the gateway can be restarted on another budget.
	NeedPolicyChange Need = "policy-change"
	// NeedLeases: admitted requests hold reservations that expire unless renewed.
	NeedLeases Need = "leases"
	// NeedAttribution: each admitted response names the provider that served it, and the id
	// it forwarded, so the provider's log confirms it. Only ever preferred: without it the
	// sites are counted at the providers.
	NeedAttribution Need = "attribution"
)

// Scenario is one qualification scenario.
type Scenario struct {
	Name      string
	Summary   string // what it proves, one line
	Invariant string // which invariant: "hard gate: …" or "meter: …"
	Needs     []Need
	// Exclusive says why the scenario must have the topology to itself — it pulls a fault
	// lever (restarts or kills a gateway, stops the store or cuts a gateway off from it, moves
	// the gateways to another store or policy) or loads the machine on purpose — and is empty
	// for a scenario that only sends its own principals' requests and reads its own keys, which
	// then runs side by side with the other such scenarios.
	Exclusive string
	// SharesAfterLever marks an exclusive scenario that hands the topology back with
	// Env.ShareTopology once its lever is released and what is left is a wait on its own keys:
	// it runs first among the exclusive ones, and the shared scenarios overlap that wait.
	SharesAfterLever bool
	// Profiles lists the profiles whose default run includes the scenario; empty: every
	// profile. --scenario selects it in any profile.
	Profiles []string
	// Prefers are capabilities the scenario uses when the gateway has them and replaces with
	// black-box evidence when it has not; its result then names the checks not made
	// (Result.NotMade) and carries a lower evidence level.
	Prefers []Need
	// BlackBox states what the scenario's black-box path — what it does on a gateway without
	// quota inspection — can and cannot see: "sees …; cannot see …". A result at the black-box
	// evidence level carries it, so a reader knows what its verdict could not have caught.
	BlackBox string
	Run      func(ctx context.Context, env *Env) *Result
}

// All returns the scenarios in the qualification's order: the nine of the upstream
// qualification (identity-sources beside auth-rejection: whom a request is metered as) with
// gateway-crash after gateway-restart (a gateway killed with a request in flight), then
// valkey-partition (one replica cut off from the store), then the metering scenarios
// (usage-accounting, long-generation, hard-gate), the rule shapes (layered-budgets: two
// windows; model-budgets: a key per model; model-source: which model decides the key), the
// metering clauses along their dimensions (output-bound, provider-usage: after layered-budgets,
// the longest of the scenarios side by side, so that it starts as early as before them), then
// valkey-failover (a split brain of the replicated store group), then rolling-upgrade (a policy
// change while both gateways serve), then sustained-load (many subjects at a fixed rate; in the
// reference profile's default run).
func All() []Scenario {
	return []Scenario{
		probeNoQuota(),
		validAuth(),
		authRejection(),
		identitySources(),
		sharedBudget(),
		concurrency(),
		windowExpiry(),
		gatewayRestart(),
		gatewayCrash(),
		valkeyOutage(),
		networkPolicy(),
		valkeyPartition(),
		usageAccounting(),
		longGeneration(),
		hardGate(),
		layeredBudgets(),
		modelBudgets(),
		modelSource(),
		outputBound(),
		providerUsage(),
		valkeyFailover(),
		rollingUpgrade(),
		sustainedLoad(),
	}
}

// UseStoreGroup reports whether any scenario of list needs or prefers the replicated store
// group: a run of none leaves the group out (topology.Spec.WithoutStoreGroup).
func UseStoreGroup(list []Scenario) bool {
	for _, sc := range list {
		if slices.Contains(sc.Needs, NeedStoreGroup) || slices.Contains(sc.Prefers, NeedStoreGroup) {
			return true
		}
	}
	return false
}

// ForProfile is Select for a run of profile: no names means the scenarios of that profile's
// default run (those whose Profiles are empty or name it).
func ForProfile(profile string, names []string) ([]Scenario, error) {
	if len(names) > 0 {
		return Select(names)
	}
	var out []Scenario
	for _, s := range All() {
		if len(s.Profiles) == 0 || slices.Contains(s.Profiles, profile) {
			out = append(out, s)
		}
	}
	return out, nil
}

// Names lists every scenario name in order.
func Names() []string {
	all := All()
	out := make([]string, len(all))
	for i, s := range all {
		out[i] = s.Name
	}
	return out
}

// Select returns the named scenarios in the qualification's order (not the order given);
// no names means all. An unknown name is an error that lists the valid ones.
func Select(names []string) ([]Scenario, error) {
	all := All()
	if len(names) == 0 {
		return all, nil
	}
	want := make(map[string]bool, len(names))
	var unknown []string
	for _, n := range names {
		n = strings.TrimSpace(n)
		found := false
		for _, s := range all {
			if s.Name == n {
				found = true
				break
			}
		}
		if !found {
			unknown = append(unknown, fmt.Sprintf("%q", n))
			continue
		}
		want[n] = true
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("unknown scenario %s: choose from %s", strings.Join(unknown, ", "), strings.Join(Names(), ", "))
	}
	var out []Scenario
	for _, s := range all {
		if want[s.Name] {
			out = append(out, s)
		}
	}
	return out, nil
}

// Result collects one scenario's facts and checks. Build it with env.NewResult so that a
// scenario that panics still hands its partial facts to the evidence.
type Result struct {
	facts      []evidence.Fact
	assertions []evidence.Assertion
	keyFact    string
	errs       []error
	skip       string
	faults     []evidence.FaultWindow // recorded by Env.Fault
	notMade    []string               // checks the gateway under test could not support
	decidedBy  []string               // the black-box evidence that decided instead (DecidedBy)
}

// NewResult returns an empty result (unit tests; scenarios use env.NewResult).
func NewResult() *Result { return &Result{} }

// Fact records one named observation.
func (r *Result) Fact(name string, value any) {
	r.facts = append(r.facts, evidence.Fact{Name: name, Value: value})
}

// Check records one assertion and returns ok. Every check is kept, passing or not; callers
// must not use the return value to skip later checks or recordings.
func (r *Result) Check(name string, expected, observed any, ok bool) bool {
	r.assertions = append(r.assertions, evidence.Assertion{Name: name, Expected: expected, Observed: observed, OK: ok})
	return ok
}

// Key sets the one-line key fact shown in the closing table.
func (r *Result) Key(format string, args ...any) { r.keyFact = fmt.Sprintf(format, args...) }

// Error records an operational error (a lever or an observation that could not be made). The
// scenario fails; what was recorded before stays in the evidence.
func (r *Result) Error(err error) *Result {
	if err != nil {
		r.errs = append(r.errs, err)
	}
	return r
}

// NotMade records a check that could not be made because the gateway under test lacks a
// capability, and why. The result keeps its other checks but is marked with the lower,
// black-box evidence level: it never passes as if the check had been made.
func (r *Result) NotMade(check, why string) {
	r.notMade = append(r.notMade, check+" ("+why+")")
}

// DecidedBy names the black-box evidence that decided the verdict in place of the checks
// not made: "admissions probed from outside", "the providers' call logs", … The result is
// marked with the black-box evidence level even when every check was made another way.
func (r *Result) DecidedBy(evidence ...string) {
	for _, e := range evidence {
		if !slices.Contains(r.decidedBy, e) {
			r.decidedBy = append(r.decidedBy, e)
		}
	}
}

// evidenceLevel is "" for the full evidence, or what decided the verdict instead and what
// that evidence can and cannot see (the scenario's BlackBox).
func (r *Result) evidenceLevel(blackBox string) string {
	if len(r.notMade) == 0 && len(r.decidedBy) == 0 {
		return ""
	}
	by := "provider-side counts and the request history"
	if len(r.decidedBy) > 0 {
		by = strings.Join(r.decidedBy, ", ")
	}
	s := "black-box: decided by " + by
	if len(r.notMade) > 0 {
		s += "; not made: " + strings.Join(r.notMade, "; ")
	}
	if blackBox != "" {
		s += "; its black-box path " + blackBox
	}
	return s
}

// Skip marks the result skipped with a reason (a missing lever). A skip is never a pass.
func (r *Result) Skip(reason string) *Result {
	r.skip = reason
	return r
}

// Failed reports whether any check failed or any operational error was recorded so far.
func (r *Result) Failed() bool {
	if len(r.errs) > 0 {
		return true
	}
	for _, a := range r.assertions {
		if !a.OK {
			return true
		}
	}
	return false
}

func (r *Result) anyCheckFailed() bool {
	for _, a := range r.assertions {
		if !a.OK {
			return true
		}
	}
	return false
}

// verdict computes status and reason. A result with no assertion cannot pass.
func (r *Result) verdict() (evidence.Status, string) {
	var reasons []string
	unsupported := 0
	for _, e := range r.errs {
		reasons = append(reasons, e.Error())
		if errors.Is(e, topology.ErrUnsupported) {
			unsupported++
		}
	}
	if unsupported > 0 && unsupported == len(r.errs) && !r.anyCheckFailed() {
		// A lever this topology lacks: skipped with the reason, never passed.
		return evidence.Skipped, strings.Join(reasons, "; ")
	}
	for _, a := range r.assertions {
		if !a.OK {
			reasons = append(reasons, fmt.Sprintf("%s: expected %v, observed %v", a.Name, short(a.Expected), short(a.Observed)))
		}
	}
	if len(reasons) > 0 {
		return evidence.Failed, strings.Join(reasons, "; ")
	}
	if r.skip != "" {
		return evidence.Skipped, r.skip
	}
	if len(r.assertions) == 0 {
		return evidence.Failed, "the scenario made no assertion: a verdict needs at least one check"
	}
	return evidence.Passed, ""
}

func short(v any) string {
	s := fmt.Sprint(v)
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}

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
	Alone  map[string]int
	NotRun int
}

// aloneOwnLever is Ran.Alone's key for a scenario alone for its own lever or load.
const aloneOwnLever = "a lever or a load"

// String says it in the closing progress line's words: "10 side by side, 8 alone (a lever
// or a load)", or "0 side by side, 18 alone (8 for a lever or a load, 10 because …)".
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
	s := fmt.Sprintf("%d side by side, %d alone", r.SideBySide, alone)
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
	why := make([]string, len(list))
	for i, sc := range list {
		if sc.Exclusive != "" {
			why[i] = aloneOwnLever
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
	schedule(list, func(i int, share func()) {
		var started bool
		out[i], started = runScenario(ctx, env, list[i], caps, share)
		finishedMu.Lock()
		defer finishedMu.Unlock()
		switch {
		case !started:
			ran.NotRun++
		case share == nil:
			ran.SideBySide++
		default:
			ran.Alone[why[i]]++
		}
		if env != nil && env.Finished != nil {
			env.Finished(out[i])
		}
	})
	return out, ran
}

// runScenario runs one scenario (or skips it before it starts: started is false) and turns its
// Result into the evidence's form.
func runScenario(ctx context.Context, env *Env, sc Scenario, caps topology.Capabilities, share func()) (_ evidence.ScenarioResult, started bool) {
	res := evidence.ScenarioResult{Name: sc.Name, Summary: sc.Summary, Invariant: sc.Invariant,
		Started: time.Now().UTC(), Facts: []evidence.Fact{}, Assertions: []evidence.Assertion{}}
	if err := ctx.Err(); err != nil {
		res.Status, res.Reason, res.KeyFact = evidence.Skipped, "interrupted before it started", "interrupted"
		return res, false
	}
	reason := missingNeed(sc.Needs, caps, env.gateway())
	if slices.Contains(sc.Needs, NeedScenarioRules) {
		if why := env.ownRulesWhy(sc.Name); why != "" {
			reason = strings.Join(slices.DeleteFunc([]string{reason, why}, func(s string) bool { return s == "" }), "; ")
		}
	}
	if reason != "" {
		res.Status, res.Reason, res.KeyFact = evidence.Skipped, reason, "skipped: "+reason
		return env.progressed(sc.Name, res), false
	}
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
	return env.progressed(sc.Name, res), true
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

// gatewayNeeds are the needs a gateway profile answers: what each is, in a reason, and
// whether the profile offers it.
var gatewayNeeds = map[Need]struct {
	what string
	has  func(*undertest.Profile) bool
}{
	NeedRestart:         {"a restart", func(*undertest.Profile) bool { return true }},
	NeedQuotaInspection: {"quota inspection", (*undertest.Profile).Inspects},
	NeedSharedStore:     {"its quota state in the run's store", func(g *undertest.Profile) bool { return g.Caps.SharedStore }},
	NeedStoreGroup:      {"the replicated store group", func(g *undertest.Profile) bool { return g.Caps.StoreGroup }},
	NeedPolicyChange:    {"a restart on another budget", func(g *undertest.Profile) bool { return g.Caps.PolicyChange }},
	NeedLeases:          {"reservation leases", func(g *undertest.Profile) bool { return g.Caps.Leases }},
	NeedAttribution: {"attribution headers", func(g *undertest.Profile) bool {
		return g.Expect.Attribution.Header != "" && g.Expect.RequestIDHeader != ""
	}},
}

// missingNeed returns why the topology or the gateway under test cannot run a scenario with
// these needs, or "".
func missingNeed(needs []Need, caps topology.Capabilities, gw *undertest.Profile) string {
	var reasons []string
	for _, n := range needs {
		if n == NeedScenarioRules {
			continue // the scenario's own rule decides: Env.ownRule
		}
		if g, ok := gatewayNeeds[n]; ok {
			if !g.has(gw) {
				reasons = append(reasons, fmt.Sprintf("needs %s, which gateway profile %s does not offer", g.what, gw.Name))
			}
			continue
		}
		switch n {
		case NeedNetworkPolicy:
			if !caps.NetworkPolicy {
				reasons = append(reasons, "needs network policy enforcement: "+orUnknown(caps.NetworkPolicyReason))
			}
		case NeedPartition:
			if !caps.Partition {
				reasons = append(reasons, "needs partitions: "+orUnknown(caps.PartitionReason))
			}
		default:
			reasons = append(reasons, fmt.Sprintf("needs %q, which no topology provides", string(n)))
		}
	}
	sort.Strings(reasons)
	return strings.Join(reasons, "; ")
}

func orUnknown(s string) string {
	if s == "" {
		return "this topology does not provide it"
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
