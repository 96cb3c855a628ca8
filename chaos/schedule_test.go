package chaos

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
)

var twoGateways = []string{topology.HostGatewayA, topology.HostGatewayB}

// The same seed gives the same schedule — the promise a printed seed rests on — and other
// seeds give other schedules.
func TestSameSeedSameSchedule(t *testing.T) {
	plan := Plan{Seed: 42, Duration: 20 * time.Second, Gateways: twoGateways}
	a, err := Generate(plan)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Generate(plan)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("seed 42 drew two schedules:\n%s\n%s", a, b)
	}
	if len(a.Faults) < 3 {
		t.Fatalf("20 s should hold several faults: %s", a)
	}
	plan.Seed = 43
	c, _ := Generate(plan)
	if reflect.DeepEqual(a.Faults, c.Faults) {
		t.Fatalf("seeds 42 and 43 drew the same schedule: %s", a)
	}
	// The schedule is a function of the seed alone: pinned here so a change to the generator
	// (which changes what every printed seed means) is a deliberate one.
	if got := a.Faults[0].String(); got != pinnedFirstFault {
		t.Errorf("seed 42's first fault is %q, was %q: the generator changed what seeds mean", got, pinnedFirstFault)
	}
}

// Re-pinned when the store-link levers (store-latency, store-lost-replies) joined the
// catalogue: a longer catalogue redraws every seed.
const pinnedFirstFault = "#1 restart-gateway gateway-b at 1s"

// Every fault lies within the duration; faults holding a shared thing never overlap.
func TestScheduleShape(t *testing.T) {
	for seed := int64(1); seed <= 200; seed++ {
		s, err := Generate(Plan{Seed: seed, Duration: 15 * time.Second, Gateways: twoGateways})
		if err != nil {
			t.Fatal(err)
		}
		for i, f := range s.Faults {
			k, ok := KindByName(f.Lever)
			if !ok {
				t.Fatalf("seed %d: unknown lever %s", seed, f.Lever)
			}
			span := k.Takes + f.Hold
			if k.Instant {
				span = instantSpan
			}
			if f.At < warmUp || f.At+span > s.Duration {
				t.Fatalf("seed %d: %s outside [%s, %s]", seed, f, warmUp, s.Duration)
			}
			for _, g := range s.Faults[:i] {
				gk, _ := KindByName(g.Lever)
				gspan := gk.Takes + g.Hold
				if gk.Instant {
					gspan = instantSpan
				}
				if g.At+gspan > f.At && overlaps(gk.Holds(g.Target), k.Holds(f.Target)) {
					t.Fatalf("seed %d: %s overlaps %s on a shared thing", seed, f, g)
				}
			}
		}
	}
}

func TestUnknownLeverNamed(t *testing.T) {
	_, err := Generate(Plan{Seed: 1, Duration: 10 * time.Second, Gateways: twoGateways, Levers: []string{"meteor"}})
	if err == nil || !containsSub(err.Error(), "meteor") || !containsSub(err.Error(), "partition") {
		t.Fatalf("want an error naming the lever and the choices, got %v", err)
	}
}

func containsSub(s, sub string) bool { return strings.Contains(s, sub) }

// A run without the replicated store group leaves the failover out and says why; one on the
// group leaves out the levers that act on the single Valkey, each with its reason; the same
// seed still draws the same schedule, and only levers that were not left out are drawn.
func TestScheduleLeavesOutLeversWithReasons(t *testing.T) {
	single, err := Generate(Plan{Seed: 42, Duration: 30 * time.Second, Gateways: twoGateways})
	if err != nil {
		t.Fatal(err)
	}
	if len(single.Excluded) != 3 || single.Excluded[0].Lever != topology.StoreFailover.Name() ||
		!containsSub(single.Excluded[0].Reason, "--lever store-failover") ||
		single.Excluded[1].Lever != PartitionPrimary.Name() || !containsSub(single.Excluded[1].Reason, "--lever store-failover beside it") ||
		single.Excluded[2].Lever != topology.Loss.Name() || !containsSub(single.Excluded[2].Reason, "--lever loss") {
		t.Fatalf("want only store-failover, partition-primary and loss left out, with the flag that runs them: %+v", single.Excluded)
	}
	if !containsSub(single.String(), "left out: store-failover") {
		t.Fatalf("the printed schedule hides what was left out:\n%s", single)
	}
	levers := []string{"partition", "crash-gateway", topology.StoreFailover.Name(), PolicyChange.Name()}
	plan := Plan{Seed: 5, Duration: 30 * time.Second, Gateways: twoGateways, Levers: levers, StoreGroup: true}
	group, err := Generate(plan)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := Generate(plan)
	if !reflect.DeepEqual(group, again) {
		t.Fatalf("seed 5 drew two schedules on the store group:\n%s\n%s", group, again)
	}
	if len(group.Excluded) != 1 || group.Excluded[0].Lever != "partition" || !containsSub(group.Excluded[0].Reason, "single Valkey") {
		t.Fatalf("want partition left out on the store group, with why: %+v", group.Excluded)
	}
	drawn := map[string]int{}
	for _, f := range group.Faults {
		drawn[f.Lever]++
		if f.Lever == PolicyChange.Name() && f.Target.Percent != 50 && f.Target.Percent != 150 {
			t.Errorf("%s: a policy change to %d%%", f, f.Target.Percent)
		}
	}
	if drawn["partition"] > 0 || drawn[topology.StoreFailover.Name()] == 0 || drawn[PolicyChange.Name()] == 0 {
		t.Fatalf("want failovers and policy changes and no partition in 30 s:\n%s", group)
	}
	// Nothing left to draw is an error naming the reasons, never an empty schedule.
	_, err = Generate(Plan{Seed: 1, Duration: 10 * time.Second, Gateways: twoGateways, Levers: []string{topology.StoreFailover.Name()}})
	if err == nil || !containsSub(err.Error(), "store-failover: this run's gateways decide on the single Valkey") {
		t.Fatalf("want an error naming the left-out failover and why, got %v", err)
	}
}

// Async replication is only meaningful on the store group, which --lever store-failover asks for.
func TestOptionsStoreReplication(t *testing.T) {
	o := Options{Duration: 10 * time.Second, Engine: topology.EngineNetns, StoreReplication: "async"}
	if err := o.Validate(); err == nil || !containsSub(err.Error(), "--lever store-failover") {
		t.Fatalf("async without the failover: want an error naming the flag, got %v", err)
	}
	o.Levers = []string{topology.StoreFailover.Name()}
	if err := o.Validate(); err != nil || !o.storeGroup() {
		t.Fatalf("async with the failover: %v (store group %v)", err, o.storeGroup())
	}
	o.StoreReplication = "sync"
	if err := o.Validate(); err == nil || !containsSub(err.Error(), "--store-replication") {
		t.Fatalf("want the flag named, got %v", err)
	}
}

// The reproduce line names the levers and a replication other than the default.
func TestReproduceNamesTheLevers(t *testing.T) {
	s, err := Generate(Plan{Seed: 11, Duration: 10 * time.Second, Gateways: twoGateways,
		Levers: []string{topology.StoreFailover.Name(), PolicyChange.Name()}, StoreGroup: true, Replication: "async"})
	if err != nil {
		t.Fatal(err)
	}
	got := Reproduce(Report{Seed: 11, Schedule: s})
	if !containsSub(got, "quotaqual chaos --seed 11 --duration 10s --lever store-failover --lever policy-change --store-replication async\n") {
		t.Fatalf("the reproduce line does not reproduce:\n%s", got)
	}
}

// A peer's profile decides the levers: what it cannot host is left out with the reason, and
// a partition cuts a gateway off from the hosts the profile names, not from Valkey.
func TestGeneratePeerProfileExcludesWithReasons(t *testing.T) {
	for _, tc := range []struct {
		profile  string
		excluded []string
		peer     string
	}{
		{"envoy-ai-gateway", []string{"store-latency", "store-lost-replies", "store-failover", "policy-change", "partition-primary", "loss"}, "ratelimit"},
		{"gubernator", []string{"stop-valkey", "store-stall", "store-memory-pressure", "store-latency", "store-lost-replies", "store-failover", "partition-primary", "loss"},
			"gubernator-1,gubernator-2,gubernator-3"},
	} {
		gw, err := undertest.Shipped(tc.profile)
		if err != nil {
			t.Fatal(err)
		}
		s, err := Generate(Plan{Seed: 3, Duration: 40 * time.Second, Gateways: []string{"gateway-a", "gateway-b"}, Gateway: gw})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range s.Excluded {
			if e.Reason == "" || !strings.Contains(e.Reason, tc.profile) && e.Lever != "store-failover" && e.Lever != "partition-primary" && e.Lever != "loss" {
				t.Errorf("%s: %s left out without naming the profile: %q", tc.profile, e.Lever, e.Reason)
			}
			got = append(got, e.Lever)
		}
		if !slices.Equal(got, tc.excluded) {
			t.Errorf("%s: left out %v, want %v", tc.profile, got, tc.excluded)
		}
		partitions := 0
		for _, f := range s.Faults {
			if slices.Contains(got, f.Lever) {
				t.Errorf("%s: drew the excluded %s", tc.profile, f)
			}
			if f.Lever == "partition" {
				partitions++
				if f.Target.Peer != tc.peer {
					t.Errorf("%s: %s cuts %q, want %q", tc.profile, f, f.Target.Peer, tc.peer)
				}
			}
		}
		if partitions == 0 {
			t.Errorf("%s: seed 3 drew no partition in 40s: %s", tc.profile, s)
		}
		if s.Gateway != tc.profile {
			t.Errorf("schedule names gateway %q, want %q", s.Gateway, tc.profile)
		}
	}
}

// The chaos rule keeps its ten-minute window where the gateway can express it, takes the
// shortest longer window where it cannot (envoy ratelimit's hour), and refuses a gateway that
// expresses none as long, naming the windows it has.
func TestRuleForTheGatewaysWindows(t *testing.T) {
	for name, want := range map[string]time.Duration{"gubernator": 10 * time.Minute, "envoy-ai-gateway": time.Hour, "kuadrant": time.Hour} {
		gw, err := undertest.Shipped(name)
		if err != nil {
			t.Fatal(err)
		}
		p, err := RuleFor(gw)
		if err != nil || p.Window != want {
			t.Errorf("%s: window %s, %v; want %s", name, p.Window, err, want)
		}
	}
	gw, _ := undertest.Shipped("envoy-ai-gateway")
	gw.Expect.Admission.Windows = []string{"1s", "1m"}
	if _, err := RuleFor(gw); err == nil || !strings.Contains(err.Error(), "1s, 1m") {
		t.Fatalf("want a refusal naming the windows, got %v", err)
	}
}

// A run on an epoch-anchored fixed window (envoy ratelimit's hour) waits when the next
// boundary falls within it; a first-hit window (gubernator) and our own never wait.
func TestEpochBoundaryWithinTheRun(t *testing.T) {
	envoy, _ := undertest.Shipped("envoy-ai-gateway")
	guber, _ := undertest.Shipped("gubernator")
	hour := time.Date(2026, 12, 7, 23, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		gw   *undertest.Profile
		now  time.Time
		wait bool
	}{
		{envoy, hour.Add(-30 * time.Second), true},
		{envoy, hour.Add(-5 * time.Minute), false},
		{envoy, hour.Add(time.Second), false},
		{guber, hour.Add(-30 * time.Second), false},
		{nil, hour.Add(-30 * time.Second), false},
	} {
		b, wait := epochBoundaryWithin(tc.gw, time.Hour, 90*time.Second, tc.now)
		if wait != tc.wait || (wait && !b.Equal(hour)) {
			t.Errorf("now %s: wait %v until %s, want %v", tc.now.Format("15:04:05"), wait, b, tc.wait)
		}
	}
}

// chaos runs on netns and docker only, and says so naming the flag.
func TestOptionsEngines(t *testing.T) {
	for _, e := range []string{topology.EngineNetns, topology.EngineDocker} {
		o := Options{Duration: 10 * time.Second, Engine: e}
		if err := o.Validate(); err != nil {
			t.Errorf("--topology %s: %v", e, err)
		}
	}
	o := Options{Duration: 10 * time.Second, Engine: topology.EngineProcess}
	if err := o.Validate(); err == nil || !containsSub(err.Error(), "--topology process") || !containsSub(err.Error(), "--topology docker") {
		t.Errorf("--topology process: want an error naming it and the engines that work, got %v", err)
	}
}

// A lever the engine cannot host is left out with the engine's reason, never drawn, and the
// other levers are drawn as before; a plan with nothing unhosted draws the very schedule it
// drew without the field (netns's seeds keep their meaning).
func TestUnhostedLeversLeftOutWithTheReason(t *testing.T) {
	plan := Plan{Seed: 42, Duration: 20 * time.Second, Gateways: twoGateways}
	before, err := Generate(plan)
	if err != nil {
		t.Fatal(err)
	}
	plan.Unhosted = map[string]string{}
	if same, _ := Generate(plan); !reflect.DeepEqual(before, same) {
		t.Fatalf("an empty Unhosted redrew seed 42:\n%s\n%s", before, same)
	}
	why := "the docker engine cannot host it: test reason"
	plan.Unhosted = map[string]string{topology.Pause.Name(): why}
	for seed := int64(1); seed <= 50; seed++ {
		plan.Seed = seed
		s, err := Generate(plan)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(s.Excluded, Exclusion{Lever: topology.Pause.Name(), Reason: why}) {
			t.Fatalf("seed %d: pause not left out with the reason: %+v", seed, s.Excluded)
		}
		for _, f := range s.Faults {
			if f.Lever == topology.Pause.Name() {
				t.Fatalf("seed %d drew an unhosted lever: %s", seed, s)
			}
		}
	}
}

// The docker engine answers, before anything starts, which catalogue levers it cannot host;
// each answer names docker and says why. On a Docker host run as root with nsenter and nft
// (this project's machines) it hosts them all; elsewhere the store-link levers go, with the
// reason.
func TestUnhostedOnDocker(t *testing.T) {
	d, err := newDeployment("unhostedtest", Profile())
	if err != nil {
		t.Fatal(err)
	}
	o := Options{Binary: "/bin/true"}
	got, err := Unhosted(topology.EngineDocker, o.spec("unhostedtest", t.TempDir(), d, false))
	if err != nil {
		t.Fatal(err)
	}
	for lever, why := range got {
		if !strings.HasPrefix(why, "the docker engine cannot host it: ") {
			t.Errorf("%s: the reason does not name the engine: %q", lever, why)
		}
		if lever != topology.StoreLatency.Name() && lever != topology.StoreLostReplies.Name() && lever != topology.Loss.Name() {
			t.Errorf("docker cannot host %s: %s", lever, why)
		}
	}
	t.Logf("docker leaves out: %v", got)
	if none, _ := Unhosted(topology.EngineNetns, topology.Spec{}); none != nil {
		t.Errorf("netns is asked nothing, got %v", none)
	}
}

// partition-primary was appended to the catalogue and is left out of every run off the store
// group, so every such run draws exactly the schedule it drew before (seeds keep their
// meaning); on the group, named beside the failover, it is drawn, cutting a gateway from the
// primary, and it never overlaps a failover (both hold the store).
func TestPartitionPrimaryKeepsTheSeeds(t *testing.T) {
	full := Catalogue
	defer func() { Catalogue = full }()
	var before []Schedule
	plans := func() []Plan {
		var ps []Plan
		for seed := int64(1); seed <= 100; seed++ {
			ps = append(ps, Plan{Seed: seed, Duration: 20 * time.Second, Gateways: twoGateways})
			ps = append(ps, Plan{Seed: seed, Duration: 15 * time.Second, Gateways: []string{"gateway-a", "gateway-b", "gateway-c"},
				Levers: []string{"partition", "pause", PartitionPrimary.Name()}})
		}
		return ps
	}
	Catalogue = full[:len(full)-1]
	for _, p := range plans() {
		if p.Levers != nil {
			p.Levers = p.Levers[:2] // the lever did not exist: the same run without it
		}
		s, err := Generate(p)
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, s)
	}
	Catalogue = full
	for i, p := range plans() {
		s, err := Generate(p)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(s.Faults, before[i].Faults) {
			t.Fatalf("seed %d (levers %v) drew another schedule with partition-primary in the catalogue:\n%s\nwas\n%s", p.Seed, p.Levers, s, before[i])
		}
	}
	group := Plan{Seed: 3, Duration: 30 * time.Second, Gateways: twoGateways, StoreGroup: true,
		Levers: []string{topology.StoreFailover.Name(), PartitionPrimary.Name()}}
	s, err := Generate(group)
	if err != nil {
		t.Fatal(err)
	}
	cuts := 0
	for i, f := range s.Faults {
		if f.Lever != PartitionPrimary.Name() {
			continue
		}
		cuts++
		if !slices.Contains(twoGateways, f.Target.Host) || f.Target.Peer != topology.StorePrimaryHost {
			t.Errorf("%s: want a gateway cut from %s", f, topology.StorePrimaryHost)
		}
		k, _ := KindByName(f.Lever)
		if got := k.CutsOff(f.Target, twoGateways); !slices.Equal(got, []string{f.Target.Host}) {
			t.Errorf("%s cuts off %v, want only %s", f, got, f.Target.Host)
		}
		for _, g := range s.Faults[:i] {
			if g.Lever == topology.StoreFailover.Name() && g.At+g.Hold+4*time.Second > f.At {
				t.Errorf("%s overlaps the failover %s", f, g)
			}
		}
	}
	if cuts == 0 {
		t.Fatalf("seed 3 on the group drew no partition-primary in 30 s: %s", s)
	}
}

// Loss is drawn only when named: the default set (and so every recorded seed) is unchanged,
// and a run that names it draws it on a gateway's store link, at lossPercent, for a peer on
// the hosts its profile names.
func TestLossDrawnOnlyWhenNamed(t *testing.T) {
	plan := Plan{Seed: 4, Duration: 30 * time.Second, Gateways: twoGateways, Levers: []string{topology.Loss.Name(), "partition"}}
	s, err := Generate(plan)
	if err != nil {
		t.Fatal(err)
	}
	losses := 0
	for _, f := range s.Faults {
		if f.Lever != topology.Loss.Name() {
			continue
		}
		losses++
		if f.Target.Peer != topology.HostValkey || f.Target.Percent != lossPercent {
			t.Errorf("loss on %+v, want a gateway↔valkey link at %d %%", f.Target, lossPercent)
		}
	}
	if losses == 0 {
		t.Fatalf("a 30 s schedule naming loss drew none:\n%s", s)
	}
	gw, err := undertest.Shipped("envoy-ai-gateway")
	if err != nil {
		t.Fatal(err)
	}
	plan.Gateway = gw
	peer, err := Generate(plan)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range peer.Faults {
		if f.Lever == topology.Loss.Name() && f.Target.Peer != "ratelimit" {
			t.Errorf("envoy-ai-gateway: loss on %+v, want the gateway's link to ratelimit", f.Target)
		}
	}
}
