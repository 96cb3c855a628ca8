package ledgertest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/ledger"
)

// The conformance suite: the ONE set of cases every ledger.Ledger backend must pass, with the
// same expected figures for each (memory and Valkey give identical results on the same
// sequence of operations). Cases run on the real clock (Valkey's TIME cannot be faked), with
// short windows and leases, in parallel; every wait polls with a deadline.

var limitsByTest sync.Map // *testing.T -> ledger.Limits

// Limits returns the limits the suite wants the ledger built for t to have (zero: defaults).
// Factories passed to Run must honour it: the bound cases need small limits.
func Limits(t *testing.T) ledger.Limits {
	v, _ := limitsByTest.Load(t)
	l, _ := v.(ledger.Limits)
	return l
}

// timing tolerance between the local clock and the store's (same host: same clock) and for
// call latency.
const tol = 50 * time.Millisecond

func open(t *testing.T, newLedger func(t *testing.T) ledger.Ledger, limits ledger.Limits) ledger.Ledger {
	t.Helper()
	if limits != (ledger.Limits{}) {
		limitsByTest.Store(t, limits)
		t.Cleanup(func() { limitsByTest.Delete(t) })
	}
	l := newLedger(t)
	t.Cleanup(func() { _ = l.Close() })
	return l
}

var ruleSeq atomic.Int64

// quota builds a quota with a rule name unique to this process, lease and (window, capacity)
// pairs.
func quota(name string, lease time.Duration, pairs ...any) *ledger.Quota {
	q := &ledger.Quota{Rule: fmt.Sprintf("%s-%d", name, ruleSeq.Add(1)), Lease: lease}
	for i := 0; i < len(pairs); i += 2 {
		q.Budgets = append(q.Budgets, ledger.Budget{Window: pairs[i].(time.Duration), Capacity: int64(pairs[i+1].(int))})
	}
	return q
}

type harness struct {
	t   *testing.T
	l   ledger.Ledger
	ctx context.Context
}

func (h harness) reserve(q *ledger.Quota, key string, est int64) ledger.Decision {
	h.t.Helper()
	d, err := h.l.Reserve(h.ctx, q, key, est)
	if err != nil {
		h.t.Fatalf("Reserve(%s, %q, %d): %v", q.Rule, key, est, err)
	}
	if d.Admitted == (d.Denial != nil) {
		h.t.Fatalf("Reserve(%q, %d): Admitted %v with Denial %+v", key, est, d.Admitted, d.Denial)
	}
	return d
}

func (h harness) admit(q *ledger.Quota, key string, est int64) ledger.Reservation {
	h.t.Helper()
	d := h.reserve(q, key, est)
	if !d.Admitted {
		h.t.Fatalf("Reserve(%q, %d) denied: %+v; want admitted", key, est, *d.Denial)
	}
	r := d.Reservation
	if r.ID == "" || r.Key != key || r.Quota != q || r.Estimate != est {
		h.t.Fatalf("Reserve(%q, %d): reservation %+v does not describe the request", key, est, r)
	}
	if len(d.Windows) != len(q.Budgets) {
		h.t.Fatalf("admitted with %d window states, want %d", len(d.Windows), len(q.Budgets))
	}
	return r
}

func (h harness) deny(q *ledger.Quota, key string, est int64, reason ledger.Reason) ledger.Decision {
	h.t.Helper()
	d := h.reserve(q, key, est)
	if d.Admitted {
		h.t.Fatalf("Reserve(%q, %d) admitted; want denied with %s", key, est, reason)
	}
	if d.Denial.Reason != reason {
		h.t.Fatalf("Reserve(%q, %d) denied with %+v; want reason %s", key, est, *d.Denial, reason)
	}
	return d
}

func (h harness) settle(r ledger.Reservation, u ledger.Usage) ledger.Settlement {
	h.t.Helper()
	s, err := h.l.Settle(h.ctx, r, u)
	if err != nil {
		h.t.Fatalf("Settle(%s): %v", r.ID, err)
	}
	return s
}

func (h harness) renew(r ledger.Reservation) bool {
	h.t.Helper()
	ok, err := h.l.Renew(h.ctx, r)
	if err != nil {
		h.t.Fatalf("Renew(%s): %v", r.ID, err)
	}
	return ok
}

func (h harness) inspect(q *ledger.Quota, key string) ledger.KeyState {
	h.t.Helper()
	st, err := h.l.Inspect(h.ctx, q, key)
	if err != nil {
		h.t.Fatalf("Inspect(%q): %v", key, err)
	}
	if len(st.Windows) != len(q.Budgets) {
		h.t.Fatalf("Inspect: %d windows, want %d", len(st.Windows), len(q.Budgets))
	}
	return st
}

func (h harness) expectState(q *ledger.Quota, key string, active int, reserved int64, settled ...int64) {
	h.t.Helper()
	st := h.inspect(q, key)
	got := []int64{}
	for _, w := range st.Windows {
		got = append(got, w.Settled)
	}
	if st.ActiveReservations != active || st.ReservedTokens != reserved || fmt.Sprint(got) != fmt.Sprint(settled) {
		h.t.Fatalf("Inspect(%q) = %d active, %d reserved, settled %v; want %d, %d, %v",
			key, st.ActiveReservations, st.ReservedTokens, got, active, reserved, settled)
	}
	for i, w := range st.Windows {
		if w.Window != q.Budgets[i].Window || w.Capacity != q.Budgets[i].Capacity {
			h.t.Fatalf("Inspect window %d = %+v; want the quota's budget %+v", i, w, q.Budgets[i])
		}
	}
}

// eventually polls f every interval until it holds or the deadline passes.
func eventually(t *testing.T, within, interval time.Duration, what string, f func() bool) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		if f() {
			return time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within %v", what, within)
		}
		time.Sleep(interval)
	}
}

// bucketLeave is when usage charged at time at leaves a window counted in buckets of width
// (one second for the short windows here).
func bucketLeave(at time.Time, window time.Duration) time.Time {
	b := at.UnixMilli() / 1000
	return time.UnixMilli((b+1)*1000 + window.Milliseconds())
}

// expectRetryAfter checks ra against usage charged at some time in [chargedFrom, chargedTo]
// leaving window, asked at some time in [askFrom, askTo].
func expectRetryAfter(t *testing.T, ra time.Duration, window time.Duration, chargedFrom, chargedTo, askFrom, askTo time.Time) {
	t.Helper()
	lo := bucketLeave(chargedFrom, window).Sub(askTo) - tol
	hi := bucketLeave(chargedTo, window).Sub(askFrom) + tol
	if ra < lo || ra > hi {
		t.Fatalf("RetryAfter %v; want between %v and %v (when the bucket of the charge leaves the %v window)", ra, lo, hi, window)
	}
}

func sleepUntil(t time.Time) { time.Sleep(time.Until(t)) }

// Run runs the conformance suite against ledgers built by newLedger (one per case; see Limits).
func Run(t *testing.T, newLedger func(t *testing.T) ledger.Ledger) {
	setup := func(t *testing.T, limits ledger.Limits) harness {
		t.Parallel()
		return harness{t: t, l: open(t, newLedger, limits), ctx: t.Context()}
	}

	t.Run("invalid requests are denied as invalid_key", func(t *testing.T) {
		h := setup(t, ledger.Limits{MaxKeyLength: 8})
		q := quota("invalid", 30*time.Second, 10*time.Second, 100)
		cases := []struct {
			name string
			q    *ledger.Quota
			key  string
			est  int64
		}{
			{"empty key", q, "", 1},
			{"key longer than max_key_length", q, "123456789", 1},
			{"zero estimate", q, "k", 0},
			{"negative estimate", q, "k", -5},
			{"nil quota", nil, "k", 1},
			{"quota without budgets", &ledger.Quota{Rule: "none", Lease: time.Second}, "k", 1},
		}
		for _, c := range cases {
			d, err := h.l.Reserve(h.ctx, c.q, c.key, c.est)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if d.Admitted || d.Denial == nil || d.Denial.Reason != ledger.ReasonInvalidKey || len(d.Windows) != 0 || d.Denial.RetryAfter != 0 {
				t.Fatalf("%s: %+v (denial %+v); want denied invalid_key, no windows, no retry", c.name, d, d.Denial)
			}
		}
		h.admit(q, "12345678", 1) // exactly max_key_length is fine
		h.expectState(q, "k", 0, 0, 0)
	})

	t.Run("an estimate above a window's capacity is denied with no retry", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		q := quota("too-large", 30*time.Second, 10*time.Second, 100, 20*time.Second, 50)
		d := h.deny(q, "k", 51, ledger.ReasonEstimateTooLarge)
		if d.Denial.RetryAfter != 0 || d.Denial.Window != 20*time.Second || d.Denial.Limit != 50 {
			t.Fatalf("denial %+v; want window 20s, limit 50, no retry", *d.Denial)
		}
		h.expectState(q, "k", 0, 0, 0, 0)
		h.admit(q, "k", 50) // exactly the smallest capacity fits
	})

	t.Run("admission reports remaining and reset per window and settles actual usage", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		q := quota("report", 30*time.Second, 10*time.Second, 100, 60*time.Second, 300)
		d := h.reserve(q, "k", 30)
		if !d.Admitted {
			t.Fatalf("denied: %+v", *d.Denial)
		}
		for i, want := range []int64{70, 270} {
			w := d.Windows[i]
			if w.Window != q.Budgets[i].Window || w.Limit != q.Budgets[i].Capacity || w.Remaining != want {
				t.Fatalf("window %d = %+v; want remaining %d", i, w, want)
			}
			// The reservation counts as usage settled now: it leaves the window a window
			// (plus at most a bucket) from now.
			if w.Reset <= w.Window-tol || w.Reset > w.Window+time.Second {
				t.Fatalf("window %d reset %v; want about %v", i, w.Reset, w.Window)
			}
		}
		h.expectState(q, "k", 1, 30, 0, 0)
		s := h.settle(d.Reservation, ledger.Usage{Tokens: 20, Known: true})
		if s != (ledger.Settlement{Applied: true, Charged: 20, Refund: 10}) {
			t.Fatalf("settle = %+v; want charged 20, refund 10", s)
		}
		h.expectState(q, "k", 0, 0, 20, 20)
		d = h.reserve(q, "k", 80)
		if !d.Admitted || d.Windows[0].Remaining != 0 || d.Windows[1].Remaining != 200 {
			t.Fatalf("second reservation %+v; want admitted with remaining 0 and 200", d)
		}
	})

	t.Run("exhaustion: settled plus reserved plus estimate may not exceed capacity", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		q := quota("exhaust", 5*time.Second, 10*time.Second, 100)
		before := time.Now()
		h.admit(q, "k", 60)
		r2 := h.admit(q, "k", 40) // exactly the capacity
		after := time.Now()
		d := h.deny(q, "k", 1, ledger.ReasonWindowCapacity)
		den := *d.Denial
		if den.Window != 10*time.Second || den.Limit != 100 || den.Remaining != 0 || d.Windows[0].Remaining != 0 {
			t.Fatalf("denial %+v windows %+v; want window 10s, limit 100, remaining 0", den, d.Windows)
		}
		// Only live reservations hold the capacity: settled usage leaving cannot help, so the
		// wait is until the earliest lease deadline (5s from the first reservation).
		if lo, hi := before.Add(5*time.Second).Sub(time.Now())-tol, after.Add(5*time.Second).Sub(before)+tol; den.RetryAfter < lo || den.RetryAfter > hi {
			t.Fatalf("RetryAfter %v; want the earliest lease deadline, between %v and %v", den.RetryAfter, lo, hi)
		}
		h.expectState(q, "k", 2, 100, 0)
		h.settle(r2, ledger.Usage{Tokens: 40, Known: true})
		h.deny(q, "k", 1, ledger.ReasonWindowCapacity)
		h.expectState(q, "k", 1, 60, 40)
	})

	t.Run("a short lease bounds the retry-after at one second", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		q := quota("short-lease", 200*time.Millisecond, 10*time.Second, 10)
		h.admit(q, "k", 10)
		d := h.deny(q, "k", 1, ledger.ReasonWindowCapacity)
		if d.Denial.RetryAfter != time.Second {
			t.Fatalf("RetryAfter %v; want 1s (the floor when only a lease holds capacity)", d.Denial.RetryAfter)
		}
	})

	t.Run("multi-window atomicity: a request one window refuses reserves nothing in any", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		q := quota("atomic", 30*time.Second, 10*time.Second, 100, 20*time.Second, 50)
		h.admit(q, "k", 40)
		d := h.deny(q, "k", 20, ledger.ReasonWindowCapacity) // fits 10s (60 ≤ 100), not 20s (60 > 50)
		if d.Denial.Window != 20*time.Second || d.Denial.Limit != 50 || d.Denial.Remaining != 10 {
			t.Fatalf("denial %+v; want the 20s window, limit 50, remaining 10", *d.Denial)
		}
		if d.Windows[0].Remaining != 60 || d.Windows[1].Remaining != 10 {
			t.Fatalf("windows %+v; want remaining 60 and 10 (nothing reserved by the denial)", d.Windows)
		}
		h.expectState(q, "k", 1, 40, 0, 0)
		d = h.reserve(q, "k", 10) // 50 ≤ 50: the denied request left no hold behind
		if !d.Admitted || d.Windows[0].Remaining != 50 || d.Windows[1].Remaining != 0 {
			t.Fatalf("reserve 10 = %+v; want admitted with remaining 50 and 0", d)
		}
	})

	t.Run("refund, overage and missing usage", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		q := quota("refund", 30*time.Second, 30*time.Second, 100)
		r1 := h.admit(q, "k", 50)
		if s := h.settle(r1, ledger.Usage{Tokens: 30, Known: true}); s != (ledger.Settlement{Applied: true, Charged: 30, Refund: 20}) {
			t.Fatalf("under-use: %+v; want charged 30 refund 20", s)
		}
		r2 := h.admit(q, "k", 50)
		if s := h.settle(r2, ledger.Usage{Tokens: 90, Known: true}); s != (ledger.Settlement{Applied: true, Charged: 90, Overage: 40}) {
			t.Fatalf("over-use: %+v; want charged 90 overage 40", s)
		}
		// Overage is truthful accounting: settled usage may exceed the capacity.
		h.expectState(q, "k", 0, 0, 120)
		d := h.deny(q, "k", 1, ledger.ReasonWindowCapacity)
		if d.Denial.Remaining != 0 || d.Windows[0].Remaining != 0 {
			t.Fatalf("remaining %d / %d; want clamped at 0", d.Denial.Remaining, d.Windows[0].Remaining)
		}

		r3 := h.admit(q, "k2", 70)
		if s := h.settle(r3, ledger.Usage{Known: false, Tokens: 5}); s != (ledger.Settlement{Applied: true, Charged: 70}) {
			t.Fatalf("missing usage: %+v; want charged at the estimate 70", s)
		}
		r4 := h.admit(q, "k2", 30)
		if s := h.settle(r4, ledger.Usage{Tokens: 0, Known: true}); s != (ledger.Settlement{Applied: true, Charged: 0, Refund: 30}) {
			t.Fatalf("zero usage: %+v; want charged 0 refund 30", s)
		}
		h.expectState(q, "k2", 0, 0, 70)
	})

	t.Run("settle is idempotent under retry and under concurrent retries", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		q := quota("idem", 30*time.Second, 30*time.Second, 1000)
		r := h.admit(q, "k", 50)
		first := h.settle(r, ledger.Usage{Tokens: 40, Known: true})
		if !first.Applied {
			t.Fatalf("first settle not applied: %+v", first)
		}
		for range 3 {
			if s := h.settle(r, ledger.Usage{Tokens: 400, Known: true}); s != (ledger.Settlement{}) {
				t.Fatalf("repeated settle = %+v; want a no-op", s)
			}
		}
		if h.renew(r) {
			t.Fatal("Renew of a settled reservation reported live")
		}
		h.expectState(q, "k", 0, 0, 40)

		never := ledger.Reservation{ID: "00000000000000000000000000000000", Key: "k", Quota: q, Estimate: 10}
		if s := h.settle(never, ledger.Usage{}); s != (ledger.Settlement{}) {
			t.Fatalf("settle of an unknown id = %+v; want a no-op", s)
		}
		if h.renew(never) {
			t.Fatal("Renew of an unknown id reported live")
		}

		r = h.admit(q, "k", 100)
		var applied atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for range 16 {
			wg.Go(func() {
				s, err := h.l.Settle(h.ctx, r, ledger.Usage{Tokens: 70, Known: true})
				if err != nil {
					errs <- err
					return
				}
				if s.Applied {
					applied.Add(1)
					if s != (ledger.Settlement{Applied: true, Charged: 70, Refund: 30}) {
						errs <- fmt.Errorf("applied settle = %+v", s)
					}
				} else if s != (ledger.Settlement{}) {
					errs <- fmt.Errorf("no-op settle = %+v", s)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if applied.Load() != 1 {
			t.Fatalf("%d of 16 concurrent settles applied; want exactly 1", applied.Load())
		}
		h.expectState(q, "k", 0, 0, 110)
	})

	t.Run("concurrent reservations never hold more than the capacity", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		q := quota("concurrent", 30*time.Second, 30*time.Second, 100)
		var admitted atomic.Int64
		var wg sync.WaitGroup
		errs := make(chan error, 40)
		for range 40 {
			wg.Go(func() {
				d, err := h.l.Reserve(h.ctx, q, "k", 10)
				switch {
				case err != nil:
					errs <- err
				case d.Admitted:
					admitted.Add(1)
				case d.Denial.Reason != ledger.ReasonWindowCapacity:
					errs <- fmt.Errorf("denied with %s", d.Denial.Reason)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		if admitted.Load() != 10 {
			t.Fatalf("%d of 40 reservations of 10 admitted under capacity 100; want exactly 10", admitted.Load())
		}
		h.expectState(q, "k", 10, 100, 0)
	})

	t.Run("renewal keeps a reservation alive past its original lease", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		const lease = 1500 * time.Millisecond
		q := quota("renew", lease, 30*time.Second, 100)
		kept := h.admit(q, "k", 30)
		lapsed := h.admit(q, "k", 20)
		end := time.Now().Add(2*lease + 200*time.Millisecond)
		for time.Now().Before(end) {
			if !h.renew(kept) {
				t.Fatal("Renew of a live reservation reported not live")
			}
			time.Sleep(250 * time.Millisecond)
		}
		// Past twice the original lease: the renewed one is live, the other expired and was
		// charged at its estimate.
		h.expectState(q, "k", 1, 30, 20)
		if h.renew(lapsed) {
			t.Fatal("Renew of an expired reservation reported live")
		}
		if s := h.settle(kept, ledger.Usage{Tokens: 25, Known: true}); s != (ledger.Settlement{Applied: true, Charged: 25, Refund: 5}) {
			t.Fatalf("settle after renewals = %+v; want applied, charged 25", s)
		}
		h.expectState(q, "k", 0, 0, 45)
	})

	t.Run("expiry charges the estimate at the deadline and frees the hold; a late settle is a no-op", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		const lease = time.Second
		q := quota("expiry", lease, 10*time.Second, 100)
		before := time.Now()
		r := h.admit(q, "k", 60)
		after := time.Now()
		h.deny(q, "k", 50, ledger.ReasonWindowCapacity)
		eventually(t, lease+2*time.Second, 20*time.Millisecond, "expiry of the reservation", func() bool {
			return h.inspect(q, "k").ActiveReservations == 0
		})
		h.expectState(q, "k", 0, 0, 60)
		if s := h.settle(r, ledger.Usage{Tokens: 1, Known: true}); s != (ledger.Settlement{}) {
			t.Fatalf("settle after expiry = %+v; want a no-op", s)
		}
		if h.renew(r) {
			t.Fatal("Renew after expiry reported live")
		}
		h.expectState(q, "k", 0, 0, 60)
		// The charge is what admission reads: exactly the rest of the capacity fits.
		h.admit(q, "k", 40)
		askFrom := time.Now()
		d := h.deny(q, "k", 1, ledger.ReasonWindowCapacity)
		askTo := time.Now()
		if d.Denial.RetryAfter <= 0 {
			t.Fatalf("RetryAfter %v", d.Denial.RetryAfter)
		}
		// Charged in the bucket of the lease deadline (not of the sweep): the 60 tokens leave
		// the window a window after the deadline. The 40 are held by a live reservation, so
		// settled usage leaving is what frees room for 1 token.
		expectRetryAfter(t, d.Denial.RetryAfter, 10*time.Second, before.Add(lease), after.Add(lease), askFrom, askTo)
	})

	// Issue 10, defect 1: a lost lease must not lose the overage. The expiry charged the
	// estimate; a settlement arriving later with more usage charges the difference, once.
	t.Run("a settle after the lease ran out charges the usage above the estimate, once", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		const lease = time.Second
		q := quota("lost-lease", lease, 30*time.Second, 100)
		over := h.admit(q, "k", 20)  // settled after expiry with 50: 30 over
		under := h.admit(q, "k", 10) // settled after expiry with 4: no refund
		blind := h.admit(q, "k", 5)  // settled after expiry with unknown usage: the estimate stands
		eventually(t, lease+2*time.Second, 20*time.Millisecond, "expiry of the reservations", func() bool {
			return h.inspect(q, "k").ActiveReservations == 0
		})
		h.expectState(q, "k", 0, 0, 35)
		if s := h.settle(over, ledger.Usage{Tokens: 50, Known: true}); s != (ledger.Settlement{Applied: true, Charged: 30, Overage: 30}) {
			t.Fatalf("settle of 50 after the lease of 20 ran out = %+v; want the 30 over charged", s)
		}
		h.expectState(q, "k", 0, 0, 65)
		if s := h.settle(over, ledger.Usage{Tokens: 50, Known: true}); s != (ledger.Settlement{}) {
			t.Fatalf("second settle = %+v; want a no-op", s)
		}
		if s := h.settle(under, ledger.Usage{Tokens: 4, Known: true}); s != (ledger.Settlement{}) {
			t.Fatalf("settle of 4 after the lease of 10 ran out = %+v; want a no-op (never a refund)", s)
		}
		if s := h.settle(blind, ledger.Usage{}); s != (ledger.Settlement{}) {
			t.Fatalf("settle of unknown usage after the lease ran out = %+v; want a no-op", s)
		}
		h.expectState(q, "k", 0, 0, 65)
		// What admission reads: exactly the rest of the capacity fits.
		h.admit(q, "k", 35)
		h.deny(q, "k", 1, ledger.ReasonWindowCapacity)
	})

	// The second case keeps the settle on the store's fast path: with a one-hour window (one-minute
	// buckets) no window moves within the lease, so only the lease's own deadline tells the
	// settle that the reservation ended.
	for _, c := range []struct {
		name   string
		window time.Duration
	}{{"", 30 * time.Second}, {", also while no window moves", time.Hour}} {
		t.Run("a settle that finds the lease run out itself charges the usage above the estimate"+c.name, func(t *testing.T) {
			h := setup(t, ledger.Limits{})
			const lease = time.Second
			q := quota("lost-lease-late", lease, c.window, 100)
			if w := ledger.BucketWidth(c.window); w > 2*lease {
				// not across a bucket boundary: start just after one when one is near
				if next := time.Now().Truncate(w).Add(w); time.Until(next) < lease+time.Second {
					sleepUntil(next.Add(50 * time.Millisecond))
				}
			}
			r := h.admit(q, "k", 20)
			// No call in between: the settle's own expiry sweep ends the reservation.
			sleepUntil(time.Now().Add(lease + 300*time.Millisecond))
			if s := h.settle(r, ledger.Usage{Tokens: 70, Known: true}); s != (ledger.Settlement{Applied: true, Charged: 50, Overage: 50}) {
				t.Fatalf("settle of 70 after the lease of 20 ran out = %+v; want the 50 over charged", s)
			}
			h.expectState(q, "k", 0, 0, 70)
			if s := h.settle(r, ledger.Usage{Tokens: 70, Known: true}); s != (ledger.Settlement{}) {
				t.Fatalf("second settle = %+v; want a no-op", s)
			}
			h.expectState(q, "k", 0, 0, 70)
		})
	}

	t.Run("sliding recovery: usage leaves the window late, never early", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		const window = 2 * time.Second
		q := quota("sliding", 30*time.Second, window, 100)
		r := h.admit(q, "k", 100)
		chargedFrom := time.Now()
		h.settle(r, ledger.Usage{Tokens: 100, Known: true})
		chargedTo := time.Now()
		askFrom := time.Now()
		d := h.deny(q, "k", 50, ledger.ReasonWindowCapacity)
		askTo := time.Now()
		expectRetryAfter(t, d.Denial.RetryAfter, window, chargedFrom, chargedTo, askFrom, askTo)
		var admittedAt time.Time
		eventually(t, d.Denial.RetryAfter+2*time.Second, 20*time.Millisecond, "recovery", func() bool {
			ok := h.reserve(q, "k", 50).Admitted
			admittedAt = time.Now()
			return ok
		})
		if early := chargedFrom.Add(window); admittedAt.Before(early) {
			t.Fatalf("admitted %v after the charge: usage left the %v window early", admittedAt.Sub(chargedFrom), window)
		}
		if promised := askFrom.Add(d.Denial.RetryAfter); admittedAt.Before(promised.Add(-tol)) || admittedAt.After(promised.Add(500*time.Millisecond)) {
			t.Fatalf("admitted at +%v after the denial; Retry-After said %v", admittedAt.Sub(askFrom), d.Denial.RetryAfter)
		}
	})

	t.Run("retry-after is the time until enough capacity frees, not the whole window", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		const window = 4 * time.Second
		q := quota("retry", 30*time.Second, window, 100)
		r := h.admit(q, "k", 60)
		aFrom := time.Now()
		h.settle(r, ledger.Usage{Tokens: 60, Known: true})
		aTo := time.Now()
		// Two bucket boundaries later, settle 40 more: now the window holds 60 old + 40 new.
		sleepUntil(time.UnixMilli((aTo.UnixMilli()/1000+2)*1000 + 20))
		r = h.admit(q, "k", 40)
		bFrom := time.Now()
		h.settle(r, ledger.Usage{Tokens: 40, Known: true})
		bTo := time.Now()

		askFrom := time.Now()
		d50 := h.deny(q, "k", 50, ledger.ReasonWindowCapacity) // the old 60 leaving is enough
		d70 := h.deny(q, "k", 70, ledger.ReasonWindowCapacity) // needs the new 40 to leave too
		askTo := time.Now()
		expectRetryAfter(t, d50.Denial.RetryAfter, window, aFrom, aTo, askFrom, askTo)
		expectRetryAfter(t, d70.Denial.RetryAfter, window, bFrom, bTo, askFrom, askTo)
		if d50.Denial.RetryAfter >= window-time.Second {
			t.Fatalf("RetryAfter %v for usage two seconds old; want well under the %v window", d50.Denial.RetryAfter, window)
		}
		if d70.Denial.RetryAfter < d50.Denial.RetryAfter+time.Second-tol {
			t.Fatalf("RetryAfter %v for 70 tokens, %v for 50; want the later bucket's leave time", d70.Denial.RetryAfter, d50.Denial.RetryAfter)
		}
		// And the promise holds: 50 tokens fit once the old bucket has left, not before.
		var at time.Time
		eventually(t, d50.Denial.RetryAfter+2*time.Second, 20*time.Millisecond, "room for 50 tokens", func() bool {
			ok := h.reserve(q, "k", 50).Admitted
			at = time.Now()
			return ok
		})
		if promised := askFrom.Add(d50.Denial.RetryAfter); at.Before(promised.Add(-tol)) || at.After(askTo.Add(d50.Denial.RetryAfter).Add(500*time.Millisecond)) {
			t.Fatalf("50 tokens fitted %v after the denial; Retry-After said %v", at.Sub(askFrom), d50.Denial.RetryAfter)
		}
	})

	t.Run("keys of different rules and keys are independent", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		q1 := quota("indep", 30*time.Second, 30*time.Second, 100)
		q2 := quota("indep", 30*time.Second, 30*time.Second, 100)
		keys := []string{"alice", "bob", "a:{b}", "a\x00b", "ключ", strings.Repeat("x", 256)}
		for _, k := range keys {
			h.admit(q1, k, 100)
		}
		for _, k := range keys {
			h.deny(q1, k, 1, ledger.ReasonWindowCapacity)
			h.admit(q2, k, 100) // same key, other rule
			h.expectState(q1, k, 1, 100, 0)
		}
		h.expectState(q1, "carol", 0, 0, 0)
	})

	t.Run("max_keys bounds the quota keys one instance tracks", func(t *testing.T) {
		h := setup(t, ledger.Limits{MaxKeys: 2})
		q := quota("maxkeys", time.Second, time.Second, 100)
		a := h.admit(q, "a", 10)
		b := h.admit(q, "b", 10)
		d := h.deny(q, "c", 10, ledger.ReasonKeyCapacity)
		if d.Denial.RetryAfter != time.Second {
			t.Fatalf("key_capacity RetryAfter %v; want 1s", d.Denial.RetryAfter)
		}
		h.admit(q, "a", 10) // a tracked key is still served
		h.settle(a, ledger.Usage{Known: true})
		h.settle(b, ledger.Usage{Known: true})
		// Once their state is gone (settled, expired, out of every window) the slots free.
		eventually(t, 6*time.Second, 50*time.Millisecond, "a key slot freeing", func() bool {
			return h.reserve(q, "c", 10).Admitted
		})
	})

	t.Run("max_active_reservations bounds the reservations one instance holds", func(t *testing.T) {
		h := setup(t, ledger.Limits{MaxActiveReservations: 2})
		q := quota("maxactive", time.Second, 10*time.Second, 100)
		a1 := h.admit(q, "a", 10)
		h.admit(q, "a", 10)
		d := h.deny(q, "b", 10, ledger.ReasonReservationCapacity)
		if d.Denial.RetryAfter != time.Second {
			t.Fatalf("reservation_capacity RetryAfter %v; want 1s", d.Denial.RetryAfter)
		}
		h.settle(a1, ledger.Usage{Tokens: 5, Known: true})
		h.admit(q, "b", 10) // a settled reservation frees its slot
		h.deny(q, "c", 10, ledger.ReasonReservationCapacity)
		// Expired reservations free theirs too.
		eventually(t, 4*time.Second, 50*time.Millisecond, "expired reservations freeing slots", func() bool {
			return h.reserve(q, "c", 10).Admitted
		})
	})

	t.Run("inspect of an unknown key reports nothing", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		q := quota("unknown", 30*time.Second, time.Minute, 10, time.Hour, 100)
		h.expectState(q, "nobody", 0, 0, 0, 0)
	})

	t.Run("long windows use coarse buckets and count every settled token", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		q := quota("long", 30*time.Second, time.Second, 1000, time.Hour, 1000, 24*time.Hour, 1000)
		r := h.admit(q, "k", 300)
		h.settle(r, ledger.Usage{Tokens: 250, Known: true})
		h.expectState(q, "k", 0, 0, 250, 250, 250)
		d := h.deny(q, "k", 800, ledger.ReasonWindowCapacity)
		// The 1s window frees first; the 24h window is the one that waits longest.
		if d.Denial.Window != 24*time.Hour || d.Denial.RetryAfter <= 24*time.Hour-time.Second || d.Denial.RetryAfter > 24*time.Hour+ledger.BucketWidth(24*time.Hour) {
			t.Fatalf("denial %+v; want the 24h window, retry about 24h (+ one %v bucket)", *d.Denial, ledger.BucketWidth(24*time.Hour))
		}
	})

	t.Run("a cancelled context is not an admission", func(t *testing.T) {
		h := setup(t, ledger.Limits{})
		q := quota("cancel", 30*time.Second, 30*time.Second, 100)
		ctx, cancel := context.WithCancel(h.ctx)
		cancel()
		d, err := h.l.Reserve(ctx, q, "k", 10)
		if err != nil {
			if !errors.Is(err, ledger.ErrStore) {
				t.Fatalf("error %v does not wrap ErrStore", err)
			}
			if d.Admitted {
				t.Fatal("admitted together with an error")
			}
			return
		}
		// A backend that never blocks may decide anyway; then the decision must be whole.
		if d.Admitted != (d.Denial == nil) {
			t.Fatalf("decision %+v", d)
		}
	})
}
