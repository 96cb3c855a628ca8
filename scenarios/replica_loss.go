package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
)

func init() { register(2050, replicaLoss) }

// replicaLoss takes the replicated store's replicas away while its primary stays up: the
// case valkey-failover's split brain does not show. Nothing fails over (the Sentinels still
// reach the primary), every write still succeeds on the primary, and only the acknowledgement
// falls short: in acknowledged mode such an admission is no admission (a 503), and it must be
// refused as soon as the acknowledgement timeout has run out — not held until the store
// timeout, which is what a gateway that waits for its replicas without a bound (WAIT n 0)
// answers. With healthy replicas the two cannot be told apart: WAIT returns at once.
func replicaLoss() Scenario {
	return Scenario{
		Name: "replica-loss",
		Summary: "the replicated store's replicas cut off from its primary while the primary stays up: every request answered the store-failure status " +
			"within the acknowledgement timeout plus a slack, below the store timeout, and none reaches a provider; the replicas back: admission resumes and the refusals charged nothing",
		Invariant: "fail closed in bounded time: an admission too few replicas confirmed is no admission, refused once the acknowledgement timeout runs out, not at the store timeout",
		Exclusive: "moves both gateways to the replicated store group and cuts its replicas off",
		Needs:     []Need{NeedPartition, NeedStoreGroup},
		Prefers:   []Need{NeedQuotaInspection},
		BlackBox: "sees each refusal's status, error type and time, the providers' call counts, and after the replicas' return the admissions and " +
			"remaining headers of an exhaustion from which a hold a refusal left behind would show; cannot see the holds the refused reserves took on " +
			"the primary while they lasted, nor settled usage after each admission (summed from the responses)",
		Run: runReplicaLoss,
	}
}

// replicaLossRequests is how many requests each gateway of the pair gets, one after another,
// while the replicas are cut off.
const replicaLossRequests = 3

// ackRefusalBound is how soon a request must be refused when too few replicas confirm its
// reservation: the acknowledgement timeout the run configures (deployment.StoreAckTimeout)
// plus a slack of two thirds of what is left of the store timeout, and still a third of that
// gap short of the store timeout, before which a gateway that waits for its replicas without a
// bound cannot answer (100 ms short of it in quick: 200 ms + 200 ms against 500 ms). The
// slack covers Valkey's own lateness — it times a blocked WAIT out on its 100 ms cron tick
// (hz 10), so an unconfirmed write comes back 200-300 ms after it was sent (measured on netns:
// 214-303 ms) — and leaves about 100 ms for the request's way through the gateway.
func ackRefusalBound(p deployment.Profile) (bound, slack time.Duration) {
	slack = (p.StoreTimeout - deployment.StoreAckTimeout) * 2 / 3
	return deployment.StoreAckTimeout + slack, slack
}

func runReplicaLoss(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	if mode := env.storeReplication(); mode != deployment.ReplicationAcknowledged {
		return r.Skip(fmt.Sprintf("the gateways write to the replicated store with %s replication (--store-replication %s): a write counts once the primary ran it, "+
			"so losing the replicas fails nothing; run with --store-replication %s", mode, mode, deployment.ReplicationAcknowledged))
	}
	sg, skip, err := env.storeGroup(ctx)
	if skip != "" {
		return r.Skip(skip)
	}
	if err != nil {
		return r.Error(err)
	}
	primary, err := sg.StorePrimary(ctx)
	if err != nil {
		return r.Error(fmt.Errorf("asking the Sentinels for the primary: %w", err))
	}
	replicas := slices.DeleteFunc(slices.Clone(topology.StoreNodes), func(h string) bool { return h == primary })
	r.Fact("primary", primary)
	r.Fact("replicas", replicas)
	bound, slack := ackRefusalBound(p)
	r.Fact("ack_timeout_ms", ms(deployment.StoreAckTimeout))
	r.Fact("store_timeout_ms", ms(p.StoreTimeout))
	r.Fact("refusal_bound_ms", ms(bound))

	defer env.moveBackFromStoreGroup(ctx, r, sg)
	env.Progressf("restarting both gateways on the replicated store")
	if err := env.moveToStoreGroup(ctx, sg); err != nil {
		return r.Error(err)
	}

	// With every replica there, each gateway admits: an admission in acknowledged mode is one
	// a replica confirmed. application-b's, so application-a's budget is whole for the end.
	for _, gw := range failoverPair {
		o := env.admitBeforeFault(ctx, r, ChatCall{Gateway: gw, Label: "replicas-up", Subject: appB})
		r.Check("admitted on "+gw+" with every replica up", http.StatusOK, o.Status, o.Admitted())
	}
	r.Fact("replication_before", storeOffsets(ctx, sg))
	provBefore, err := env.settledProviders(ctx)
	if err != nil {
		return r.Error(fmt.Errorf("provider call counts before: %w", err))
	}

	// Every replica cut off from the primary: whatever min_replicas a gateway asks for (at
	// least one), no write can be confirmed. The Sentinels still reach every node, so the
	// primary stays the primary.
	env.Progressf("cutting %s off from %s", primary, strings.Join(replicas, ", "))
	cutAt := time.Now()
	var heals []func() error
	healAll := func() error {
		var first error
		for _, h := range heals {
			if err := h(); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	healed := false
	defer func() {
		if healed {
			return
		}
		if err := healAll(); err != nil {
			r.Error(fmt.Errorf("healing after a failed step: %w", err))
		}
	}()
	for _, rep := range replicas {
		heal, err := env.pull(ctx, topology.Partition, topology.Target{Host: primary, Peer: rep})
		if err != nil {
			return r.Error(fmt.Errorf("cutting %s off from %s: %w", primary, rep, err))
		}
		heals = append(heals, heal)
	}
	r.Fact("cut_ms", ms(time.Since(cutAt)))

	// One request after another, so each one's time is its own: a refusal within
	// ack_timeout + slack, the gateway's store-failure answer, no provider.
	var dec decisions
	var refused []Outcome
	for i := range replicaLossRequests {
		for _, gw := range failoverPair {
			o := env.Chat(ctx, ChatCall{Gateway: gw, Label: fmt.Sprintf("replicas-lost-%d", i+1), Subject: appA})
			refused = append(refused, o)
			what := fmt.Sprintf("%s request %d with the replicas cut off", gw, i+1)
			dec.checkFailClosed(env, r, what, o, p.StoreTimeout+p.OutageSLO)
			r.Check(what+" names no provider site", "", o.Site, o.Site == "")
		}
	}
	dec.record(r)
	// Whose bound answered: the acknowledgement's (ack_timeout, then Valkey's next 100 ms
	// tick) or the store timeout's. A gateway waiting for its replicas without a bound cannot
	// answer before the store timeout, so no refusal of it comes sooner; one waiting
	// ack_timeout answers well before it. The median is judged, not the slowest: one refusal
	// delayed by a loaded machine says nothing of whose bound answered, all of them being
	// late does.
	median := medianLatency(refused)
	r.Check(fmt.Sprintf("the refusals' median within ack_timeout + slack (%s + %s; store timeout %s): the acknowledgement's bound answered, not the store timeout's",
		deployment.StoreAckTimeout, slack, p.StoreTimeout), "≤ "+bound.String(), median.Round(time.Millisecond).String(), median <= bound)
	r.Fact("refusal_median_ms", ms(median))
	provDuring, err := env.settledProviders(ctx)
	if err != nil {
		r.Error(fmt.Errorf("provider call counts with the replicas cut off: %w", err))
	} else {
		d := TotalDelta(provBefore, provDuring)
		r.Check("no provider contacted while the replicas were cut off", 0, d, d == 0)
	}
	// The loss must have been of the replicas alone: a promotion would make it a failover.
	if h, err := sg.StorePrimary(ctx); err != nil {
		r.Error(fmt.Errorf("asking the Sentinels for the primary after the requests: %w", err))
	} else {
		r.Check("the primary stayed the primary (no failover)", primary, h, h == primary)
	}

	env.Progressf("healing: the replicas back")
	healAt := time.Now()
	healed = true
	if err := healAll(); err != nil {
		return r.Error(fmt.Errorf("healing: %w", err))
	}
	r.Fact("replicas_lost_ms", ms(healAt.Sub(cutAt)))
	recovery := r.mark()
	var recovered time.Duration
	for _, gw := range failoverPair {
		rec := env.awaitRecovery(ctx, gw, appC, healAt, Outcome.Admitted)
		r.Fact("recovery_statuses_"+gw, rec.statuses)
		r.Fact("time_to_recovery_ms_"+gw, ms(rec.elapsed))
		recovered = max(recovered, rec.elapsed)
		rec.check(r, "admission recovered on "+gw+" within RecoveryMax of the replicas' return", p.RecoveryMax)
		bad := slices.DeleteFunc(slices.Clone(rec.statuses), func(s int) bool {
			return s == http.StatusOK || s == env.gateway().Expect.StoreFailure.Status
		})
		r.Check(fmt.Sprintf("while recovering %s answered only %d or 200", gw, env.gateway().Expect.StoreFailure.Status), "no 429, no transport failure", rec.statuses, len(bad) == 0)
	}
	back := fmt.Sprintf("recovered in %s", recovered.Round(time.Millisecond))
	if !r.passedSince(recovery) {
		back = fmt.Sprintf("%s (the slower gateway's last answer %s after the heal)", recoveryPhrase(false), recovered.Round(time.Millisecond))
	}
	r.Fact("replication_after", storeOffsets(ctx, sg))

	r.Key("replicas cut off, primary up: %s, median %s (ack bound %s); replicas back: %s, then %s",
		dec.key(env, "the replicas were cut off", p.StoreTimeout+p.OutageSLO), median.Round(time.Millisecond), bound, back, env.chargesAfterReplicaLoss(ctx, r, refused))
	return r
}

// chargesAfterReplicaLoss spends application-a's budget — the subject every refusal was
// for — once the replicas are back, from both gateways until a denial, and checks it admits
// what a whole budget does: each refused reservation was released, none is still held or
// charged. A hold left behind is held for the lease and then charged its estimate within the
// window, so it shows only while the exhaustion starts within lease + window of the last
// refusal; later, the check is not made and says why. It returns the key fact's part.
func (env *Env) chargesAfterReplicaLoss(ctx context.Context, r *Result, refused []Outcome) string {
	p := env.Profile
	before, ok := env.readProviders(ctx, r, "provider call counts before the exhaustion")
	if !ok {
		return "no exhaustion"
	}
	if err := env.fixedWindowStart(ctx, r, env.Profile.Window, fixedWindowMargin); err != nil {
		r.Error(err)
		return "no exhaustion"
	}
	ex, err := env.exhaust(ctx, Key{Rule: RuleName, Subject: appA}, "replicas-back", failoverPair, exhaustCap)
	if err != nil {
		r.Error(err)
	}
	if len(ex.Outcomes) == 0 {
		return "no exhaustion"
	}
	var lastRefusal time.Time
	for _, o := range refused {
		if o.End.After(lastRefusal) {
			lastRefusal = o.End
		}
	}
	gap := ex.Outcomes[0].Start.Sub(lastRefusal)
	r.Fact("last_refusal_to_exhaustion_ms", ms(gap))
	r.Fact("exhaust_statuses", statuses(ex.Outcomes))
	if !env.inspects() { // ex.Blind only once something was admitted
		r.Fact("settled_after_each_admission_from_responses", ex.Settled)
		r.NotMade("settled usage read from the gateway after each admission", "no quota inspection: summed from the responses' usage")
	} else {
		r.Fact("settled_after_each_admission", ex.Settled)
	}
	if seen := p.Lease + p.Window; gap > seen {
		r.NotMade("the refused reservations left nothing held or charged",
			fmt.Sprintf("the exhaustion began %s after the last refusal, past lease + window (%s), by when a hold left behind has left the window", gap.Round(time.Millisecond), seen))
	}
	last := ex.Outcomes[len(ex.Outcomes)-1]
	r.Check("exhaustion after the replicas' return ended with 429", http.StatusTooManyRequests, last.Status, ex.Denied)
	predicted := env.checkPredictedAdmissions(r, ex, p)
	env.checkRemainingTruth(r, ex, p.Capacity, env.admitCost(env.Profile))
	span := last.End.Sub(ex.Outcomes[0].Start)
	r.Fact("exhaustion_span_ms", ms(span))
	r.Check("exhaustion within one window (no roll-over)", fmt.Sprintf("< %s", p.Window), span.Round(time.Millisecond).String(), span < p.Window)
	after, err := env.settledProviders(ctx)
	if err != nil {
		r.Error(fmt.Errorf("provider call counts after the exhaustion: %w", err))
	} else {
		d := TotalDelta(before, after)
		r.Check("denied requests reached no provider (provider calls == admitted)", ex.Admitted, d, d == int64(ex.Admitted))
	}
	return fmt.Sprintf("%d admitted (predicted %d), then %d", ex.Admitted, predicted, last.Status)
}

// medianLatency is the median of the outcomes' latencies (the upper one of an even count).
func medianLatency(outs []Outcome) time.Duration {
	if len(outs) == 0 {
		return 0
	}
	l := make([]time.Duration, len(outs))
	for i, o := range outs {
		l[i] = o.Latency
	}
	slices.Sort(l)
	return l[len(l)/2]
}
