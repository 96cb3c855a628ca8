package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/providerstub"
)

// runLongGenerationBlackBox is long-generation for a gateway without quota inspection, leases
// or the scenario's own rule: the generation's hold is seen only in the admissions it denies.
// On the scenario's rule (room for one request) that is every concurrent request; on the run's
// rule, held requests fill the rest of the budget first, so every concurrent request sent while
// the generation runs, also after the lease, must be denied. A renewed hold and an expired one
// charged at its estimate deny alike, so this proves the generation stays counted, not that the
// lease was renewed (said as a check not made). The generation outlasts the window as well as
// the lease: a gateway that only charges at admission forgets it within a window.
func runLongGenerationBlackBox(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	caps := env.gateway().Caps
	capacity, lease, rule := p.Capacity, p.Lease, "the run's rule"
	if env.hasOwnRule(longGenerationRuleName) {
		capacity, lease, rule = p.Estimate, shortestRenewedLease(p), longGenerationRuleName
	}
	r.DecidedBy("admissions probed from outside", "the providers' call logs")
	if !env.inspects() {
		r.NotMade("the reservation stayed live after the lease, sampled from the ledger, and the generation settled at the usage the provider counted",
			"no quota inspection: a renewed hold and an expired one charged at its estimate deny alike")
	} else {
		r.NotMade("the reservation sampled from the ledger and the settled usage", "the scenario's own rule is not rendered: the run's rule is shared with the fill requests")
	}
	if !caps.Leases {
		r.NotMade("the hold outlives its lease by renewal", "the gateway has no leases: its admission charge is the hold")
	}
	if p.Estimate <= 0 || capacity < p.Estimate {
		return r.Error(fmt.Errorf("profile %s: estimate %d and capacity %d: the capacity must hold one estimate", p.Name, p.Estimate, capacity))
	}
	// Longer than the lease and than the window: a gateway whose hold is its admission
	// charge (no lease) must keep it past the window too, which a real long generation
	// always spans (a fixed window's boundary, a sliding window's length).
	tokens := int((max(lease, p.Window) + time.Second + longGenerationInterToken - 1) / longGenerationInterToken)
	length := time.Duration(tokens) * longGenerationInterToken
	// The fills are held a second past the generation, and the generation must finish within
	// the gateway's upstream timeout: a window as long as that (the reference profile's minute)
	// leaves no generation that outlasts it, so the black-box check cannot be made here.
	if hold := length + time.Second; hold > deployment.GatewayUpstreamTimeout || hold > providerstub.MaxHold {
		return r.Skip(fmt.Sprintf("on the run's %s window a generation outlasting it (%s, its fill requests held %s) does not fit the gateways' %s upstream timeout or the stubs' %s hold: the black-box check needs a shorter window (--profile quick)",
			p.Window, length, hold, deployment.GatewayUpstreamTimeout, providerstub.MaxHold))
	}
	fill := int(capacity/p.Estimate) - 1
	r.Fact("rule", fmt.Sprintf("%s: %d tokens reserved, capacity %d per %s, lease %s", rule, p.Estimate, capacity, p.Window, lease))
	r.Fact("generation", length.String())
	r.Fact("fill_requests", fill)
	if err := env.fixedWindowStart(ctx, r, env.Profile.Window, fixedWindowMargin); err != nil {
		return r.Error(err)
	}
	before, err := env.settledProviders(ctx)
	if err != nil {
		return r.Error(fmt.Errorf("provider call logs before: %w", err))
	}

	done := make(chan Outcome, 1)
	started := time.Now()
	go func() {
		done <- env.Chat(ctx, ChatCall{Gateway: gwA, Label: "long-generation", Subject: appA, Stream: true, MaxTokens: -1,
			Metadata: map[string]string{providerstub.TokensMetadata: strconv.Itoa(tokens),
				providerstub.InterTokenMetadata: longGenerationInterToken.String()}})
	}()
	if err := env.waitInFlight(ctx, 1); err != nil {
		<-done
		return r.Error(fmt.Errorf("waiting for the long generation to reach a provider: %w", err))
	}
	// The rest of the budget, held at the providers past the generation's end.
	fills := make([]Outcome, fill)
	var answered atomic.Int64
	var wg sync.WaitGroup
	for i := range fill {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fills[i] = env.Chat(ctx, ChatCall{Gateway: env.alternate(i + 1), Label: fmt.Sprintf("fill-%d", i+1), Subject: appA, Hold: length + time.Second})
			answered.Add(1)
		}()
	}
	if fill > 0 {
		if err := env.waitInFlight(ctx, int64(1+fill)); err != nil {
			r.Error(fmt.Errorf("waiting for the fill requests to be held (%d answered early): %w", answered.Load(), err))
		}
	}

	var probes []concurrentProbe
	long, err := probeUntil(ctx, done, func(i int) {
		o := env.Chat(ctx, ChatCall{Gateway: env.alternate(i + 1), Label: fmt.Sprintf("concurrent-%d", i+1), Subject: appA})
		probes = append(probes, concurrentProbe{sent: o.Start, end: o.End, status: o.Status, retryAfter: env.retryAfterOf(o),
			pastLease: time.Since(started) > lease+p.StoreTimeout})
	})
	wg.Wait()
	if err != nil {
		return r.Error(err)
	}
	after, err := env.settledProviders(ctx)
	if err != nil {
		return r.Error(fmt.Errorf("provider call logs after: %w", err))
	}
	// The generation's end, at the provider (the stream's own entry), and the fills' earliest
	// end: only a probe sent before both met the budget full.
	generating := long.End
	for _, pr := range newRequests(before, after) {
		if pr.Stream {
			generating = pr.Time.Add(time.Duration(pr.DurationMS * float64(time.Millisecond)))
		}
	}
	heldUntil := generating
	var filled int
	for _, o := range fills {
		if o.Admitted() {
			filled++
			if o.End.Before(heldUntil) {
				heldUntil = o.End
			}
		}
	}
	t := tallyProbes(probes, heldUntil)
	probeStatuses, denied, afterLease, late := t.statuses, t.denied, t.afterLease, t.late
	r.Fact("fill_statuses", statuses(fills))
	r.Fact("probes_after_the_budget_was_freed", late)
	r.Fact("long_status", long.Status)
	r.Fact("long_latency_ms", ms(long.Latency))
	r.Fact("concurrent_statuses", probeStatuses)
	r.Fact("concurrent_after_the_lease", afterLease)
	r.Check("the fill requests were admitted and held (the budget is full but for the generation)", fill, filled, filled == fill)
	r.Check("the long generation completed", http.StatusOK, long.Status, long.Status == http.StatusOK)
	r.Check("it lasted longer than the lease", fmt.Sprintf("> %s", lease), long.Latency.Round(time.Millisecond).String(), long.Latency > lease)
	r.Check("concurrent requests were made after the lease would have run out", "≥ 1", afterLease, afterLease >= 1)
	r.Check("every concurrent request was denied with 429: the generation stays counted", len(probeStatuses), denied, denied == len(probeStatuses))
	r.Check("only the long generation and the fill requests reached a provider", 1+filled, TotalDelta(before, after), TotalDelta(before, after) == int64(1+filled))
	seen := env.checkRetryAfterWhileHeld(ctx, r, probes, started, heldUntil, lease, rule == longGenerationRuleName)
	if admitted := len(probeStatuses) - denied; admitted > 0 {
		why := "the window forgot it while it ran"
		if env.checksThenCharges() {
			why = "nothing is held before a response ends"
		}
		r.Key("admitted %d of %d requests made while a %s generation and %d held requests filled the budget: %s",
			admitted, len(probeStatuses), long.Latency.Round(100*time.Millisecond), filled, why)
		return r
	}
	r.Key("%s generation, lease %s, %d fill requests: %d/%d concurrent requests denied (%d after the lease); %s", long.Latency.Round(100*time.Millisecond),
		lease, filled, denied, len(probeStatuses), afterLease, seen)
	return r
}
