package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/wire"
)

// probeRounds is how many times each probe endpoint is hit on each gateway.
const probeRounds = 5

func probeNoQuota() Scenario {
	return Scenario{
		Name:      "probe-no-quota",
		Summary:   "health and readiness probes and metric scrapes consume no quota and reach no provider",
		Invariant: "meter: /healthz, /readyz and /metrics leave settled and reserved tokens and provider call counts unchanged",
		Prefers:   []Need{NeedQuotaInspection},
		// "The probes changed nothing" holds only if nothing else ran meanwhile: a probe that
		// charges the subject a gateway admitted last charges another scenario's subject when
		// scenarios run beside it (the probes-consume-quota mutant went uncaught that way).
		Exclusive: "its probes must be the only traffic, so that any change they cause is seen on its own subject",
		Run:       runProbeNoQuota,
	}
}

func runProbeNoQuota(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile

	// One admitted request gives application-a a non-zero settled usage, so "unchanged" compares
	// a real figure, and proves the inspection reads the key the gateways charge.
	seed := env.Chat(ctx, ChatCall{Gateway: gwA, Label: "seed", Subject: appA})
	r.Check("seed request admitted", http.StatusOK, seed.Status, seed.Admitted())
	before := map[string]wire.QuotaState{}
	for _, s := range subjects() {
		q, err := env.waitIdle(ctx, gwA, s)
		if err != nil {
			return r.Error(err)
		}
		before[s] = q
	}
	paths := env.gateway().Expect.AdminProbes
	leakPaths := paths // where a subject could leak: /metrics when there is one, else every probe
	if slices.Contains(paths, "/metrics") {
		leakPaths = []string{"/metrics"}
	}
	pBefore, ok := env.readProviders(ctx, r, "provider call counts before the probes")
	if !ok {
		return r
	}
	r.Fact("settled_before", settledMap(before))

	var probes, ok200 int
	var failures []string
	var subjectLeaks []string
	maxLatency := time.Duration(0)
	for round := 1; round <= probeRounds; round++ {
		for _, gw := range env.gateways() {
			for _, path := range paths {
				probes++
				status, body, lat, err := env.adminProbe(ctx, gw, path, fmt.Sprintf("probe%s-%d", path, round))
				if lat > maxLatency {
					maxLatency = lat
				}
				if status == http.StatusOK {
					ok200++
				} else {
					failures = append(failures, fmt.Sprintf("%s %s: status %d %v", gw, path, status, err))
				}
				if round == 1 && slices.Contains(leakPaths, path) {
					for _, c := range env.Deployment.Credentials {
						if c.Scenario == env.scenario && strings.Contains(string(body), c.Username) {
							subjectLeaks = append(subjectLeaks, gw+" exposes "+c.Label)
						}
					}
				}
			}
		}
	}
	pAfter, ok := env.readProviders(ctx, r, "provider call counts after the probes")
	after := map[string]wire.QuotaState{}
	for _, s := range subjects() {
		if !env.inspects() {
			break
		}
		q, err := env.Quota(ctx, gwB, s)
		if err != nil {
			r.Error(err)
			continue
		}
		after[s] = q
	}
	checkedAt := time.Now()
	r.Fact("probes", probes)
	r.Fact("probe_max_latency_ms", ms(maxLatency))
	r.Fact("settled_after", settledMap(after))

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
		r.Check("seed usage visible to the inspection (comparison is not vacuous)", "> 0", before[appA].Settled(), before[appA].Settled() > 0)
	} else {
		r.NotMade("settled and reserved tokens unchanged by the probes", "no quota inspection: provider calls counted instead")
	}
	if ok {
		d := TotalDelta(pBefore, pAfter)
		r.Check("provider calls unchanged by the probes", 0, d, d == 0)
		r.Fact("provider_calls_delta", d)
	}
	// The seeded usage may leave the window no earlier than window after the seed was sent;
	// the comparison is meaningful only if it finished before then.
	leaveAt := seed.Start.Add(p.Window)
	r.Check("comparison finished within the seed's window (usage could not have left)",
		fmt.Sprintf("before %s after the seed", p.Window), fmt.Sprintf("%s after the seed", checkedAt.Sub(seed.Start).Round(time.Millisecond)),
		checkedAt.Before(leaveAt))
	r.Check(probeLeakCheck(paths), "no subject username in "+strings.Join(leakPaths, ", "), subjectLeaks, len(subjectLeaks) == 0)
	if !env.inspects() {
		r.Key("%d probes, provider calls +%d", probes, TotalDelta(pBefore, pAfter))
		return r
	}
	r.Key("%d probes, settled %d → %d, provider calls +%d", probes, before[appA].Settled(), after[appA].Settled(), TotalDelta(pBefore, pAfter))
	return r
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
