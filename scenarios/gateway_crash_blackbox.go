package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/providerstub"
)

// runGatewayCrashBlackBox is gateway-crash for a gateway that offers no quota inspection, or no
// leases: the dead gateway's hold is seen only through what the subject can still be admitted
// for, probed from outside.
//
//   - After the crash, a burst of held requests fills the budget: it must admit exactly
//     (capacity − estimate) / estimate, the crashed request's estimate still counting (a
//     gateway that forgets it hands out free tokens and admits one more).
//   - With leases, once the dead reservation's lease has run out and while the burst still
//     holds the rest of the budget, one more request must still be denied: the expired
//     reservation is charged at its estimate, not dropped (the upstream D1 bug: a sweep that
//     charges where admission does not read frees it).
//   - Afterwards the subject is admitted again within a window: the hold does not stick.
func runGatewayCrashBlackBox(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	leases := env.gateway().Caps.Leases
	r.DecidedBy("admissions probed from outside", "the providers' in-flight counts")
	if !env.inspects() {
		r.NotMade("the dead gateway's reservation read from the ledger before and after the crash, and its release time and settled charge",
			"no quota inspection: what the subject can still be admitted for decides")
	}
	if !leases {
		r.NotMade("the expired reservation is charged at its estimate once its lease runs out",
			"the gateway has no leases: its admission charge is the hold, kept for its window")
	}
	if p.Estimate <= 0 || p.Capacity < p.Estimate {
		return r.Error(fmt.Errorf("profile %s has estimate %d and capacity %d: the burst needs capacity ≥ estimate > 0", p.Name, p.Estimate, p.Capacity))
	}
	if err := env.fixedWindowStart(ctx, r, env.Profile.Window, fixedWindowMargin); err != nil {
		return r.Error(err)
	}
	start := time.Now()
	// For a fixed window every decision below must fall in the window the crashed request was
	// charged in: a boundary in between resets the count and admits what the hold would deny.
	sameWindow := func(t time.Time) bool { return env.inOneWindow(start, t, p.Window) }

	// With the profile's lease known, the dead hold's bounds are judged by when the subject is
	// admitted again (its charge leaves the window a window after its deadline), and it is
	// renewed before the crash with the same subject's request renewed on gateway-b past them.
	var bb blackBoxLease
	bounds := leases && env.leaseStated() && p.Capacity >= 3*p.Estimate
	survivorHold := bb.survivorHold(p, env.bucketWidth(p.Window))
	const boundsNotMade = "the dead hold ends no earlier than its last renewal + lease and no later than that + the profile's slack"
	switch {
	case !leases:
	case !bounds:
		r.NotMade(boundsNotMade, "the gateway's profile does not render the run's lease (or its capacity holds fewer than three estimates): its lease is unknown")
	case survivorHold > min(deployment.GatewayUpstreamTimeout, providerstub.MaxHold):
		// The survivor must hold through a window after the dead lease: the reference
		// profile's minute does not fit a request.
		bounds = false
		r.NotMade(boundsNotMade, fmt.Sprintf("on the run's %s window the renewed request beside it would be held %s, past the gateways' %s upstream timeout or the stubs' %s hold (--profile quick)",
			p.Window, survivorHold, deployment.GatewayUpstreamTimeout, providerstub.MaxHold))
	}
	r.NotMade("a 429 while holds fill the budget carries a Retry-After no earlier than the earliest hold can end",
		"no quota inspection: the dead hold's end is seen only to within a bucket, through the first admission after its charge leaves the window")
	held := make(chan Outcome, 1)
	go func() {
		held <- env.Chat(ctx, ChatCall{Gateway: gwA, Label: "held-then-crashed", Subject: appA, Hold: p.Lease + bb.renewedFor(p), NoTransportRetry: true})
	}()
	if bounds {
		bb.survivor = make(chan Outcome, 1)
		go func() {
			bb.survivor <- env.Chat(ctx, ChatCall{Gateway: gwB, Label: "renewed-on-survivor", Subject: appA, Hold: survivorHold})
		}()
		defer func() { <-bb.survivor }()
		bb.held = 1
	}
	if err := env.waitInFlight(ctx, int64(1+bb.held)); err != nil {
		<-held
		return r.Error(fmt.Errorf("waiting for the held request to reach a provider: %w", err))
	}
	if bounds {
		if err := waitUntil(ctx, start.Add(bb.renewedFor(p))); err != nil {
			<-held
			return r.Error(err)
		}
	}
	env.Progressf("killing gateway-a with a request in flight")
	// The engine restarts gateway-a while the burst below goes to the surviving replicas.
	crashAt, awaitRestart, restartDone := env.crashInBackground(ctx, r)
	defer awaitRestart()
	o, err := heldThroughCrash(held, restartDone, awaitRestart) // cut by the kill (no transport retry)
	if err != nil {
		return r.Error(err)
	}
	r.Fact("held_request", fmt.Sprintf("status %d, error %v", o.Status, o.Err))
	if o.Status != 0 {
		return r.Error(fmt.Errorf("the held request was answered %d before the crash: nothing was left in flight", o.Status))
	}
	// The dead gateway's call to the provider ends with its connection; the burst below is
	// counted by the providers' in-flight requests, so wait for it to be gone.
	if _, err := poll(ctx, 10*time.Millisecond, adminTimeout(p)+longestHold(p), func(ctx context.Context) (bool, error) {
		s, err := env.Providers().Read(ctx)
		return err == nil && s.InFlight() <= int64(bb.held), err // the survivor, if any, still held
	}); err != nil {
		return r.Error(fmt.Errorf("waiting for the dead gateway's provider call to end: %w", err))
	}

	// The burst: each admitted request holds its estimate at the provider past the probe below.
	probeAt := crashAt.Add(p.Lease + 500*time.Millisecond + p.StoreTimeout) // the lease, renewed at the latest at the crash, has run out
	hold := time.Second
	if leases {
		hold = time.Until(probeAt) + time.Second
	}
	n := int(p.Capacity/p.Estimate) - bb.held + 1
	want := int((p.Capacity - int64(1+bb.held)*p.Estimate) / p.Estimate)
	burst := make([]Outcome, n)
	var answered atomic.Int64
	var wg sync.WaitGroup
	survivors := env.othersThan(gwA)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			burst[i] = env.Chat(ctx, ChatCall{Gateway: survivors[i%len(survivors)], Label: fmt.Sprintf("fill-after-crash-%d", i+1), Subject: appA, Hold: hold})
			answered.Add(1)
		}()
	}
	// Decided once every request is either answered (denied) or held at a provider.
	var inFlight int64
	_, err = poll(ctx, 10*time.Millisecond, adminTimeout(p)+2*time.Second, func(ctx context.Context) (bool, error) {
		s, err := env.Providers().Read(ctx)
		if err != nil {
			return false, err
		}
		inFlight = s.InFlight() - int64(bb.held)
		return answered.Load()+inFlight >= int64(n), nil
	})
	decided := time.Now()
	if err != nil {
		wg.Wait()
		return r.Error(fmt.Errorf("waiting for the burst after the crash to be decided: %w", err))
	}
	r.Fact("burst_admitted_while_held", inFlight)
	if env.checksThenCharges() {
		// Nothing is charged before a response ends, and the crashed request generated nothing
		// (it was held before its first token): the model admits the whole burst.
		want = n
		r.Check("after the crash the burst admits what check-then-charge admits (all of it: nothing charged before a response ends, nothing generated for the crashed request)",
			want, inFlight, inFlight == int64(want))
	} else {
		name := "after the crash the dead gateway's estimate still counts: the burst admits (capacity − estimate) / estimate"
		if bb.held > 0 {
			name = "after the crash the dead gateway's estimate still counts beside the survivor's: the burst admits (capacity − 2 × estimate) / estimate"
		}
		r.Check(name, want, inFlight, inFlight == int64(want))
	}
	if !sameWindow(decided) {
		r.Error(errors.New("a fixed window's boundary fell between the crash and the burst's decision: not decided"))
	}

	var after Outcome
	if leases {
		if err := waitUntil(ctx, probeAt); err != nil {
			wg.Wait()
			return r.Error(err)
		}
		after = env.Chat(ctx, ChatCall{Gateway: gwB, Label: "after-the-dead-lease", Subject: appA})
		r.Check("after the dead reservation's lease ran out it is charged, not dropped: the next request is still denied",
			http.StatusTooManyRequests, after.Status, after.Status == http.StatusTooManyRequests)
		r.Fact("probe_s_after_crash", seconds(after.Start.Sub(crashAt)))
	}
	wg.Wait()
	var burstStatuses []int
	heldUntil := time.Time{}
	for _, o := range burst {
		burstStatuses = append(burstStatuses, o.Status)
		if o.Admitted() && (heldUntil.IsZero() || o.End.Before(heldUntil)) {
			heldUntil = o.End
		}
	}
	r.Fact("burst_statuses", burstStatuses)
	var denied, other int
	for _, s := range burstStatuses {
		switch s {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			denied++
		default:
			other++
		}
	}
	r.Check("the rest of the burst denied with 429", n-want, denied, denied == n-want && other == 0)
	if leases && !after.Start.IsZero() {
		if heldUntil.IsZero() || !after.Start.Before(heldUntil) || !sameWindow(after.Start) {
			r.Error(fmt.Errorf("the probe after the lease was sent once the burst no longer held the budget (first held request ended %s): not decided",
				heldUntil.Format(time.RFC3339Nano)))
		}
	}

	if err := awaitRestart(); err != nil {
		return r.Error(err)
	}
	if bounds {
		return bb.judge(ctx, env, r, crashAt, inFlight, n, want, afterLease(leases, after))
	}
	// Released: within a window of the lease the subject is admitted again.
	var again Outcome
	var tries int
	_, err = poll(ctx, 200*time.Millisecond, p.Lease+p.Window+env.bucketWidth(p.Window)+adminTimeout(p), func(ctx context.Context) (bool, error) {
		tries++
		again = env.Chat(ctx, ChatCall{Gateway: env.alternate(tries), Label: fmt.Sprintf("released-%d", tries), Subject: appA})
		return again.Admitted(), nil
	})
	if err != nil && !errors.Is(err, errPollDeadline) {
		return r.Error(err)
	}
	r.Fact("released_s_after_crash", seconds(again.Start.Sub(crashAt)))
	r.Check("the subject is admitted again within a window of the lease (the hold does not stick)", http.StatusOK, again.Status, again.Admitted())

	other2 := env.Chat(ctx, ChatCall{Gateway: gwA, Label: "after-crash-other", Subject: appB})
	r.Check("another subject admitted on the restarted gateway-a", http.StatusOK, other2.Status, other2.Admitted())
	released := fmt.Sprintf("admitted again %.1fs after the crash", seconds(again.Start.Sub(crashAt)))
	if !again.Admitted() {
		released = fmt.Sprintf("not admitted again: %d tries, the last answered %d %.1fs after the crash", tries, again.Status, seconds(again.Start.Sub(crashAt)))
	}
	r.Key("killed with 1 request in flight; the burst after it admitted %d of %d (want %d); %s; %s",
		inFlight, n, want, afterLease(leases, after), released)
	return r
}

// afterLease says what the probe after the dead lease was answered, for the key fact.
func afterLease(leases bool, after Outcome) string {
	if !leases {
		return "no lease to outlive"
	}
	return fmt.Sprintf("the next request after the dead lease answered %d", after.Status)
}

// blackBoxLease is gateway-crash's black-box judgement of the dead hold's lease, made when the
// profile states the lease. The crashed request is renewed for three and a half renewal
// periods, and the same subject's request on gateway-b (the survivor) is renewed past every
// bound. The dead hold's end is seen through its charge: charged at its deadline, it leaves the
// window at least a window and at most a window and a bucket later, and while it counts, the
// survivor's hold and the burst's settled usage leave no room for one more estimate. So the
// first admission after the crash (polled every 50 ms) must come no earlier than
// (crash − renewal period + lease) + window, and no later than (crash + lease + slack) + window
// + bucket: a lease that ran out a period early (renewed once), a lease longer than the
// profile's, or a dead hold kept while the survivor renews, each moves it out of those bounds.
type blackBoxLease struct {
	survivor chan Outcome
	held     int // the survivor's hold, counted at the providers and in the budget
}

// renewedFor is how long the crashed request is renewed before the crash: three and a half
// periods, so a renewal that fires once lets it lapse one and a half periods before the
// earliest deadline a renewed lease has, more than a bucket's worth of the admission's slack.
func (blackBoxLease) renewedFor(p deployment.Profile) time.Duration {
	return 3*p.RenewalPeriod() + p.RenewalPeriod()/2
}

// latest is the latest the subject may be admitted again after the crash: the dead hold's
// latest end, then its charge's window and bucket, and two polls.
func (blackBoxLease) latest(p deployment.Profile, bucket time.Duration) time.Duration {
	return p.Lease + p.LeaseSlack + p.Window + bucket + 100*time.Millisecond
}

// survivorHold outlasts the crash by a second past the latest admission allowed: it holds its
// estimate through every bound, renewed.
func (bb blackBoxLease) survivorHold(p deployment.Profile, bucket time.Duration) time.Duration {
	return bb.renewedFor(p) + bb.latest(p, bucket) + time.Second
}

// judge polls for the first admission after the crash and checks it against the bounds.
func (bb blackBoxLease) judge(ctx context.Context, env *Env, r *Result, crashAt time.Time, inFlight int64, n, want int, afterLease string) *Result {
	p := env.Profile
	bucket := env.bucketWidth(p.Window)
	earliest := crashAt.Add(p.Lease - env.statedRenewalPeriod() + p.Window)
	latest := crashAt.Add(bb.latest(p, bucket))
	// From half a second before the earliest: an admission at the first poll is itself early.
	if err := waitUntil(ctx, earliest.Add(-500*time.Millisecond)); err != nil {
		return r.Error(err)
	}
	var again Outcome
	var tries int
	_, err := poll(ctx, 50*time.Millisecond, time.Until(latest.Add(500*time.Millisecond)), func(ctx context.Context) (bool, error) {
		tries++
		again = env.Chat(ctx, ChatCall{Gateway: env.othersThan(gwA)[tries%len(env.othersThan(gwA))], Label: fmt.Sprintf("released-%d", tries), Subject: appA})
		return again.Admitted(), nil
	})
	if err != nil && !errors.Is(err, errPollDeadline) {
		return r.Error(err)
	}
	survivor := <-bb.survivor
	bb.survivor <- survivor
	at := seconds(again.End.Sub(crashAt))
	r.Fact("released_s_after_crash", at)
	r.Fact("readmission_bounds_s_after_crash", fmt.Sprintf("%.3f–%.3f", seconds(earliest.Sub(crashAt)), seconds(latest.Sub(crashAt))))
	r.Check("the subject is admitted again no earlier than the dead hold's last renewal + lease + window (crash − renewal period + lease + window): its lease did not run out early",
		fmt.Sprintf("≥ %.3fs after the crash", seconds(earliest.Sub(crashAt))), fmt.Sprintf("%.3fs, %d tries", at, tries),
		!again.Admitted() || !again.End.Before(earliest.Add(-retryAfterTolerance))) // never admitted: not early (the next check fails)
	r.Check("the subject is admitted again no later than the dead hold's last renewal + lease + the profile's slack + window + bucket, "+
		"while the same subject's renewed request on the survivor still holds", fmt.Sprintf("≤ %.3fs after the crash", seconds(latest.Sub(crashAt))),
		fmt.Sprintf("%.3fs (admitted %v), survivor answered %d %.3fs after the crash", at, again.Admitted(), survivor.Status, seconds(survivor.End.Sub(crashAt))),
		again.Admitted() && !again.Start.After(latest) && survivor.Admitted() && survivor.End.After(again.End))
	other := env.Chat(ctx, ChatCall{Gateway: gwA, Label: "after-crash-other", Subject: appB})
	r.Check("another subject admitted on the restarted gateway-a", http.StatusOK, other.Status, other.Admitted())
	// Worded without "admitted again", the phrase of the checks above (keyClaims): the time is
	// the observation, the bounds beside it the reader's to compare.
	released := fmt.Sprintf("first admission %.1fs after the crash (bounds %.1f–%.1fs)", at, seconds(earliest.Sub(crashAt)), seconds(latest.Sub(crashAt)))
	if !again.Admitted() {
		released = fmt.Sprintf("no admission in %d tries, the last answered %d %.1fs after the crash (bounds %.1f–%.1fs)",
			tries, again.Status, at, seconds(earliest.Sub(crashAt)), seconds(latest.Sub(crashAt)))
	}
	r.Key("killed with 1 renewed request in flight; the burst after it admitted %d of %d (want %d); %s; %s", inFlight, n, want, afterLease, released)
	return r
}
