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

// TestASweepThatMeetsAnOverflowNeitherFailsNorChargesTwice is issue 10's defect 9: an error
// midway through the expiry sweep (here an increment overflowing the bucket of the lease's
// deadline) aborted the script after some writes, leaving the expired reservation live — every
// later call failed the same way, and a sweep that got further charged it again. Now expired
// ids are removed before they are charged and a charge saturates at 2^53.
func TestASweepThatMeetsAnOverflowNeitherFailsNorChargesTwice(t *testing.T) {
	srv := valkeytest.Start(t)
	v, ns := newValkeyLedger(t, srv.URL(), ledger.Limits{}, time.Second)
	q := &ledger.Quota{Rule: "sweep", Lease: time.Second, Budgets: []ledger.Budget{{Window: 10 * time.Second, Capacity: 100}}}
	ctx := context.Background()
	d, err := v.Reserve(ctx, q, "k", 10)
	if err != nil || !d.Admitted {
		t.Fatalf("reserve: %+v %v", d, err)
	}
	c := rawClient(t, srv)
	keys, err := c.Do(ctx, c.B().Keys().Pattern(ns+":*:r").Build()).AsStrSlice()
	if err != nil || len(keys) != 1 {
		t.Fatalf("reservation key: %v %v", keys, err)
	}
	// the reservation's field: "<estimate> <deadline>"
	val, err := c.Do(ctx, c.B().Hget().Key(keys[0]).Field(d.Reservation.ID).Build()).ToString()
	est, dl, ok := strings.Cut(val, " ")
	deadline, perr := strconv.ParseInt(dl, 10, 64)
	if err != nil || !ok || est != "10" || perr != nil {
		t.Fatalf("reservation field %q (%v); want \"10 <deadline>\"", val, err)
	}
	bucket := strings.TrimSuffix(keys[0], ":r") + ":s1"
	// The bucket the expired estimate will be charged into is one increment from overflow.
	if err := c.Do(ctx, c.B().Hset().Key(bucket).FieldValue().FieldValue(strconv.FormatInt(deadline/1000, 10), "9223372036854775800").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(time.UnixMilli(deadline)) + 100*time.Millisecond)
	st, err := v.Inspect(ctx, q, "k")
	if err != nil {
		t.Fatalf("the sweep failed: %v", err)
	}
	if st.ActiveReservations != 0 || st.ReservedTokens != 0 {
		t.Fatalf("after the sweep: %+v, want the expired reservation gone", st)
	}
	again, err := v.Inspect(ctx, q, "k")
	if err != nil || again.Windows[0].Settled != st.Windows[0].Settled {
		t.Fatalf("a second call changed settled %d → %d (%v): charged twice", st.Windows[0].Settled, again.Windows[0].Settled, err)
	}
	if n, err := c.Do(ctx, c.B().Hget().Key(bucket).Field(strconv.FormatInt(deadline/1000, 10)).Build()).AsInt64(); err != nil || n != ledger.MaxEstimate {
		t.Errorf("the overflowing bucket holds %d (%v), want it saturated at 2^53", n, err)
	}
}
