package scenarios

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
)

// The catalogue: every scenario, in the qualification's order.
//
// Adding a scenario is one file. Besides its constructor (a func returning its Scenario), the
// file registers it, at its top:
//
//	func init() { register(1950, storeStall) }
//
// The number is the scenario's position in the qualification's order (All, --scenario's
// selection, the report): a run lists its scenarios by position, so pick a number between the
// positions of the scenarios it belongs between. Positions are unique (register panics on a
// taken one, and on a taken name); they are spaced 100 apart so a new one fits without moving
// the others. Today's order, by position:
//
//	 100-1200 the upstream qualification (probe-no-quota … network-policy, identity-sources beside
//	          auth-rejection: whom a request is metered as), gateway-crash after gateway-restart (a
//	          gateway killed with a request in flight), then valkey-partition (one replica cut off
//	          from the store);
//	1300-1500 the metering scenarios (usage-accounting, long-generation, hard-gate);
//	1600-1800 the rule shapes (layered-budgets: two windows; model-budgets: a key per model;
//	          model-source: which model decides the key);
//	1900-2000 the metering clauses along their dimensions (output-bound, provider-usage: after
//	          layered-budgets, the longest of the scenarios side by side, so that they start as
//	          early as before them);
//	2050      replica-loss (the replicated store group's replicas gone, its primary up: before
//	          valkey-failover, which leaves the group with another primary);
//	2070      subject-privacy (the last that pulls no lever: no raw username in the gateways'
//	          logs, metrics or store keys; short, so it ends inside the shared block);
//	2100      valkey-failover (a split brain of the replicated store group);
//	2200      rolling-upgrade (a policy change while both gateways serve);
//	2300      sustained-load (many subjects at a fixed rate; in the reference profile's default run).
//
// Counts and tables derive from All: no test or document states how many scenarios there are.

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
	// WholeMachine marks an exclusive scenario that needs the machine to itself, not only a
	// topology (it drives a load whose latencies, and the timing of anything beside it, must
	// each be their own): it never runs on a topology of its own beside the others
	// (Env.OwnTopology), but on the run's, after every other scenario has finished.
	WholeMachine bool
	// Lasts is about how long the scenario runs on the quick profile when it is one of the
	// longest (measured; zero for the others). It only orders the scenarios that run on
	// topologies of their own: longest first, so that the longest is not the last to get a
	// slot and the run ends when it does. A wrong figure costs time, never a verdict.
	Lasts time.Duration
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
	// Rules, when set, are the quota rules of its own the scenario needs in the gateway config,
	// for the run's profile: the deployment renders each for the scenario's users, ahead of the
	// run's rule (NewDeployment hands them over; deployment.ScenarioRule says what a rule holds).
	// A scenario that prefers its own rule finds it at run time with Env.hasOwnRule.
	Rules func(p deployment.Profile) []deployment.ScenarioRule
	// Subjects, when set, are the labels of the subjects the scenario sends as, for the run's
	// profile: the deployment makes one user of each (NewDeployment hands them over). Unset: the
	// three applications every profile has (deployment.Subjects).
	Subjects func(p deployment.Profile) []string
	Run      func(ctx context.Context, env *Env) *Result
}

// registered holds each scenario's constructor by position, as register received them.
var registered = map[int]func() Scenario{}

// register adds a scenario to the catalogue at position (see above): the one line a scenario
// file adds, from its init. A taken position or name is a build mistake, and panics.
func register(position int, build func() Scenario) {
	if _, ok := registered[position]; ok {
		panic(fmt.Sprintf("scenarios: position %d is registered twice", position))
	}
	name := build().Name
	for _, b := range registered {
		if b().Name == name {
			panic("scenarios: scenario " + name + " is registered twice")
		}
	}
	registered[position] = build
}

// All returns the scenarios in the qualification's order: by the position each registered at.
func All() []Scenario {
	positions := make([]int, 0, len(registered))
	for p := range registered {
		positions = append(positions, p)
	}
	sort.Ints(positions)
	out := make([]Scenario, len(positions))
	for i, p := range positions {
		out[i] = registered[p]()
	}
	return out
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

// NewDeployment is deployment.NewDeployment for the scenarios of list, with the subjects and
// the quota rules they declare (Scenario.Subjects, Scenario.Rules) for profile p: the one way a
// run's deployment learns the users and the gateway config its scenarios need, without package
// deployment knowing the scenarios.
func NewDeployment(runID string, p deployment.Profile, list []Scenario) (*deployment.Deployment, error) {
	users := make([]deployment.ScenarioSubjects, len(list))
	var rules []deployment.ScenarioRule
	for i, sc := range list {
		users[i].Name = sc.Name
		if sc.Subjects != nil {
			users[i].Subjects = sc.Subjects(p)
		}
		if sc.Rules != nil {
			rules = append(rules, sc.Rules(p)...)
		}
	}
	d, err := deployment.NewDeployment(runID, p, users)
	if err != nil {
		return nil, err
	}
	d.Rules = rules
	return d, nil
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
