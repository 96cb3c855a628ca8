package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { register(2200, rollingUpgrade) }

// rollingUpgrade changes the rule's policy while both gateways serve: gateway-a is restarted
// with policy P2 (shorter window, larger capacity, smaller estimate, shorter lease) while
// gateway-b still runs P1 (the profile's), traffic goes through both, then gateway-b is
// restarted with P2. The guarantee while the two policies share the quota key's state:
//   - no window of either policy ever admits beyond the larger capacity: tokens held at once
//     never exceed max(C1, C2), and each gateway reports its own policy's limit;
//   - no live lease is cut short: every admitted request in flight is held in the store;
//   - no usage leaves a window earlier than either policy allows: after P2's window has passed
//     and P2 has rebuilt its totals, P1's longer window still counts what was settled in it
//     (the ledger used to prune it).
func rollingUpgrade() Scenario {
	return Scenario{
		Name:      "rolling-upgrade",
		Summary:   "gateway-a restarted on policy P2 while gateway-b runs P1, traffic through both, then gateway-b on P2: held tokens ≤ the larger capacity, live leases kept, P1's window keeps usage P2's shorter window dropped",
		Invariant: "hard gate across a policy change: no window admits beyond the larger capacity, no live lease cut short, no usage leaves a window earlier than either policy allows",
		Exclusive: "restarts both gateways on other policies of the qualification's rule",
		Needs:     []Need{NeedRestart, NeedPolicyChange},
		// Without inspection the held tokens come from the request history and P1's memory
		// of the burst from an admission probed on gateway-b; the store's own figures are
		// checks not made.
		Prefers: []Need{NeedQuotaInspection},
		BlackBox: "sees the tokens held at once reconstructed from the request history against the larger capacity, and " +
			"admissions probed through each policy after the rebuild; cannot see what each policy reads from the store while the burst is held, " +
			"nor P3's longer window counting usage settled under P2",
		Run: runRollingUpgrade,
	}
}

// rollingPolicy is P2: a quarter of the window (at least 1 s), 1.5× the capacity, two thirds
// of the estimate, two thirds of the lease of the profile's policy (P1). Both windows are at
// most a minute, so both use one-second buckets.
func rollingPolicy(p deployment.Profile) deployment.Profile {
	p2 := p
	p2.Name = p.Name + "-p2"
	p2.Window = max(time.Second, p.Window/4)
	p2.Capacity = p.Capacity * 3 / 2
	p2.Estimate = max(1, p.Estimate*2/3)
	p2.Lease = max(3*p.StoreTimeout+time.Second, p.Lease*2/3)
	return p2
}

const rollingHold = 800 * time.Millisecond

func runRollingUpgrade(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p1 := env.Profile
	p2 := rollingPolicy(p1)
	ro, ok := env.Topo.(topology.PolicyRollout)
	if !ok {
		return r.Skip("the " + env.Topo.Engine() + " topology cannot restart a gateway on another policy")
	}
	r.Fact("p1", policyFact(p1))
	r.Fact("p2", policyFact(p2))
	larger := max(p1.Capacity, p2.Capacity)
	// gateway-a goes to P2 first; every other replica stays on P1 until the rollout goes on.
	estOf, limitOf := map[string]int64{}, map[string]int64{}
	for _, gw := range env.gateways() {
		estOf[gw], limitOf[gw] = p1.Estimate, p1.Capacity
	}
	estOf[gwA], limitOf[gwA] = p2.Estimate, p2.Capacity

	defer func() { // back on P1 for the scenarios after this one, also after a failed step
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), p1.RecoveryMax)
		defer cancel()
		var mu sync.Mutex
		allGateways(env.gateways(), func(gw string) {
			if err := ro.RestartGatewayWithPolicy(c, gw, nil); err != nil {
				mu.Lock()
				r.Error(fmt.Errorf("restarting %s back on P1: %w", gw, err))
				mu.Unlock()
			}
		})
	}()
	env.Progressf("restarting gateway-a on P2 (window %s, capacity %d)", p2.Window, p2.Capacity)
	if err := ro.RestartGatewayWithPolicy(ctx, gwA, &p2); err != nil {
		return r.Error(err)
	}

	// A burst through every gateway, every admitted request held in flight: each gateway
	// admits by its own policy against the one shared state.
	burst := max(10, len(env.gateways()))
	outs := make([]Outcome, burst)
	var wg sync.WaitGroup
	for i := range burst {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = env.Chat(ctx, ChatCall{Gateway: env.alternate(i), Label: fmt.Sprintf("mixed-%d", i+1), Subject: appA, Hold: rollingHold})
		}()
	}
	// While they are held: what the store holds, seen through each policy.
	if err := waitUntil(ctx, time.Now().Add(rollingHold/2)); err != nil { // the burst's admissions are decided by now
		return r.Error(err)
	}
	held := map[string]wire.QuotaState{}
	inspects := env.inspects()
	if !inspects {
		r.DecidedBy("the request history (held intervals, quota headers)", "admissions probed from outside")
		r.NotMade("no live lease cut short: each gateway sees every admitted request held in the store",
			"no quota inspection: the held tokens are reconstructed from the request history instead")
		r.NotMade("P3's longer window counts usage settled under P2", "no quota inspection, and P3's capacity is too large for one probe to show it")
	}
	for _, gw := range env.gateways() {
		if !inspects { // nothing to read: held stays empty, its checks below are not made
			break
		}
		q, err := env.Quotas().Read(ctx, gw, Key{Rule: RuleName, Subject: appA})
		if err != nil {
			r.Error(err)
			continue
		}
		held[gw] = q
	}
	wg.Wait()
	settledAt := time.Now()

	var ivs []heldInterval
	admitted := map[string]int{}
	for i, o := range outs {
		gw := env.alternate(i)
		if o.Admitted() {
			admitted[gw]++
			ivs = append(ivs, heldInterval{o.Start, o.End, estOf[gw]})
			limit := headerOf(o.Headers, env.gateway().Expect.QuotaHeaders.Limit)
			want := strconv.FormatInt(limitOf[gw], 10)
			r.Check(fmt.Sprintf("%s reports its own policy's limit", gw), want, limit, limit == want)
		} else {
			r.Check(fmt.Sprintf("%s request %d: admitted or denied for the window, never an error", gw, i+1),
				"200 or 429", o.Status, o.Status == http.StatusTooManyRequests)
		}
	}
	peak := peakHeld(ivs)
	r.Fact("admitted", admitted)
	r.Fact("peak_held_tokens", peak)
	r.Check("tokens held at once ≤ the larger capacity", fmt.Sprintf("≤ %d", larger), peak, peak <= larger)
	var admittedTokens int64
	for _, iv := range ivs {
		admittedTokens += iv.est
	}
	for gw, q := range held {
		r.Check("no live lease cut short: "+gw+" sees every admitted request held",
			fmt.Sprintf("%d reservations, %d tokens", len(ivs), admittedTokens),
			fmt.Sprintf("%d reservations, %d tokens", q.ActiveReservations, q.ReservedTokens),
			q.ActiveReservations == int64(len(ivs)) && q.ReservedTokens == admittedTokens)
	}
	var charged int64
	for i, o := range outs {
		if o.Admitted() {
			charged += charge(o, estOf[env.alternate(i)])
		}
	}

	// Past P2's window (and a bucket) but within P1's: P2 rebuilds its totals on its next
	// call; P1's window must still count what the burst was charged.
	check := settledAt.Add(p2.Window + env.bucketWidth(p2.Window) + 200*time.Millisecond)
	if latest := settledAt.Add(p1.Window - 500*time.Millisecond); check.After(latest) {
		return r.Error(fmt.Errorf("P2's window %s leaves no time inside P1's %s", p2.Window, p1.Window))
	}
	if err := waitUntil(ctx, check); err != nil { // bounded by P1's window (checked above)
		return r.Error(err)
	}
	o := env.Chat(ctx, ChatCall{Gateway: gwA, Label: "p2-after-its-window", Subject: appA})
	r.Check("P2 admits once its own window has passed", http.StatusOK, o.Status, o.Admitted())
	r.Fact("burst_charged", charged)
	var q wire.QuotaState
	if inspects {
		var err error
		if q, err = env.Quotas().Read(ctx, gwB, Key{Rule: RuleName, Subject: appA}); err != nil {
			return r.Error(err)
		}
		r.Fact("p1_settled_after_p2_rebuild", q.Settled())
		r.Check("no usage leaves P1's window early: P1 still counts the burst after P2's rebuild",
			fmt.Sprintf("≥ %d", charged), q.Settled(), q.Settled() >= charged)
	} else {
		// From outside: P1 counting the burst (and P2's request) leaves it less than an
		// estimate, so gateway-b denies; had P2's rebuild dropped the burst, it admits.
		counted := charged + charge(o, p2.Estimate)
		if counted+p1.Estimate > p1.Capacity {
			o1 := env.Chat(ctx, ChatCall{Gateway: gwB, Label: "p1-after-p2-rebuild", Subject: appA})
			r.Check(fmt.Sprintf("no usage leaves P1's window early: gateway-b (P1) still counts the burst (%d charged) and denies", counted),
				http.StatusTooManyRequests, o1.Status, o1.Status == http.StatusTooManyRequests)
		} else {
			r.NotMade("no usage leaves P1's window early", fmt.Sprintf("no quota inspection, and the burst's charge %d leaves room in P1's capacity %d: no probe can show it", counted, p1.Capacity))
		}
	}
	if time.Since(settledAt) > p1.Window {
		r.Error(fmt.Errorf("the check ran %s after the settlements, past P1's window %s: not decided", time.Since(settledAt).Round(time.Millisecond), p1.Window))
	}

	// The rollout goes on one replica at a time: gateway-b, then each next one, on P2.
	for _, gw := range env.othersThan(gwA) {
		env.Progressf("restarting %s on P2", gw)
		if err := ro.RestartGatewayWithPolicy(ctx, gw, &p2); err != nil {
			return r.Error(err)
		}
	}
	// Every replica now answers on P2: application-b admitted while P2's budget lasts (every
	// replica with two or a few; past it, with many, a 429 that still names P2's limit).
	onP2 := env.newBudgetRound()
	onP2.estimate, onP2.capacity = p2.Estimate, p2.Capacity
	for _, gw := range env.gateways() {
		_, fits := onP2.next(appB)
		o := env.Chat(ctx, ChatCall{Gateway: gw, Label: "both-on-p2", Subject: appB})
		limit := headerOf(o.Headers, env.gateway().Expect.QuotaHeaders.Limit)
		want := strconv.FormatInt(p2.Capacity, 10)
		if !fits {
			r.Check(gw+" decides past P2's budget with P2's limit after the rollout (429, or 200 once P2's window moved)", "429 or 200, limit "+want,
				fmt.Sprintf("%d, limit %s", o.Status, limit), (o.Status == http.StatusTooManyRequests || o.Admitted()) && limit == want)
			continue
		}
		r.Check(gw+" admits on P2 with P2's limit after the rollout", "200, limit "+want,
			fmt.Sprintf("%d, limit %s", o.Status, limit), o.Admitted() && limit == want)
	}

	// A next change to a window over a minute (P3), whose buckets are window/60 wide: once P3
	// has served a key, usage settled under P2's one-second buckets must count in P3's window
	// too. (Usage from before P3's first call on a key is in buckets P3 does not have: see the
	// limits in docs/ledger.md.)
	p3 := rollingLongPolicy(p1)
	env.Progressf("restarting gateway-a on P3 (window %s)", p3.Window)
	if err := ro.RestartGatewayWithPolicy(ctx, gwA, &p3); err != nil {
		return r.Error(err)
	}
	r.Fact("p3", policyFact(p3))
	first := env.Chat(ctx, ChatCall{Gateway: gwA, Label: "p3-first", Subject: appC})
	r.Check("gateway-a (P3) admits", http.StatusOK, first.Status, first.Admitted())
	o = env.Chat(ctx, ChatCall{Gateway: gwB, Label: "p2-settles-for-p3", Subject: appC})
	r.Check("gateway-b (P2) admits while gateway-a runs P3", http.StatusOK, o.Status, o.Admitted())
	want := charge(first, p3.Estimate) + charge(o, p2.Estimate)
	var seen int64
	if inspects {
		if _, err := poll(ctx, 50*time.Millisecond, 2*time.Second, func(ctx context.Context) (bool, error) {
			q, err := env.Quotas().Read(ctx, gwA, Key{Rule: RuleName, Subject: appC})
			seen = q.Settled()
			return err == nil && seen >= want, nil
		}); err != nil && !errors.Is(err, errPollDeadline) {
			return r.Error(err)
		}
		r.Check("P3's longer window (buckets of "+env.bucketWidth(p3.Window).String()+") counts usage settled under P2 (1 s buckets)",
			fmt.Sprintf("≥ %d", want), seen, seen >= want)
	}
	burstAdmitted := len(ivs)
	if !inspects {
		r.Key("peak held (from the request history) %s, %d+%d admitted", atMost(peak, "capacity", larger), admitted[gwA], burstAdmitted-admitted[gwA])
		return r
	}
	r.Key("peak held %s, P1 kept %d/%d settled after P2's rebuild, P3 saw %d/%d, %d+%d admitted",
		atMost(peak, "capacity", larger), q.Settled(), charged, seen, want, admitted[gwA], burstAdmitted-admitted[gwA])
	return r
}

// rollingLongPolicy is P3: P1 with a two-minute window (buckets of two seconds instead of one)
// and twice the capacity.
func rollingLongPolicy(p deployment.Profile) deployment.Profile {
	p3 := p
	p3.Name = p.Name + "-p3"
	p3.Window = 2 * time.Minute
	p3.Capacity = 2 * p.Capacity
	return p3
}

// heldInterval is one admitted request's time in flight and the tokens it held.
type heldInterval struct {
	start, end time.Time
	est        int64
}

// peakHeld is the most tokens held at one instant by the intervals (an interval ending when
// another starts counts as overlapping).
func peakHeld(ivs []heldInterval) int64 {
	type edge struct {
		t     time.Time
		delta int64
	}
	var edges []edge
	for _, iv := range ivs {
		edges = append(edges, edge{iv.start, iv.est}, edge{iv.end, -iv.est})
	}
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].t.Equal(edges[j].t) {
			return edges[i].t.Before(edges[j].t)
		}
		return edges[i].delta > edges[j].delta
	})
	var n, best int64
	for _, e := range edges {
		n += e.delta
		best = max(best, n)
	}
	return best
}

// allGateways runs f for every gateway at once (a restart of each takes a few hundred
// milliseconds).
func allGateways(gateways []string, f func(gw string)) {
	var wg sync.WaitGroup
	for _, gw := range gateways {
		wg.Add(1)
		go func() { defer wg.Done(); f(gw) }()
	}
	wg.Wait()
}

func policyFact(p deployment.Profile) map[string]any {
	return map[string]any{"window": p.Window.String(), "capacity": p.Capacity, "reserved_tokens": p.Estimate, "lease": p.Lease.String()}
}
