package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
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
	// Targets lists what the lever may act on in a run of plan p (its gateways, and the
	// hosts its gateway under test reaches its quota state through).
	Targets func(p Plan) []topology.Target
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
	// A gateway cut off from every host it reaches its quota state through (the run's Valkey,
	// or a peer's rate-limit service or cluster: the profile's store_hosts).
	{Lever: partitionFromStore{}, Targets: gatewayStoreCuts, Holds: linkOf, CutsOff: hostOnly, Excluded: onSingleValkey},
	{Lever: topology.StopValkey, Targets: storeOnly, Holds: store, CutsOff: everyGateway, Excluded: valkeyDecides},
	{Lever: topology.CrashGateway, Targets: gatewayHosts, Holds: gatewayAndStore, CutsOff: none, Instant: true},
	{Lever: topology.RestartGateway, Targets: gatewayHosts, Holds: gatewayAndStore, CutsOff: none, Instant: true},
	// A frozen gateway answers nothing and cuts no one off; its late settlements land after
	// the thaw, which the hard gate and porcupine then judge.
	{Lever: topology.Pause, Targets: gatewayHosts, Holds: gatewayAndStore, CutsOff: none},
	// A write stall and refused writes: no gateway can reserve, so none may admit.
	{Lever: topology.StoreStall, Targets: storeStall, Holds: store, CutsOff: everyGateway, Excluded: valkeyDecides},
	{Lever: topology.StoreMemoryPressure, Targets: storeOnly, Holds: store, CutsOff: everyGateway, Excluded: valkeyDecides},
	// A gateway's store link through a proxy (netns): replies delayed near the store timeout,
	// so that some calls succeed late and some time out after the store ran them — the
	// gateway still decides, so it cuts no one off; or every reply lost, every write applied —
	// the gateway can decide nothing, so it may admit nothing.
	{Lever: topology.StoreLatency, Targets: slowStoreLinks, Holds: linkOf, CutsOff: none, Excluded: ownValkeyLink},
	{Lever: topology.StoreLostReplies, Targets: gatewayStoreLinks, Holds: linkOf, CutsOff: hostOnly, Excluded: ownValkeyLink},
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
	{Lever: PolicyChange, Targets: policyTargets, Holds: gatewayAndStore, CutsOff: none, Describe: describePolicy, Excluded: policyChangeable},
	// On the store group: one gateway cut off from the group's current primary only — the
	// Sentinels and the replicas still see the primary, so nothing is promoted, and the
	// gateway (which writes only to the primary) can decide nothing: it may admit nothing.
	// It holds the store so that no failover moves the primary under it. Appended last, and
	// left out of every run off the group, so the seeds of those runs draw what they drew.
	{Lever: PartitionPrimary, Targets: gatewayPrimaryCuts, Holds: linkAndStore, CutsOff: hostOnly, Excluded: onStoreGroupOnly},
	// Packet loss on one gateway's link to one host of its quota state, both ways (nftables in
	// the kernel): TCP retransmits push some store calls past the timeout (a call the store
	// may have run), others succeed late — the gateway still decides, so it cuts no one off.
	// Drawn only when named: in the default set it would redraw every recorded seed.
	{Lever: topology.Loss, Targets: lossyStoreLinks, Holds: linkOf, CutsOff: none, Excluded: lossNamed},
}

// lossPercent is the loss lever's share of packets dropped, as lossy-store-link's loss phase.
const lossPercent = 50

// lossyStoreLinks: each gateway's link to each host it reaches its quota state through, at
// lossPercent.
func lossyStoreLinks(p Plan) []topology.Target {
	hosts := []string{topology.HostValkey}
	if p.Gateway != nil {
		hosts = p.Gateway.StoreHosts()
	}
	var out []topology.Target
	for _, g := range p.Gateways {
		for _, h := range hosts {
			out = append(out, topology.Target{Host: g, Peer: h, Percent: lossPercent})
		}
	}
	return out
}

// lossNamed leaves loss out unless --lever names it (the catalogue's order and the default set
// are what a recorded seed means), and off the single Valkey where the gateways do not use it.
func lossNamed(p Plan) string {
	if !slices.Contains(p.Levers, topology.Loss.Name()) {
		return "drawn only when named (--lever " + topology.Loss.Name() + "): in the default set it would redraw every recorded seed's schedule"
	}
	return onSingleValkey(p)
}

// PartitionPrimary cuts Target.Host (a gateway) off from whichever node of the replicated
// store group is primary when it is pulled (topology.Partition between the two, which every
// engine with the store group can do), until Undo heals that same pair.
var PartitionPrimary topology.Lever = partitionPrimary{}

type partitionPrimary struct{}

func (partitionPrimary) Name() string { return "partition-primary" }

func (partitionPrimary) Available(t topology.Topology) (bool, string) {
	return topology.StoreFailover.Available(t) // the store group, and partitions of its nodes
}

func (l partitionPrimary) Inject(ctx context.Context, t topology.Topology, target topology.Target) (topology.Undo, error) {
	if ok, why := l.Available(t); !ok {
		return nil, fmt.Errorf("%s %s: %s: %w", l.Name(), target.Host, why, topology.ErrUnsupported)
	}
	primary, err := t.(topology.StoreGroup).StorePrimary(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s %s: asking the Sentinels for the primary: %w", l.Name(), target.Host, err)
	}
	if err := t.Partition(ctx, primary, target.Host); err != nil {
		return nil, fmt.Errorf("%s: cutting %s off from the primary %s: %w", l.Name(), target.Host, primary, err)
	}
	return func(ctx context.Context) error { return t.Heal(ctx, primary, target.Host) }, nil
}

func gatewayPrimaryCuts(p Plan) []topology.Target {
	out := gatewayStoreLinks(p)
	for i := range out {
		out[i].Peer = topology.StorePrimaryHost
	}
	return out
}

func linkAndStore(t topology.Target) []string { return []string{"link:" + t.Host, "store"} }

// onStoreGroupOnly: the lever cuts a gateway from the store group's primary, which only a run
// on the group has.
func onStoreGroupOnly(p Plan) string {
	if why := needsStoreGroup(p); why != "" {
		return strings.Replace(why, "name --lever "+topology.StoreFailover.Name()+" to run on the group",
			"name --lever "+topology.StoreFailover.Name()+" beside it to run on the group", 1)
	}
	return ""
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

func policyTargets(p Plan) []topology.Target {
	var out []topology.Target
	for _, g := range p.Gateways {
		for _, pc := range policyPercents {
			out = append(out, topology.Target{Host: g, Percent: pc})
		}
	}
	return out
}

func describePolicy(t topology.Target) string {
	return fmt.Sprintf("%s capacity %d (%d%%)", t.Host, PolicyOf(t).Capacity, t.Percent)
}

func storePrimary(Plan) []topology.Target {
	return []topology.Target{{Host: topology.StorePrimaryHost}}
}

// needsStoreGroup: the failover needs the gateways on the replicated store group, which the
// gateway under test's template must render.
func needsStoreGroup(p Plan) string {
	if gw := p.Gateway; gw != nil && !gw.Caps.StoreGroup {
		return "gateway profile " + gw.Name + " does not render the replicated store group (capabilities.store_group false)"
	}
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

func gatewayStoreLinks(p Plan) []topology.Target {
	out := make([]topology.Target, len(p.Gateways))
	for i, g := range p.Gateways {
		out[i] = topology.Target{Host: g, Peer: topology.HostValkey}
	}
	return out
}

// slowStoreLinks: the chaos rule's store timeout is 500 ms (the quick profile); replies
// delayed 400 ± 150 ms make a call's answer land on either side of it.
func slowStoreLinks(p Plan) []topology.Target {
	out := gatewayStoreLinks(p)
	for i := range out {
		out[i].Latency, out[i].Jitter = 400*time.Millisecond, 150*time.Millisecond
	}
	return out
}

func gatewayHosts(p Plan) []topology.Target {
	out := make([]topology.Target, len(p.Gateways))
	for i, g := range p.Gateways {
		out[i] = topology.Target{Host: g}
	}
	return out
}

func storeOnly(Plan) []topology.Target { return []topology.Target{{Host: topology.HostValkey}} }

// storeStall: CLIENT PAUSE needs a length; the schedule's Undo ends the stall when its hold
// ends, so the length is only a ceiling.
func storeStall(Plan) []topology.Target {
	return []topology.Target{{Host: topology.HostValkey, Duration: time.Minute}}
}

// gatewayStoreCuts: each gateway cut off from the hosts its profile reaches its quota state
// through (Target.Peer lists them, comma-separated; the run's Valkey for quotaqual's own).
func gatewayStoreCuts(p Plan) []topology.Target {
	peer := topology.HostValkey
	if p.Gateway != nil {
		peer = strings.Join(p.Gateway.StoreHosts(), ",")
	}
	out := gatewayStoreLinks(p)
	for i := range out {
		out[i].Peer = peer
	}
	return out
}

// partitionFromStore is topology.Partition of Target.Host from every host Target.Peer lists
// (comma-separated), under the same name: with the one peer valkey it is that lever exactly,
// so a seed draws what it drew before gateways had profiles here.
type partitionFromStore struct{}

func (partitionFromStore) Name() string { return topology.Partition.Name() }

func (partitionFromStore) Available(t topology.Topology) (bool, string) {
	return topology.Partition.Available(t)
}

func (partitionFromStore) Inject(ctx context.Context, t topology.Topology, target topology.Target) (topology.Undo, error) {
	var undos []topology.Undo
	undo := func(ctx context.Context) error {
		var errs []error
		for _, u := range undos {
			errs = append(errs, u(ctx))
		}
		return errors.Join(errs...)
	}
	for _, peer := range strings.Split(target.Peer, ",") {
		u, err := topology.Partition.Inject(ctx, t, topology.Target{Host: target.Host, Peer: peer})
		if err != nil {
			_ = undo(context.WithoutCancel(ctx))
			return nil, fmt.Errorf("cutting %s off from %s: %w", target.Host, peer, err)
		}
		undos = append(undos, u)
	}
	return undo, nil
}

// valkeyDecides: a lever on the run's Valkey faults the deciding store only when the gateway
// keeps its quota state there (directly, or through a service of its own that does).
func valkeyDecides(p Plan) string {
	if gw := p.Gateway; gw != nil && !gw.Caps.SharedStore {
		return "gateway profile " + gw.Name + " keeps its quota state outside the run's Valkey (capabilities.shared_store false: " +
			strings.Join(gw.StoreHosts(), ", ") + "), so this lever would fault a store nobody decides on"
	}
	return onSingleValkey(p)
}

// ownValkeyLink: the store-link levers put a proxy in a gateway's own link to Valkey, which a
// gateway that reaches its state through other hosts does not have.
func ownValkeyLink(p Plan) string {
	if gw := p.Gateway; gw != nil && !slices.Equal(gw.StoreHosts(), []string{topology.HostValkey}) {
		return "gateway profile " + gw.Name + " reaches its quota state through " + strings.Join(gw.StoreHosts(), ", ") +
			", not a Valkey link of its own, and this lever's proxy sits in a gateway↔valkey link"
	}
	return onSingleValkey(p)
}

// policyChangeable: a policy change restarts a gateway on another capacity, which the profile
// must say it can be.
func policyChangeable(p Plan) string {
	if gw := p.Gateway; gw != nil && !gw.Caps.PolicyChange {
		return "gateway profile " + gw.Name + " cannot be restarted on another budget (capabilities.policy_change false)"
	}
	return ""
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
