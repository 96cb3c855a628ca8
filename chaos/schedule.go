package chaos

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
)

// Fault is one entry of a schedule: pull Lever on Target At after the traffic started, and
// release it Hold later (an instant lever, a crash, is pulled and done).
type Fault struct {
	N      int             `json:"n"` // 1-based position in the generated schedule, kept by shrinking
	Lever  string          `json:"lever"`
	Target topology.Target `json:"target"`
	At     time.Duration   `json:"at_ns"`
	Hold   time.Duration   `json:"hold_ns"`
}

func (f Fault) String() string {
	s := fmt.Sprintf("#%d %s %s at %s", f.N, f.Lever, describe(f.Lever, f.Target), f.At)
	if f.Hold > 0 {
		s += " for " + f.Hold.String()
	}
	return s
}

// Schedule is a seed's faults, in the order they start.
type Schedule struct {
	Seed     int64         `json:"seed"`
	Duration time.Duration `json:"duration_ns"`
	Faults   []Fault       `json:"faults"`
	// Levers are the levers the plan named (empty: the whole catalogue), for reproducing it.
	Levers []string `json:"levers,omitempty"`
	// StoreGroup: the run's gateways decide on the replicated store group (Plan.StoreGroup),
	// written with Replication.
	StoreGroup  bool   `json:"store_group,omitempty"`
	Replication string `json:"replication,omitempty"`
	// Gateway names the gateway profile under test ("": quotaqual's own), for reproducing it.
	Gateway string `json:"gateway,omitempty"`
	// Excluded are the levers of the plan this run could not draw, each with why.
	Excluded []Exclusion `json:"excluded,omitempty"`
}

// Exclusion is a lever left out of a schedule, and why.
type Exclusion struct {
	Lever  string `json:"lever"`
	Reason string `json:"reason"`
}

func (s Schedule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "seed %d, %s, %d faults", s.Seed, s.Duration, len(s.Faults))
	if s.StoreGroup {
		b.WriteString(", on the replicated store group")
	}
	for _, f := range s.Faults {
		b.WriteString("\n  " + f.String())
	}
	for _, e := range s.Excluded {
		b.WriteString("\n  left out: " + e.Lever + ": " + e.Reason)
	}
	return b.String()
}

// End is when the last fault is released: the earliest a run of this schedule may stop its
// traffic (plus the tail the checker needs to see recovery).
func (s Schedule) End() time.Duration {
	var end time.Duration
	for _, f := range s.Faults {
		k, _ := KindByName(f.Lever)
		end = max(end, f.At+k.Takes+f.Hold)
	}
	return end
}

// Only returns the schedule with just the faults numbered in keep (a shrinking candidate).
func (s Schedule) Only(faults []Fault) Schedule {
	s.Faults = append([]Fault(nil), faults...)
	return s
}

// Plan is what a schedule is drawn for.
type Plan struct {
	Seed     int64
	Duration time.Duration // the faults all start and end within it
	Gateways []string
	Levers   []string // lever names from Catalogue, in catalogue order; empty: all
	// StoreGroup: the gateways decide on the replicated store group (a run that names the
	// store-failover lever), so the levers on the single Valkey are left out; without it the
	// failover is left out. Either way the schedule records what was left out and why.
	StoreGroup  bool
	Replication string // on the store group: acknowledged or async
	// Gateway is the gateway under test (nil: quotaqual's own): its profile says which levers
	// can act on what it decides by (Kind.Excluded) and which hosts hold its quota state.
	Gateway *undertest.Profile
	// Unhosted are the levers the run's engine cannot host (lever name → the engine's
	// reason, from Lever.Available before anything starts: Unhosted): left out, with it.
	Unhosted map[string]string
}

// The shape of a schedule: a warm-up without faults (so every subject's first decisions are
// made on a whole topology), holds and gaps drawn from these ranges.
const (
	warmUp  = 1 * time.Second
	minHold = 700 * time.Millisecond
	maxHold = 2500 * time.Millisecond
	minGap  = 300 * time.Millisecond
	maxGap  = 2500 * time.Millisecond
	// instantSpan is how long an instant fault (a crash and the restart after it) is taken to
	// hold its resources when the schedule is drawn; the runner waits for the real release.
	instantSpan = 1500 * time.Millisecond
	// tick is the resolution of every time in a schedule, so one reads at a glance.
	tick = 10 * time.Millisecond
)

// Generate draws the schedule of p.Seed: the same plan gives the same schedule, on any
// machine (math/rand/v2's PCG is specified, and nothing else goes in). Faults start one after
// another at random gaps; a gap shorter than the previous hold overlaps them, unless the two
// hold a shared thing (Kind.Holds), in which case the later one starts after the earlier one
// ends.
func Generate(p Plan) (Schedule, error) {
	all, err := kindsOf(p.Levers)
	if err != nil {
		return Schedule{}, err
	}
	if len(p.Gateways) == 0 {
		return Schedule{}, fmt.Errorf("no gateways to draw targets from")
	}
	s := Schedule{Seed: p.Seed, Duration: p.Duration, Levers: p.Levers, StoreGroup: p.StoreGroup, Replication: p.Replication}
	if p.Gateway != nil {
		s.Gateway = p.Gateway.Name
	}
	var kinds []Kind
	for _, k := range all {
		if k.Excluded != nil {
			if why := k.Excluded(p); why != "" {
				s.Excluded = append(s.Excluded, Exclusion{Lever: k.Lever.Name(), Reason: why})
				continue
			}
		}
		if why, ok := p.Unhosted[k.Lever.Name()]; ok {
			s.Excluded = append(s.Excluded, Exclusion{Lever: k.Lever.Name(), Reason: why})
			continue
		}
		kinds = append(kinds, k)
	}
	if len(kinds) == 0 {
		var why []string
		for _, e := range s.Excluded {
			why = append(why, e.Lever+": "+e.Reason)
		}
		return Schedule{}, fmt.Errorf("--lever: every lever named is left out of this run (%s): name levers that act on the store the run decides on", strings.Join(why, "; "))
	}
	rng := rand.New(rand.NewPCG(uint64(p.Seed), 0x9E3779B97F4A7C15))
	between := func(lo, hi time.Duration) time.Duration {
		return (lo + time.Duration(rng.Int64N(int64(hi-lo)+1))).Truncate(tick)
	}
	type held struct {
		end   time.Duration
		holds []string
	}
	var busy []held
	for at := warmUp; ; {
		k := kinds[rng.IntN(len(kinds))]
		targets := k.Targets(p)
		tg := targets[rng.IntN(len(targets))]
		hold := time.Duration(0)
		span := instantSpan
		if !k.Instant {
			hold = between(minHold, maxHold)
			span = k.Takes + hold
		}
		holds := k.Holds(tg)
		for _, b := range busy {
			if b.end > at && overlaps(b.holds, holds) {
				at = (b.end + minGap).Truncate(tick)
			}
		}
		if at+span > p.Duration {
			break
		}
		s.Faults = append(s.Faults, Fault{N: len(s.Faults) + 1, Lever: k.Lever.Name(), Target: tg, At: at, Hold: hold})
		busy = append(busy, held{end: at + span, holds: holds})
		at += between(minGap, maxGap)
	}
	return s, nil
}

func kindsOf(names []string) ([]Kind, error) {
	if len(names) == 0 {
		return Catalogue, nil
	}
	var out []Kind
	for _, k := range Catalogue {
		if slices.Contains(names, k.Lever.Name()) {
			out = append(out, k)
		}
	}
	for _, n := range names {
		if _, ok := KindByName(n); !ok {
			return nil, fmt.Errorf("--lever %q is not a chaos lever: use one of %s", n, strings.Join(LeverNames(), ", "))
		}
	}
	return out, nil
}

// LeverNames lists the catalogue's lever names in order.
func LeverNames() []string {
	out := make([]string, len(Catalogue))
	for i, k := range Catalogue {
		out[i] = k.Lever.Name()
	}
	return out
}

func overlaps(a, b []string) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}
