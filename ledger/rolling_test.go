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
	cluster := threePrimaries(t)
	return map[string]func(t *testing.T) ledger.Ledger{
		"memory": func(t *testing.T) ledger.Ledger { return ledger.NewMemory(ledger.Limits{}, nil) },
		"valkey": func(t *testing.T) ledger.Ledger {
			l, _ := newValkeyLedger(t, srv.URL(), ledger.Limits{}, time.Second)
			return l
		},
		// the keys the two policies touch must all share the quota key's slot
		"valkey-cluster": func(t *testing.T) ledger.Ledger {
			l, _ := newClusterLedger(t, cluster, ledger.Limits{})
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

// A reservation whose lease runs out is charged in every bucket width any policy for the rule
// uses, whichever policy's call sweeps it: the sweep used to charge only the sweeping policy's
// widths, and a window of another width (a window over a minute has buckets of window/60)
// never counted the expired estimate.
func TestExpiryIsChargedInEveryPolicysBucketWidths(t *testing.T) {
	for name, newLedger := range twoPolicyBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := newLedger(t)
			ctx := context.Background()
			hours := &ledger.Quota{Rule: "r", Budgets: []ledger.Budget{{Window: 2 * time.Hour, Capacity: 1000}}, Lease: time.Second}
			seconds := &ledger.Quota{Rule: "r", Budgets: []ledger.Budget{{Window: 4 * time.Second, Capacity: 1000}}, Lease: time.Minute}
			d, err := l.Reserve(ctx, hours, "k", 600)
			if err != nil || !d.Admitted {
				t.Fatalf("reserve under the 2 h window: %+v %v", d, err)
			}
			time.Sleep(1500 * time.Millisecond)        // its 1 s lease runs out
			o, err := l.Reserve(ctx, seconds, "k", 10) // this policy's call sweeps it
			if err != nil || !o.Admitted {
				t.Fatalf("reserve under the 4 s window: %+v %v", o, err)
			}
			st, err := l.Inspect(ctx, hours, "k")
			if err != nil {
				t.Fatal(err)
			}
			if st.Windows[0].Settled != 600 {
				t.Errorf("the 2 h window counts %d tokens of the expired 600-token reservation, want 600", st.Windows[0].Settled)
			}
			if d, err := l.Reserve(ctx, hours, "k", 500); err != nil || d.Admitted {
				t.Errorf("600 expired + 10 held + 500 > 1000 in the 2 h window was admitted (err %v)", err)
			}
		})
	}
}

// A settlement is charged in every bucket width any policy for the rule declared, whichever
// policy settles: it used to be charged in the settling policy's widths only, and a window of
// another width (over a minute: buckets of window/60) never counted usage settled under the
// other policy during a rollout.
func TestSettlementIsChargedInEveryPolicysBucketWidths(t *testing.T) {
	for name, newLedger := range twoPolicyBackends(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := newLedger(t)
			ctx := context.Background()
			hours := &ledger.Quota{Rule: "r", Budgets: []ledger.Budget{{Window: 2 * time.Hour, Capacity: 1000}}, Lease: time.Minute}
			seconds := &ledger.Quota{Rule: "r", Budgets: []ledger.Budget{{Window: 4 * time.Second, Capacity: 1000}}, Lease: time.Minute}
			h, err := l.Reserve(ctx, hours, "k", 10) // the 2 h policy has been here
			if err != nil || !h.Admitted {
				t.Fatalf("reserve under the 2 h window: %+v %v", h, err)
			}
			for i := range 2 { // the second settles on the fast path, when there is one
				d, err := l.Reserve(ctx, seconds, "k", 10)
				if err != nil || !d.Admitted {
					t.Fatalf("reserve %d under the 4 s window: %+v %v", i+1, d, err)
				}
				if _, err := l.Settle(ctx, d.Reservation, ledger.Usage{Tokens: 300, Known: true}); err != nil {
					t.Fatal(err)
				}
			}
			st, err := l.Inspect(ctx, hours, "k")
			if err != nil {
				t.Fatal(err)
			}
			if st.Windows[0].Settled != 600 {
				t.Errorf("the 2 h window counts %d of the 600 tokens settled under the 4 s policy, want 600", st.Windows[0].Settled)
			}
			if d, err := l.Reserve(ctx, hours, "k", 400); err != nil || d.Admitted {
				t.Errorf("600 settled + 10 held + 400 > 1000 in the 2 h window was admitted (err %v)", err)
			}
		})
	}
}
