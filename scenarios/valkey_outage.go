package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// outageRequestsPerGateway is how many requests each gateway gets while the store is down.
const outageRequestsPerGateway = 3

// checkStoreFailure checks o is the gateway's store-failure answer: its status (503 for
// quotaqual) and, when its profile names one, its error type (quota_store_unavailable).
func (env *Env) checkStoreFailure(r *Result, what string, o Outcome) {
	want := env.gateway().Expect.StoreFailure
	r.Check(fmt.Sprintf("%s → %d", what, want.Status), want.Status, o.Status, o.Status == want.Status)
	if want.ErrorType == "" {
		r.NotMade(what+" error type", "the profile names no store-failure error type")
		return
	}
	r.Check(what+" error type", want.ErrorType, o.ErrorType, o.ErrorType == want.ErrorType)
}

func valkeyOutage() Scenario {
	return Scenario{
		Name:      "valkey-outage",
		Summary:   "Valkey stopped: both gateways answer 503 within the store timeout plus a margin, no provider contacted; Valkey back: admission recovers",
		Invariant: "fail closed: a store failure is a 503 (never 200, never 429), decided in bounded time before any provider is contacted",
		Needs:     []Need{NeedSharedStore},
		Prefers:   []Need{NeedQuotaInspection},
		Run:       runValkeyOutage,
	}
}

func runValkeyOutage(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	for _, gw := range []string{gwA, gwB} {
		o := env.Chat(ctx, ChatCall{Gateway: gw, Label: "before-outage", Subject: appA})
		r.Check("admitted on "+gw+" before the outage", http.StatusOK, o.Status, o.Admitted())
	}
	// Let both settle before the store goes, so the outage starts from a clean ledger.
	if _, err := env.waitIdle(ctx, gwA, appA); err != nil {
		return r.Error(err)
	}
	before, err := env.settledProviders(ctx)
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
	var decisions []float64
	var worst time.Duration
	for i := 0; i < outageRequestsPerGateway; i++ {
		for _, gw := range []string{gwA, gwB} {
			o := env.Chat(ctx, ChatCall{Gateway: gw, Label: fmt.Sprintf("outage-%d", i+1), Subject: appA})
			decisions = append(decisions, ms(o.Latency))
			worst = max(worst, o.Latency)
			what := fmt.Sprintf("%s request %d", gw, i+1)
			env.checkStoreFailure(r, what, o)
			r.Check(what+" decided within store timeout + margin", "≤ "+slo.String(), o.Latency.Round(time.Millisecond).String(), o.Status != 0 && o.Latency <= slo)
			r.Check(what+" names no provider site", "", o.Site, o.Site == "")
		}
	}
	r.Fact("time_to_decision_ms", decisions)
	r.Fact("worst_time_to_decision_ms", ms(worst))
	during, err := env.settledProviders(ctx)
	if err != nil {
		r.Error(fmt.Errorf("provider call counts during the outage: %w", err))
	} else {
		d := TotalDelta(before, during)
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
	for i, gw := range []string{gwA, gwB} {
		subject := []string{appA, appB}[i]
		var got Outcome
		var statusesSeen []int
		tries, err := poll(ctx, 100*time.Millisecond, p.RecoveryMax, func(ctx context.Context) (bool, error) {
			got = env.Chat(ctx, ChatCall{Gateway: gw, Label: "recover", Subject: subject})
			statusesSeen = append(statusesSeen, got.Status)
			return got.Admitted(), nil
		})
		recovery := time.Since(startAt)
		r.Fact("recovery_statuses_"+gw, statusesSeen)
		r.Fact("time_to_recovery_ms_"+gw, ms(recovery))
		bad := 0
		for _, s := range statusesSeen {
			if s == http.StatusOK || s == env.gateway().Expect.StoreFailure.Status {
				continue
			}
			bad++
		}
		r.Check("admission recovered on "+gw+" within RecoveryMax", "≤ "+p.RecoveryMax.String(),
			fmt.Sprintf("%s after %d tries (%v)", recovery.Round(time.Millisecond), tries, err), got.Admitted() && recovery <= p.RecoveryMax)
		r.Check(fmt.Sprintf("while recovering %s answered only %d or 200", gw, env.gateway().Expect.StoreFailure.Status), "no 429, no transport failure", statusesSeen, bad == 0)
	}
	r.Key("503 within %s (SLO %s), recovered", worst.Round(time.Millisecond), slo)
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
