package scenarios

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/topology"
)

// gateway-restart stops gateway-a gracefully (SIGTERM, what RestartGateway does) with streams
// of its own subject in flight on it. The contract: the stop lets them finish and settles each
// at its usage. A gateway that drops their settlements (its settler stopped, or its store
// client closed, before the drain) leaves their reservations to expire, charged the estimate.
//
// The streams generate drainTokens each, the first at once and the next drainInterToken
// later, so the stop finds them mid-stream for about a second. Together they reserve the whole
// quick budget (4 × the estimate 15 = 60) and use 4 × (9 + 2) = 44 of it: charged their usage,
// their subject has room for one more request; charged their estimate (or still held), none.
const (
	drainStreams    = 4
	drainTokens     = 2
	drainInterToken = 500 * time.Millisecond
)

// drainingStreams are the streams in flight on gateway-a while it stops.
type drainingStreams struct {
	started time.Time
	outs    []Outcome
	done    chan struct{}
}

// startDrainStreams sends the streams on gateway-a for appC and returns at once.
func (env *Env) startDrainStreams(ctx context.Context) *drainingStreams {
	d := &drainingStreams{started: time.Now(), outs: make([]Outcome, drainStreams), done: make(chan struct{})}
	var wg sync.WaitGroup
	for i := range d.outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Not retried: a stream the stop cut must not be sent again to the new gateway-a.
			d.outs[i] = env.Chat(ctx, ChatCall{Gateway: gwA, Label: fmt.Sprintf("in-flight-at-restart-%d", i+1), Subject: appC,
				Stream: true, MaxTokens: drainTokens, NoTransportRetry: true, Metadata: map[string]string{
					providerstub.TokensMetadata: strconv.Itoa(drainTokens), providerstub.InterTokenMetadata: drainInterToken.String()}})
		}()
	}
	go func() { wg.Wait(); close(d.done) }()
	return d
}

// judgeDrain waits for the streams (the stop that began at stopAt has ended them) and checks
// that each finished and was charged its usage: with quota inspection by the settled figure,
// and on every gateway by what their subject is admitted for afterwards, predicted from the
// tokens the providers logged for the streams.
func (env *Env) judgeDrain(ctx context.Context, r *Result, d *drainingStreams, stopAt time.Time) string {
	<-d.done
	p := env.Profile
	var finished, endedAfterStop int
	for _, o := range d.outs {
		if o.Admitted() && o.Usage != nil && o.Usage.CompletionTokens == drainTokens {
			finished++
		}
		if o.End.After(stopAt) {
			endedAfterStop++
		}
	}
	r.Fact("in_flight_at_restart_statuses", statuses(d.outs))
	r.Check("the streams in flight at the stop finished: 200 with their usage reported", fmt.Sprintf("%d of %d", drainStreams, drainStreams),
		fmt.Sprintf("%d of %d", finished, drainStreams), finished == drainStreams)
	r.Check("the streams ended after the stop began (they were in flight through it)", drainStreams, endedAfterStop, endedAfterStop == drainStreams)

	snap, err := env.settledProviders(ctx)
	if err != nil {
		r.Error(fmt.Errorf("provider call logs after the restart: %w", err))
		return ""
	}
	var logged, whole int
	var consumed int64
	for _, h := range topology.Providers {
		for _, pr := range snap.ByHost[h].Requests {
			if !pr.Stream || pr.Time.Before(d.started) {
				continue // gateway-restart sends no other stream
			}
			logged++
			consumed += pr.Consumed()
			if pr.GeneratedTokens == drainTokens && !pr.ClientGone {
				whole++
			}
		}
	}
	r.Fact("in_flight_at_restart_consumed", consumed)
	r.Check("the providers generated every stream whole (the client stayed to the end)", fmt.Sprintf("%d of %d logged whole", drainStreams, drainStreams),
		fmt.Sprintf("%d of %d logged whole", whole, logged), logged == drainStreams && whole == drainStreams)

	switch {
	case env.inspects() && time.Since(d.started) >= p.Window:
		r.NotMade("the streams were settled at the usage the providers counted", "read past the window of their charges (a slow restart): the settled figure no longer holds them")
	case env.inspects():
		if q, err := env.Quotas().Read(ctx, gwA, Key{Rule: RuleName, Subject: appC}); err != nil {
			r.Error(err)
		} else {
			r.Fact("in_flight_at_restart_settled", q.Settled())
			r.Check("the streams were settled at the usage the providers counted before gateway-a stopped", fmt.Sprintf("settled %d, 0 active", consumed),
				fmt.Sprintf("settled %d, %d active", q.Settled(), q.ActiveReservations), q.Settled() == consumed && q.ActiveReservations == 0)
		}
	default:
		r.NotMade("the streams were settled at the usage the providers counted", "no quota inspection: what their subject is admitted for decides")
	}
	// What their subject can still spend: within the window of their charge, admitted while
	// charged + the admission cost fits the capacity, each admission charged the stub's usage.
	predicted := admissionsAfter(consumed, p.Capacity, env.admitCost(env.Profile), chatUsage(p, 1).TotalTokens)
	ex, err := env.exhaust(ctx, Key{Rule: RuleName, Subject: appC}, "after-drain", env.gateways(), exhaustCap)
	if err != nil {
		r.Error(err)
		return ""
	}
	r.Fact("after_drain_statuses", statuses(ex.Outcomes))
	if took := time.Since(d.started); took >= p.Window {
		// The streams' charges could have left the window before the last of these answers:
		// what their subject is admitted for no longer tells their charge.
		r.NotMade("their subject is admitted afterwards as a charge of their usage predicts",
			fmt.Sprintf("the admissions ended %s after the streams started, past the %s window (a slow restart)", took.Round(time.Millisecond), p.Window))
		return fmt.Sprintf("%d/%d streams finished through the stop, charged %d; admissions after not judged (past the window)", finished, drainStreams, consumed)
	}
	r.Check(fmt.Sprintf("their subject is admitted afterwards as a charge of their usage (%d) predicts (%s)", consumed, env.admissionRule()),
		fmt.Sprintf("%d admitted, then 429", predicted), fmt.Sprintf("%d admitted, then %d", ex.Admitted, ex.Outcomes[len(ex.Outcomes)-1].Status),
		ex.Admitted == predicted && ex.Denied)
	return fmt.Sprintf("%d/%d streams finished through the stop, charged %d: %d admitted after (predicted %d)",
		finished, drainStreams, consumed, ex.Admitted, predicted)
}

// restartWithStreamsInFlight stops gateway-a gracefully again with the drain streams in flight
// on it, and judges them.
func (env *Env) restartWithStreamsInFlight(ctx context.Context, r *Result) string {
	drain := env.startDrainStreams(ctx)
	env.inFlightAtStop(ctx, r)
	env.Progressf("restarting gateway-a with %d streams in flight", drainStreams)
	env.Topo.Client().CloseIdleConnections()
	env.Topo.Observer().CloseIdleConnections()
	stopAt := time.Now()
	endFault := env.Fault("restart", gwA)
	err := env.Topo.RestartGateway(ctx, gwA)
	endFault()
	if err != nil {
		<-drain.done
		r.Error(fmt.Errorf("restarting gateway-a with streams in flight: %w", err))
		return ""
	}
	env.Topo.Client().CloseIdleConnections()
	env.Topo.Observer().CloseIdleConnections()
	return env.judgeDrain(ctx, r, drain, stopAt)
}

// admissionsAfter is how many sequential requests a subject already charged charged is
// admitted for: while charged + cost ≤ capacity, each adding usage (its cost when it reports
// none).
func admissionsAfter(charged, capacity, cost, usage int64) int {
	n := 0
	for ; charged+cost <= capacity && n < maxPredicted; n++ {
		charged += max(usage, cost, 1)
	}
	return n
}

// inFlightAtStop checks that the streams were at a provider when the stop began.
func (env *Env) inFlightAtStop(ctx context.Context, r *Result) {
	err := env.waitInFlight(ctx, drainStreams)
	seen := fmt.Sprintf("≥ %d in flight", drainStreams)
	if err != nil {
		seen = errString(err)
	}
	r.Check("the streams were in flight at the providers when gateway-a was stopped", fmt.Sprintf("≥ %d in flight", drainStreams), seen, err == nil)
}
