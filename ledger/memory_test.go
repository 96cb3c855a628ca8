package ledger_test

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/ledger"
	"github.com/quotaqual/quotaqual/ledger/ledgertest"
)

func TestConformanceMemory(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) ledger.Ledger {
		return ledger.NewMemory(ledgertest.Limits(t), nil)
	})
}

// fakeClock is a settable clock for the memory backend's deterministic tests.
type fakeClock struct{ ms atomic.Int64 }

func (c *fakeClock) now() time.Time                         { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) set(ms int64)                           { c.ms.Store(ms) }
func (c *fakeClock) advance(d time.Duration)                { c.ms.Add(d.Milliseconds()) }
func newFakeClock(ms int64) *fakeClock                      { c := &fakeClock{}; c.set(ms); return c }
func memoryAt(c *fakeClock, l ledger.Limits) *ledger.Memory { return ledger.NewMemory(l, c.now) }

func TestMemoryBucketWidth(t *testing.T) {
	for _, c := range []struct{ window, width time.Duration }{
		{time.Second, time.Second},
		{2 * time.Second, time.Second},
		{60 * time.Second, time.Second},
		{61 * time.Second, 2 * time.Second}, // 61s/60 = 1.017s, rounded up to 2s
		{90 * time.Second, 2 * time.Second},
		{120 * time.Second, 2 * time.Second},
		{121 * time.Second, 3 * time.Second},
		{time.Hour, time.Minute},
		{24 * time.Hour, 24 * time.Minute},
		{1500 * time.Millisecond, time.Second},
	} {
		if got := ledger.BucketWidth(c.window); got != c.width {
			t.Errorf("BucketWidth(%v) = %v; want %v", c.window, got, c.width)
		}
	}
}

// With a fake clock the bucket arithmetic is exact: usage charged in bucket b leaves a window
// at (b+1)*width + window, never earlier, and Retry-After says exactly that.
func TestMemoryUsageLeavesAtTheBucketBoundaryNeverEarly(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name   string
		window time.Duration
		at     int64 // ms of the charge within its bucket
	}{
		{"2s window, charge at a bucket start", 2 * time.Second, 0},
		{"2s window, charge late in a bucket", 2 * time.Second, 999},
		{"1h window, 60s buckets", time.Hour, 59_999},
		{"90s window, 2s buckets", 90 * time.Second, 1_500},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := ledger.BucketWidth(c.window).Milliseconds()
			base := int64(1_700_000_000_000) / w * w // a bucket boundary of every width here
			clk := newFakeClock(base + c.at)
			m := memoryAt(clk, ledger.Limits{})
			q := &ledger.Quota{Rule: "r", Lease: time.Minute, Budgets: []ledger.Budget{{Window: c.window, Capacity: 100}}}
			d, _ := m.Reserve(ctx, q, "k", 100)
			if s, _ := m.Settle(ctx, d.Reservation, ledger.Usage{Tokens: 100, Known: true}); !s.Applied {
				t.Fatal("settle not applied")
			}
			leave := base + w + c.window.Milliseconds() // bucket index base/w leaves here
			clk.set(base + c.at + 1)
			d, _ = m.Reserve(ctx, q, "k", 1)
			if d.Admitted || d.Denial.RetryAfter != time.Duration(leave-clk.ms.Load())*time.Millisecond {
				t.Fatalf("right after the charge: %+v; want denied with RetryAfter %dms", d.Denial, leave-clk.ms.Load())
			}
			if d.Windows[0].Reset != d.Denial.RetryAfter {
				t.Fatalf("Reset %v; want %v (all usage leaves with that bucket)", d.Windows[0].Reset, d.Denial.RetryAfter)
			}
			clk.set(base + c.at + c.window.Milliseconds()) // a whole window after the charge
			if d, _ = m.Reserve(ctx, q, "k", 1); d.Admitted {
				t.Fatal("admitted a whole window after the charge, before its bucket left: usage left early")
			}
			clk.set(leave - 1)
			if d, _ = m.Reserve(ctx, q, "k", 1); d.Admitted || d.Denial.RetryAfter != time.Millisecond {
				t.Fatalf("1ms before the bucket leaves: %+v; want denied, retry 1ms", d.Denial)
			}
			clk.set(leave)
			if d, _ = m.Reserve(ctx, q, "k", 1); !d.Admitted {
				t.Fatalf("when the bucket leaves: denied %+v", d.Denial)
			}
			if got := leave - (base + c.at); got < c.window.Milliseconds() || got > c.window.Milliseconds()+w {
				t.Fatalf("usage stayed %dms; want between the window and the window plus a bucket", got)
			}
		})
	}
}

func TestMemoryExpiredReservationIsChargedInTheBucketOfItsDeadline(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock(1_700_000_000_000)
	m := memoryAt(clk, ledger.Limits{})
	q := &ledger.Quota{Rule: "r", Lease: 5 * time.Second, Budgets: []ledger.Budget{{Window: 10 * time.Second, Capacity: 100}}}
	d, _ := m.Reserve(ctx, q, "k", 70)
	clk.advance(30 * time.Second) // long past the deadline (t+5s) and even past its window
	st, _ := m.Inspect(ctx, q, "k")
	if st.ActiveReservations != 0 || st.Windows[0].Settled != 0 {
		t.Fatalf("state %+v; want the reservation expired and its charge (at t+5s) out of the window", st)
	}
	if s, _ := m.Settle(ctx, d.Reservation, ledger.Usage{Tokens: 1, Known: true}); s.Applied {
		t.Fatal("late settle applied")
	}
	d, _ = m.Reserve(ctx, q, "k", 70)
	clk.advance(5 * time.Second)
	st, _ = m.Inspect(ctx, q, "k")
	if st.ActiveReservations != 0 || st.Windows[0].Settled != 70 {
		t.Fatalf("state at the deadline %+v; want charged 70", st)
	}
	clk.advance(10*time.Second - 1)
	if st, _ = m.Inspect(ctx, q, "k"); st.Windows[0].Settled != 70 {
		t.Fatalf("charge left before deadline + window: %+v", st)
	}
	clk.advance(time.Second + time.Millisecond) // the deadline's bucket ends a second after it
	if st, _ = m.Inspect(ctx, q, "k"); st.Windows[0].Settled != 0 {
		t.Fatalf("charge still counted a bucket after deadline + window: %+v", st)
	}
}

// Idle keys are removed by the amortised sweep, without a goroutine: memory stays bounded by
// what is live.
func TestMemoryRemovesIdleKeysWithoutGoroutines(t *testing.T) {
	ctx := context.Background()
	goroutines := runtime.NumGoroutine()
	clk := newFakeClock(1_700_000_000_000)
	m := memoryAt(clk, ledger.Limits{MaxKeys: 1000})
	q := &ledger.Quota{Rule: "r", Lease: time.Second, Budgets: []ledger.Budget{{Window: 2 * time.Second, Capacity: 100}}}
	for i := range 1000 {
		d, _ := m.Reserve(ctx, q, fmt.Sprintf("k%d", i), 10)
		if !d.Admitted {
			t.Fatalf("key %d: %+v", i, d.Denial)
		}
		if i%2 == 0 {
			m.Settle(ctx, d.Reservation, ledger.Usage{Tokens: 3, Known: true})
		} // the odd ones expire
	}
	if keys, active := m.Tracked(); keys != 1000 || active != 500 {
		t.Fatalf("tracked %d keys, %d reservations; want 1000, 500", keys, active)
	}
	if d, _ := m.Reserve(ctx, q, "one-more", 1); d.Admitted || d.Denial.Reason != ledger.ReasonKeyCapacity {
		t.Fatalf("1001st key: %+v; want key_capacity", d)
	}
	clk.advance(5 * time.Second) // every lease ran out and every charge left the window
	for i := range 1000 {
		m.Inspect(ctx, q, fmt.Sprintf("k%d", i))
	}
	// An expired lease leaves a tombstone (a late settle still charges its overage) that keeps
	// its key for the tombstone's lifetime: window + lease + a bucket = 4 s.
	clk.advance(5 * time.Second)
	for i := range 600 {
		m.Inspect(ctx, q, fmt.Sprintf("k%d", i))
	}
	keys, active := m.Tracked()
	if keys > 100 || active != 0 && keys == 1000 {
		t.Fatalf("after the window: %d keys, %d reservations still tracked; want idle keys swept", keys, active)
	}
	if d, _ := m.Reserve(ctx, q, "one-more", 1); !d.Admitted {
		t.Fatalf("new key after the sweep: %+v", d.Denial)
	}
	if n := runtime.NumGoroutine(); n > goroutines {
		t.Fatalf("%d goroutines after, %d before: the memory backend must run none", n, goroutines)
	}
}

func TestMemoryConcurrentTrafficOnManyKeysStaysExact(t *testing.T) {
	ctx := context.Background()
	m := ledger.NewMemory(ledger.Limits{}, nil)
	q := &ledger.Quota{Rule: "r", Lease: time.Minute, Budgets: []ledger.Budget{{Window: time.Minute, Capacity: 1000}, {Window: time.Hour, Capacity: 5000}}}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 500 {
				key := fmt.Sprintf("k%d", (g+i)%4)
				d, err := m.Reserve(ctx, q, key, 7)
				if err != nil || !d.Admitted {
					continue
				}
				m.Settle(ctx, d.Reservation, ledger.Usage{Tokens: 5, Known: true})
			}
		})
	}
	wg.Wait()
	var total int64
	for k := range 4 {
		st, _ := m.Inspect(ctx, q, fmt.Sprintf("k%d", k))
		if st.ActiveReservations != 0 || st.ReservedTokens != 0 || st.Windows[0].Settled > 1000+0 || st.Windows[0].Settled != st.Windows[1].Settled {
			t.Fatalf("key k%d: %+v", k, st)
		}
		total += st.Windows[0].Settled
	}
	if total%5 != 0 || total == 0 {
		t.Fatalf("settled total %d; want a positive multiple of 5", total)
	}
	if _, active := m.Tracked(); active != 0 {
		t.Fatalf("%d reservations tracked after every settle", active)
	}
}
