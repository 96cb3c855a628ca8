package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/valkeytest"
	"github.com/quotaqual/quotaqual/ledger"
)

// Two policies for one rule share a quota key's state, as during a rolling deploy that
// shortens the lease. The shorter policy's writes must not cut short the state the longer
// lease still holds: the live reservation stays held and is settled, on both backends alike.
func TestAShorterLeasePolicyDoesNotExpireALongerLiveLease(t *testing.T) {
	srv := valkeytest.Start(t)
	backends := map[string]func(t *testing.T) ledger.Ledger{
		"memory": func(t *testing.T) ledger.Ledger { return ledger.NewMemory(ledger.Limits{}, nil) },
		"valkey": func(t *testing.T) ledger.Ledger {
			l, err := ledger.NewValkey(ledger.ValkeyOptions{URL: srv.URL(), Namespace: "qq-policies", Timeout: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			return l
		},
	}
	for name, newLedger := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := newLedger(t)
			ctx := context.Background()
			long := &ledger.Quota{Rule: "r", Budgets: []ledger.Budget{{Window: 2 * time.Second, Capacity: 100}}, Lease: time.Minute}
			short := &ledger.Quota{Rule: "r", Budgets: []ledger.Budget{{Window: 2 * time.Second, Capacity: 100}}, Lease: 200 * time.Millisecond}
			held, err := l.Reserve(ctx, long, "k", 50)
			if err != nil || !held.Admitted {
				t.Fatalf("reserve under the long lease: %+v %v", held, err)
			}
			other, err := l.Reserve(ctx, short, "k", 10)
			if err != nil || !other.Admitted {
				t.Fatalf("reserve under the short lease: %+v %v", other, err)
			}
			if _, err := l.Settle(ctx, other.Reservation, ledger.Usage{Tokens: 10, Known: true}); err != nil {
				t.Fatal(err)
			}
			// Past the short policy's whole state lifetime (window + lease + a bucket), well
			// within the long lease.
			time.Sleep(3500 * time.Millisecond)
			st, err := l.Inspect(ctx, long, "k")
			if err != nil {
				t.Fatal(err)
			}
			if st.ActiveReservations != 1 || st.ReservedTokens != 50 {
				t.Errorf("the live 1-minute lease: %d reservations holding %d tokens, want 1 holding 50", st.ActiveReservations, st.ReservedTokens)
			}
			if d, err := l.Reserve(ctx, long, "k", 60); err != nil || d.Admitted {
				t.Errorf("50 held + 60 > 100 was admitted (err %v): the hold vanished", err)
			}
			s, err := l.Settle(ctx, held.Reservation, ledger.Usage{Tokens: 40, Known: true})
			if err != nil || !s.Applied || s.Charged != 40 {
				t.Errorf("settle of the live lease: %+v %v, want applied at 40", s, err)
			}
		})
	}
}
