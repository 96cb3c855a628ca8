package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

func init() { register(1200, valkeyPartition) }

// partitionRequests is how many requests the cut-off gateway gets at once while partitioned.
const partitionRequests = 3

// valkeyPartition cuts one gateway off from Valkey while the other keeps its link: the case an
// outage scenario cannot show. The cut-off replica must fail closed in bounded time (a silent
// network is bounded only by the store timeout, unlike a stopped server that refuses at once);
// the healthy replica must keep admitting against the same shared budget; and the cut-off one
// must recover once the network heals, without a restart.
func valkeyPartition() Scenario {
	return Scenario{
		Name:      "valkey-partition",
		Summary:   "gateway-a cut off from Valkey: it answers 503 within the store timeout plus a margin while gateway-b keeps admitting; healed: gateway-a recovers",
		Invariant: "fail closed per replica: a gateway that cannot reach the store never admits, and never blocks longer than its store timeout; the other replica is unaffected",
		Exclusive: "cuts gateway-a off from the store",
		Needs:     []Need{NeedPartition, NeedSharedStore},
		Prefers:   []Need{NeedQuotaInspection},
		BlackBox: "sees the cut-off replica answer the store-failure status, the other replicas keep admitting, and the cut-off " +
			"one admit again after the partition heals; cannot see whether it keeps reading the store steadily afterwards (a check not made)",
		Run: runValkeyPartition,
	}
}

// stableReadInterval spaces the store reads through the cut-off gateway after the heal
// (checkStaysRecovered): a connection the partition left behind backs off its retransmissions.
const stableReadInterval = 50 * time.Millisecond

func runValkeyPartition(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	// gateway-a (to be cut off) and gateway-b admit before the cut. Two, whatever the run's
	// replicas: every other replica shows it reaches the store during the partition below,
	// and application-a's budget must keep room for gateway-a's recovery.
	spend := env.newBudgetRound()
	for _, gw := range []string{gwA, gwB} {
		s, _ := spend.next(appA)
		o := env.admitBeforeFault(ctx, r, ChatCall{Gateway: gw, Label: "before-partition", Subject: s})
		r.Check("admitted on "+gw+" before the partition", http.StatusOK, o.Status, o.Admitted())
	}
	if _, err := env.Quotas().WaitIdle(ctx, gwA, Key{Rule: RuleName, Subject: appA}); err != nil {
		return r.Error(err)
	}
	before, err := env.settledProviders(ctx)
	if err != nil {
		return r.Error(fmt.Errorf("provider call counts before: %w", err))
	}

	// The quota store as the gateway reaches it: the run's Valkey, or what the gateway's
	// profile names instead (a rate-limit service that keeps its counters in Valkey behind it).
	stores := env.gateway().StoreHosts()
	r.Fact("cut_from", stores)
	env.Progressf("partitioning gateway-a from %s", strings.Join(stores, ", "))
	cutAt := time.Now()
	endFault := env.Fault("partition", gwA+"→"+strings.Join(stores, ","))
	defer endFault() // the window ends once healed, on every path
	healAll := func(ctx context.Context) error {
		var errs []error
		for _, h := range stores {
			errs = append(errs, env.Topo.Heal(ctx, gwA, h))
		}
		return errors.Join(errs...)
	}
	for _, h := range stores {
		if err := env.Topo.Partition(ctx, gwA, h); err != nil {
			r.Error(fmt.Errorf("partitioning gateway-a from %s: %w", h, err))
			_ = healAll(context.WithoutCancel(ctx))
			return r
		}
	}
	r.Fact("partition_ms", ms(time.Since(cutAt)))
	healed := false
	defer func() {
		if !healed {
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.RecoveryMax)
			defer cancel()
			if err := healAll(c); err != nil {
				r.Error(fmt.Errorf("healing the partition after a failed step: %w", err))
			}
		}
	}()

	// The cut-off requests go at once: on a silent network each waits out the store timeout,
	// and one after another they would only add up those waits. Each is still decided within
	// the bound on its own, the one that finds a pooled connection and those that must dial.
	slo := p.StoreTimeout + p.OutageSLO
	cut := env.chatAtOnce(ctx, partitionRequests, func(i int) ChatCall {
		return ChatCall{Gateway: gwA, Label: fmt.Sprintf("partitioned-%d", i+1), Subject: appA}
	})
	var dec decisions
	for i, o := range cut {
		dec.checkFailClosed(env, r, fmt.Sprintf("cut-off gateway-a request %d", i+1), o, slo)
	}
	dec.record(r)

	// The healthy replicas keep serving the same subjects from the same shared budget:
	// application-b and -c on each (with two gateways, both on gateway-b), admitted while
	// their budgets last and denied after, both answers from the store gateway-a cannot reach.
	admittedOnB := 0
	healthy := env.othersThan(gwA)
	for i := range max(2, len(healthy)) {
		gw := healthy[i%len(healthy)]
		s, fits := spend.next(appB, appC)
		o := env.Chat(ctx, ChatCall{Gateway: gw, Label: "healthy-replica", Subject: s})
		if !fits {
			r.Check(gw+" still decides "+s+" past its budget during the partition (429, or 200 once the window moved)", "429 or 200", o.Status, o.Status == http.StatusTooManyRequests || o.Admitted())
			if o.Admitted() {
				admittedOnB++
			}
			continue
		}
		r.Check(gw+" still admits "+s+" during the partition", http.StatusOK, o.Status, o.Admitted())
		if o.Admitted() {
			admittedOnB++
		}
	}
	during, err := env.settledProviders(ctx)
	if err != nil {
		r.Error(fmt.Errorf("provider call counts during the partition: %w", err))
	} else {
		d := TotalDelta(before, during)
		r.Check("providers saw only the healthy replicas' admitted requests", admittedOnB, d, d == int64(admittedOnB))
	}

	env.Progressf("healing the partition")
	healAt := time.Now()
	healed = true
	err = healAll(ctx)
	endFault()
	if err != nil {
		return r.Error(fmt.Errorf("healing the partition: %w", err))
	}
	recovery := r.mark()
	rec := env.awaitRecovery(ctx, gwA, appA, healAt, Outcome.Admitted)
	r.Fact("recovery_statuses", rec.statuses)
	r.Fact("time_to_recovery_ms", ms(rec.elapsed))
	rec.check(r, "gateway-a recovered after the heal within RecoveryMax, without a restart", p.RecoveryMax)

	// Recovered means recovered for good, not one lucky answer: a connection the partition left
	// behind (its retransmissions backing off) can still fail a store read after the first
	// admission. Read the store through gateway-a until stableReads reads in a row answer;
	// the time that takes is the recovery clients actually see, and the next scenario starts
	// from a settled gateway.
	if !env.inspects() {
		r.NotMade(fmt.Sprintf("gateway-a stays recovered: %d store reads in a row answer", stableReads), "no quota inspection to read the store through")
		r.Key("cut-off replica %s; other replicas admitted %d/%d; %s",
			dec.key(env, "cut off from "+strings.Join(stores, ", "), slo), admittedOnB, max(2, len(healthy)), partitionRecovery(r.passedSince(recovery), rec, 0))
		return r
	}
	stable := env.checkStaysRecovered(ctx, r, gwA, "the heal", healAt, stableReadInterval)
	r.Key("cut-off replica answered %s, slowest %s; other replicas admitted %d/%d; %s",
		tally(statuses(cut)), durAtMost(dec.worst, "SLO", slo), admittedOnB, max(2, len(healthy)), partitionRecovery(r.passedSince(recovery), rec, stable))
	return r
}

// partitionRecovery is the key fact's word on gateway-a after the heal: "recovered in 365ms
// (stable in 420ms)" when its recovery checks held, else what it last answered.
func partitionRecovery(held bool, rec recovery, stable time.Duration) string {
	if !held {
		return fmt.Sprintf("%s: after the heal gateway-a answered %s in %s", recoveryPhrase(false), tally(rec.statuses), rec.elapsed.Round(time.Millisecond))
	}
	s := "recovered in " + rec.elapsed.Round(time.Millisecond).String()
	if stable > 0 {
		s += " (stable in " + stable.Round(time.Millisecond).String() + ")"
	}
	return s
}
