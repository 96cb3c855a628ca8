package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
)

func init() { register(600, concurrency) }

// concurrencyBurst is how many requests the burst sends at once: many more than capacity /
// estimate on every profile (24 against 60/15 = 4), so the gate, not the burst, decides.
const concurrencyBurst = 24

// quotaSampleInterval is how often the ledger's reserved tokens are sampled during the burst.
const quotaSampleInterval = 10 * time.Millisecond

func concurrency() Scenario {
	return Scenario{
		Name:    "concurrency",
		Summary: "a burst of many more simultaneous requests than the capacity allows, across both gateways, with providers holding each in flight",
		Invariant: "hard gate: peak reserved tokens ≤ capacity (sampled from the ledger and reconstructed from the request history); " +
			"admitted == capacity / estimate; denials reach no provider",
		Prefers: []Need{NeedQuotaInspection},
		BlackBox: "sees how many of the burst were admitted and denied on each gateway, the held intervals from the request " +
			"history (the peak it reconstructs from them), and the providers' calls; cannot see the ledger's reserved tokens while the burst " +
			"is held, nor whether a hold outlived its lease by renewal or was charged its estimate when it expired, nor the settled figure",
		Rules: concurrencyRules,
		Run:   runConcurrency,
	}
}

// concurrencyRuleName is the scenario's own rule: the run's budget with the shortest lease
// with renewal (shortestRenewedLease), which its holds must outlast; the run takes as long as
// they do.
const concurrencyRuleName = "concurrency"

// concurrencyOutlast is how much longer than the lease the providers hold each admitted
// request: a gateway that does not renew loses its holds mid-request and the qualification
// sees it. On quick: 2.5 s lease, 3 s hold on its own rule; 3 s lease, 3.5 s hold on the run's.
const concurrencyOutlast = 500 * time.Millisecond

func concurrencyRules(p deployment.Profile) []deployment.ScenarioRule {
	lease, _ := concurrencyHold(p, true)
	return []deployment.ScenarioRule{runBudgetRule(concurrencyRuleName, p, p.Window, lease)}
}

// concurrencyHold is concurrency's lease and provider hold: on its own rule (ownRule: the
// gateway renders scenario rules) the shortest lease with renewal, else the run's Lease; the
// hold outlasts the lease by concurrencyOutlast either way.
func concurrencyHold(p deployment.Profile, ownRule bool) (lease, hold time.Duration) {
	lease = p.Lease
	if ownRule {
		lease = shortestRenewedLease(p)
	}
	return lease, lease + concurrencyOutlast
}

// longestHold is the longest a provider holds a scenario's request (concurrency's hold on
// either rule): what a request's deadline must leave room for.
func longestHold(p deployment.Profile) time.Duration {
	_, own := concurrencyHold(p, true)
	_, run := concurrencyHold(p, false)
	return max(own, run)
}

// interval is one admitted request's time in flight, as the client saw it, and the tokens it
// holds meanwhile (0: the caller's per-request weight).
type interval struct {
	Start, End time.Time
	Tokens     int64
}

// peakReserved reconstructs the peak reserved tokens from the admitted requests' intervals:
// the most tokens held by the intervals in flight at one instant, each holding its Tokens or,
// when it has none, estimate. An interval holds from Start to End inclusive, so one ending
// exactly when another starts counts as overlapping (conservative).
func peakReserved(ivs []interval, estimate int64) (peak int64, at time.Time) {
	type edge struct {
		t     time.Time
		delta int64
	}
	edges := make([]edge, 0, 2*len(ivs))
	for _, iv := range ivs {
		w := iv.Tokens
		if w == 0 {
			w = estimate
		}
		edges = append(edges, edge{iv.Start, +w}, edge{iv.End, -w})
	}
	sort.Slice(edges, func(i, j int) bool {
		if !edges[i].t.Equal(edges[j].t) {
			return edges[i].t.Before(edges[j].t)
		}
		return edges[i].delta > edges[j].delta // starts before ends at the same instant
	})
	var n, best int64
	for _, e := range edges {
		n += e.delta
		if n > best {
			best, at = n, e.t
		}
	}
	return best, at
}

// concurrencyRule is the rule concurrency's burst runs under, its lease and how long the
// providers hold each admitted request: the scenario's own rule (the shortest lease with
// renewal) when the gateway renders scenario rules, else the run's rule; either way the holds
// outlast the lease (concurrencyHold).
func concurrencyRule(env *Env) (rule string, lease, hold time.Duration) {
	own := env.hasOwnRule(concurrencyRuleName)
	lease, hold = concurrencyHold(env.Profile, own)
	if own {
		return concurrencyRuleName, lease, hold
	}
	return RuleName, lease, hold
}

func runConcurrency(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	if p.Estimate <= 0 {
		return r.Error(fmt.Errorf("profile %s has estimate %d: it must be positive", p.Name, p.Estimate))
	}
	rule, lease, hold := concurrencyRule(env)
	allowed := p.Capacity / p.Estimate
	ctc := env.checksThenCharges()
	if ctc {
		// Nothing is charged before a response ends and every decision comes before the first
		// one does (the providers hold each admitted request): the model admits the burst.
		allowed = 0
		if env.admitCost(env.Profile) <= p.Capacity {
			allowed = int64(concurrencyBurst)
		}
		r.Fact("admission_model", env.admissionRule()+": nothing is charged before a response ends")
	}
	r.Fact("rule", rule)
	r.Fact("burst", concurrencyBurst)
	r.Fact("hold", hold.String())
	r.Fact("lease", lease.String())
	r.Fact("allowed_by_capacity", allowed)
	if hold <= 0 {
		r.Fact("note", "the profile holds no request at the provider: admissions may settle before the burst is decided")
	}
	before, ok := env.readProviders(ctx, r, "provider call counts before")
	if !ok {
		return r
	}

	// Sampler: the ledger's reserved tokens every ~10 ms, until the burst has settled.
	if err := env.fixedWindowStart(ctx, r, env.Profile.Window, fixedWindowMargin); err != nil {
		return r.Error(err)
	}
	sampler := env.sampleLedger(ctx, Key{Rule: rule, Subject: appA}, p.Window, quotaSampleInterval)

	// The burst, released together through a barrier, going round every gateway replica.
	outs := make([]Outcome, concurrencyBurst)
	release := make(chan struct{})
	var ready, done sync.WaitGroup
	for i := 0; i < concurrencyBurst; i++ {
		ready.Add(1)
		done.Add(1)
		go func(i int) {
			defer done.Done()
			ready.Done()
			<-release
			outs[i] = env.Chat(ctx, ChatCall{Gateway: env.alternate(i), Label: fmt.Sprintf("burst-%d", i+1), Subject: appA, Hold: hold})
		}(i)
	}
	ready.Wait()
	released := time.Now()
	close(release)
	done.Wait()
	burstEnd := time.Now()
	// Keep sampling until the reservations have settled, then stop.
	idle, idleErr := env.Quotas().WaitIdle(ctx, gwA, Key{Rule: rule, Subject: appA})
	samples, sampleErrs := sampler.Stop(env, r, appA)

	after, err := env.settledProviders(ctx)
	if err != nil {
		return r.Error(fmt.Errorf("provider call counts after: %w", err))
	}

	var admitted, denied, other int
	otherKinds := map[string]int{} // "503 quota_store_unavailable" → count
	var ivs []interval
	var lastDecision time.Time // when the last denial was answered
	firstAdmittedEnd := time.Time{}
	for _, o := range outs {
		switch o.Status {
		case http.StatusOK:
			admitted++
			iv := interval{Start: o.Start, End: o.End}
			if ctc {
				// Holding nothing, each admitted request still spends what it used: the
				// tokens admitted at once are what the budget lets through together.
				iv.Tokens = max(1, charge(o, env.admitCost(env.Profile)))
			}
			ivs = append(ivs, iv)
			if firstAdmittedEnd.IsZero() || o.End.Before(firstAdmittedEnd) {
				firstAdmittedEnd = o.End
			}
		case http.StatusTooManyRequests:
			denied++
			if o.End.After(lastDecision) {
				lastDecision = o.End
			}
		default:
			other++
			otherKinds[fmt.Sprintf("%d %s", o.Status, o.ErrorType)]++
		}
	}
	var sampledPeak, sampledActivePeak int64
	for _, s := range samples {
		sampledPeak = max(sampledPeak, s.Reserved)
		sampledActivePeak = max(sampledActivePeak, s.Active)
	}
	histPeak, histAt := peakReserved(ivs, p.Estimate)
	d := TotalDelta(before, after)

	r.Fact("statuses", statuses(outs))
	perGateway := env.tallyByGateway(outs, env.alternate)
	r.Fact("per_gateway", perGateway)
	r.Fact("admitted", admitted)
	r.Fact("denied_429", denied)
	r.Fact("other_status", other)
	if other > 0 {
		r.Fact("other_status_kinds", otherKinds)
	}
	r.Fact("burst_duration_ms", ms(burstEnd.Sub(released)))
	if env.inspects() {
		// The ledger's figures, sampled: a gateway without inspection has none to report.
		r.Fact("samples", len(samples))
		r.Fact("sample_errors", sampleErrs)
		r.Fact("peak_reserved_sampled", sampledPeak)
		r.Fact("peak_active_reservations_sampled", sampledActivePeak)
	}
	r.Fact("peak_reserved_reconstructed", histPeak)
	if !histAt.IsZero() {
		r.Fact("peak_reconstructed_at_ms_after_release", ms(histAt.Sub(released)))
	}
	r.Fact("provider_calls_delta", d)
	r.Fact("provider_distribution", SiteDelta(before, after))
	if idleErr != nil {
		// Reservations still held after every response: requests the gateway answered with
		// an error after the store had reserved (a store reply past the timeout) hold their
		// estimate until the lease expires — conservative, and worth seeing.
		r.Fact("reservations_still_held_after_burst", fmt.Sprintf("%d reservations, %d tokens", idle.ActiveReservations, idle.ReservedTokens))
		r.Error(idleErr)
	} else if env.inspects() {
		r.Fact("settled_after_burst", idle.Settled())
	}

	if ctc {
		r.Check("admitted == what check-then-charge admits (the whole burst: nothing is charged before a response ends)", allowed, admitted, int64(admitted) == allowed)
	} else {
		r.Check("admitted == capacity / estimate", allowed, admitted, int64(admitted) == allowed)
	}
	r.Check("every other request denied with 429", concurrencyBurst-admitted, denied, denied == concurrencyBurst-admitted && other == 0)
	env.checkEveryReplicaDecided(r, "the burst", perGateway)
	inspected := env.inspects()
	if inspected {
		r.Check("peak reserved ≤ capacity (sampled from the ledger)", fmt.Sprintf("≤ %d", p.Capacity), sampledPeak, sampledPeak <= p.Capacity)
	}
	if ctc {
		r.Check("tokens admitted at once ≤ capacity (reconstructed from the history: each admitted request's reported usage)", fmt.Sprintf("≤ %d", p.Capacity), histPeak, histPeak <= p.Capacity)
	} else {
		r.Check("peak reserved ≤ capacity (reconstructed from the history)", fmt.Sprintf("≤ %d", p.Capacity), histPeak, histPeak <= p.Capacity)
	}
	if inspected {
		r.Check("the sampler saw reservations in flight (the sampled peak is not vacuous)", fmt.Sprintf("≥ %d", p.Estimate), sampledPeak, sampledPeak >= p.Estimate)
	}
	r.Check("no denied request reached a provider (provider calls == admitted)", admitted, d, d == int64(admitted))
	if inspected {
		checkHeldInFlight(r, samples, outs, hold)
	} else {
		r.NotMade("peak reserved sampled from the ledger; every admitted request keeps its reservation while in flight; settled == reported usage",
			"no quota inspection: the peak is reconstructed from the request history only")
	}
	if idleErr == nil && inspected {
		// Truthful metering: every admitted request settled once, at the usage its response
		// reported — also when it outlived the lease (renewed, not expired at its estimate).
		var usage int64
		for _, o := range outs {
			if o.Admitted() {
				usage += charge(o, p.Estimate)
			}
		}
		r.Check("settled after the burst == the admitted responses' reported usage (each settled once, at its usage)", usage, idle.Settled(), idle.Settled() == usage)
	}
	// Context for exactness: a denial answered after the first admitted request finished was
	// decided against settled usage plus the remaining reservations (still a denial while
	// fewer than three of four have settled), so this is a fact, not a check.
	if admitted > 0 && denied > 0 {
		r.Fact("decisions_within_hold", !lastDecision.After(firstAdmittedEnd))
		r.Fact("last_denial_ms_after_release", ms(lastDecision.Sub(released)))
		r.Fact("first_admitted_end_ms_after_release", ms(firstAdmittedEnd.Sub(released)))
	}
	if histPeak > p.Capacity {
		why := "more requests admitted at once than the budget holds"
		if ctc {
			why = "charged after the response"
		}
		r.Key("over-admitted %d tokens in one window under concurrency (%d of %d requests admitted at once, %d tokens on a budget of %d): %s",
			histPeak-p.Capacity, admitted, concurrencyBurst, histPeak, p.Capacity, why)
		return r
	}
	if !inspected {
		r.Key("%d/%d admitted, peak reserved %d reconstructed (cap %d)", admitted, concurrencyBurst, histPeak, p.Capacity)
		return r
	}
	r.Key("%d/%d admitted, peak reserved %d sampled / %d reconstructed (cap %d)", admitted, concurrencyBurst, sampledPeak, histPeak, p.Capacity)
	return r
}

// checkHeldInFlight checks that every admitted request held its reservation for as long as it
// was certainly in flight, which takes lease renewal when the hold outlives the lease. An
// admitted request reached its provider after admission and no later than End − hold, and
// released its hold after the provider finished, no earlier than Start + hold: so it certainly
// held a reservation throughout [End − hold, Start + hold]. A sample whose whole inspection
// fell in that span of k requests must count at least k active reservations.
func checkHeldInFlight(r *Result, samples []evidence.LedgerSample, outs []Outcome, hold time.Duration) {
	var spans []interval
	for _, o := range outs {
		if o.Admitted() {
			spans = append(spans, interval{Start: o.End.Add(-hold), End: o.Start.Add(hold)})
		}
	}
	var bad []string
	checked := 0
	for _, s := range samples {
		k := 0
		for _, sp := range spans {
			if !s.Sent.Before(sp.Start) && !s.At.After(sp.End) {
				k++
			}
		}
		if k == 0 {
			continue
		}
		checked++
		if s.Active < int64(k) {
			bad = append(bad, fmt.Sprintf("%d active while %d certainly in flight", s.Active, k))
		}
	}
	r.Fact("samples_with_requests_certainly_in_flight", checked)
	r.Check("every admitted request held its reservation while in flight (leases renewed past the lease)", "no sample short",
		firstFew(bad, 5), len(bad) == 0 && checked > 0)
}
