package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
)

// occupancy records which scenarios run at once.
type occupancy struct {
	mu      sync.Mutex
	running map[string]bool
	events  []string // "+name" at start, "-name" at end, in order
	beside  map[string][]string
	peak    int
}

func (o *occupancy) enter(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for other := range o.running {
		o.beside[name] = append(o.beside[name], other)
		o.beside[other] = append(o.beside[other], name)
	}
	o.running[name] = true
	o.events = append(o.events, "+"+name)
	o.peak = max(o.peak, len(o.running))
}

func (o *occupancy) leave(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.running, name)
	o.events = append(o.events, "-"+name)
}

// TestScheduleRunsLeversAloneAndTheRestSideBySide: an exclusive scenario never overlaps
// another until it hands the topology back (and one that does runs first); the shared ones
// then run side by side (bounded); the next exclusive ones wait for them, in list order;
// results come back in list order.
func TestScheduleRunsLeversAloneAndTheRestSideBySide(t *testing.T) {
	occ := &occupancy{running: map[string]bool{}, beside: map[string][]string{}}
	step := func(name string, share bool) func(ctx context.Context, env *Env) *Result {
		return func(ctx context.Context, env *Env) *Result {
			r := env.NewResult()
			occ.enter(name)
			time.Sleep(30 * time.Millisecond)
			if share {
				env.ShareTopology()
				time.Sleep(150 * time.Millisecond) // the lever's tail: a wait others may overlap
			}
			occ.leave(name)
			r.Check("ran", 1, 1, true)
			return r
		}
	}
	var list []Scenario
	var shared []string
	for i := range sideBySide + 3 {
		name := fmt.Sprintf("shared-%d", i)
		shared = append(shared, name)
		list = append(list, fake(name, nil, step(name, false)))
	}
	lever := func(name string, share bool) Scenario {
		s := fake(name, nil, step(name, share))
		s.Exclusive = "pulls a lever"
		s.SharesAfterLever = share
		return s
	}
	list = append([]Scenario{lever("lever-1", false), lever("lever-2", true)}, append(list, lever("lever-3", false))...)

	res := Run(context.Background(), testEnv(topology.Capabilities{}), list)
	for i, r := range res {
		if r.Name != list[i].Name || r.Status != evidence.Passed {
			t.Fatalf("result %d: %s %s, want %s passed (results in list order)", i, r.Name, r.Status, list[i].Name)
		}
	}
	if b := occ.beside["lever-1"]; len(b) != 0 {
		t.Errorf("lever-1 ran beside %v", b)
	}
	if b := occ.beside["lever-3"]; len(b) != 0 {
		t.Errorf("lever-3 ran beside %v", b)
	}
	for _, name := range occ.beside["lever-2"] {
		if !strings.HasPrefix(name, "shared-") {
			t.Errorf("lever-2 ran beside another lever, %s", name)
		}
	}
	if len(occ.beside["lever-2"]) == 0 {
		t.Errorf("no shared scenario ran in lever-2's tail after it handed the topology back: %v", occ.events)
	}
	if occ.peak < 3 || occ.peak > sideBySide+1 {
		t.Errorf("peak %d at once, want side by side (> 2) and at most %d shared plus lever-2", occ.peak, sideBySide)
	}
	if occ.events[0] != "+lever-2" {
		t.Errorf("lever-2, which hands the topology back, did not run first: %v", occ.events)
	}
	last := occ.events[len(occ.events)-4:]
	if strings.Join(last, " ") != "+lever-1 -lever-1 +lever-3 -lever-3" {
		t.Errorf("the other levers did not run last, alone and in list order: %v", occ.events)
	}
}

// TestScheduleWithoutLeversRunsEverythingSideBySide, and a scenario's failure or panic does
// not keep the others from finishing.
func TestScheduleWithoutLeversRunsEverythingSideBySide(t *testing.T) {
	var mu sync.Mutex
	started := 0
	all := make(chan struct{})
	wait := func(ctx context.Context, env *Env) *Result {
		r := env.NewResult()
		mu.Lock()
		started++
		if started == 3 {
			close(all)
		}
		mu.Unlock()
		select {
		case <-all:
			r.Check("the three ran at once", true, true, true)
		case <-ctx.Done():
			r.Check("the three ran at once", true, false, false)
		}
		return r
	}
	boom := func(ctx context.Context, env *Env) *Result {
		if r := wait(ctx, env); r != nil {
			panic("boom")
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res := Run(ctx, testEnv(topology.Capabilities{}), []Scenario{fake("a", nil, wait), fake("b", nil, boom), fake("c", nil, wait)})
	if res[0].Status != evidence.Passed || res[2].Status != evidence.Passed {
		t.Fatalf("a %s %q, c %s %q: want both passed beside b", res[0].Status, res[0].Reason, res[2].Status, res[2].Reason)
	}
	if res[1].Status != evidence.Failed || !strings.Contains(res[1].Reason, "panic") {
		t.Fatalf("b: %s %q, want failed by its panic", res[1].Status, res[1].Reason)
	}
}

// A gateway that does not forward the scenario header leaves the provider stubs unable to tell
// the scenarios' calls apart: every scenario then runs alone, even those that pull no lever.
func TestScheduleWithoutTheScenarioHeaderRunsOneAtATime(t *testing.T) {
	var mu sync.Mutex
	running, peak := 0, 0
	run := func(ctx context.Context, env *Env) *Result {
		r := env.NewResult()
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		time.Sleep(50 * time.Millisecond) // long enough for a second one to start beside it
		mu.Lock()
		running--
		mu.Unlock()
		r.Check("ran", true, true, true)
		return r
	}
	gw := *undertest.Default()
	gw.Caps.ForwardsScenarioHeader = false
	env := testEnv(topology.Capabilities{})
	env.Gateway = &gw
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lever := fake("d", nil, run)
	lever.Exclusive = "pulls a lever"
	res, ran := RunScheduled(ctx, env, []Scenario{fake("a", nil, run), fake("b", nil, run), fake("c", nil, run), lever})
	for _, r := range res {
		if r.Status != evidence.Passed {
			t.Fatalf("%s: %s %q", r.Name, r.Status, r.Reason)
		}
	}
	if peak != 1 {
		t.Errorf("%d scenarios ran at once; want one at a time", peak)
	}
	// The closing progress line says so: none side by side, every one alone, and why.
	if got, want := ran.String(), "0 side by side, 4 alone (1 for a lever or a load, 3 because gateway profile quotaqual does not forward the scenario header)"; got != want {
		t.Errorf("ran = %q, want %q", got, want)
	}
}

// Ran counts what happened: the shared scenarios side by side, the levers alone, and a scenario
// skipped before it started (a lever the topology lacks) not at all.
func TestRanSaysHowTheScenariosRan(t *testing.T) {
	pass := func(ctx context.Context, env *Env) *Result {
		r := env.NewResult()
		r.Check("ran", true, true, true)
		return r
	}
	lever := fake("lever", nil, pass)
	lever.Exclusive = "pulls a lever"
	list := []Scenario{fake("a", nil, pass), fake("b", nil, pass), lever, fake("cut", []Need{NeedPartition}, pass)}
	_, ran := RunScheduled(context.Background(), testEnv(topology.Capabilities{}), list)
	if got, want := ran.String(), "2 side by side, 1 alone (a lever or a load), 1 not run"; got != want {
		t.Errorf("ran = %q, want %q", got, want)
	}
}

// ownTopologies is an Env.OwnTopology that records what it brought up and tore down: each
// topology's work directory names its scenario, so a scenario can tell it runs on its own.
type ownTopologies struct {
	mu         sync.Mutex
	up, down   []string
	fail       map[string]bool // scenarios whose topology does not come up
	live, peak int
}

func (o *ownTopologies) open(ctx context.Context, sc Scenario) (OwnTopology, func(), error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.fail[sc.Name] {
		return OwnTopology{}, nil, fmt.Errorf("bridge for %s: no slot", sc.Name)
	}
	o.up = append(o.up, sc.Name)
	o.live++
	o.peak = max(o.peak, o.live)
	done := func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		o.down = append(o.down, sc.Name)
		o.live--
	}
	return OwnTopology{Topo: capsOnly{}, WorkDir: "own-" + sc.Name}, done, nil
}

// TestOwnTopologiesGiveEachLeverItsOwn: with Env.OwnTopology set, each lever scenario runs on
// a topology of its own (and the shared ones on the run's), the levers side by side with each
// other and with the shared block, at most OwnTopologies at once; no topology comes up for a
// scenario skipped before it starts; every topology brought up is torn down; results come back
// in list order, and Ran says how they ran.
func TestOwnTopologiesGiveEachLeverItsOwn(t *testing.T) {
	occ := &occupancy{running: map[string]bool{}, beside: map[string][]string{}}
	step := func(name string, lever bool) func(ctx context.Context, env *Env) *Result {
		return func(ctx context.Context, env *Env) *Result {
			r := env.NewResult()
			occ.enter(name)
			time.Sleep(60 * time.Millisecond)
			occ.leave(name)
			want := "run"
			if lever {
				want = "own-" + name
			}
			r.Check("ran on its topology", want, env.WorkDir, env.WorkDir == want)
			return r
		}
	}
	var list []Scenario
	for i := range 3 {
		name := fmt.Sprintf("shared-%d", i)
		list = append(list, fake(name, nil, step(name, false)))
	}
	var levers []string
	for i := range 5 {
		name := fmt.Sprintf("lever-%d", i)
		s := fake(name, nil, step(name, true))
		s.Exclusive, s.SharesAfterLever = "pulls a lever", i == 0
		list = append(list, s)
		levers = append(levers, name)
	}
	cut := fake("cut", []Need{NeedPartition}, step("cut", true))
	cut.Exclusive = "cuts a link"
	load := fake("load", nil, step("load", false))
	load.Exclusive, load.WholeMachine = "loads the machine", true
	list = append(list, cut, load)

	own := &ownTopologies{}
	env := testEnv(topology.Capabilities{})
	env.WorkDir, env.OwnTopology, env.OwnTopologies = "run", own.open, 2
	res, ran := RunScheduled(context.Background(), env, list)
	for i, r := range res {
		want := evidence.Passed
		if list[i].Name == "cut" {
			want = evidence.Skipped
		}
		if r.Name != list[i].Name || r.Status != want {
			t.Fatalf("result %d: %s %s %q, want %s %s (results in list order)", i, r.Name, r.Status, r.Reason, list[i].Name, want)
		}
	}
	if strings.Join(slices.Sorted(slices.Values(own.up)), " ") != strings.Join(levers, " ") {
		t.Errorf("topologies brought up for %v, want one for each lever %v (none for the skipped one)", own.up, levers)
	}
	if len(own.down) != len(own.up) || own.live != 0 {
		t.Errorf("torn down %v of %v (%d still up)", own.down, own.up, own.live)
	}
	if own.peak != 2 {
		t.Errorf("%d own topologies up at once, want the bound, 2", own.peak)
	}
	leverBesideLever, leverBesideShared := false, false
	for _, l := range levers {
		for _, other := range occ.beside[l] {
			leverBesideLever = leverBesideLever || strings.HasPrefix(other, "lever-")
			leverBesideShared = leverBesideShared || strings.HasPrefix(other, "shared-")
		}
	}
	if !leverBesideLever || !leverBesideShared {
		t.Errorf("levers beside levers %v, beside shared scenarios %v: want both (%v)", leverBesideLever, leverBesideShared, occ.events)
	}
	// The one that needs the whole machine ran last, on the run's topology, with nothing beside it.
	if b := occ.beside["load"]; len(b) != 0 || occ.events[len(occ.events)-2] != "+load" {
		t.Errorf("load, which needs the whole machine, ran beside %v (events %v): want last and alone", b, occ.events)
	}
	if got, want := ran.String(), "3 side by side, 5 on topologies of their own, 1 alone (a lever or a load), 1 not run"; got != want {
		t.Errorf("ran = %q, want %q", got, want)
	}
}

// A lever scenario whose own topology does not come up is skipped with the reason; the others
// run; a cancelled run brings no topology up and skips every scenario as interrupted.
func TestOwnTopologyThatDoesNotComeUpSkipsItsScenario(t *testing.T) {
	pass := func(ctx context.Context, env *Env) *Result {
		r := env.NewResult()
		r.Check("ran", true, true, true)
		return r
	}
	a, b := fake("a", nil, pass), fake("b", nil, pass)
	a.Exclusive, b.Exclusive = "pulls a lever", "pulls a lever"
	own := &ownTopologies{fail: map[string]bool{"a": true}}
	env := testEnv(topology.Capabilities{})
	env.OwnTopology, env.OwnTopologies = own.open, 4
	res, ran := RunScheduled(context.Background(), env, []Scenario{a, b, fake("c", nil, pass)})
	if res[0].Status != evidence.Skipped || !strings.Contains(res[0].Reason, "its own topology could not be brought up: bridge for a: no slot") {
		t.Errorf("a: %s %q, want skipped with its topology's error", res[0].Status, res[0].Reason)
	}
	if res[1].Status != evidence.Passed || res[2].Status != evidence.Passed {
		t.Errorf("b %s, c %s: want both passed", res[1].Status, res[2].Status)
	}
	if got, want := ran.String(), "1 side by side, 1 on topologies of their own, 1 not run"; got != want {
		t.Errorf("ran = %q, want %q", got, want)
	}

	own = &ownTopologies{}
	env.OwnTopology = own.open
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, _ = RunScheduled(ctx, env, []Scenario{a, b, fake("c", nil, pass)})
	for _, r := range res {
		if r.Status != evidence.Skipped || r.KeyFact != "interrupted" {
			t.Errorf("%s: %s %q after the run was interrupted, want skipped as interrupted", r.Name, r.Status, r.KeyFact)
		}
	}
	if len(own.up) != 0 {
		t.Errorf("an interrupted run brought topologies up for %v", own.up)
	}
}

// TestOwnTopologiesStartLongestFirst: with one slot, the scenarios on topologies of their own
// come up in the order of their Lasts, longest first, the rest in list order; the results
// still come back in list order.
func TestOwnTopologiesStartLongestFirst(t *testing.T) {
	var list []Scenario
	for _, l := range []struct {
		name  string
		lasts time.Duration
	}{{"short", 0}, {"long", 9 * time.Second}, {"plain", 0}, {"longest", 12 * time.Second}} {
		s := fake(l.name, nil, func(ctx context.Context, env *Env) *Result { return env.NewResult() })
		s.Exclusive, s.Lasts = "pulls a lever", l.lasts
		list = append(list, s)
	}
	own := &ownTopologies{}
	env := testEnv(topology.Capabilities{})
	env.WorkDir, env.OwnTopology, env.OwnTopologies = "run", own.open, 1
	res, _ := RunScheduled(context.Background(), env, list)
	if want := []string{"longest", "long", "short", "plain"}; !slices.Equal(own.up, want) {
		t.Errorf("own topologies came up in the order %v, want %v", own.up, want)
	}
	for i, r := range res {
		if r.Name != list[i].Name {
			t.Errorf("result %d is %s, want %s (list order)", i, r.Name, list[i].Name)
		}
	}
}
