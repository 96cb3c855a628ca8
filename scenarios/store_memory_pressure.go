package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/quotaqual/quotaqual/topology"
)

func init() { register(2280, storeMemoryPressure) }

func storeMemoryPressure() Scenario {
	return Scenario{
		Name: "store-memory-pressure",
		Summary: "Valkey out of memory (maxmemory below what it uses, noeviction): every write is refused while reads still " +
			"answer; every gateway answers 503 within the store timeout plus a margin, no provider contacted; memory back: admission recovers",
		Invariant: "fail closed: a store that refuses writes is a store failure — 503, never 200, never 429 — decided in bounded time before any provider is contacted",
		Exclusive: "makes the store refuse writes",
		Needs:     []Need{NeedSharedStore},
		BlackBox: "sees every answer while the store refuses writes, no request reach a provider, and admissions return once memory is back; " +
			"cannot see whether a refused settlement left a hold to its lease (nothing is in flight when memory runs out)",
		Run: runStoreMemoryPressure,
	}
}

func runStoreMemoryPressure(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	if ok, why := topology.StoreMemoryPressure.Available(env.Topo); !ok {
		return r.Error(fmt.Errorf("%s: %w", why, topology.ErrUnsupported))
	}
	for _, gw := range env.gateways()[:2] {
		o := env.admitBeforeFault(ctx, r, ChatCall{Gateway: gw, Label: "before-pressure", Subject: appA})
		r.Check("admitted on "+gw+" before the store runs out of memory", http.StatusOK, o.Status, o.Admitted())
	}
	if _, err := env.Quotas().WaitIdle(ctx, gwA, Key{Rule: RuleName, Subject: appA}); err != nil {
		return r.Error(err)
	}
	provBefore, err := env.settledProviders(ctx)
	if err != nil {
		return r.Error(fmt.Errorf("provider call counts before: %w", err))
	}

	env.Progressf("setting valkey's maxmemory below its usage")
	heal, err := env.pull(ctx, topology.StoreMemoryPressure, topology.Target{Host: topology.HostValkey})
	if err != nil {
		return r.Error(fmt.Errorf("memory pressure on the store: %w", err))
	}
	defer healOnExit(r, heal)
	slo := p.StoreTimeout + p.OutageSLO
	var dec decisions
	for i := 0; i < outageRequestsPerGateway; i++ {
		for _, gw := range env.gateways() {
			o := env.Chat(ctx, ChatCall{Gateway: gw, Label: fmt.Sprintf("under-pressure-%d", i+1), Subject: appB})
			what := fmt.Sprintf("%s request %d while the store refuses writes", gw, i+1)
			dec.checkFailClosed(env, r, what, o, slo)
			r.Check(what+" names no provider site", "", o.Site, o.Site == "")
		}
	}
	dec.record(r)
	if provDuring, err := env.settledProviders(ctx); err != nil {
		r.Error(fmt.Errorf("provider call counts during the pressure: %w", err))
	} else {
		d := TotalDelta(provBefore, provDuring)
		r.Check("no provider contacted while the store refused writes", 0, d, d == 0)
	}

	env.Progressf("restoring valkey's maxmemory")
	healedAt := time.Now()
	if err := heal(); err != nil {
		return r.Error(err)
	}
	recovery := r.mark()
	for i, gw := range env.gateways()[:2] {
		s := []string{appC, appA}[i]
		rec := env.awaitRecovery(ctx, gw, s, healedAt, Outcome.Admitted)
		r.Fact("recovery_statuses_"+gw, rec.statuses)
		rec.check(r, "admission recovered on "+gw+" within RecoveryMax once memory was back", p.RecoveryMax)
	}
	if !env.inspects() {
		// Nothing here reads the ledger but the wait before the pressure, which without
		// inspection waits on the providers instead: the answers and the providers' counts
		// decided, as they do with inspection.
		r.DecidedBy("every answer while the store refused writes", "the providers' call counts")
	}
	r.Key("%s; %s", dec.key(env, "the store refused writes", slo), recoveryPhrase(r.passedSince(recovery)))
	return r
}
