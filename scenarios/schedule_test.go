package scenarios

import (
	"context"
	"fmt"
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
