package ledger_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/valkeytest"
	"github.com/quotaqual/quotaqual/ledger"
)

var backQuota = &ledger.Quota{Rule: "clock-back", Lease: 30 * time.Second, Budgets: []ledger.Budget{{Window: 10 * time.Second, Capacity: 100}}}

// charge40 reserves and settles 40 tokens on key k.
func charge40(t *testing.T, l ledger.Ledger, k string) {
	t.Helper()
	ctx := context.Background()
	d, err := l.Reserve(ctx, backQuota, k, 40)
	if err != nil || !d.Admitted {
		t.Fatalf("reserve: %+v %v", d, err)
	}
	if _, err := l.Settle(ctx, d.Reservation, ledger.Usage{Tokens: 40, Known: true}); err != nil {
		t.Fatal(err)
	}
}

// expectCountedAsNow checks that the 40 tokens settled "in the future" still count.
func expectCountedAsNow(t *testing.T, l ledger.Ledger, k string) {
	t.Helper()
	ctx := context.Background()
	st, err := l.Inspect(ctx, backQuota, k)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Windows[0].Settled; got != 40 {
		t.Errorf("settled %d after the clock stepped back, want 40: recent usage was forgotten", got)
	}
	d, err := l.Reserve(ctx, backQuota, k, 70)
	if err != nil {
		t.Fatal(err)
	}
	if d.Admitted {
		t.Errorf("70 more admitted over 40 settled (capacity 100): recent usage was forgotten")
	}
}

// TestUsageNewerThanTheClockCountsAsNow is issue 10's defect 8: after the store's clock steps
// back (a failover to a node whose clock is behind), buckets newer than now were ignored.
func TestUsageNewerThanTheClockCountsAsNow(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		c := newFakeClock(1_000_000_000)
		m := memoryAt(c, ledger.Limits{})
		charge40(t, m, "k")
		c.advance(-5 * time.Second)
		expectCountedAsNow(t, m, "k")
	})
	t.Run("valkey", func(t *testing.T) {
		// Valkey's TIME cannot be set back: the bucket and the bookkeeping are moved 5 s into
		// the future instead, which is what a node whose clock is 5 s behind sees.
		srv := valkeytest.Start(t)
		v, ns := newValkeyLedger(t, srv.URL(), ledger.Limits{}, time.Second)
		charge40(t, v, "k")
		c := rawClient(t, srv)
		ctx := context.Background()
		keys, err := c.Do(ctx, c.B().Keys().Pattern(ns+":*").Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		var a, s1 string
		for _, k := range keys {
			switch {
			case strings.HasSuffix(k, ":r"):
				a = k
			case strings.HasSuffix(k, ":s1"):
				s1 = k
			}
		}
		// The 40 tokens are in bucket h1000: in the bucket hash, or pending in the reservation
		// hash (b1000, see ledger/scripts/common.lua). Both move with h1000.
		h, err := c.Do(ctx, c.B().Hget().Key(a).Field("h1000").Build()).AsInt64()
		if err != nil {
			t.Fatalf("h1000 of %s: %v", a, err)
		}
		pending, _ := c.Do(ctx, c.B().Hget().Key(a).Field("b1000").Build()).AsInt64()
		future := strconv.FormatInt(h+5, 10)
		cmds := [][]string{{"HSET", a, "h1000", future}}
		buckets := map[string]string{}
		if s1 != "" {
			if buckets, err = c.Do(ctx, c.B().Hgetall().Key(s1).Build()).AsStrMap(); err != nil {
				t.Fatal(err)
			}
		}
		total := pending
		for b, tok := range buckets {
			n, _ := strconv.ParseInt(tok, 10, 64)
			if b != strconv.FormatInt(h, 10) {
				t.Fatalf("bucket %s of %s: want only bucket %d", b, s1, h)
			}
			total += n
			cmds = append(cmds, []string{"HDEL", s1, b}, []string{"HSET", s1, future, tok})
		}
		if total != 40 {
			t.Fatalf("bucket %d holds %d tokens (%v in %s, %d pending); want 40", h, total, buckets, s1, pending)
		}
		for _, cmd := range cmds {
			if err := c.Do(ctx, c.B().Arbitrary(cmd...).Build()).Error(); err != nil {
				t.Fatal(err)
			}
		}
		expectCountedAsNow(t, v, "k")
	})
}
