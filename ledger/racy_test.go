package ledger_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"

	"github.com/valkey-io/valkey-go"

	"github.com/quotaqual/quotaqual/ledger"
)

// racyLedger is a deliberately WRONG ledger.Ledger over a real Valkey, for tests only: it reads
// the key's state in one call (HGETALL + GET) and writes its decision in another (HSET), with a
// yield in between — the read-then-write race the upstream proof of concept had. Two gateways (or
// two goroutines) can both read "there is room" and both admit. The linearizability check must
// reject its histories; see TestLinearizabilityCheckCatchesReadThenWrite.
type racyLedger struct {
	client valkey.Client
	ns     string
	inst   int
	next   atomic.Int64
}

func newRacyLedger(url, namespace string, instance int) (*racyLedger, error) {
	opt, err := valkey.ParseURL(url)
	if err != nil {
		return nil, err
	}
	c, err := valkey.NewClient(opt)
	if err != nil {
		return nil, err
	}
	return &racyLedger{client: c, ns: namespace, inst: instance}, nil
}

func (r *racyLedger) keys(key string) (active, settled string) {
	base := r.ns + ":{" + key + "}"
	return base + ":active", base + ":settled"
}

// read returns the key's settled tokens and live holds, in one round trip.
func (r *racyLedger) read(ctx context.Context, key string) (int64, map[string]int64, error) {
	active, settled := r.keys(key)
	res := r.client.DoMulti(ctx,
		r.client.B().Hgetall().Key(active).Build(),
		r.client.B().Get().Key(settled).Build())
	holds, err := res[0].AsIntMap()
	if err != nil {
		return 0, nil, fmt.Errorf("%w: racy read: %w", ledger.ErrStore, err)
	}
	s, err := res[1].AsInt64()
	if err != nil && !valkey.IsValkeyNil(err) {
		return 0, nil, fmt.Errorf("%w: racy read: %w", ledger.ErrStore, err)
	}
	return s, holds, nil
}

func (r *racyLedger) Reserve(ctx context.Context, q *ledger.Quota, key string, estimate int64) (ledger.Decision, error) {
	settled, holds, err := r.read(ctx, key)
	if err != nil {
		return ledger.Decision{}, err
	}
	var reserved int64
	for _, n := range holds {
		reserved += n
	}
	runtime.Gosched() // widen the window between the read and the write
	if settled+reserved+estimate > q.Limit() {
		return ledger.Decision{Denial: &ledger.Denial{Reason: ledger.ReasonWindowCapacity, Limit: q.Limit(),
			Remaining: max(0, q.Limit()-settled-reserved)}}, nil
	}
	id := fmt.Sprintf("racy%d-%d", r.inst, r.next.Add(1))
	active, _ := r.keys(key)
	if err := r.client.Do(ctx, r.client.B().Hset().Key(active).FieldValue().FieldValue(id, fmt.Sprint(estimate)).Build()).Error(); err != nil {
		return ledger.Decision{}, fmt.Errorf("%w: racy write: %w", ledger.ErrStore, err)
	}
	return ledger.Decision{Admitted: true, Reservation: ledger.Reservation{ID: id, Key: key, Quota: q, Estimate: estimate}}, nil
}

func (r *racyLedger) Renew(ctx context.Context, res ledger.Reservation) (bool, error) {
	active, _ := r.keys(res.Key)
	return r.client.Do(ctx, r.client.B().Hexists().Key(active).Field(res.ID).Build()).AsBool()
}

func (r *racyLedger) Settle(ctx context.Context, res ledger.Reservation, u ledger.Usage) (ledger.Settlement, error) {
	active, settled := r.keys(res.Key)
	n, err := r.client.Do(ctx, r.client.B().Hdel().Key(active).Field(res.ID).Build()).AsInt64()
	if err != nil {
		return ledger.Settlement{}, fmt.Errorf("%w: racy settle: %w", ledger.ErrStore, err)
	}
	if n == 0 {
		return ledger.Settlement{}, nil
	}
	charged := res.Estimate
	if u.Known {
		charged = u.Tokens
	}
	if err := r.client.Do(ctx, r.client.B().Incrby().Key(settled).Increment(charged).Build()).Error(); err != nil {
		return ledger.Settlement{}, fmt.Errorf("%w: racy settle: %w", ledger.ErrStore, err)
	}
	return ledger.Settlement{Applied: true, Charged: charged, Refund: max(0, res.Estimate-charged),
		Overage: max(0, charged-res.Estimate)}, nil
}

func (r *racyLedger) Inspect(ctx context.Context, q *ledger.Quota, key string) (ledger.KeyState, error) {
	settled, holds, err := r.read(ctx, key)
	if err != nil {
		return ledger.KeyState{}, err
	}
	ks := ledger.KeyState{ActiveReservations: len(holds)}
	for _, n := range holds {
		ks.ReservedTokens += n
	}
	for _, b := range q.Budgets {
		ks.Windows = append(ks.Windows, ledger.WindowUsage{Window: b.Window, Capacity: b.Capacity, Settled: settled})
	}
	return ks, nil
}

func (r *racyLedger) Backend() string { return "racy-valkey" }

func (r *racyLedger) Close() error { r.client.Close(); return nil }

var _ ledger.Ledger = (*racyLedger)(nil)
