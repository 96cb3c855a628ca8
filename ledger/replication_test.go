package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/quotaqual/quotaqual/internal/valkeyproc"
	"github.com/quotaqual/quotaqual/internal/valkeytest"
	"github.com/quotaqual/quotaqual/ledger"
	"github.com/quotaqual/quotaqual/ledger/ledgermodel"
	"github.com/quotaqual/quotaqual/ledger/ledgertest"
)

// newSentinelLedger is a Valkey ledger that finds the primary through r's Sentinels; with
// minReplicas > 0 every write must be acknowledged by that many replicas within ackTimeout.
func newSentinelLedger(t *testing.T, r *valkeyproc.Replicated, limits ledger.Limits, minReplicas int, ackTimeout time.Duration) (*ledger.Valkey, string) {
	t.Helper()
	ns := fmt.Sprintf("qq%d", nsSeq.Add(1))
	v, err := ledger.NewValkey(ledger.ValkeyOptions{
		Sentinel:  &ledger.SentinelOptions{MasterName: r.MasterName, Addresses: r.SentinelAddrs()},
		Namespace: ns, Timeout: time.Second, Limits: limits,
		MinReplicas: minReplicas, AckTimeout: ackTimeout,
	})
	if err != nil {
		t.Fatalf("NewValkey: %v", err)
	}
	t.Cleanup(func() { _ = v.Close() })
	return v, ns
}

// The whole contract holds against a replicated store reached through Sentinel with every write
// acknowledged by the replica.
func TestConformanceValkeyReplicatedAcknowledged(t *testing.T) {
	r := valkeytest.StartReplicated(t)
	ledgertest.Run(t, func(t *testing.T) ledger.Ledger {
		v, _ := newSentinelLedger(t, r, ledgertest.Limits(t), 1, 500*time.Millisecond)
		return v
	})
}

// heldIDs lists the reservation ids the node at addr holds in namespace ns (the fields of the
// reservation hashes whose value is "<estimate> <deadline>").
func heldIDs(t *testing.T, addr, ns string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rep, err := valkeyproc.Do(ctx, addr, "", "KEYS", ns+":*:r")
	if err != nil {
		t.Fatalf("KEYS on %s: %v", addr, err)
	}
	var ids []string
	for _, k := range rep.([]any) {
		fields, err := valkeyproc.Do(ctx, addr, "", "HGETALL", k.(string))
		if err != nil {
			t.Fatalf("HGETALL on %s: %v", addr, err)
		}
		fv := fields.([]any)
		for i := 0; i+1 < len(fv); i += 2 {
			if strings.Contains(fv[i+1].(string), " ") {
				ids = append(ids, fv[i].(string))
			}
		}
	}
	return ids
}

// failoverOutcome is what one run of the failover sequence measured.
type failoverOutcome struct {
	admitted       int64    // tokens admitted across the whole sequence
	lost           []string // ids admitted on the old primary and absent from the promoted one
	unacknowledged int      // reserves refused because the replica did not confirm them
	promotion      time.Duration
	healed         time.Duration // until the rejoined old primary replicates and the ledger answers
	linearizable   porcupine.CheckResult
}

// runFailover admits part of a budget, then freezes the replica (it stops replicating, as if
// cut off), keeps reserving on the primary, kills the primary and resumes the replica, waits
// for the Sentinels to promote it, and reserves again until the budget is refused. Every
// reserve holds its reservation (nothing is settled), so a hold the promoted primary does not
// have is tokens it will hand out a second time.
func runFailover(t *testing.T, minReplicas int) failoverOutcome {
	r := valkeytest.StartReplicated(t)
	led, ns := newSentinelLedger(t, r, ledgertest.Limits(t), minReplicas, 100*time.Millisecond)
	const capacity, est = 100, 10
	q := &ledger.Quota{Rule: "failover", Lease: 5 * time.Minute, Budgets: []ledger.Budget{{Window: 10 * time.Minute, Capacity: capacity}}}
	rec := ledgermodel.NewRecorder()
	var out failoverOutcome
	var ids []string
	reserve := func() (ledger.Decision, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		d, err := rec.Reserve(ctx, led, 0, q, "subject", est)
		if err == nil && d.Admitted {
			out.admitted += est
			ids = append(ids, d.Reservation.ID)
		}
		return d, err
	}
	for range 3 {
		if d, err := reserve(); err != nil || !d.Admitted {
			t.Fatalf("before the split: reserve = %+v, %v", d, err)
		}
	}
	// Let the replica catch up, so the first three are the part of the budget both nodes hold.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, po, err1 := valkeyproc.Role(context.Background(), r.Primary)
		_, ro, err2 := valkeyproc.Role(context.Background(), r.Replica)
		if err1 == nil && err2 == nil && po == ro {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica not in sync: primary %d, replica %d (%v, %v)", po, ro, err1, err2)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Cut the replica off: frozen, it cannot reconnect, and with its link closed by the primary
	// nothing more reaches it (a frozen process's socket would otherwise still buffer the
	// stream and hand it over on resume).
	if err := r.Replica.Pause(); err != nil {
		t.Fatal(err)
	}
	if _, err := valkeyproc.Do(context.Background(), r.Primary.Addr(), "", "CLIENT", "KILL", "TYPE", "replica"); err != nil {
		t.Fatal(err)
	}
	for range 7 {
		d, err := reserve()
		switch {
		case errors.Is(err, ledger.ErrNotAcknowledged):
			out.unacknowledged++
		case err != nil:
			t.Fatalf("during the split: %v", err)
		case !d.Admitted:
			t.Fatalf("during the split: denied with %d of %d admitted", out.admitted, capacity)
		}
	}
	onOldPrimary := heldIDs(t, r.Primary.Addr(), ns)
	killed := time.Now()
	if err := r.Primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := r.Replica.Resume(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		addr, err := r.PrimaryAddr(ctx)
		cancel()
		if err == nil && addr == r.Replica.Addr() {
			out.promotion = time.Since(killed)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no promotion within 30 s: %v %v", addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Heal: the old primary comes back (with what it took alone in its append-only file) and
	// rejoins as a replica of the promoted node, which discards that history. It is told so at
	// once, as a deployment's start script does (it asks the Sentinels for the primary before it
	// serves): left to the Sentinels, the conversion waits until the node has reported itself
	// master for 8 s and for a 10 s INFO period, and a Sentinel whose timer runs over 2 s late —
	// a loaded 2-core CI machine — enters TILT and does nothing for 30 s more (a CI run saw no
	// rejoin within 60 s). What is measured here is the failover, not Sentinel's patience.
	if err := r.Primary.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := valkeyproc.Do(context.Background(), r.Primary.Addr(), "", "REPLICAOF", r.Replica.Host(), fmt.Sprint(r.Replica.Port())); err != nil {
		t.Fatalf("REPLICAOF the promoted node on the old primary: %v", err)
	}
	// Wait (without touching the quota) until the ledger reaches the promoted primary and, in
	// acknowledged mode, the rejoined node replicates from it: until then reserves fail closed,
	// and every failed reserve is an operation porcupine must consider both ways.
	const rejoinWithin = 30 * time.Second
	deadline = time.Now().Add(rejoinWithin)
	for {
		role, _, err := valkeyproc.Role(context.Background(), r.Primary)
		info, err2 := valkeyproc.Info(context.Background(), r.Primary.Addr(), "", "replication")
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err3 := led.Inspect(ctx, q, "subject")
		cancel()
		rejoined := err == nil && err2 == nil && role == "slave" && info["master_link_status"] == "up"
		if err3 == nil && (rejoined || minReplicas == 0) {
			out.healed = time.Since(killed)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready within %v: the ledger reaches the promoted primary: %v; the old primary rejoined as a replica: role %q link %q (%v %v)",
				rejoinWithin, err3, role, info["master_link_status"], err, err2)
		}
		time.Sleep(50 * time.Millisecond)
	}
	deadline = time.Now().Add(10 * time.Second)
	for {
		d, err := reserve()
		if err == nil && !d.Admitted {
			break // the budget is spent, as far as the promoted primary knows
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the promotion: still admitting or failing at the deadline: %+v, %v", d, err)
		}
		if err != nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
	survivors := heldIDs(t, r.Replica.Addr(), ns)
	for _, id := range onOldPrimary {
		if slices.Contains(ids, id) && !slices.Contains(survivors, id) {
			out.lost = append(out.lost, id)
		}
	}
	out.linearizable, _ = ledgermodel.CheckPrefixes(capacity, rec.Operations(), 4, 10*time.Second)
	t.Logf("admitted %d tokens of %d; lost %d acknowledged holds %v; %d reserves refused unacknowledged; promotion %v and heal %v after the primary died; history %v",
		out.admitted, capacity, len(out.lost), out.lost, out.unacknowledged, out.promotion.Round(time.Millisecond), out.healed.Round(time.Millisecond), out.linearizable)
	return out
}

// With asynchronous replication a failover spends a budget twice: the holds the primary took
// while the replica lagged vanish with it, and the promoted replica admits their tokens again.
// This is the defect acknowledged mode exists for; the test keeps it demonstrated.
func TestFailoverAsyncSpendsTheBudgetTwice(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a Sentinel failover takes several seconds")
	}
	out := runFailover(t, 0)
	if out.admitted <= 100 {
		t.Errorf("async: admitted %d tokens of 100 across the failover; want over-admission (the lost holds admitted again)", out.admitted)
	}
	if len(out.lost) != 7 {
		t.Errorf("async: %d admitted holds lost; want the 7 taken while the replica was cut off", len(out.lost))
	}
	if out.linearizable != porcupine.Illegal {
		t.Errorf("async: porcupine says %v; want Illegal (over-admission)", out.linearizable)
	}
}

// With acknowledged replication no admission is lost in a failover: while the replica cannot
// confirm, reserves fail closed (and their holds are released); after the promotion the budget
// admits exactly what is left.
func TestFailoverAcknowledgedLosesNoAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a Sentinel failover takes several seconds")
	}
	out := runFailover(t, 1)
	if out.admitted > 100 {
		t.Errorf("acknowledged: admitted %d tokens of 100 across the failover: double spend", out.admitted)
	}
	if len(out.lost) != 0 {
		t.Errorf("acknowledged: admitted holds lost in the failover: %v", out.lost)
	}
	if out.unacknowledged != 7 {
		t.Errorf("acknowledged: %d reserves refused while the replica was cut off; want all 7", out.unacknowledged)
	}
	if out.linearizable != porcupine.Ok {
		t.Errorf("acknowledged: porcupine says %v; want Ok", out.linearizable)
	}
}

// An unacknowledged settlement: applied on the primary, reported applied with
// ErrNotAcknowledged; the replica still holds the reservation, so a promoted replica would
// charge its estimate when the lease runs out — the refund is lost (conservative), never the
// hold.
func TestSettleNotAcknowledgedLeavesTheHoldOnTheReplica(t *testing.T) {
	r := valkeytest.StartReplicated(t)
	led, ns := newSentinelLedger(t, r, ledgertest.Limits(t), 1, 100*time.Millisecond)
	q := &ledger.Quota{Rule: "settle-ack", Lease: time.Minute, Budgets: []ledger.Budget{{Window: time.Minute, Capacity: 100}}}
	ctx := context.Background()
	d, err := led.Reserve(ctx, q, "subject", 30)
	if err != nil || !d.Admitted {
		t.Fatalf("reserve: %+v, %v", d, err)
	}
	if ids := heldIDs(t, r.Replica.Addr(), ns); !slices.Contains(ids, d.Reservation.ID) {
		t.Fatalf("an acknowledged reserve returned before the replica held it: replica holds %v", ids)
	}
	if err := r.Replica.Pause(); err != nil {
		t.Fatal(err)
	}
	if _, err := valkeyproc.Do(ctx, r.Primary.Addr(), "", "CLIENT", "KILL", "TYPE", "replica"); err != nil {
		t.Fatal(err)
	}
	st, err := led.Settle(ctx, d.Reservation, ledger.Usage{Tokens: 5, Known: true})
	if !errors.Is(err, ledger.ErrNotAcknowledged) || !errors.Is(err, ledger.ErrStore) {
		t.Fatalf("settle with the replica cut off: err %v; want ErrNotAcknowledged (and ErrStore)", err)
	}
	if !st.Applied || st.Charged != 5 || st.Refund != 25 {
		t.Errorf("settle reported %+v; want applied on the primary, charged 5, refund 25", st)
	}
	if ids := heldIDs(t, r.Primary.Addr(), ns); slices.Contains(ids, d.Reservation.ID) {
		t.Errorf("the primary still holds the settled reservation")
	}
	if err := r.Replica.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := r.Primary.Kill(); err != nil { // lost before the replica reconnects
		t.Fatal(err)
	}
	if ids := heldIDs(t, r.Replica.Addr(), ns); !slices.Contains(ids, d.Reservation.ID) {
		t.Errorf("the replica lost the hold: %v; a promoted replica must still charge the estimate", ids)
	}
}

// An acknowledgement confirms this write, not the connection's history: with the replica still
// connected but frozen (its acknowledged offset stuck before the write), an acknowledged reserve
// fails closed. A WAIT sent on a connection of its own (valkey-go sends WAIT on a dedicated one)
// would count the frozen replica — its offset is past that fresh connection's nothing — and
// admit like async.
func TestAcknowledgementCoversTheWriteItself(t *testing.T) {
	r := valkeytest.StartReplicated(t)
	led, _ := newSentinelLedger(t, r, ledgertest.Limits(t), 1, 100*time.Millisecond)
	q := &ledger.Quota{Rule: "ack-own-write", Lease: time.Minute, Budgets: []ledger.Budget{{Window: time.Minute, Capacity: 100}}}
	ctx := context.Background()
	if d, err := led.Reserve(ctx, q, "subject", 10); err != nil || !d.Admitted {
		t.Fatalf("reserve with the replica in sync: %+v, %v", d, err)
	}
	if err := r.Replica.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = r.Replica.Resume() }()
	for i := range 3 {
		d, err := led.Reserve(ctx, q, "subject", 10)
		if !errors.Is(err, ledger.ErrNotAcknowledged) {
			t.Errorf("reserve %d with the replica frozen: %+v, %v; want ErrNotAcknowledged", i+1, d, err)
		}
	}
}

// The Sentinel client's passwords never appear in an error, and a Sentinel-managed store that
// cannot be reached fails closed within the timeout.
func TestSentinelPasswordsNeverInErrors(t *testing.T) {
	const sentinelPW, masterPW = "sentinel-canary-Pw1", "master-canary-Pw2"
	v, err := ledger.NewValkey(ledger.ValkeyOptions{
		Sentinel: &ledger.SentinelOptions{MasterName: "quotaqual", Addresses: []string{"127.0.0.1:1"},
			Password: sentinelPW, MasterPassword: masterPW},
		Namespace: "qq-sentinel-secret", Timeout: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	q := &ledger.Quota{Rule: "r", Lease: time.Minute, Budgets: []ledger.Budget{{Window: time.Minute, Capacity: 10}}}
	start := time.Now()
	_, err = v.Reserve(context.Background(), q, "k", 1)
	if !errors.Is(err, ledger.ErrStore) {
		t.Fatalf("reserve against no Sentinel: %v; want ErrStore", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("failed closed after %v; want within the 200ms timeout plus slack", took)
	}
	for _, pw := range []string{sentinelPW, masterPW} {
		if strings.Contains(err.Error(), pw) {
			t.Errorf("the error shows a password: %v", err)
		}
	}
}
