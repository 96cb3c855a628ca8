package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/undertest"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { register(100, probeNoQuota) }

// probeRounds is how many times each probe endpoint is hit on each gateway.
const probeRounds = 5

func probeNoQuota() Scenario {
	return Scenario{
		Name:    "probe-no-quota",
		Summary: "health and readiness probes and metric scrapes consume no quota and reach no provider",
		Invariant: "meter: /healthz, /readyz and /metrics leave settled and reserved tokens and provider call counts unchanged: " +
			"a subject left room for exactly one more estimate before the probes is admitted once after them",
		Prefers: []Need{NeedQuotaInspection},
		BlackBox: "sees the admission of the one request the rule still has room for after the probes (the subject filled to " +
			"capacity − estimate by the responses' own usage, so a probe that spends one token denies it), the providers' call " +
			"counts and the probe answers; cannot see the settled and reserved figures, so it does not report them, nor a probe " +
			"charge that lands on another subject than the one admitted last",
		// "The probes changed nothing" holds only if nothing else ran meanwhile: a probe that
		// charges the subject a gateway admitted last charges another scenario's subject when
		// scenarios run beside it (the probes-consume-quota mutant went uncaught that way).
		Exclusive: "its probes must be the only traffic, so that any change they cause is seen on its own subject",
		Run:       runProbeNoQuota,
	}
}

// runProbeNoQuota fills application-a to capacity − estimate with one request whose usage
// (the provider generates what it is asked for) leaves room for exactly one more estimate,
// probes every admin path on every gateway, and then asks twice: the rule admits the first
// request and denies the second. A probe that charged the subject any token leaves less than
// an estimate, so the first is denied: that is seen from outside, on any gateway. With quota
// inspection the settled and reserved figures before and after the probes are compared too.
func runProbeNoQuota(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	gw := env.gateway()
	fixed := gw.Expect.Admission.Model == undertest.AdmitFixedEstimate
	if !env.inspects() {
		r.DecidedBy("admissions probed from outside", "the providers' call logs")
		r.NotMade("settled and reserved tokens unchanged by the probes", "no quota inspection: the admission after the probes decides")
	}
	r.Fact("rule", fmt.Sprintf("the run's rule: %d tokens reserved, capacity %d per %s", p.Estimate, p.Capacity, p.Window))
	if err := env.fixedWindowStart(ctx, r, env.Profile.Window, fixedWindowMargin); err != nil {
		return r.Error(err)
	}

	// The fill: one request the provider generates for so that its usage (its own response
	// says it) is capacity − estimate.
	fill, err := env.fillRoom(ctx, ChatCall{Gateway: gwA, Label: "fill", Subject: appA}, p.Capacity, p.Estimate)
	if err != nil {
		return r.Error(err)
	}
	r.Check("fill request admitted", http.StatusOK, fill.Status, fill.Admitted())
	filled := charge(fill, p.Estimate)
	room := p.Capacity - filled
	r.Fact("filled_from_the_response", filled)
	r.Fact("room_left_before_the_probes", room)
	before := map[string]wire.QuotaState{}
	if env.inspects() {
		for _, s := range subjects() {
			q, err := env.Quotas().WaitIdle(ctx, gwA, Key{Rule: RuleName, Subject: s})
			if err != nil {
				return r.Error(err)
			}
			before[s] = q
		}
		r.Fact("settled_before", settledMap(before))
	} else if err := env.settleBlind(ctx); err != nil {
		return r.Error(err)
	}
	paths := gw.Expect.AdminProbes
	leakPaths := paths // where a subject could leak: /metrics when there is one, else every probe
	if slices.Contains(paths, "/metrics") {
		leakPaths = []string{"/metrics"}
	}
	pBefore, ok := env.readProviders(ctx, r, "provider call counts before the probes")
	if !ok {
		return r
	}

	var probes, ok200 int
	var failures []string
	var subjectLeaks []string
	maxLatency := time.Duration(0)
	for round := 1; round <= probeRounds; round++ {
		for _, g := range env.gateways() {
			for _, path := range paths {
				probes++
				status, body, lat, err := env.adminProbe(ctx, g, path, fmt.Sprintf("probe%s-%d", path, round))
				if lat > maxLatency {
					maxLatency = lat
				}
				if status == http.StatusOK {
					ok200++
				} else {
					failures = append(failures, fmt.Sprintf("%s %s: status %d %v", g, path, status, err))
				}
				if round == 1 && slices.Contains(leakPaths, path) {
					for _, c := range env.Deployment.Credentials {
						if c.Scenario == env.scenario && strings.Contains(string(body), c.Username) {
							subjectLeaks = append(subjectLeaks, g+" exposes "+c.Label)
						}
					}
				}
			}
		}
	}
	pAfter, provOK := env.readProviders(ctx, r, "provider call counts after the probes")
	after := map[string]wire.QuotaState{}
	if env.inspects() {
		for _, s := range subjects() {
			q, err := env.Quotas().Read(ctx, gwB, Key{Rule: RuleName, Subject: s})
			if err != nil {
				r.Error(err)
				continue
			}
			after[s] = q
		}
	} else if err := env.settleBlind(ctx); err != nil {
		// A charge a probe hands to a settlement of its own lands within the same grace.
		return r.Error(err)
	}

	// The admissions after the probes: the rule has room for one estimate, not two.
	last := env.Chat(ctx, ChatCall{Gateway: gwB, Label: "last-the-rule-admits", Subject: appA})
	over := env.Chat(ctx, ChatCall{Gateway: gwA, Label: "one-past-the-rule", Subject: appA})
	checkedAt := time.Now()
	r.Fact("probes", probes)
	r.Fact("probe_max_latency_ms", ms(maxLatency))
	if env.inspects() {
		r.Fact("settled_after", settledMap(after))
	}

	r.Check("every probe answered 200", probes, ok200, ok200 == probes && len(failures) == 0)
	if len(failures) > 0 {
		r.Fact("probe_failures", failures)
	}
	if env.inspects() {
		for _, s := range subjects() {
			b, a := before[s], after[s]
			r.Check(s+": settled tokens unchanged", b.Settled(), a.Settled(), a.Settled() == b.Settled())
			r.Check(s+": reserved tokens unchanged", b.ReservedTokens, a.ReservedTokens, a.ReservedTokens == b.ReservedTokens)
		}
		r.Check("fill usage visible to the inspection (comparison is not vacuous)", "> 0", before[appA].Settled(), before[appA].Settled() > 0)
	}
	if !fixed {
		r.NotMade("the request the rule still has room for is admitted after the probes",
			"admission model "+gw.Expect.Admission.Model+": a request's estimate includes the gateway's own input estimate, so the room left is not known exactly")
	} else {
		if room < p.Estimate || room >= 2*p.Estimate {
			r.Error(fmt.Errorf("not decided: the fill's usage %d left %d of %d, not room for exactly one estimate of %d", filled, room, p.Capacity, p.Estimate))
		}
		r.Fact("probe_charge_the_admission_shows", fmt.Sprintf("≥ %d tokens", room-p.Estimate+1))
		r.Check(fmt.Sprintf("the probes spent no quota: the request the rule has room for (%d left, %d needed) admitted after them", room, p.Estimate),
			http.StatusOK, last.Status, last.Admitted())
		r.Check("the subject was at the boundary (the check is not vacuous): the request after it denied",
			http.StatusTooManyRequests, over.Status, over.Status == http.StatusTooManyRequests)
	}
	if provOK {
		d := TotalDelta(pBefore, pAfter)
		r.Check("provider calls unchanged by the probes", 0, d, d == 0)
		r.Fact("provider_calls_delta", d)
	}
	// The fill's usage may leave the window no earlier than window after it was sent; the
	// comparison is meaningful only if it finished before then.
	leaveAt := fill.Start.Add(p.Window)
	r.Check("comparison finished within the fill's window (its usage could not have left)",
		fmt.Sprintf("before %s after the fill", p.Window), fmt.Sprintf("%s after the fill", checkedAt.Sub(fill.Start).Round(time.Millisecond)),
		checkedAt.Before(leaveAt))
	r.Check(probeLeakCheck(paths), "no subject username in "+strings.Join(leakPaths, ", "), subjectLeaks, len(subjectLeaks) == 0)
	if env.inspects() {
		r.Key("%d probes, settled %d → %d, provider calls +%d; after them %d, %d", probes, before[appA].Settled(), after[appA].Settled(),
			TotalDelta(pBefore, pAfter), last.Status, over.Status)
		return r
	}
	r.Key("%d probes, provider calls +%d; %d of %d left for one estimate of %d: after the probes %d then %d", probes,
		TotalDelta(pBefore, pAfter), room, p.Capacity, p.Estimate, last.Status, over.Status)
	return r
}

// settleBlind waits, on a gateway without quota inspection, until the providers hold none of
// the scenario's requests and then a settlement's grace: what a black-box path can do to let
// a charge land before the next admission is to see it.
func (env *Env) settleBlind(ctx context.Context) error {
	if _, err := env.settledProviders(ctx); err != nil {
		return fmt.Errorf("waiting for the providers to finish: %w", err)
	}
	return waitUntil(ctx, time.Now().Add(settleGrace(env.Profile.StoreTimeout)))
}

// probeLeakCheck names the check that no probe answer exposes a subject: quotaqual's as
// always (its /metrics is where a subject could leak), another gateway's by its probes.
func probeLeakCheck(paths []string) string {
	if slices.Contains(paths, "/metrics") {
		return "metrics expose no subject"
	}
	return "probe answers expose no subject"
}

func settledMap(m map[string]wire.QuotaState) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, q := range m {
		out[k] = q.Settled()
	}
	return out
}
