package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/ledger/ledgermodel"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { register(2100, valkeyFailover) }

// valkeyFailover is the split brain of a replicated store: the primary is cut off from its
// replicas, the Sentinels and gateway-b, while gateway-a still reaches it. The Sentinels promote
// a replica; whatever the old primary admitted alone and had not replicated is gone with it.
// With asynchronous replication those admissions are acknowledged to clients and then handed
// out again by the promoted primary: a budget spent twice. With acknowledged replication
// (WAIT) the isolated primary cannot get its admissions confirmed and answers 503 instead.
//
// Every admitted request is held in flight by its provider for the whole split, so its
// reservation is live throughout: tokens held at once beyond the capacity are double spend,
// whatever the window. The failover pair (gateway-a and gateway-b, failoverPair; any other
// replica stays on the single Valkey) is restarted on the replicated store group for this
// scenario and back afterwards (see topology/store.go for why the group is separate).
func valkeyFailover() Scenario {
	return Scenario{
		Name:      "valkey-failover",
		Summary:   "split brain of a replicated store (primary cut off from replicas, Sentinels and gateway-b; gateway-a still reaches it): no token admitted twice, no acknowledged reservation lost across the promotion",
		Invariant: "hard gate across a failover: reservations held at once ≤ capacity, and every admitted reservation survives the promotion (porcupine-checked against the ledger model)",
		Exclusive: "moves both gateways to the replicated store group and splits it",
		Lasts:     6 * time.Second,
		Needs:     []Need{NeedPartition, NeedStoreGroup, NeedQuotaInspection},
		BlackBox: "has none: the lost-reservation check and the linearizability check read the promoted primary's ledger, " +
			"so the scenario needs quota inspection and is skipped without it; the request history alone would see tokens held at once " +
			"beyond the capacity, not a reservation lost with the old primary",
		Rules: valkeyFailoverRules,
		Run:   runValkeyFailover,
	}
}

// valkeyFailoverRule is the scenario's own rule: the run's budget with a production-length
// lease. A failover takes seconds in which no renewal reaches the store, and a lease shorter
// than that would expire holds the promoted primary still has (charged, but no longer live),
// which the scenario could not tell from a reservation lost in the promotion.
const (
	valkeyFailoverRule  = "valkey-failover"
	valkeyFailoverLease = 30 * time.Second
)

func valkeyFailoverRules(p deployment.Profile) []deployment.ScenarioRule {
	return []deployment.ScenarioRule{runBudgetRule(valkeyFailoverRule, p, p.Window, valkeyFailoverLease)}
}

// failoverHold keeps the requests admitted before and during the split in flight until after
// the promotion (2.6-3.3 s measured) and both gateways' next decisions (3.4-5.4 s), so every
// admission of the scenario overlaps. Only requests still in flight when the promoted primary
// is inspected count for lost reservations, so a slow promotion cannot fake a loss.
const failoverHold = 6 * time.Second

// failoverProbe is how long a request admitted after the promotion is held.
const failoverProbe = 2 * time.Second

// sentRequest is one request of the scenario with what it was sent as.
type sentRequest struct {
	Outcome
	gateway, label string
	hold           time.Duration
}

// failoverPair are the gateways the split brain puts on the replicated store: exactly two,
// whatever the run's replicas, as the scenario needs one gateway on each side of the split
// (gateway-a with the cut-off old primary, gateway-b with the Sentinels' majority). Any other
// replica stays on the single Valkey and takes no part.
var failoverPair = []string{gwA, gwB}

func runValkeyFailover(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	sg, skip, err := env.storeGroup(ctx)
	if skip != "" {
		return r.Skip(skip)
	}
	if err != nil {
		return r.Error(err)
	}
	oldPrimary, err := sg.StorePrimary(ctx)
	if err != nil {
		return r.Error(fmt.Errorf("asking the Sentinels for the primary: %w", err))
	}
	r.Fact("primary_before", oldPrimary)

	var inflight sync.WaitGroup
	var hmu sync.Mutex
	var history []sentRequest
	defer func() {
		// Back on the single Valkey for the scenarios after this one (also after a failed
		// step), once nothing is held.
		inflight.Wait()
		env.moveBackFromStoreGroup(ctx, r, sg)
	}()
	env.Progressf("restarting both gateways on the replicated store")
	if err := env.moveToStoreGroup(ctx, sg); err != nil {
		return r.Error(err)
	}
	// send sends one held request in the background; its outcome lands in the history and on
	// the returned channel once the response is complete. The admission decision comes first,
	// in the response headers, but the client sees it only with the provider's first byte: a
	// 503 or 429 returns at once, a 200 after the hold.
	send := func(gw, label string, hold time.Duration) <-chan Outcome {
		ch := make(chan Outcome, 1)
		inflight.Add(1)
		go func() {
			defer inflight.Done()
			o := env.Chat(ctx, ChatCall{Gateway: gw, Label: label, Subject: appA, Hold: hold})
			hmu.Lock()
			history = append(history, sentRequest{o, gw, label, hold})
			hmu.Unlock()
			ch <- o
		}()
		return ch
	}
	// quick waits up to d for an outcome: a refusal answers at once, an admission only after
	// its hold, so no answer within d means admitted (the history confirms it later).
	quick := func(ch <-chan Outcome, d time.Duration) (Outcome, bool) {
		select {
		case o := <-ch:
			return o, true
		case <-time.After(d):
			return Outcome{}, false
		}
	}
	// A refusal (503, 429) comes within the store timeout; no answer by then means admitted
	// and held. This only paces the loop below: the verdict reads the final history.
	decide := p.StoreTimeout + 300*time.Millisecond

	// Part of the budget, held in flight and replicated to every replica before the split.
	for i := range 2 {
		send(gwA, fmt.Sprintf("before-split-%d", i+1), failoverHold)
	}
	before := awaitHeldAndReplicated(ctx, env, sg, oldPrimary, 2*p.Estimate)
	if !before.ok {
		r.Check("before the split: 2 requests held and replicated to every replica",
			fmt.Sprintf("%d tokens reserved, then every replica at or past the primary's offset, within %s", 2*p.Estimate, p.RecoveryMax), before.String(), false)
	}
	r.Fact("before_split_held_ms", ms(before.held))
	r.Fact("before_split_replicated_ms", ms(before.replicated))
	r.Fact("primary_offset_when_held", before.target)
	r.Fact("replication_before", before.nodes)

	env.Progressf("split brain: %s cut off from the replicas, the Sentinels and gateway-b", oldPrimary)
	var cut []string
	for _, h := range append(append(slices.DeleteFunc(slices.Clone(topology.StoreNodes), func(h string) bool { return h == oldPrimary }), topology.StoreSentinels...), gwB) {
		cut = append(cut, h)
	}
	splitAt := time.Now()
	for _, h := range cut {
		if err := env.Topo.Partition(ctx, oldPrimary, h); err != nil {
			return r.Error(fmt.Errorf("partitioning %s from %s: %w", oldPrimary, h, err))
		}
	}
	healed := false
	heal := func(c context.Context) error {
		var errs []error
		for _, h := range cut {
			if err := env.Topo.Heal(c, oldPrimary, h); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	defer func() {
		if !healed {
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.RecoveryMax)
			defer cancel()
			if err := heal(c); err != nil {
				r.Error(fmt.Errorf("healing after a failed step: %w", err))
			}
		}
	}()
	r.Fact("split_ms", ms(time.Since(splitAt)))

	// gateway-a still reaches the old primary: what it admits now exists only there.
	for i := range 2 {
		quick(send(gwA, fmt.Sprintf("split-%d", i+1), failoverHold), decide)
	}

	// Drive both gateways until the Sentinels have promoted a replica and each gateway decides
	// again (admits or denies, not 503).
	var promotedAt time.Time
	newPrimary := ""
	decidedAgain := map[string]time.Time{}
	// What the promoted primary holds, read through gateway-b as soon as it follows the
	// promotion, while the admissions before and during the split are still in flight.
	var held wire.QuotaState
	var qerr error
	var inspectAt time.Time
	inspect := func() {
		held, qerr = env.Quotas().Read(ctx, gwB, Key{Rule: valkeyFailoverRule, Subject: appA})
		inspectAt = time.Now()
	}
	deadline := time.Now().Add(p.RecoveryMax)
	for i := 0; time.Now().Before(deadline) && (promotedAt.IsZero() || len(decidedAgain) < 2); i++ {
		if promotedAt.IsZero() {
			if h, err := sg.StorePrimary(ctx); err == nil && h != oldPrimary {
				promotedAt, newPrimary = time.Now(), h
			}
		}
		// One request to each gateway that has not decided again yet, at once.
		type probe struct {
			gw   string
			at   time.Time
			o    Outcome
			done bool
		}
		var probes []*probe
		for _, gw := range []string{gwA, gwB} {
			if _, ok := decidedAgain[gw]; !ok {
				probes = append(probes, &probe{gw: gw, at: time.Now()})
			}
		}
		var pw sync.WaitGroup
		for _, pr := range probes {
			ch := send(pr.gw, fmt.Sprintf("during-split-%d-%s", i+1, pr.gw), failoverProbe)
			pw.Add(1)
			go func() { defer pw.Done(); pr.o, pr.done = quick(ch, decide) }()
		}
		pw.Wait()
		for _, pr := range probes {
			decided := !pr.done || pr.o.Status == http.StatusOK || pr.o.Status == http.StatusTooManyRequests
			if !promotedAt.IsZero() && decided {
				decidedAgain[pr.gw] = pr.at // when the request that was decided was sent
				if pr.gw == gwB {
					inspect()
				}
			}
		}
		// Paced: every 503 is an operation whose effect porcupine must consider both ways.
		select {
		case <-ctx.Done():
			return r.Error(ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	if promotedAt.IsZero() {
		r.Check("the Sentinels promoted a replica", "within "+p.RecoveryMax.String(), "no promotion", false)
	} else {
		r.Fact("primary_after", newPrimary)
		r.Fact("time_to_promotion_ms", ms(promotedAt.Sub(splitAt)))
	}
	for _, gw := range []string{gwA, gwB} {
		t, ok := decidedAgain[gw]
		r.Check(gw+" decides again (admits or denies) after the promotion", "within "+p.RecoveryMax.String(), fmt.Sprint(ok), ok)
		if ok {
			r.Fact("time_until_"+gw+"_decides_again_ms", ms(t.Sub(splitAt)))
		}
	}
	if inspectAt.IsZero() {
		inspect()
	}

	env.Progressf("healing the split")
	healAt := time.Now()
	healed = true
	if err := heal(ctx); err != nil {
		return r.Error(fmt.Errorf("healing: %w", err))
	}
	r.Fact("heal_ms", ms(time.Since(healAt)))
	inflight.Wait()
	r.Fact("replication_after", storeOffsets(ctx, sg))
	if ev, err := sg.StoreEvents(); err != nil {
		r.Error(fmt.Errorf("reading the Sentinels' events: %w", err))
	} else {
		r.Fact("promotion_timeline", failoverTimeline(ev, splitAt, healAt))
	}

	hmu.Lock()
	hist := slices.Clone(history)
	hmu.Unlock()
	judgeFailover(r, p.Capacity, p.Estimate, hist, held, qerr, inspectAt)
	return r
}

// quotaRead is the last quota read of a wait, kept so that a wait that ran out says what it
// saw last: the state or the error, from which gateway, when (also as time into the wait, to
// set beside the holds), and of how many reads.
type quotaRead struct {
	gateway string
	since   time.Time // the wait's start
	reads   int
	at      time.Time
	q       wire.QuotaState
	err     error
}

func (s *quotaRead) record(q wire.QuotaState, err error) {
	s.reads++
	s.at, s.q, s.err = time.Now(), q, err
}

func (s quotaRead) String() string {
	if s.reads == 0 {
		return "no quota read from " + s.gateway
	}
	head := fmt.Sprintf("last of %d quota reads from %s, at %s (+%.1f s into the wait): ", s.reads, s.gateway,
		s.at.UTC().Format("15:04:05.000"), s.at.Sub(s.since).Seconds())
	if s.err != nil {
		return head + s.err.Error()
	}
	return head + fmt.Sprintf("%d tokens reserved by %d active reservations", s.q.ReservedTokens, s.q.ActiveReservations)
}

// heldAndReplicated is what awaitHeldAndReplicated saw.
type heldAndReplicated struct {
	ok         bool
	quota      quotaRead
	primary    string
	target     int64 // the primary's offset read once the holds showed; -1 until read
	nodes      []topology.StoreNodeState
	held       time.Duration // from the start of the wait until the quota showed the holds
	replicated time.Duration // until every replica had the target offset
}

func (h heldAndReplicated) String() string {
	if h.held == 0 {
		return h.quota.String()
	}
	s := fmt.Sprintf("held after %.1f s; ", h.held.Seconds())
	if h.target < 0 {
		return s + fmt.Sprintf("the primary %s's offset not read: %v", h.primary, h.nodes)
	}
	return s + fmt.Sprintf("the primary %s then at offset %d; last offsets read: %v", h.primary, h.target, h.nodes)
}

// awaitHeldAndReplicated waits, within the profile's recovery bound, until gateway-a's quota
// shows want tokens reserved, then reads the primary's replication offset once and waits until
// every replica has reached it: the reservations' writes, which came before that offset, are
// then on every replica.
//
// The two are waited for one after the other. Seeing the holds and equal offsets in one round
// misses on a loaded machine: the holds end after failoverHold (then no read can show them
// again), while the Sentinels' hello messages move the primary's offset a few times a second,
// and the three INFO reads (docker execs on the docker engine, 1-2 s per round under load)
// rarely land between two of them — every round of the holds can see the primary, read first,
// behind replicas read later.
func awaitHeldAndReplicated(ctx context.Context, env *Env, sg topology.StoreGroup, primary string, want int64) heldAndReplicated {
	start := time.Now()
	h := heldAndReplicated{quota: quotaRead{gateway: gwA, since: start}, primary: primary, target: -1}
	limit := env.Profile.RecoveryMax
	if _, err := poll(ctx, 20*time.Millisecond, limit, func(ctx context.Context) (bool, error) {
		q, err := env.Quotas().Read(ctx, gwA, Key{Rule: valkeyFailoverRule, Subject: appA})
		h.quota.record(q, err)
		return err == nil && q.ReservedTokens == want, nil
	}); err != nil {
		return h
	}
	h.held = time.Since(start)
	_, err := poll(ctx, 20*time.Millisecond, max(0, limit-h.held), func(ctx context.Context) (bool, error) {
		if h.target < 0 {
			st, err := sg.StoreNode(ctx, primary)
			if err != nil || st.Role != "master" {
				h.nodes = []topology.StoreNodeState{st}
				return false, nil
			}
			h.target = st.Offset
		}
		h.nodes = storeOffsets(ctx, sg)
		return replicatedTo(h.nodes, primary, h.target), nil
	})
	h.ok = err == nil
	if h.ok {
		h.replicated = time.Since(start)
	}
	return h
}

// replicatedTo reports whether every replica has reached offset, and primary is still the
// primary. A replica past it is replicated too: the primary's offset moves on between reads.
func replicatedTo(nodes []topology.StoreNodeState, primary string, offset int64) bool {
	if len(nodes) == 0 {
		return false
	}
	for _, n := range nodes {
		switch {
		case n.Error != "":
			return false
		case n.Host == primary && n.Role != "master":
			return false
		case n.Host != primary && n.Offset < offset:
			return false
		}
	}
	return true
}

// judgeFailover decides the scenario from the request history and the promoted primary's
// view: over-admission (tokens held at once beyond the capacity), lost reservations (admitted,
// still in flight, and absent from the promoted primary), each gateway's 503 window, and a
// porcupine check of the history against the ledger model.
func judgeFailover(r *Result, capacity, estimate int64, hist []sentRequest, held wire.QuotaState, qerr error, inspectAt time.Time) {
	var ivs []interval
	var inFlightAtInspect int64
	first503, last503 := map[string]time.Time{}, map[string]time.Time{}
	admittedSplit := []string{}
	statusCount := map[int]int{}
	for _, o := range hist {
		statusCount[o.Status]++
		if o.Admitted() {
			ivs = append(ivs, interval{Start: o.Start, End: o.End})
		}
		if o.Status == http.StatusServiceUnavailable {
			gw := o.gateway
			if t, ok := first503[gw]; !ok || o.Start.Before(t) {
				first503[gw] = o.Start
			}
			if o.End.After(last503[gw]) {
				last503[gw] = o.End
			}
		}
	}
	for _, o := range hist {
		if o.Admitted() && strings.HasPrefix(o.label, "split-") {
			admittedSplit = append(admittedSplit, o.label+" (request id "+o.RequestID+")")
		}
		if o.Admitted() && o.Start.Before(inspectAt) && o.End.After(inspectAt) {
			inFlightAtInspect += estimate
		}
	}
	peak, _ := peakReserved(ivs, estimate)
	over := max(0, peak-capacity)
	// Whether a request admitted after the promotion was held while one admitted during the
	// split still ran: only then can a lost hold show as tokens held twice at once. When the
	// promotion outlasts the split holds (a slow machine), a lost hold is still spent twice
	// within the window, but the evidence of it is the lost-reservation check, not the peak.
	overlapped := false
	for _, a := range hist {
		if !a.Admitted() || !strings.HasPrefix(a.label, "split-") {
			continue
		}
		for _, b := range hist {
			if b.Admitted() && strings.HasPrefix(b.label, "during-split-") && b.Start.Before(a.End) {
				overlapped = true
			}
		}
	}
	r.Fact("readmitted_while_split_holds_ran", overlapped)
	r.Fact("statuses", statusCount)
	r.Fact("peak_held_tokens", peak)
	r.Fact("over_admission_tokens", over)
	r.Check("no token admitted twice: tokens held at once ≤ capacity", fmt.Sprintf("≤ %d", capacity), peak, peak <= capacity)

	for _, gw := range []string{gwA, gwB} {
		if t, ok := first503[gw]; ok {
			r.Fact(gw+"_503_window_ms", ms(last503[gw].Sub(t)))
		} else {
			r.Fact(gw+"_503_window_ms", 0)
		}
	}
	var lostTokens int64
	if qerr != nil {
		r.Error(fmt.Errorf("reading the promoted primary's holds through gateway-b: %w", qerr))
	} else {
		lostTokens = max(0, inFlightAtInspect-held.ReservedTokens)
		r.Fact("held_on_promoted_primary_tokens", held.ReservedTokens)
		r.Fact("admitted_in_flight_tokens", inFlightAtInspect)
	}
	var lost []string
	if lostTokens > 0 {
		lost = admittedSplit // the admissions gateway-a made alone on the cut-off primary
	}
	r.Fact("lost_reservations", lost)
	r.Check("no acknowledged reservation lost in the promotion", "0 tokens", fmt.Sprintf("%d tokens %v", lostTokens, lost), qerr == nil && lostTokens == 0)

	res := checkFailoverHistory(capacity, estimate, hist)
	r.Fact("porcupine", string(res))
	r.Check("the history is linearizable against the ledger model (porcupine)", string(porcupine.Ok), string(res), res == porcupine.Ok)
	r.Key("over-admission %d tokens, lost %d, peak held %s", over, len(lost), atMost(peak, "capacity", capacity))
}

// checkFailoverHistory turns the history into ledger operations on one key (a reserve per
// request: admitted, denied, or — a 503 — unknown) and checks it with porcupine against the
// ledgertest model. Nothing is settled while the checked requests are in flight, so the
// model's "nothing leaves the window" holds for the part that matters; settlements after the
// holds end are not part of the history.
func checkFailoverHistory(capacity, estimate int64, hist []sentRequest) porcupine.CheckResult {
	var ops []porcupine.Operation
	t0 := time.Time{}
	for _, o := range hist {
		if t0.IsZero() || o.Start.Before(t0) {
			t0 = o.Start
		}
	}
	for i, o := range hist {
		in := ledgermodel.Input{Kind: ledgermodel.OpReserve, Client: i, Seq: i + 1, Estimate: estimate}
		var out ledgermodel.Output
		switch o.Status {
		case http.StatusOK:
			out = ledgermodel.Output{Admitted: true, ID: o.RequestID}
		case http.StatusTooManyRequests:
			out = ledgermodel.Output{Reason: "window_capacity"}
		default:
			out = ledgermodel.Output{Err: fmt.Sprintf("status %d", o.Status)}
		}
		ret := int64(o.End.Sub(t0))
		if out.Err != "" {
			ret = int64(time.Hour) // an unknown outcome may take effect at any time after its call
		}
		ops = append(ops, porcupine.Operation{ClientId: i, Input: in, Call: int64(o.Start.Sub(t0)), Output: out, Return: ret})
	}
	res, _ := ledgermodel.Check(capacity, ops, 10*time.Second, "")
	return res
}

// storeOffsets reads every data node's role and replication offset.
func storeOffsets(ctx context.Context, sg topology.StoreGroup) []topology.StoreNodeState {
	var out []topology.StoreNodeState
	for _, h := range topology.StoreNodes {
		st, _ := sg.StoreNode(ctx, h)
		out = append(out, st)
	}
	return out
}

// failoverTimeline keeps the Sentinel events from the split on, with times relative to it.
func failoverTimeline(ev []topology.StoreEvent, splitAt, healAt time.Time) []string {
	out := []string{"0 ms: partition"}
	healed := false
	for _, e := range ev {
		if e.At.Before(splitAt.Add(-time.Second)) {
			continue
		}
		if !healed && e.At.After(healAt) {
			out = append(out, fmt.Sprintf("%.0f ms: heal", ms(healAt.Sub(splitAt))))
			healed = true
		}
		switch e.Event {
		case "+sdown", "+odown", "+switch-master", "+failover-end", "+promoted-slave", "+convert-to-slave", "+elected-leader":
			out = append(out, fmt.Sprintf("%.0f ms: %s %s %s", ms(e.At.Sub(splitAt)), e.Sentinel, e.Event, e.Detail))
		}
	}
	if !healed {
		out = append(out, fmt.Sprintf("%.0f ms: heal", ms(healAt.Sub(splitAt))))
	}
	return out
}
