package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/wire"
)

func init() { register(900, gatewayCrash) }

func gatewayCrash() Scenario {
	return Scenario{
		Name: "gateway-crash",
		Summary: "gateway A killed (SIGKILL) while a provider holds one of its admitted requests, renewed several times, and the same " +
			"subject's renewed requests hold the rest of the budget on gateway-b: the dead gateway's reservation holds until its last " +
			"renewal + lease, no longer than the profile's slack past it, and then its estimate is charged",
		Invariant: "a dead gateway's lease expires in the store no earlier than last renewal + lease and no later than that plus the " +
			"profile's slack, also while other reservations of its key are renewed, and its estimate stays charged (conservative): " +
			"the expiry sweep writes what admission reads; a 429 while holds fill the budget does not send its client back before the " +
			"earliest hold can end",
		Exclusive:        "kills and restarts gateway-a",
		Lasts:            7 * time.Second,
		SharesAfterLever: true, // then waits for the dead gateway's lease to run out
		Needs:            []Need{NeedRestart},
		// Without either, what the subject can still be admitted for decides
		// (gateway_crash_blackbox.go).
		Prefers: []Need{NeedLeases, NeedQuotaInspection},
		BlackBox: "sees the dead gateway's held request in the admissions around it: the burst after the crash admits what the capacity " +
			"less its hold (and, where the profile states the lease, the same subject's renewed request on another gateway) allows, " +
			"the first request after the lease is denied (the expired hold charged), and where the profile states the lease the first " +
			"admission after the crash, polled every 50 ms, between the dead hold's earliest end (crash − renewal period + lease) " +
			"plus a window and its latest (crash + lease + slack) plus a window and a bucket, else only that the subject is admitted " +
			"again within a window of the lease; cannot see the reservation itself, nor when the store released it to better than a " +
			"bucket (so not whether a Retry-After during the holds sent its client back before the dead hold ended), nor its settled " +
			"charge",
		Run: runGatewayCrash,
	}
}

func runGatewayCrash(ctx context.Context, env *Env) *Result {
	if !env.inspects() || !env.gateway().Caps.Leases {
		return runGatewayCrashBlackBox(ctx, env)
	}
	r := env.NewResult()
	p := env.Profile
	period := p.RenewalPeriod()
	// The crashed request lives through two renewals and half a period: its deadline is then
	// last renewal + lease, a period later than a single renewal's (or its first lease's).
	renewedFor := 2*period + period/2
	// The survivor (same subject, on gateway-b) and the fills renew past the dead hold's latest
	// allowed release, so a renewal that moves the key's other deadlines would show; the
	// release is polled until a half second before they end.
	crashAfter := func(start time.Time) time.Time { return start.Add(renewedFor) }
	liveFor := renewedFor + p.Lease + p.LeaseSlack + 1500*time.Millisecond
	renewal := "unstated by the gateway's profile: the lower bound is the crash"
	if n := env.gateway().Caps.RenewalsPerLease; n > 0 {
		renewal = fmt.Sprintf("every %s (lease/%d, the gateway's profile)", env.statedRenewalPeriod(), n)
	}
	r.Fact("lease", fmt.Sprintf("%s, slack %s (the profile's); renewed %s", p.Lease, p.LeaseSlack, renewal))
	start := time.Now()
	held := make(chan Outcome, 1)
	go func() {
		// The provider would hold it past the crash; the crash ends it.
		held <- env.Chat(ctx, ChatCall{Gateway: gwA, Label: "held-then-crashed", Subject: appA, Hold: liveFor, NoTransportRetry: true})
	}()
	survivor := make(chan Outcome, 1)
	go func() {
		survivor <- env.Chat(ctx, ChatCall{Gateway: gwB, Label: "renewed-on-survivor", Subject: appA, Hold: liveFor})
	}()
	defer func() { <-survivor }()
	// Both admitted and at the provider: their reservations are in the store.
	if err := env.waitInFlight(ctx, 2); err != nil {
		<-held
		return r.Error(fmt.Errorf("waiting for the held requests to reach a provider: %w", err))
	}
	if q, err := env.Quotas().Read(ctx, gwB, Key{Rule: RuleName, Subject: appA}); err != nil {
		r.Error(err)
	} else {
		r.Check("the admitted requests hold their estimates", fmt.Sprintf("2 active, %d reserved", 2*p.Estimate),
			fmt.Sprintf("%d active, %d reserved", q.ActiveReservations, q.ReservedTokens), q.ActiveReservations == 2 && q.ReservedTokens == 2*p.Estimate)
	}
	if err := waitUntil(ctx, crashAfter(start)); err != nil {
		<-held
		return r.Error(err)
	}
	// Renewed several times by now: a gateway that renews once (or not at all) has lost it.
	if q, err := env.Quotas().Read(ctx, gwB, Key{Rule: RuleName, Subject: appA}); err != nil {
		r.Error(err)
	} else {
		r.Check(fmt.Sprintf("both reservations still held %.1fs after admission, past their first lease deadline (renewed)", seconds(time.Since(start))),
			"2 active", q.ActiveReservations, q.ActiveReservations == 2)
	}

	env.Progressf("killing gateway-a with a request in flight")
	// The lease runs out in the store whether or not gateway-a is back: the survivors are
	// watched while the engine restarts it.
	crashAt, awaitRestart, restartDone := env.crashInBackground(ctx, r)
	defer awaitRestart()
	o, err := heldThroughCrash(held, restartDone, awaitRestart) // cut by the kill (no transport retry: nothing to settle)
	if err != nil {
		return r.Error(err)
	}
	r.Fact("held_request", fmt.Sprintf("status %d after %d attempt(s)", o.Status, o.Attempts))
	if o.Admitted() {
		return r.Error(errors.New("the held request completed before the crash: nothing was left in flight"))
	}
	// Its deadline: its last renewal came within the gateway's renewal period before the crash,
	// the lease after it.
	earliest, latest := crashAt.Add(p.Lease-env.statedRenewalPeriod()), crashAt.Add(p.Lease+p.LeaseSlack)

	// The rest of the budget, held on the survivors: from here every 429 is the holds' doing
	// (nothing of this key is settled), and the dead hold's deadline is the earliest of them.
	fills := make([]Outcome, (p.Capacity-2*p.Estimate)/p.Estimate)
	var wg sync.WaitGroup
	for i := range fills {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fills[i] = env.Chat(ctx, ChatCall{Gateway: gwB, Label: fmt.Sprintf("fill-after-crash-%d", i+1), Subject: appA,
				Hold: time.Until(start.Add(liveFor))})
		}()
	}
	defer wg.Wait()
	// Admitted, read from the ledger (the providers may still count the dead gateway's call).
	if _, err := poll(ctx, 10*time.Millisecond, adminTimeout(p)+2*time.Second, func(ctx context.Context) (bool, error) {
		q, err := env.Quotas().Read(ctx, gwB, Key{Rule: RuleName, Subject: appA})
		return err == nil && q.ActiveReservations >= int64(2+len(fills)), err
	}); err != nil {
		return r.Error(fmt.Errorf("waiting for the fill requests to be held: %w", err))
	}

	// Every surviving replica sees the dead gateway's hold.
	for _, gw := range env.othersThan(gwA) {
		sent := time.Now()
		if q, err := env.Quotas().Read(ctx, gw, Key{Rule: RuleName, Subject: appA}); err != nil {
			r.Error(err)
		} else if sent.Before(earliest) {
			r.Check("the dead gateway's reservation still holds after the crash (its lease has not run out), seen on "+gw,
				fmt.Sprintf("%d active", 2+len(fills)), q.ActiveReservations, q.ActiveReservations == int64(2+len(fills)))
		}
	}

	// Until the dead lease runs out: the ledger read every 50 ms, a probe every 200 ms whose
	// 429 must not send its client back before then. The renewed holds stay.
	// heldAt is when the last read that still saw the dead hold was sent (the hold ended after
	// it), releasedAt when the first that did not came back (it ended before): each bound is
	// judged on the side of the two that favours the gateway.
	var idle wire.QuotaState
	var heldAt, releasedAt time.Time
	var probes []Outcome
	i := 0
	_, err = poll(ctx, 50*time.Millisecond, time.Until(start.Add(liveFor-500*time.Millisecond)), func(ctx context.Context) (bool, error) {
		if i++; i%4 == 1 {
			probes = append(probes, env.Chat(ctx, ChatCall{Gateway: env.othersThan(gwA)[(i/4)%len(env.othersThan(gwA))],
				Label: fmt.Sprintf("while-held-%d", len(probes)+1), Subject: appA}))
		}
		sent := time.Now()
		q, err := env.Quotas().Read(ctx, gwB, Key{Rule: RuleName, Subject: appA})
		if err != nil {
			return false, err
		}
		idle, releasedAt = q, time.Now()
		if q.ActiveReservations < int64(2+len(fills)) {
			return true, nil
		}
		heldAt = sent
		return false, nil
	})
	released := err == nil
	if err != nil && !errors.Is(err, errPollDeadline) {
		return r.Error(fmt.Errorf("waiting for the dead gateway's lease to run out: %w", err))
	}
	liveUntil := <-survivor
	survivor <- liveUntil // for the deferred receive
	if released {
		r.Fact("released_s_after_crash", seconds(releasedAt.Sub(crashAt)))
	} else {
		r.Fact("released_s_after_crash", fmt.Sprintf("not released %.1fs after the crash", seconds(releasedAt.Sub(crashAt))))
	}
	if env.leaseStated() {
		r.Check("the dead hold is released no earlier than its last renewal + lease (crash − the gateway's renewal period + lease)",
			fmt.Sprintf("≥ %.3fs after the crash", seconds(earliest.Sub(crashAt))), fmt.Sprintf("%.3fs", seconds(releasedAt.Sub(crashAt))),
			!released || !releasedAt.Before(earliest.Add(-retryAfterTolerance))) // still held: not early
		r.Check("the dead hold is released no later than its last renewal + lease + the profile's slack (crash + lease + slack), "+
			"while the same subject's renewed requests on the survivor still hold", fmt.Sprintf("≤ %.3fs after the crash", seconds(latest.Sub(crashAt))),
			fmt.Sprintf("%.3fs, %d active after", seconds(releasedAt.Sub(crashAt)), idle.ActiveReservations),
			released && !heldAt.After(latest) && idle.ActiveReservations == int64(1+len(fills)) && liveUntil.End.After(releasedAt))
	} else {
		r.NotMade("the dead hold is released no earlier than its last renewal + lease and no later than that + the profile's slack",
			"the gateway's profile does not render the run's lease (no .Budget.Lease in its config template): its lease is unknown")
		r.Check("the dead hold is released while the same subject's renewed requests on the survivor still hold", "released, the others held",
			fmt.Sprintf("released %v, %d active after", released, idle.ActiveReservations),
			released && idle.ActiveReservations == int64(1+len(fills)) && liveUntil.End.After(releasedAt))
	}
	if released { // else its release already failed: there is no charge to read yet
		r.Check("the expired reservation is charged at its estimate (settled == estimate)", p.Estimate, idle.Settled(), idle.Settled() == p.Estimate)
	}
	checkRetryAfterDuringHolds(r, env, probes, heldAt, released)

	if err := awaitRestart(); err != nil {
		return r.Error(err)
	}
	other := env.Chat(ctx, ChatCall{Gateway: gwA, Label: "after-crash-other", Subject: appB})
	r.Check("another subject admitted on the restarted gateway-a", http.StatusOK, other.Status, other.Admitted())
	if !released {
		r.Key("killed with 1 request in flight after %.1fs; its hold not released %.1fs later (lease %s, slack %s)",
			seconds(renewedFor), seconds(releasedAt.Sub(crashAt)), p.Lease, p.LeaseSlack)
		return r
	}
	r.Key("killed with 1 request in flight after %.1fs; its hold released %.1fs later (lease %s), settled %d",
		seconds(renewedFor), seconds(releasedAt.Sub(crashAt)), p.Lease, idle.Settled())
	return r
}

// statedRenewalPeriod is how long before the crash the dead request's last renewal came at the
// latest: lease/N where the gateway's profile states N (capabilities.renewals_per_lease), else
// the whole lease — a gateway whose schedule is unknown is held only to keeping the hold
// past the crash, not to quotaqual's own gateway's lease/3.
func (env *Env) statedRenewalPeriod() time.Duration {
	if n := env.gateway().Caps.RenewalsPerLease; n > 0 {
		return env.Profile.Lease / time.Duration(n)
	}
	return env.Profile.Lease
}

// leaseStated reports whether the gateway's profile renders the run's lease into its config, so
// the lease its dead holds must keep is the profile's: quotaqual's own profiles do.
func (env *Env) leaseStated() bool {
	return strings.Contains(env.gateway().Config.Template, ".Budget.Lease")
}

// checkRetryAfterDuringHolds checks the 429s answered while only holds filled the budget, the
// earliest of them the dead gateway's (seen held in the ledger by a read sent at heldAt): a
// client obeying Retry-After is not sent back before that hold could end, nor told to wait
// longer than a window and a bucket.
func checkRetryAfterDuringHolds(r *Result, env *Env, probes []Outcome, heldAt time.Time, released bool) {
	h := env.gateway().Expect.QuotaHeaders.RetryAfter
	if h == "" {
		r.NotMade("a 429 caused by holds carries a Retry-After no earlier than the earliest hold can end", "the gateway sends no Retry-After")
		return
	}
	limit := env.Profile.Window + env.bucketWidth(env.Profile.Window)
	var judged int
	var bad []string
	for i, o := range probes {
		if o.Status != http.StatusTooManyRequests || !o.End.Before(heldAt) {
			if o.Status != http.StatusTooManyRequests {
				bad = append(bad, fmt.Sprintf("#%d answered %d while the budget was held", i+1, o.Status))
			}
			continue
		}
		judged++
		n, err := strconv.ParseInt(o.Headers.Get(h), 10, 64)
		switch back := o.End.Add(time.Duration(n) * time.Second); {
		case err != nil || n < 1:
			bad = append(bad, fmt.Sprintf("#%d %s %q", i+1, h, o.Headers.Get(h)))
		case released && back.Before(heldAt.Add(-retryAfterTolerance)):
			bad = append(bad, fmt.Sprintf("#%d %s %d: back %.3fs before the hold was last seen held", i+1, h, n, seconds(heldAt.Sub(back))))
		case time.Duration(n)*time.Second > limit:
			bad = append(bad, fmt.Sprintf("#%d %s %d > window + bucket", i+1, h, n))
		}
	}
	r.Fact("retry_after_during_holds_judged", judged)
	r.Check("every 429 while holds fill the budget carries a Retry-After no earlier than the earliest hold can end (and ≤ window + bucket)",
		"none short, ≥ 3 judged", firstFew(bad, 5), len(bad) == 0 && judged >= 3)
}

// crashInBackground kills gateway-a and has the engine start it again while the scenario goes
// on watching the surviving replicas: how long a restart takes (a container start on a loaded
// docker daemon took 7–17 s, past lease and window) must not decide what is seen of the dead
// gateway's lease, nor push a burst out of the window its request was charged in. The topology
// is shared again once gateway-a serves. await waits for the restart (once; later calls return
// the same error) and records how long it took: every path out of the scenario calls it, so the
// next scenario finds gateway-a serving.
func (env *Env) crashInBackground(ctx context.Context, r *Result) (crashAt time.Time, await func() error, done <-chan struct{}) {
	crashAt = time.Now()
	endCrash := env.Fault("crash", gwA)
	restarted := make(chan error, 1)
	finished := make(chan struct{})
	var took time.Duration // written before the send on restarted, read after the receive
	go func() {
		err := env.Topo.CrashGateway(ctx, gwA)
		took = time.Since(crashAt)
		if err == nil {
			env.Topo.Client().CloseIdleConnections()
			env.Topo.Observer().CloseIdleConnections()
			env.ShareTopology()
		}
		restarted <- err
		close(finished)
	}()
	return crashAt, sync.OnceValue(func() error {
		err := <-restarted
		endCrash()
		r.Fact("crash_and_restart_ms", ms(took))
		if err != nil {
			return fmt.Errorf("crashing gateway-a: %w", err)
		}
		return nil
	}), finished
}

// heldThroughCrash is the held request's outcome once the crash has cut it, or the crash's
// error when the engine has no crash lever (kind on a cluster it cannot reach through docker
// refuses at once: the scenario is skipped with the reason instead of failing on a request
// that was never cut).
func heldThroughCrash(held <-chan Outcome, done <-chan struct{}, await func() error) (Outcome, error) {
	select {
	case o := <-held:
		return o, nil
	case <-done:
		if err := await(); err != nil {
			<-held
			return Outcome{}, err
		}
		return <-held, nil
	}
}
