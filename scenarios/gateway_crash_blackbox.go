package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
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
	if err := env.fixedWindowStart(ctx, r, fixedWindowMargin); err != nil {
		return r.Error(err)
	}
	start := time.Now()
	// For a fixed window every decision below must fall in the window the crashed request was
	// charged in: a boundary in between resets the count and admits what the hold would deny.
	sameWindow := func(t time.Time) bool { return env.inOneWindow(start, t, p.Window) }

	held := make(chan Outcome, 1)
	go func() {
		held <- env.Chat(ctx, ChatCall{Gateway: gwA, Label: "held-then-crashed", Subject: appA, Hold: p.Lease, NoTransportRetry: true})
	}()
	if err := env.waitInFlight(ctx, 1); err != nil {
		<-held
		return r.Error(fmt.Errorf("waiting for the held request to reach a provider: %w", err))
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
	if _, err := env.settledProviders(ctx); err != nil {
		return r.Error(fmt.Errorf("waiting for the dead gateway's provider call to end: %w", err))
	}

	// The burst: each admitted request holds its estimate at the provider past the probe below.
	probeAt := crashAt.Add(p.Lease + 500*time.Millisecond + p.StoreTimeout) // the lease, renewed at the latest at the crash, has run out
	hold := time.Second
	if leases {
		hold = time.Until(probeAt) + time.Second
	}
	n := int(p.Capacity/p.Estimate) + 1
	want := int((p.Capacity - p.Estimate) / p.Estimate)
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
		s, err := env.ProviderCalls(ctx)
		if err != nil {
			return false, err
		}
		inFlight = s.InFlight()
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
		r.Check("after the crash the dead gateway's estimate still counts: the burst admits (capacity − estimate) / estimate",
			want, inFlight, inFlight == int64(want))
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
	afterLease := "no lease to outlive"
	if leases {
		afterLease = fmt.Sprintf("the next request after the dead lease answered %d", after.Status)
	}
	released := fmt.Sprintf("admitted again %.1fs after the crash", seconds(again.Start.Sub(crashAt)))
	if !again.Admitted() {
		released = fmt.Sprintf("not admitted again: %d tries, the last answered %d %.1fs after the crash", tries, again.Status, seconds(again.Start.Sub(crashAt)))
	}
	r.Key("killed with 1 request in flight; the burst after it admitted %d of %d (want %d); %s; %s",
		inFlight, n, want, afterLease, released)
	return r
}
