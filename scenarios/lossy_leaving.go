package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// The last phase of lossy-store-link: clients that leave while their reserve is in flight.
// gateway-a's store replies are delayed by leavingLatency % of the store timeout, without
// jitter, so every store call is answered well within the timeout: the store does not fail.
// One subject's requests leave half that delay after they are sent — after the gateway has sent
// their reserve, before its answer comes back — while another subject's requests stay for
// their answers. A client that leaves is not a store failure: where the gateway declares its
// store-error counter (capabilities.metrics.store_errors), it moves by exactly the
// store-failure answers the clients that stayed received (blind 58, the reserve run on the
// request's context, counts one for each client that left); and the subject that left is
// charged only what reached a provider — nothing, when nothing did (gateway.md: a request that
// never reached the provider costs 0), read from a probe's remaining header on gateway-b.

const (
	leavingPhase = "clients-leave"
	// leavingLatency is the delay of every store reply, in percent of the store timeout (150 ms
	// of the quick profile's 500 ms): a call on a fresh connection — its handshake's round trip
	// and its own — stays well within the timeout. (At half the timeout a reserve of a client
	// that left could time out for real, unseen; and a store client that closes its connection
	// when a lone call times out — as our ledger's valkey-go client did until it pipelined every
	// call, TestReconnectThroughSlowRepliesDecidesAgain — reconnects into a handshake and a call
	// that together reach the timeout, again and again: gateway-a decided nothing for 20 s.)
	leavingLatency = 30
	// leavingClients leave; as many as lossyCoolRequests, so that should each reach a provider
	// and be charged, the probe after them still fits the capacity.
	leavingClients = lossyCoolRequests
	// leavingStaying stay, as many: within the capacity.
	leavingStaying = lossyCoolRequests
	// leavingHeadStart is how much earlier than the leaving clients the staying ones are sent.
	leavingHeadStart = 20 * time.Millisecond
	// leavingSubjects: the one whose clients leave, the one whose clients stay, and the one
	// that sees gateway-a decide through the fault and recover after it.
	leavingSubjects = 3
)

func runLeavingPhase(ctx context.Context, env *Env, r *Result, ph lossyPhase, first int) (key string, ok bool) {
	p := env.Profile
	leaver, stayer, witness := lossySubject(first), lossySubject(first+1), lossySubject(first+2)
	want := env.gateway().Expect.StoreFailure
	// max_tokens such that the provider generates exactly the estimate: a request that reached
	// a provider is charged its estimate whether its usage or a floor is charged.
	maxTokens := max(1, p.Estimate-chatUsage(p, 1).PromptTokens)
	usage := chatUsage(p, maxTokens).TotalTokens
	leaveAfter := ph.target.Latency / 2
	r.Fact("fault", fmt.Sprintf("%s %s; store timeout %s", ph.lever.Name(), describeLink(ph.target), p.StoreTimeout))
	r.Fact("clients", fmt.Sprintf("%d requests of %s stay, %d of %s sent %s later leave %s after they are sent, all through %s",
		leavingStaying, stayer, leavingClients, leaver, leavingHeadStart, leaveAfter, gwA))
	errCounter, why, declared := env.counterOf(env.gateway().Caps.Metrics.StoreErrors, "store errors", RuleName)

	env.Progressf("%s: %s", ph.phaseName(), describeLink(ph.target))
	heal, err := env.pull(ctx, ph.lever, ph.target)
	if err != nil {
		r.Error(fmt.Errorf("%s between %s and the store: %w", ph.lever.Name(), gwA, err))
		return "", false
	}
	defer healOnExit(r, heal)
	// Pulling the lever resets gateway-a's store connection once: the clients are to meet the
	// slow link, not that reconnect.
	w := env.awaitRecovery(ctx, gwA, witness, time.Now(), Outcome.Admitted)
	r.Fact("first_decision_through_the_fault", fmt.Sprintf("%v after %s (%v)", w.statuses, w.elapsed.Round(time.Millisecond), w.err))
	if !w.got.Admitted() {
		r.Error(fmt.Errorf("gateway-a admitted nothing through the delayed store link within %s: %v", p.RecoveryMax, w.statuses))
		return "", false
	}
	var before []float64
	if declared {
		if before, err = env.readCounters(ctx, errCounter); err != nil {
			r.Error(fmt.Errorf("store-error counter before: %w", err))
			return "", false
		}
	}
	pBefore, err := env.settledProviders(ctx)
	if err != nil {
		r.Error(fmt.Errorf("provider call counts before: %w", err))
		return "", false
	}

	// The clients that stay go first, the ones that leave leavingHeadStart later: their reserves
	// then meet calls already in flight on the gateway's store connections, as under any load
	// (a store client may wait out a lone call on a connection of its own without watching
	// its context: valkey-go's synchronous path does).
	start := time.Now()
	outs := make([]Outcome, leavingClients+leavingStaying)
	var wg sync.WaitGroup
	for i := range outs {
		c := ChatCall{Gateway: gwA, Label: fmt.Sprintf("stays-%d", i+1), Subject: stayer, MaxTokens: maxTokens}
		if i >= leavingStaying {
			if i == leavingStaying {
				if err := waitUntil(ctx, start.Add(leavingHeadStart)); err != nil {
					break
				}
			}
			c = ChatCall{Gateway: gwA, Label: fmt.Sprintf("leaves-%d", i-leavingStaying+1), Subject: leaver, MaxTokens: maxTokens,
				Timeout: leaveAfter, NoTransportRetry: true}
		}
		wg.Add(1)
		go func() { defer wg.Done(); outs[i] = env.Chat(ctx, c) }()
	}
	wg.Wait()
	// A reserve outlives its client by at most the store timeout: by then each left client's
	// handler has decided, and counted whatever it counts.
	if err := waitUntil(ctx, start.Add(leavingHeadStart+leaveAfter+p.StoreTimeout+100*time.Millisecond)); err != nil {
		r.Error(err)
		return "", false
	}
	var after []float64
	if declared {
		if after, err = env.readCounters(ctx, errCounter); err != nil {
			r.Error(fmt.Errorf("store-error counter after: %w", err))
			return "", false
		}
	}

	var left, stayAdmitted, stayFailed int
	var answered []string
	stayStatuses := []int{}
	for i, o := range outs {
		if i >= leavingStaying {
			if o.Status == 0 {
				left++
			} else {
				answered = append(answered, fmt.Sprintf("%s: %d after %s", o.RequestID, o.Status, o.Latency.Round(time.Millisecond)))
			}
			continue
		}
		stayStatuses = append(stayStatuses, o.Status)
		switch {
		case o.Admitted():
			stayAdmitted++
		case o.Status == want.Status && (want.ErrorType == "" || o.ErrorType == want.ErrorType):
			stayFailed++
		}
	}
	r.Fact("staying_statuses", stayStatuses)
	r.Check("the leaving clients left with their reserve in flight (no answer within half the delayed store reply)",
		fmt.Sprintf("%d of %d left unanswered", leavingClients, leavingClients), answered, left == leavingClients)

	counted := "store errors not read"
	if !declared {
		r.NotMade("a client leaving mid-reserve counts no store error", why)
	} else {
		d := int(after[0] - before[0])
		r.Fact("store_errors_counted", map[string]any{"counter": errCounter.sel.String(), "delta": d,
			"store_failure_answers": stayFailed, "clients_left": left})
		r.Check("a client leaving mid-reserve is no store failure: the gateway's store-error counter moved by the store-failure answers clients got",
			stayFailed, d, d == stayFailed)
		counted = fmt.Sprintf("store errors counted +%d for %d store-failure answers", d, stayFailed)
	}

	// The charge: settlements and releases of the reserves cross the slow link too; the
	// probe goes through gateway-b's clean one.
	if err := waitUntil(ctx, time.Now().Add(p.StoreTimeout+300*time.Millisecond)); err != nil {
		r.Error(err)
		return "", false
	}
	pAfter, err := env.settledProviders(ctx)
	if err != nil {
		r.Error(fmt.Errorf("provider call counts after: %w", err))
		return "", false
	}
	reached := TotalDelta(pBefore, pAfter) - int64(stayAdmitted)
	r.Fact("left_requests_that_reached_a_provider", reached)
	charged := env.leaverCharge(ctx, r, leaver, start, reached*usage, reached*p.Estimate)

	env.Progressf("healing the link")
	healedAt := time.Now()
	if err := heal(); err != nil {
		r.Error(err)
		return "", false
	}
	env.checkStaysDeciding(ctx, r, gwA, witness, healedAt)
	return fmt.Sprintf("%s: %d clients left mid-reserve (%s), %s; %s", ph.phaseName(), left, describeLink(ph.target), counted, charged), true
}

// leaverCharge reads, through one probe's remaining header on gateway-b, what the subject
// whose clients left was charged, and checks it lies within lo–hi: what its requests that
// reached a provider used, and their estimates (0–0 when none did).
func (env *Env) leaverCharge(ctx context.Context, r *Result, subject string, first time.Time, lo, hi int64) string {
	p := env.Profile
	h := env.gateway().Expect.QuotaHeaders.Remaining
	const what = "the subject whose clients left charged only for what reached a provider (nothing, when nothing did)"
	if h == "" {
		r.NotMade(what, "the gateway's profile names no remaining header")
		return "charge not read"
	}
	o := env.Chat(ctx, ChatCall{Gateway: gwB, Label: "charge-probe", Subject: subject})
	if o.End.After(first.Add(p.Window)) {
		r.Error(fmt.Errorf("the probe of %s read %s after its first request, past the %s window: a charge may have aged out", subject, o.End.Sub(first).Round(time.Millisecond), p.Window))
		return "charge not read"
	}
	if o.Status != http.StatusOK {
		r.Check(what, fmt.Sprintf("%d–%d tokens", lo, hi), fmt.Sprintf("the probe answered %d: no room left", o.Status), false)
		return "charge not read"
	}
	rem, err := strconv.ParseInt(headerOf(o.Headers, h), 10, 64)
	if err != nil {
		r.Error(fmt.Errorf("the probe's %s is %q: %w", h, headerOf(o.Headers, h), err))
		return "charge not read"
	}
	got := p.Capacity - p.Estimate - rem
	r.Check(what, fmt.Sprintf("%d–%d tokens", lo, hi), got, got >= lo && got <= hi)
	return fmt.Sprintf("the subject that left charged %d", got)
}

// checkStaysDeciding sends subject's requests to gw every 50 ms until stableReads in a row are
// decided from the store (admitted or denied: either is the store's answer), and checks that
// the first of those was sent within the store timeout + margin of since, the heal. A healed
// link answers at once, and a store connection the heal ended is one the store client sees
// end and re-dials within its own timeout: a gateway still failing calls a second after the
// heal keeps a connection that no longer answers. (Seen before the link levers' heal closed
// their proxied connections for the client: gateway-a's two valkey-go connections stayed
// half-open, and 503s went on for 2-3 s, interleaved with 200s once one was re-made, until
// valkey-go's PING, unanswered within ConnWriteTimeout, ended the other.) Polling stops at
// RecoveryMax; the next scenario is to start from a gateway that decides every call.
func (env *Env) checkStaysDeciding(ctx context.Context, r *Result, gw, subject string, since time.Time) {
	p := env.Profile
	var statuses []int
	streak := 0
	var streakFrom time.Time // when the streak's first request was sent
	_, err := poll(ctx, 50*time.Millisecond, p.RecoveryMax, func(ctx context.Context) (bool, error) {
		sent := time.Now()
		o := env.Chat(ctx, ChatCall{Gateway: gw, Label: "recover", Subject: subject})
		statuses = append(statuses, o.Status)
		if o.Decided() {
			if streak == 0 {
				streakFrom = sent
			}
			streak++
		} else {
			streak = 0
		}
		return streak >= stableReads, nil
	})
	done := time.Since(since)
	bound := p.StoreTimeout + p.OutageSLO
	r.Fact("recovery_statuses", tally(statuses))
	observed := fmt.Sprintf("not within %s (%v)", p.RecoveryMax, err)
	from := streakFrom.Sub(since)
	if err == nil {
		observed = fmt.Sprintf("from %s after the heal, the %dth %s after (%s)", from.Round(time.Millisecond), stableReads, done.Round(time.Millisecond), tally(statuses))
	}
	r.Check(fmt.Sprintf("%s decides every request soon after the heal: %d in a row admitted or denied, the first sent within store timeout + margin of the heal", gw, stableReads),
		"from ≤ "+bound.String()+" after the heal", observed, err == nil && from <= bound)
}
