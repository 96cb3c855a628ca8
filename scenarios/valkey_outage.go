package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

func init() { register(1000, valkeyOutage) }

// outageRequestsPerGateway is how many requests each gateway gets while the store is down.
const outageRequestsPerGateway = 3

func valkeyOutage() Scenario {
	return Scenario{
		Name:      "valkey-outage",
		Summary:   "Valkey stopped: both gateways answer 503 within the store timeout plus a margin, no provider contacted; Valkey back: admission recovers",
		Invariant: "fail closed: a store failure is a 503 (never 200, never 429), decided in bounded time before any provider is contacted",
		Exclusive: "stops the store",
		Needs:     []Need{NeedSharedStore},
		Prefers:   []Need{NeedQuotaInspection},
		BlackBox: "sees every gateway answer the store-failure status while the store is stopped, no request reach a provider, " +
			"and admissions return once it is back; cannot see whether each replica keeps reading the store steadily afterwards (a check " +
			"not made)",
		Run: runValkeyOutage,
	}
}

// outageStableReadInterval spaces the store reads after Valkey's return: a stale connection
// fails a read by the store timeout, so the reads need no pause of their own.
const outageStableReadInterval = 10 * time.Millisecond

func runValkeyOutage(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	// Every replica admits before the outage: application-a (on gateway-a and gateway-b, as
	// with two replicas), then the subject with the most budget left.
	spend := env.newBudgetRound()
	before := func(gw string) (string, bool) {
		if gw == gwA || gw == gwB {
			return spend.next(appA)
		}
		return spend.next(appB, appC)
	}
	for _, gw := range env.gateways() {
		s, fits := before(gw)
		o := env.admitBeforeFault(ctx, r, ChatCall{Gateway: gw, Label: "before-outage", Subject: s})
		if !fits { // many replicas: the subjects' budgets are spent, a 429 is gw's decision
			r.Check(gw+" decides "+s+" past its budget before the outage (429, or 200 once the window moved)", "429 or 200", o.Status, o.Status == http.StatusTooManyRequests || o.Admitted())
			continue
		}
		r.Check("admitted on "+gw+" before the outage", http.StatusOK, o.Status, o.Admitted())
	}
	// Let them settle before the store goes, so the outage starts from a clean ledger.
	if _, err := env.Quotas().WaitIdle(ctx, gwA, Key{Rule: RuleName, Subject: appA}); err != nil {
		return r.Error(err)
	}
	provBefore, err := env.settledProviders(ctx)
	if err != nil {
		return r.Error(fmt.Errorf("provider call counts before: %w", err))
	}

	env.Progressf("stopping valkey")
	stopAt := time.Now()
	endFault := env.Fault("outage", "valkey")
	defer endFault() // the window ends once valkey is started again, on every path
	if err := env.Topo.StopValkey(ctx); err != nil {
		r.Error(fmt.Errorf("stopping valkey: %w", err))
		env.restartValkey(ctx, r)
		return r
	}
	r.Fact("stop_ms", ms(time.Since(stopAt)))
	// Whatever happens next, Valkey comes back for the scenarios after this one.
	started := false
	defer func() {
		if !started {
			env.restartValkey(ctx, r)
		}
	}()

	slo := p.StoreTimeout + p.OutageSLO
	var dec decisions
	var during []int // the statuses answered while the store was down
	for i := 0; i < outageRequestsPerGateway; i++ {
		for _, gw := range env.gateways() {
			o := env.Chat(ctx, ChatCall{Gateway: gw, Label: fmt.Sprintf("outage-%d", i+1), Subject: appA})
			what := fmt.Sprintf("%s request %d", gw, i+1)
			dec.checkFailClosed(env, r, what, o, slo)
			r.Check(what+" names no provider site", "", o.Site, o.Site == "")
			during = append(during, o.Status)
		}
	}
	dec.record(r)
	provDuring, err := env.settledProviders(ctx)
	if err != nil {
		r.Error(fmt.Errorf("provider call counts during the outage: %w", err))
	} else {
		d := TotalDelta(provBefore, provDuring)
		r.Check("no provider contacted during the outage", 0, d, d == 0)
	}

	env.Progressf("starting valkey")
	startAt := time.Now()
	started = true
	err = env.Topo.StartValkey(ctx)
	endFault()
	if err != nil {
		return r.Error(fmt.Errorf("starting valkey: %w", err))
	}
	r.Fact("start_ms", ms(time.Since(startAt)))
	recovery := r.mark()
	for _, gw := range env.gateways() {
		// Recovery on every replica: application-a on gateway-a, application-b on gateway-b
		// (as with two), then whichever subject's budget still admits one.
		s, fits := spend.next(appA)
		if gw != gwA {
			s, fits = spend.next(appB, appC)
		}
		if !fits {
			// Every subject's budget is spent in this window: a 429 shows gw decides from
			// the store again.
			rec := env.awaitRecovery(ctx, gw, s, startAt, Outcome.Decided)
			r.Fact("recovery_statuses_"+gw, rec.statuses)
			r.Check("admission decided again on "+gw+" within RecoveryMax (its subject's budget spent: 429 or 200)", "≤ "+p.RecoveryMax.String(),
				fmt.Sprintf("%d after %s", rec.got.Status, rec.elapsed.Round(time.Millisecond)),
				rec.got.Decided() && rec.elapsed <= p.RecoveryMax)
			continue
		}
		rec := env.awaitRecovery(ctx, gw, s, startAt, Outcome.Admitted)
		r.Fact("recovery_statuses_"+gw, rec.statuses)
		r.Fact("time_to_recovery_ms_"+gw, ms(rec.elapsed))
		bad := 0
		for _, s := range rec.statuses {
			if s == http.StatusOK || s == env.gateway().Expect.StoreFailure.Status {
				continue
			}
			bad++
		}
		rec.check(r, "admission recovered on "+gw+" within RecoveryMax", p.RecoveryMax)
		r.Check(fmt.Sprintf("while recovering %s answered only %d or 200", gw, env.gateway().Expect.StoreFailure.Status), "no 429, no transport failure", rec.statuses, bad == 0)
	}
	// One admission is not a recovery for good: on Kubernetes a connection to the Valkey pod
	// that is gone may never be reset and fails a later call (seen on kind: a 503 on the next
	// scenario's first request). Every replica reads the store until it answers steadily.
	if env.inspects() {
		for _, gw := range env.gateways() {
			env.checkStaysRecovered(ctx, r, gw, "valkey's return", startAt, outageStableReadInterval)
		}
	} else {
		r.NotMade(fmt.Sprintf("every replica stays recovered: %d store reads in a row answer", stableReads), "no quota inspection to read the store through")
	}
	r.Key("%s; %s", dec.key(env, "Valkey was stopped", slo), recoveryPhrase(r.passedSince(recovery)))
	return r
}

// restartValkey brings Valkey back after a failed step, even when ctx has ended.
func (env *Env) restartValkey(ctx context.Context, r *Result) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), env.Profile.RecoveryMax)
	defer cancel()
	if err := env.Topo.StartValkey(c); err != nil {
		r.Error(fmt.Errorf("starting valkey again after a failed step: %w", err))
	}
}
