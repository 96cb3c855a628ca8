package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/topology"
)

func init() { register(2260, gatewayPause) }

func gatewayPause() Scenario {
	return Scenario{
		Name: "gateway-pause",
		Summary: "gateway-a frozen (SIGSTOP, docker pause) past its lease while it holds two admitted requests generating more than " +
			"their estimate, then thawed: meanwhile gateway-b admits exactly what the capacity less the expired holds' estimates " +
			"allows; after the thaw the late settlements charge what was generated, exactly once. Then each of two gateways frozen " +
			"right after it admits a request (the two sent half a second apart) and thawed a quarter of a second short of that " +
			"request's lease: each hold kept, charged the request's usage, not its estimate",
		Invariant: "a hold whose gateway stopped renewing it runs out and is charged its estimate; a settlement that arrives after " +
			"that charges only the rest of the usage — never the estimate and the usage both, never less than was generated; and " +
			"the hold runs out no earlier than its last renewal + lease, judged to a quarter of a second (a lease deadline on the " +
			"store's clock to the millisecond, not its whole second)",
		Exclusive: "pauses gateway-a, then both gateways at once",
		Lasts:     8 * time.Second,
		Needs:     []Need{NeedSharedStore, NeedLeases},
		Prefers:   []Need{NeedQuotaInspection},
		BlackBox: "sees gateway-b admit exactly the capacity less the frozen holds during the pause, and the frozen requests " +
			"completing after the thaw; cannot see those late settlements' charge (a probe's remaining header cannot read a key " +
			"this full). Sees each request thawed short of its lease charged its usage or its estimate (a probe's remaining " +
			"header on a subject of its own)",
		Run: runGatewayPause,
	}
}

// pauseTokens makes each frozen request generate more than the quick estimate (15): its
// late settlement owes an overage past the expired hold's estimate.
const (
	pauseTokens     = 20
	pauseHeldBefore = 1500 * time.Millisecond // the provider's hold: it answers while gateway-a is frozen
	pauseBurst      = 4
	pauseBurstHold  = 800 * time.Millisecond
)

func runGatewayPause(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	if ok, why := topology.Pause.Available(env.Topo); !ok {
		return r.Error(fmt.Errorf("%s: %w", why, topology.ErrUnsupported))
	}
	past := env.pausePastLease(ctx, r)
	short := env.pauseShortOfLease(ctx, r)
	r.Key("%s; %s", past, short)
	return r
}

// pausePastLease freezes gateway-a past its lease with two requests in flight and judges what
// gateway-b admits meanwhile and what the late settlements charge. It returns its part of the
// key fact.
func (env *Env) pausePastLease(ctx context.Context, r *Result) string {
	p := env.Profile
	const notCompleted = "paused past the lease: not completed"
	frozen := 2
	if int64(frozen)*p.Estimate >= p.Capacity {
		r.Error(fmt.Errorf("profile %s: capacity %d leaves no room beside %d holds of %d", p.Name, p.Capacity, frozen, p.Estimate))
		return notCompleted
	}
	pauseFor := p.Lease + p.LeaseSlack + 1500*time.Millisecond
	r.Fact("pause", fmt.Sprintf("%s (lease %s, slack %s)", pauseFor, p.Lease, p.LeaseSlack))
	before, ok := env.readProviders(ctx, r, "provider call counts before")
	if !ok {
		return notCompleted
	}
	outs := make([]Outcome, frozen)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = env.Chat(ctx, ChatCall{Gateway: gwA, Label: fmt.Sprintf("frozen-%d", i+1), Subject: appA, MaxTokens: -1, Hold: pauseHeldBefore,
				Metadata: map[string]string{providerstub.TokensMetadata: strconv.Itoa(pauseTokens)}})
		}()
	}
	if err := env.waitInFlight(ctx, int64(frozen)); err != nil {
		wg.Wait()
		r.Error(fmt.Errorf("waiting for gateway-a's requests to reach a provider: %w", err))
		return notCompleted
	}

	env.Progressf("pausing gateway-a for %s", pauseFor)
	pausedAt := time.Now()
	resume, err := env.pull(ctx, topology.Pause, topology.Target{Host: gwA})
	if err != nil {
		wg.Wait()
		r.Error(fmt.Errorf("pausing gateway-a: %w", err))
		return notCompleted
	}
	defer wg.Wait()
	defer healOnExit(r, resume)

	// Past the frozen holds' lease (their last renewal came at the latest when the pause began)
	// and its slack: they have run out and are charged their estimates.
	if err := waitUntil(ctx, pausedAt.Add(p.Lease+p.LeaseSlack+200*time.Millisecond)); err != nil {
		r.Error(err)
		return notCompleted
	}
	if env.inspects() {
		if q, err := env.Quotas().Read(ctx, gwB, Key{Rule: RuleName, Subject: appA}); err != nil {
			r.Error(err)
		} else {
			r.Check("the frozen gateway's holds ran out past their lease and were charged their estimates",
				fmt.Sprintf("0 active, settled %d", int64(frozen)*p.Estimate), fmt.Sprintf("%d active, settled %d", q.ActiveReservations, q.Settled()),
				q.ActiveReservations == 0 && q.Settled() == int64(frozen)*p.Estimate)
		}
	}
	// gateway-b, meanwhile: a burst held at the provider so that every admission stays
	// reserved while the others are decided.
	room := (p.Capacity - int64(frozen)*p.Estimate) / p.Estimate
	burst := env.chatAtOnce(ctx, pauseBurst, func(i int) ChatCall {
		return ChatCall{Gateway: gwB, Label: fmt.Sprintf("burst-during-pause-%d", i+1), Subject: appA, Hold: pauseBurstHold}
	})
	var admitted, denied int
	for _, o := range burst {
		switch {
		case o.Admitted():
			admitted++
		case o.Status == http.StatusTooManyRequests:
			denied++
		}
	}
	r.Check(fmt.Sprintf("gateway-b admitted exactly what the capacity less the frozen holds allows ((%d − %d×%d)/%d), denying the rest with 429",
		p.Capacity, frozen, p.Estimate, p.Estimate), fmt.Sprintf("%d admitted, %d denied", room, int64(pauseBurst)-room),
		fmt.Sprintf("%d admitted, %d denied (%s)", admitted, denied, tally(statuses(burst))), int64(admitted) == room && int64(denied) == int64(pauseBurst)-room)

	if err := waitUntil(ctx, pausedAt.Add(pauseFor)); err != nil {
		r.Error(err)
		return notCompleted
	}
	env.Progressf("resuming gateway-a")
	healOnExit(r, resume)
	wg.Wait()
	r.Fact("paused_ms", ms(time.Since(pausedAt)))
	after, err := env.settledProviders(ctx)
	if err != nil {
		r.Error(fmt.Errorf("provider call logs after: %w", err))
		return notCompleted
	}
	var generated, burstUsage int64
	found := 0
	for i, o := range outs {
		r.Check(fmt.Sprintf("frozen request %d completed after the thaw", i+1), http.StatusOK, o.Status, o.Admitted())
		if _, pr, ok := after.FindRequest(o.RequestID); ok {
			found++
			generated += pr.Consumed()
		}
	}
	for _, o := range burst {
		if _, pr, ok := after.FindRequest(o.RequestID); ok && o.Admitted() {
			burstUsage += pr.Consumed()
		}
	}
	calls := TotalDelta(before, after)
	r.Check("only the admitted requests reached a provider", int64(frozen+admitted), calls, calls == int64(frozen+admitted))
	r.Fact("usage", map[string]int64{"frozen_requests": generated, "burst_on_gateway_b": burstUsage})
	if !env.inspects() {
		r.NotMade("the late settlements charge what was generated, exactly once", "no quota inspection, and the key is too full for a probe's remaining header to read it")
		r.DecidedBy("gateway-b's admissions during the pause", "the providers' call logs")
		return fmt.Sprintf("gateway-a paused %s with %d requests held: gateway-b admitted %d of %d (room %d); the frozen requests answered %s after the thaw",
			pauseFor, frozen, admitted, pauseBurst, room, tally(statuses(outs)))
	}
	want := generated + burstUsage
	q, err := env.settledAtLeast(ctx, appA, want)
	if err != nil {
		r.Error(err)
		return notCompleted
	}
	r.Check("the frozen requests' late settlements charged what the providers counted, exactly once (with gateway-b's burst: the key's settled usage)",
		fmt.Sprintf("%d (estimates %d not charged on top; found %d of %d)", want, int64(frozen)*p.Estimate, found, frozen), q.Settled(),
		found == frozen && q.Settled() == want)
	return fmt.Sprintf("gateway-a paused %s with %d requests held: gateway-b admitted %d of %d (room %d); settled %d for usage %d",
		pauseFor, frozen, admitted, pauseBurst, room, q.Settled(), want)
}
