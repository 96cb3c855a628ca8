package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
)

// The faults a schedule draws from. Each is a topology.Lever value plus what the schedule and
// the checker must know about it: which targets it can act on, which shared things it holds
// (two faults holding the same thing never overlap), and which gateways it cuts off from the
// deciding store while it is held. Adding a lever (pause, store stall, loss, …) is one entry
// in Catalogue.
type Kind struct {
	Lever topology.Lever
	// Targets lists what the lever may act on in a run with these gateways.
	Targets func(gateways []string) []topology.Target
	// Holds names the shared things a fault on target holds while it is held: another fault
	// holding any of them is not scheduled over it (a gateway restarted while its store link
	// is cut would wait for a readiness that cannot come).
	Holds func(target topology.Target) []string
	// CutsOff lists the gateways that cannot reach the deciding store while the fault is held:
	// none of them may admit (200) a request that started after the fault took hold and ended
	// before it was released.
	CutsOff func(target topology.Target, gateways []string) []string
	// Instant: the lever's Inject does the whole fault (a crash and the restart after it) and
	// its Undo does nothing, so the schedule holds it for no time.
	Instant bool
	// Touches, when set, lists the gateways that must decide again within the recovery bound
	// after the release (default: those cut off, else the target when it is a gateway).
	Touches func(target topology.Target, gateways []string) []string
	// Excluded says why the lever cannot be drawn in a run of plan p ("" when it can): such
	// a lever is left out of the schedule and the reason recorded with it (Schedule.Excluded).
	Excluded func(p Plan) string
	// Takes is how long Inject itself is expected to take before the fault holds (a failover
	// waits for the Sentinels' promotion): the schedule reserves it before the hold, so the
	// next fault on a shared thing does not queue behind it.
	Takes time.Duration
	// Describe, when set, renders a target for schedules and evidence instead of describeTarget.
	Describe func(topology.Target) string
}

// Catalogue is every fault kind the chaos schedule can use, in a stable order (the order is
// part of what a seed means: reordering it changes every schedule).
var Catalogue = []Kind{
	{Lever: topology.Partition, Targets: gatewayStoreLinks, Holds: linkOf, CutsOff: hostOnly, Excluded: onSingleValkey},
	{Lever: topology.StopValkey, Targets: storeOnly, Holds: store, CutsOff: everyGateway, Excluded: onSingleValkey},
	{Lever: topology.CrashGateway, Targets: gatewayHosts, Holds: gatewayAndStore, CutsOff: none, Instant: true},
	{Lever: topology.RestartGateway, Targets: gatewayHosts, Holds: gatewayAndStore, CutsOff: none, Instant: true},
	// A frozen gateway answers nothing and cuts no one off; its late settlements land after
	// the thaw, which the hard gate and porcupine then judge.
	{Lever: topology.Pause, Targets: gatewayHosts, Holds: gatewayAndStore, CutsOff: none},
	// A write stall and refused writes: no gateway can reserve, so none may admit.
	{Lever: topology.StoreStall, Targets: storeStall, Holds: store, CutsOff: everyGateway, Excluded: onSingleValkey},
	{Lever: topology.StoreMemoryPressure, Targets: storeOnly, Holds: store, CutsOff: everyGateway, Excluded: onSingleValkey},
	// A gateway's store link through a proxy (netns): replies delayed near the store timeout,
	// so that some calls succeed late and some time out after the store ran them — the
	// gateway still decides, so it cuts no one off; or every reply lost, every write applied —
	// the gateway can decide nothing, so it may admit nothing.
	{Lever: topology.StoreLatency, Targets: slowStoreLinks, Holds: linkOf, CutsOff: none, Excluded: onSingleValkey},
	{Lever: topology.StoreLostReplies, Targets: gatewayStoreLinks, Holds: linkOf, CutsOff: hostOnly, Excluded: onSingleValkey},
	// The replicated store group's primary cut off from everything until the Sentinels
	// promote a replica (Held is then), held, then healed. No gateway is cut off for the
	// whole hold (each follows the promotion), but each must decide again after the heal.
	// Only in a run on the store group (Plan.StoreGroup): the checker's failover rule is in
	// checker.go (checkHardGate's failover allowance, async replication only).
	{Lever: topology.StoreFailover, Targets: storePrimary, Holds: store, CutsOff: none, Touches: everyGateway, Excluded: needsStoreGroup,
		Takes: 4 * time.Second},
	// One gateway restarted on the chaos rule with a tighter or a looser capacity, held, then
	// restarted on the run's own policy (topology.RolloutPolicyOf). It holds what a restart
	// holds; the checker bounds each window by the largest capacity in effect on any gateway
	// in it (History.Limits).
	{Lever: PolicyChange, Targets: policyTargets, Holds: gatewayAndStore, CutsOff: none, Describe: describePolicy},
}

// PolicyChange rolls a gateway out to the chaos rule at Target.Percent of its capacity (the
// same window, reservation and lease: only the limit differs), and back.
var PolicyChange topology.Lever = policyChange{}

type policyChange struct{}

func (policyChange) Name() string { return "policy-change" }

func (policyChange) Available(t topology.Topology) (bool, string) {
	return topology.RolloutPolicy.Available(t)
}

func (policyChange) Inject(ctx context.Context, t topology.Topology, target topology.Target) (topology.Undo, error) {
	p := PolicyOf(target)
	return topology.RolloutPolicyOf(&p).Inject(ctx, t, target)
}

// PolicyOf is the policy a policy-change target rolls out: the chaos rule with Percent of
// its capacity.
func PolicyOf(t topology.Target) deployment.Profile {
	p := Profile()
	p.Name = fmt.Sprintf("%s-capacity-%d", p.Name, t.Percent)
	p.Capacity = p.Capacity * int64(t.Percent) / 100
	return p
}

// policyPercents are the capacities a policy change rolls out, in percent of the rule's: a
// tighter one (two reservations of the quick profile) and a looser one.
var policyPercents = []int{50, 150}

func policyTargets(gateways []string) []topology.Target {
	var out []topology.Target
	for _, g := range gateways {
		for _, pc := range policyPercents {
			out = append(out, topology.Target{Host: g, Percent: pc})
		}
	}
	return out
}

func describePolicy(t topology.Target) string {
	return fmt.Sprintf("%s capacity %d (%d%%)", t.Host, PolicyOf(t).Capacity, t.Percent)
}

func storePrimary([]string) []topology.Target {
	return []topology.Target{{Host: topology.StorePrimaryHost}}
}

// needsStoreGroup: the failover needs the gateways on the replicated store group.
func needsStoreGroup(p Plan) string {
	if p.StoreGroup {
		return ""
	}
	return "this run's gateways decide on the single Valkey, with no replicated store group: name --lever " +
		topology.StoreFailover.Name() + " to run on the group (then the single-Valkey levers are left out)"
}

// onSingleValkey: the lever acts on the single Valkey (or the gateways' links to it), which a
// run on the store group does not decide on.
func onSingleValkey(p Plan) string {
	if !p.StoreGroup {
		return ""
	}
	return "this run's gateways decide on the replicated store group, and this lever acts on the single Valkey they do not use"
}

// describe renders a fault's target with its kind's Describe, else describeTarget.
func describe(lever string, t topology.Target) string {
	if k, ok := KindByName(lever); ok && k.Describe != nil {
		return k.Describe(t)
	}
	return describeTarget(t)
}

// KindByName finds a catalogue entry by its lever's name.
func KindByName(name string) (Kind, bool) {
	for _, k := range Catalogue {
		if k.Lever.Name() == name {
			return k, true
		}
	}
	return Kind{}, false
}

// Targets, holds and cut-offs shared by the catalogue's entries.

func gatewayStoreLinks(gateways []string) []topology.Target {
	out := make([]topology.Target, len(gateways))
	for i, g := range gateways {
		out[i] = topology.Target{Host: g, Peer: topology.HostValkey}
	}
	return out
}

// slowStoreLinks: the chaos rule's store timeout is 500 ms (the quick profile); replies
// delayed 400 ± 150 ms make a call's answer land on either side of it.
func slowStoreLinks(gateways []string) []topology.Target {
	out := gatewayStoreLinks(gateways)
	for i := range out {
		out[i].Latency, out[i].Jitter = 400*time.Millisecond, 150*time.Millisecond
	}
	return out
}

func gatewayHosts(gateways []string) []topology.Target {
	out := make([]topology.Target, len(gateways))
	for i, g := range gateways {
		out[i] = topology.Target{Host: g}
	}
	return out
}

func storeOnly([]string) []topology.Target { return []topology.Target{{Host: topology.HostValkey}} }

// storeStall: CLIENT PAUSE needs a length; the schedule's Undo ends the stall when its hold
// ends, so the length is only a ceiling.
func storeStall([]string) []topology.Target {
	return []topology.Target{{Host: topology.HostValkey, Duration: time.Minute}}
}

func linkOf(t topology.Target) []string { return []string{"link:" + t.Host} }

func store(topology.Target) []string { return []string{"store"} }

// gatewayAndStore: a gateway coming back up waits until it reaches the store, so a crash or a
// restart holds the gateway, its link and the store.
func gatewayAndStore(t topology.Target) []string {
	return []string{"gateway:" + t.Host, "link:" + t.Host, "store"}
}

func hostOnly(t topology.Target, _ []string) []string { return []string{t.Host} }

func everyGateway(_ topology.Target, gateways []string) []string { return gateways }

func none(topology.Target, []string) []string { return nil }

// describeTarget renders a target for schedules and evidence: "gateway-a", "gateway-a↔valkey".
func describeTarget(t topology.Target) string {
	s := t.Host
	if t.Peer != "" {
		s += "↔" + t.Peer
	}
	if t.Percent != 0 {
		s += fmt.Sprintf(" %d%%", t.Percent)
	}
	if t.Latency != 0 {
		s += " +" + t.Latency.String()
		if t.Jitter != 0 {
			s += "±" + t.Jitter.String()
		}
	}
	return s
}
