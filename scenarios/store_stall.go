package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { register(2240, storeStall) }

func storeStall() Scenario {
	return Scenario{
		Name: "store-stall",
		Summary: "Valkey stalled (CLIENT PAUSE WRITE: alive, answering reads, running no write) longer than the store timeout while " +
			"requests longer than the lease are in flight — once shorter than the lease (the holds must be kept: one renewal fails, " +
			"the next succeeds), once longer (the holds run out): new requests 503 within the bound, nothing admitted; the in-flight " +
			"requests settle at what the provider counted, the overage of a hold that ran out included",
		Invariant: "fail closed in bounded time while the store stalls; a lease survives a renewal lost to a stall shorter than the " +
			"lease (renewal resumes), and a hold that ran out during a longer one is charged its estimate and then its overage, " +
			"exactly what was generated",
		Exclusive: "stalls the store",
		Lasts:     13 * time.Second,
		Needs:     []Need{NeedSharedStore, NeedLeases},
		Prefers:   []Need{NeedQuotaInspection},
		BlackBox: "sees the 503s and their times while the store stalls, no provider reached by them, and each subject's settled " +
			"usage through one probe's remaining header afterwards (kept holds settle below their estimate, lost ones are charged " +
			"it); cannot see the holds themselves during the stall",
		Run: runStoreStall,
	}
}

// The two stalls, for the quick profile's 3 s lease renewed every second and its 500 ms store
// timeout. The short stall starts 1.6 s after the first of three staggered admissions and lasts
// 1.2 s: the first and third requests' renewals fail once in it (blocked past the timeout),
// the next succeeds at most a second later, and every lease keeps at least half a second to
// spare. The long stall lasts a lease and a second: the hold cannot survive it.
//
// The requests are held 6.8 s, a second past the stall's end plus a lease: a renewal the
// gateway gave up on is not lost with it — the stalled command stays queued on a connection
// the store client keeps (it pipelines), and the store runs it when the stall ends, which
// renews the hold a lease from then (5.8 s after the first admission). A renewer that stops
// after that failure must see its hold run out while its request is still in flight; with
// holds of 4.8 s, that late renewal covered them to the end and such a renewer passed.
const (
	stallShortAfter  = 1600 * time.Millisecond
	stallShort       = 1200 * time.Millisecond
	stallStagger     = 330 * time.Millisecond
	stallShortHold   = 6800 * time.Millisecond
	stallShortTokens = 2  // usage below the estimate: a kept hold settles below it, a lost one is charged it
	stallLongTokens  = 30 // usage above the estimate: the overage a lost hold must still be charged
)

func runStoreStall(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	if ok, why := topology.StoreStall.Available(env.Topo); !ok {
		return r.Error(fmt.Errorf("%s: %w", why, topology.ErrUnsupported))
	}
	if minLease := stallShortAfter + stallShort; p.Lease < 2*time.Second || p.StoreTimeout >= stallShort {
		return r.Error(fmt.Errorf("profile %s: store-stall is timed for a lease of at least 2s renewed every lease/3 and a store timeout under %s (lease %s, timeout %s, short stall ends %s after admission)",
			p.Name, stallShort, p.Lease, p.StoreTimeout, minLease))
	}
	r.Fact("stalls", fmt.Sprintf("short %s (store timeout %s, lease %s), long %s", stallShort, p.StoreTimeout, p.Lease, p.Lease+time.Second))
	short := env.storeStallKept(ctx, r)
	env.storeStallLost(ctx, r, short)
	if !env.inspects() {
		r.NotMade("the holds stay live through the short stall (sampled from the ledger)", "no quota inspection: the charges decide")
		r.DecidedBy("each subject's settled usage read from a probe's remaining header")
	}
	return r
}

// storeStallKept is the short stall: three requests of application-a in flight, staggered so
// renewals of two of them fall into the stall.
func (env *Env) storeStallKept(ctx context.Context, r *Result) (key string) {
	p := env.Profile
	before, ok := env.readProviders(ctx, r, "provider call counts before the short stall")
	if !ok {
		return "short stall: not completed"
	}
	gws := []string{gwA, gwB, gwA}
	outs := make([]Outcome, len(gws))
	var wg sync.WaitGroup
	start := time.Now()
	for i, gw := range gws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = waitUntil(ctx, start.Add(time.Duration(i)*stallStagger))
			outs[i] = env.Chat(ctx, ChatCall{Gateway: gw, Label: fmt.Sprintf("in-flight-%d", i+1), Subject: appA, MaxTokens: -1, Hold: stallShortHold,
				Metadata: map[string]string{providerstub.TokensMetadata: strconv.Itoa(stallShortTokens)}})
		}()
	}
	defer wg.Wait()
	if err := env.waitInFlight(ctx, int64(len(gws))); err != nil {
		wg.Wait()
		r.Error(fmt.Errorf("waiting for the in-flight requests to reach a provider: %w", err))
		return "short stall: not completed"
	}
	if err := waitUntil(ctx, start.Add(stallShortAfter)); err != nil {
		r.Error(err)
		return "short stall: not completed"
	}
	dec, stalled := env.stallWindow(ctx, r, "short", stallShort, appB)
	// The holds, from the end of the stall until the first request ends: a hold that lost a
	// renewal to the stall and was given up on runs out here, a lease after its last renewal.
	var samples, held int
	if env.inspects() {
		until := start.Add(stallShortHold - 200*time.Millisecond)
		for time.Now().Before(until) && ctx.Err() == nil {
			if q, err := env.Quotas().Read(ctx, gwB, Key{Rule: RuleName, Subject: appA}); err == nil {
				samples++
				if q.ActiveReservations == int64(len(gws)) {
					held++
				}
			}
			_ = waitUntil(ctx, time.Now().Add(100*time.Millisecond))
		}
	}
	wg.Wait()
	after, err := env.settledProviders(ctx)
	if err != nil {
		r.Error(fmt.Errorf("provider call logs after the short stall: %w", err))
		return "short stall: not completed"
	}
	var usage int64
	var missing int
	for i, o := range outs {
		r.Check(fmt.Sprintf("in-flight request %d (admitted before the short stall) completed", i+1), http.StatusOK, o.Status, o.Admitted())
		if _, pr, found := after.FindRequest(o.RequestID); found {
			usage += pr.Consumed()
		} else {
			missing++
		}
	}
	r.Check("only the in-flight requests reached a provider (none of those sent while the store stalled)", len(gws), TotalDelta(before, after), TotalDelta(before, after) == int64(len(gws)))
	r.Fact("short_stall", map[string]any{"stalled_ms": ms(stalled), "answers": dec.statuses, "hold_samples": samples, "held": held})
	if env.inspects() {
		r.Check(fmt.Sprintf("the %d holds stayed live after the short stall until the first request ended (renewal resumed; sampled every 100 ms)", len(gws)),
			fmt.Sprintf("%d of ≥ 5 samples", samples), held, samples >= 5 && held == samples)
	}
	settled, how, err := env.settledOf(ctx, appA, usage)
	if err != nil {
		r.Error(fmt.Errorf("application-a's settled usage after the short stall: %w", err))
		return "short stall: not completed"
	}
	r.Check(fmt.Sprintf("settled at the usage the provider counted (%s): below the estimate each, none charged as a lost hold", how),
		fmt.Sprintf("%d (found %d of %d)", usage, len(gws)-missing, len(gws)), settled, missing == 0 && settled == usage)
	return fmt.Sprintf("short stall %s: %s; %d holds settled %d (usage %d)", stalled.Round(100*time.Millisecond),
		dec.key(env, "the store stalled", p.StoreTimeout+p.OutageSLO), len(gws), settled, usage)
}

// storeStallLost is the long stall: one request of application-c in flight, generating more
// than its estimate, while the store stalls a lease and a second.
func (env *Env) storeStallLost(ctx context.Context, r *Result, short string) {
	p := env.Profile
	done := make(chan Outcome, 1)
	start := time.Now()
	hold := 500*time.Millisecond + p.Lease + time.Second + 1500*time.Millisecond
	go func() {
		done <- env.Chat(ctx, ChatCall{Gateway: gwA, Label: "in-flight-through-long-stall", Subject: appC, MaxTokens: -1, Hold: hold,
			Metadata: map[string]string{providerstub.TokensMetadata: strconv.Itoa(stallLongTokens)}})
	}()
	if err := env.waitInFlight(ctx, 1); err != nil {
		<-done
		r.Error(fmt.Errorf("waiting for the long stall's request to reach a provider: %w", err))
		return
	}
	_ = waitUntil(ctx, start.Add(500*time.Millisecond))
	dec, stalled := env.stallWindow(ctx, r, "long", p.Lease+time.Second, appB)
	if env.inspects() {
		// After a stall longer than the lease the hold has run out: charged its estimate.
		if q, err := env.Quotas().Read(ctx, gwB, Key{Rule: RuleName, Subject: appC}); err != nil {
			r.Error(err)
		} else {
			r.Check("the hold ran out during the long stall (longer than the lease): no longer held, charged its estimate",
				fmt.Sprintf("0 active, settled %d", p.Estimate), fmt.Sprintf("%d active, settled %d", q.ActiveReservations, q.Settled()),
				q.ActiveReservations == 0 && q.Settled() == p.Estimate)
		}
	}
	o := <-done
	after, err := env.settledProviders(ctx)
	if err != nil {
		r.Error(fmt.Errorf("provider call logs after the long stall: %w", err))
		return
	}
	r.Check("the request in flight through the long stall completed", http.StatusOK, o.Status, o.Admitted())
	_, pr, found := after.FindRequest(o.RequestID)
	r.Check("the provider logged it, generating more than the estimate", fmt.Sprintf("> %d", p.Estimate), pr.Consumed(), found && pr.Consumed() > p.Estimate)
	settled, how, err := env.settledOf(ctx, appC, pr.Consumed())
	if err != nil {
		r.Error(fmt.Errorf("application-c's settled usage after the long stall: %w", err))
		return
	}
	r.Check(fmt.Sprintf("its late settlement charged the overage past the expired hold's estimate: settled at the usage the provider counted (%s)", how),
		pr.Consumed(), settled, found && settled == pr.Consumed())
	r.Fact("long_stall", map[string]any{"stalled_ms": ms(stalled), "answers": dec.statuses, "usage": pr.Consumed(), "settled": settled})
	r.Key("%s; long stall %s: the lost hold settled %d of usage %d", short, stalled.Round(100*time.Millisecond), settled, pr.Consumed())
}

// stallWindow stalls the store for length and, while it lasts, sends subject one request per
// gateway: each must be the store-failure answer within the store timeout + margin. It returns
// the answers and how long the stall lasted (ended by Undo, in case the pause outlasts it).
func (env *Env) stallWindow(ctx context.Context, r *Result, name string, length time.Duration, subject string) (decisions, time.Duration) {
	p := env.Profile
	var dec decisions
	env.Progressf("stalling valkey for %s", length)
	at := time.Now()
	heal, err := env.pull(ctx, topology.StoreStall, topology.Target{Host: topology.HostValkey, Duration: length})
	if err != nil {
		r.Error(fmt.Errorf("stalling the store: %w", err))
		return dec, 0
	}
	defer healOnExit(r, heal)
	// Rounds of one request per gateway at once, while a round's answers are due before the
	// stall ends.
	slo := p.StoreTimeout + p.OutageSLO
	gws := env.gateways()
	for round := 1; time.Since(at)+slo <= length && ctx.Err() == nil; round++ {
		outs := env.chatAtOnce(ctx, len(gws), func(i int) ChatCall {
			return ChatCall{Gateway: gws[i], Label: fmt.Sprintf("during-%s-stall-%d", name, round), Subject: subject, NoTransportRetry: true}
		})
		for i, o := range outs {
			dec.checkFailClosed(env, r, fmt.Sprintf("%s request %d during the %s stall", gws[i], round, name), o, slo)
		}
	}
	dec.record(r)
	if err := waitUntil(ctx, at.Add(length)); err != nil && !errors.Is(err, context.Canceled) {
		r.Error(err)
	}
	return dec, time.Since(at)
}

// settledOf reads subject's settled usage once every request of it has settled: from the
// ledger with quota inspection (waiting briefly for want, settledAtLeast), else from the remaining header of one probe (capacity − settled
// − the probe's own estimate), which needs the gateway's profile to name that header.
func (env *Env) settledOf(ctx context.Context, subject string, want int64) (int64, string, error) {
	p := env.Profile
	if env.inspects() {
		q, err := env.settledAtLeast(ctx, subject, want)
		return q.Settled(), "read from the ledger", err
	}
	h := env.gateway().Expect.QuotaHeaders.Remaining
	if h == "" {
		return 0, "", fmt.Errorf("the gateway offers neither quota inspection nor a remaining header: %w", topology.ErrUnsupported)
	}
	if _, err := env.Quotas().WaitIdle(ctx, gwA, Key{Rule: RuleName, Subject: subject}); err != nil {
		return 0, "", err
	}
	o := env.Chat(ctx, ChatCall{Gateway: gwB, Label: "settled-probe", Subject: subject})
	if !o.Admitted() {
		return 0, "", fmt.Errorf("the probe reading %s's settled usage answered %d, not 200", subject, o.Status)
	}
	rem, err := strconv.ParseInt(headerOf(o.Headers, h), 10, 64)
	if err != nil {
		return 0, "", fmt.Errorf("the probe's %s is %q: %w", h, headerOf(o.Headers, h), err)
	}
	return p.Capacity - p.Estimate - rem, "read from a probe's " + h, nil
}

// settledAtLeast waits until subject's key holds no reservation, then — a hold that ran out
// leaves the key idle before its request's late settlement lands — until its settled usage
// reaches want, for at most a second and two store timeouts (as long-generation waits), and
// returns the last state read.
func (env *Env) settledAtLeast(ctx context.Context, subject string, want int64) (wire.QuotaState, error) {
	q, err := env.Quotas().WaitIdle(ctx, gwA, Key{Rule: RuleName, Subject: subject})
	if err != nil || q.Settled() >= want {
		return q, err
	}
	_, _ = poll(ctx, 10*time.Millisecond, time.Second+2*env.Profile.StoreTimeout, func(ctx context.Context) (bool, error) {
		if nq, err := env.Quotas().Read(ctx, gwA, Key{Rule: RuleName, Subject: subject}); err == nil {
			q = nq
		}
		return q.Settled() >= want, nil
	})
	return q, nil
}
