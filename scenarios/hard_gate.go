package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { register(1500, hardGate) }

func hardGate() Scenario {
	return Scenario{
		Name: "hard-gate",
		Summary: "a rule with enforcement: hard; a burst of clients each asking for far more output than the reservation " +
			"covers, across both gateways, streamed and not",
		Invariant: "hard gate: usage settled within any window ≤ capacity, counted at the providers (prompt + generated tokens of " +
			"every admitted request); no request consumes more than its reservation",
		// Without inspection the providers' counts decide (they do already: the ledger's
		// settled figure is only a fact). Without its rule there is nothing to qualify: the
		// run's rule promises no hard gate (a request may settle above its estimate), so the
		// checks would fail a gateway that keeps its promise.
		Needs:   []Need{NeedScenarioRules},
		Prefers: []Need{NeedQuotaInspection},
		BlackBox: "sees, at the providers, every admitted request's output bound and usage and the peak usage of any window, " +
			"and the burst's answers; cannot see the ledger's settled figure (only a fact there, never a check)",
		Rules: hardGateRules,
		Run:   runHardGate,
	}
}

// hardGateRuleName is the scenario's own rule, with enforcement hard: the gateway clamps the
// forwarded output bound to the reservation, hardGateEstimate per request, hardGateCapacity per
// window (three requests' worth).
const (
	hardGateRuleName = "hard-gate"
	hardGateEstimate = int64(60)
	hardGateCapacity = int64(180)
)

func hardGateRules(p deployment.Profile) []deployment.ScenarioRule {
	return []deployment.ScenarioRule{{Name: hardGateRuleName, Window: deployment.FormatDuration(p.Window), Capacity: hardGateCapacity,
		Lease: deployment.FormatDuration(p.Lease), Estimate: hardGateEstimate, Enforcement: "hard"}}
}

// hardGateAsk is the output each hard-gate client asks for and the stub would generate.
const hardGateAsk = 500

func runHardGate(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	if !env.inspects() {
		r.DecidedBy("the providers' call logs", "the request history")
		r.NotMade("the settled usage read from the ledger (a fact, not a check)", "no quota inspection")
	}
	est, capacity := hardGateEstimate, hardGateCapacity
	burst := int(2 * capacity / est)
	r.Fact("rule", fmt.Sprintf("%s: enforcement hard, %d tokens reserved per request, capacity %d per %s", hardGateRuleName, est, capacity, p.Window))
	r.Fact("burst", burst)
	r.Fact("asked_output_tokens", hardGateAsk)
	before, ok := env.readProviders(ctx, r, "provider call counts before")
	if !ok {
		return r
	}

	outs := env.chatAtOnce(ctx, burst, func(i int) ChatCall {
		return ChatCall{Gateway: env.alternate(i), Label: fmt.Sprintf("greedy-%d", i+1), Subject: appA,
			Stream: i%2 == 1, MaxTokens: 10 * hardGateAsk,
			Metadata: map[string]string{providerstub.TokensMetadata: strconv.Itoa(hardGateAsk)}}
	})
	var q wire.QuotaState
	var idleErr error
	if env.inspects() {
		q, idleErr = env.Quotas().WaitIdle(ctx, gwA, Key{Rule: hardGateRuleName, Subject: appA})
	}
	after, err := env.settledProviders(ctx)
	if err != nil {
		return r.Error(fmt.Errorf("provider call logs after: %w", err))
	}

	type served struct {
		end      time.Time
		consumed int64
	}
	var admitted, denied, other int
	var srv []served
	var maxConsumed, maxBound int64
	for _, o := range outs {
		switch o.Status {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
			denied++
			continue
		default:
			other++
			continue
		}
		_, pr, found := after.FindRequest(o.RequestID)
		if !r.Check("admitted request "+o.RequestID+" logged by a provider", "found", found, found) {
			continue
		}
		end := pr.Time.Add(time.Duration(pr.DurationMS * float64(time.Millisecond)))
		srv = append(srv, served{end: end, consumed: pr.Consumed()})
		maxConsumed = max(maxConsumed, pr.Consumed())
		if pr.MaxTokens != nil {
			maxBound = max(maxBound, *pr.MaxTokens)
		}
	}
	// The most usage any window of the rule's length saw, by the providers' finishing times.
	sort.Slice(srv, func(i, j int) bool { return srv[i].end.Before(srv[j].end) })
	var peak int64
	for i := range srv {
		var sum int64
		for j := i; j < len(srv) && srv[j].end.Sub(srv[i].end) < p.Window; j++ {
			sum += srv[j].consumed
		}
		peak = max(peak, sum)
	}
	d := TotalDelta(before, after)
	r.Fact("statuses", statuses(outs))
	r.Fact("admitted", admitted)
	r.Fact("largest_output_bound_the_providers_honoured", maxBound)
	r.Fact("largest_request_usage_at_the_providers", maxConsumed)
	r.Fact("peak_window_usage_at_the_providers", peak)
	if idleErr != nil {
		r.Error(idleErr)
	} else if env.inspects() {
		r.Fact("settled_in_ledger", q.Settled())
	}

	r.Check("clients were admitted (the check is not vacuous)", "≥ 1", admitted, admitted >= 1)
	r.Check("every other request denied with 429", burst-admitted, denied, denied == burst-admitted && other == 0)
	r.Check("usage settled within any window ≤ capacity (at the providers)", fmt.Sprintf("≤ %d", capacity), peak, peak <= capacity)
	r.Check("no request consumed more than its reservation (at the providers)", fmt.Sprintf("≤ %d", est), maxConsumed, maxConsumed <= est)
	r.Check("the providers were asked for less output than the clients asked", fmt.Sprintf("< %d", 10*hardGateAsk), maxBound, maxBound > 0 && maxBound < 10*hardGateAsk)
	r.Check("no denied request reached a provider", admitted, d, d == int64(admitted))
	r.Key("%d/%d admitted; at the providers peak window usage %s, largest request %s", admitted, burst, atMost(peak, "capacity", capacity), atMost(maxConsumed, "reservation", est))
	return r
}
