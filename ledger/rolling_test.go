package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/valkeytest"
	"github.com/quotaqual/quotaqual/ledger"
)

// twoPolicyBackends are the backends a rolling change of a rule's policy is checked on: two
// policies for one rule share one quota key's state, as while gateways with the old and the new
// policy serve side by side.
func twoPolicyBackends(t *testing.T) map[string]func(t *testing.T) ledger.Ledger {
	srv := valkeytest.Start(t)
	return map[string]func(t *testing.T) ledger.Ledger{
		"memory": func(t *testing.T) ledger.Ledger { return ledger.NewMemory(ledger.Limits{}, nil) },
		"valkey": func(t *testing.T) ledger.Ledger {
			l, _ := newValkeyLedger(t, srv.URL(), ledger.Limits{}, time.Second)
			return l
		},
	}
}

// A shorter window's policy must not drop usage a longer window of another policy for the same
// rule still counts: its rebuild used to prune every bucket older than its own longest window,
// and the longer window then admitted that usage's tokens again.
func TestAShorterWindowPolicyKeepsUsageALongerWindowCounts(t *testing.T) {
	for name, newLedger := range twoPolicyBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := newLedger(t)
			ctx := context.Background()
			long := &ledger.Quota{Rule: "r", Budgets: []ledger.Budget{{Window: 8 * time.Second, Capacity: 100}}, Lease: time.Minute}
			short := &ledger.Quota{Rule: "r", Budgets: []ledger.Budget{{Window: 2 * time.Second, Capacity: 100}}, Lease: time.Minute}
			d, err := l.Reserve(ctx, long, "k", 60)
			if err != nil || !d.Admitted {
				t.Fatalf("reserve under the long window: %+v %v", d, err)
			}
			if _, err := l.Settle(ctx, d.Reservation, ledger.Usage{Tokens: 60, Known: true}); err != nil {
				t.Fatal(err)
			}
			// Past the short window (and a bucket), well within the long one.
			time.Sleep(3500 * time.Millisecond)
			o, err := l.Reserve(ctx, short, "k", 10)
			if err != nil || !o.Admitted {
				t.Fatalf("reserve under the short window: %+v %v", o, err)
			}
			if _, err := l.Settle(ctx, o.Reservation, ledger.Usage{Tokens: 0, Known: true}); err != nil {
				t.Fatal(err)
			}
			st, err := l.Inspect(ctx, long, "k")
			if err != nil {
				t.Fatal(err)
			}
			if st.Windows[0].Settled != 60 {
				t.Errorf("the 8 s window counts %d settled tokens after the 2 s policy's call, want 60", st.Windows[0].Settled)
			}
			if d, err := l.Reserve(ctx, long, "k", 50); err != nil || d.Admitted {
				t.Errorf("60 settled + 50 > 100 in the 8 s window was admitted (err %v): the usage was dropped", err)
			}
		})
	}
}
