package ledger

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Clock is the memory backend's time source. The Valkey backend uses the store's TIME.
type Clock func() time.Time

// Memory is the in-process backend: exact, safe for concurrent use, bounded by its Limits. Each
// quota key has its own mutex; a small global lock guards the key map. Idle keys (no settled
// usage left in any window, no live reservation) are removed lazily by an amortised sweep of a
// few keys per call, so the backend runs no goroutine of its own.
type Memory struct {
	limits Limits
	clock  Clock

	mu   sync.Mutex
	keys map[string]*memKey

	active atomic.Int64 // live reservations held, across keys
}

type memKey struct {
	mu           sync.Mutex
	dead         bool // removed from Memory.keys; holders of the pointer must look up again
	wheels       []*wheel
	res          map[string]memRes
	reserved     int64
	nextDeadline int64 // no reservation expires before this (a lower bound)
	// tombs: ids whose reservation ended unsettled (lease ran out) or that were settled while
	// not live, as ledger/scripts/common.lua keeps them; pruned whenever one is added.
	tombs map[string]memTomb
}

type memRes struct {
	estimate   int64
	deadlineMs int64
	ttlMs      int64 // how long its tombstone lives: its quota's longest window plus lease
}

// memTomb is a tombstone: the estimate a lease expiry charged (settled false) or nothing more
// to charge (settled true), until expiresMs.
type memTomb struct {
	charged   int64
	settled   bool
	expiresMs int64
}

// entomb records a tombstone for id, first deleting the expired ones (bounded: the ids ended
// within one tombstone lifetime).
func (k *memKey) entomb(nowMs int64, id string, t memTomb) {
	if k.tombs == nil {
		k.tombs = make(map[string]memTomb)
	}
	for tid, old := range k.tombs {
		if old.expiresMs <= nowMs {
			delete(k.tombs, tid)
		}
	}
	k.tombs[id] = t
}

// tomb returns id's live tombstone.
func (k *memKey) tomb(nowMs int64, id string) (memTomb, bool) {
	t, ok := k.tombs[id]
	return t, ok && t.expiresMs > nowMs
}

// wheel is the settled usage of one bucket width: a ring of buckets long enough for the
// longest window of that width.
type wheel struct {
	width     int64
	maxWindow int64
	idx, val  []int64
}

const noBucket = -1 << 62

func newWheel(width, maxWindow int64) *wheel {
	n := maxWindow/width + 3
	w := &wheel{width: width, maxWindow: maxWindow, idx: make([]int64, n), val: make([]int64, n)}
	for i := range w.idx {
		w.idx[i] = noBucket
	}
	return w
}

func (w *wheel) slot(b int64) int {
	n := int64(len(w.idx))
	return int(((b % n) + n) % n)
}

// add charges tokens to bucket b; a bucket older than the ring holds is outside every window
// of this width already and is dropped.
func (w *wheel) add(b, tokens int64) {
	s := w.slot(b)
	switch {
	case w.idx[s] == b:
		w.val[s] += tokens
	case w.idx[s] < b:
		w.idx[s], w.val[s] = b, tokens
	}
}

// collect appends the non-empty buckets from lo on; one newer than hi (the clock stepped
// back) is listed as hi's.
func (w *wheel) collect(lo, hi int64, out []bucketTokens) []bucketTokens {
	for s, b := range w.idx {
		if b >= lo && w.val[s] != 0 {
			out = append(out, bucketTokens{index: min(b, hi), tokens: w.val[s]})
		}
	}
	return out
}

// sum is the usage in buckets from lo on and the newest non-empty one among them (noBucket if
// none). A bucket newer than hi — written before the clock stepped back — counts as hi's:
// recent usage is never forgotten (conservative).
func (w *wheel) sum(lo, hi int64) (total, newest int64) {
	newest = noBucket
	for s, b := range w.idx {
		if b >= lo {
			if v := w.val[s]; v != 0 {
				total += v
				if v > 0 && min(b, hi) > newest {
					newest = min(b, hi)
				}
			}
		}
	}
	return total, newest
}

// empty reports whether no usage is left in the wheel's longest window.
func (w *wheel) empty(nowMs int64) bool {
	lo, _ := windowRange(nowMs, w.maxWindow, w.width)
	for s, b := range w.idx {
		if b >= lo && w.val[s] != 0 {
			return false
		}
	}
	return true
}

// NewMemory returns an in-memory ledger. A nil clock means time.Now; zero Limits fields take
// the defaults (100000 keys, 256-byte keys, 200000 active reservations).
func NewMemory(limits Limits, clock Clock) *Memory {
	if clock == nil {
		clock = time.Now
	}
	return &Memory{limits: limits.withDefaults(), clock: clock, keys: make(map[string]*memKey)}
}

// Backend implements Ledger.
func (m *Memory) Backend() string { return "memory" }

// Close implements Ledger; the memory backend holds no resources.
func (m *Memory) Close() error { return nil }

func (m *Memory) nowMs() int64 { return m.clock().UnixMilli() }

// wheelFor returns the wheel of a width, creating or growing it for maxWindow.
func (k *memKey) wheelFor(width, maxWindow int64) *wheel {
	for i, w := range k.wheels {
		if w.width != width {
			continue
		}
		if w.maxWindow >= maxWindow {
			return w
		}
		g := newWheel(width, maxWindow)
		for s, b := range w.idx {
			if b != noBucket {
				g.add(b, w.val[s])
			}
		}
		k.wheels[i] = g
		return g
	}
	w := newWheel(width, maxWindow)
	k.wheels = append(k.wheels, w)
	return w
}

// ensureWheels makes sure every width of q has a wheel long enough.
func (k *memKey) ensureWheels(bs []checkedBudget) {
	for _, b := range bs {
		k.wheelFor(b.widthMs, b.windowMs)
	}
}

// sweep charges reservations whose lease ran out at their estimate, in the bucket of their
// deadline, and frees their hold. It returns how many it removed.
func (k *memKey) sweep(nowMs int64) int {
	if len(k.res) == 0 || nowMs < k.nextDeadline {
		return 0
	}
	n := 0
	next := int64(1<<62 - 1)
	for id, r := range k.res {
		if r.deadlineMs > nowMs {
			next = min(next, r.deadlineMs)
			continue
		}
		for _, w := range k.wheels {
			w.add(floorDiv(r.deadlineMs, w.width), r.estimate)
		}
		k.reserved -= r.estimate
		delete(k.res, id)
		k.entomb(nowMs, id, memTomb{charged: r.estimate, expiresMs: nowMs + r.ttlMs})
		n++
	}
	k.nextDeadline = next
	return n
}

func (k *memKey) idle(nowMs int64) bool {
	if len(k.res) > 0 {
		return false
	}
	for _, t := range k.tombs {
		if t.expiresMs > nowMs {
			return false
		}
	}
	for _, w := range k.wheels {
		if !w.empty(nowMs) {
			return false
		}
	}
	return true
}

func (k *memKey) earliestDeadline() int64 {
	e := int64(-1)
	for _, r := range k.res {
		if e < 0 || r.deadlineMs < e {
			e = r.deadlineMs
		}
	}
	return e
}

// views reads the windows of bs; withBuckets also lists their buckets (for a denial).
func (k *memKey) views(bs []checkedBudget, nowMs int64, withBuckets bool) []windowView {
	views := make([]windowView, len(bs))
	for i, b := range bs {
		w := k.wheelFor(b.widthMs, b.windowMs)
		lo, hi := windowRange(nowMs, b.windowMs, b.widthMs)
		views[i].budget = b
		views[i].settled, views[i].newest = w.sum(lo, hi)
		if withBuckets {
			views[i].buckets = w.collect(lo, hi, nil)
		}
	}
	return views
}

// sweepSomeLocked looks at up to n keys (m.mu held): expires their reservations and removes
// the idle ones. Keys busy with another call are skipped.
func (m *Memory) sweepSomeLocked(nowMs int64, n int) {
	for ck, k := range m.keys {
		if n <= 0 {
			return
		}
		n--
		if !k.mu.TryLock() {
			continue
		}
		if freed := k.sweep(nowMs); freed > 0 {
			m.active.Add(-int64(freed))
		}
		if k.idle(nowMs) {
			k.dead = true
			delete(m.keys, ck)
		}
		k.mu.Unlock()
	}
}

// lookup returns the locked state of a quota key, or nil when it is not tracked.
func (m *Memory) lookup(ck string, nowMs int64) *memKey {
	for {
		m.mu.Lock()
		k := m.keys[ck]
		m.sweepSomeLocked(nowMs, 2)
		m.mu.Unlock()
		if k == nil {
			return nil
		}
		k.mu.Lock()
		if !k.dead {
			return k
		}
		k.mu.Unlock()
	}
}

// unlock releases a key after an operation, accounting the reservations its sweep freed.
func (m *Memory) release(k *memKey, freed int) {
	k.mu.Unlock()
	if freed > 0 {
		m.active.Add(-int64(freed))
	}
}

// Reserve implements Ledger.
func (m *Memory) Reserve(_ context.Context, q *Quota, key string, estimate int64) (Decision, error) {
	if d := validateReserve(m.limits, q, key, estimate); d != nil {
		return Decision{Denial: d}, nil
	}
	nowMs := m.nowMs()
	bs := prepareBudgets(q)
	ck := compositeKey(q.Rule, key)
	maxActive := int64(m.limits.MaxActiveReservations)

	for {
		m.mu.Lock()
		m.sweepSomeLocked(nowMs, 2)
		k := m.keys[ck]
		if k == nil && len(m.keys) >= m.limits.MaxKeys {
			m.sweepSomeLocked(nowMs, 64)
			if len(m.keys) >= m.limits.MaxKeys {
				m.mu.Unlock()
				return Decision{Denial: &Denial{Reason: ReasonKeyCapacity, RetryAfter: capacityRetryAfter}}, nil
			}
		}
		if m.active.Add(1) > maxActive {
			m.active.Add(-1)
			m.sweepSomeLocked(nowMs, 64)
			if m.active.Add(1) > maxActive {
				m.active.Add(-1)
				m.mu.Unlock()
				return Decision{Denial: &Denial{Reason: ReasonReservationCapacity, RetryAfter: capacityRetryAfter}}, nil
			}
		}
		// One active slot is now held for this call.
		if k == nil {
			k = &memKey{res: make(map[string]memRes), nextDeadline: 1<<62 - 1}
			m.keys[ck] = k
		}
		m.mu.Unlock()

		k.mu.Lock()
		if k.dead {
			k.mu.Unlock()
			m.active.Add(-1)
			continue
		}
		k.ensureWheels(bs)
		freed := k.sweep(nowMs)
		views := k.views(bs, nowMs, false)
		if !fits(views, k.reserved, estimate) {
			views = k.views(bs, nowMs, true)
			states, denial := decide(q, views, nowMs, k.reserved, estimate, k.earliestDeadline())
			m.release(k, freed+1) // give the slot back too
			return Decision{Windows: states, Denial: denial}, nil
		}
		states, _ := decide(q, views, nowMs, k.reserved, estimate, -1)
		id := newReservationID()
		deadline := nowMs + q.Lease.Milliseconds()
		k.res[id] = memRes{estimate: estimate, deadlineMs: deadline, ttlMs: storeTTLMs(q)}
		k.reserved += estimate
		k.nextDeadline = min(k.nextDeadline, deadline)
		m.release(k, freed)
		return Decision{
			Admitted:    true,
			Reservation: Reservation{ID: id, Key: key, Quota: q, Estimate: estimate},
			Windows:     states,
		}, nil
	}
}

// Renew implements Ledger.
func (m *Memory) Renew(_ context.Context, r Reservation) (bool, error) {
	if r.Quota == nil || r.ID == "" {
		return false, nil
	}
	nowMs := m.nowMs()
	k := m.lookup(compositeKey(r.Quota.Rule, r.Key), nowMs)
	if k == nil {
		return false, nil
	}
	freed := k.sweep(nowMs)
	res, ok := k.res[r.ID]
	if ok {
		res.deadlineMs = nowMs + r.Quota.Lease.Milliseconds()
		k.res[r.ID] = res
	}
	m.release(k, freed)
	return ok, nil
}

// Settle implements Ledger.
func (m *Memory) Settle(_ context.Context, r Reservation, usage Usage) (Settlement, error) {
	if r.Quota == nil || r.ID == "" {
		return Settlement{}, nil
	}
	nowMs := m.nowMs()
	k := m.lookup(compositeKey(r.Quota.Rule, r.Key), nowMs)
	if k == nil {
		return Settlement{}, nil
	}
	freed := k.sweep(nowMs)
	res, ok := k.res[r.ID]
	if !ok {
		s := k.settleEnded(nowMs, r, usage)
		m.release(k, freed)
		return s, nil
	}
	delete(k.res, r.ID)
	k.reserved -= res.estimate
	s := settlement(res.estimate, usage)
	bs := prepareBudgets(r.Quota)
	k.ensureWheels(bs)
	if s.Charged != 0 {
		// Every wheel: another policy for the same rule (a rolling change) may count usage in
		// buckets of another width.
		for _, w := range k.wheels {
			w.add(floorDiv(nowMs, w.width), s.Charged)
		}
	}
	m.release(k, freed+1)
	return s, nil
}

// settleEnded settles an id that holds no live reservation. One whose lease ran out was
// charged its estimate then: a first settle with usage above it charges the overage (never a
// refund). An id never seen gets a tombstone, as in the Valkey backend.
func (k *memKey) settleEnded(nowMs int64, r Reservation, usage Usage) Settlement {
	t, ok := k.tomb(nowMs, r.ID)
	if !ok {
		k.entomb(nowMs, r.ID, memTomb{settled: true, expiresMs: nowMs + storeTTLMs(r.Quota)})
		return Settlement{}
	}
	if t.settled {
		return Settlement{}
	}
	t.settled = true
	k.tombs[r.ID] = t
	var over int64
	if usage.Known {
		over = max(0, settlement(t.charged, usage).Charged-t.charged)
	}
	if over == 0 {
		return Settlement{}
	}
	k.ensureWheels(prepareBudgets(r.Quota))
	for _, w := range k.wheels {
		w.add(floorDiv(nowMs, w.width), over)
	}
	return Settlement{Applied: true, Charged: over, Overage: over}
}

// Inspect implements Ledger.
func (m *Memory) Inspect(_ context.Context, q *Quota, key string) (KeyState, error) {
	if q == nil {
		return KeyState{}, nil
	}
	nowMs := m.nowMs()
	bs := prepareBudgets(q)
	st := KeyState{Windows: make([]WindowUsage, len(q.Budgets))}
	for i, b := range q.Budgets {
		st.Windows[i] = WindowUsage{Window: b.Window, Capacity: b.Capacity}
	}
	k := m.lookup(compositeKey(q.Rule, key), nowMs)
	if k == nil {
		return st, nil
	}
	freed := k.sweep(nowMs)
	k.ensureWheels(bs)
	for i, v := range k.views(bs, nowMs, false) {
		st.Windows[i].Settled = v.settled
	}
	st.ActiveReservations = len(k.res)
	st.ReservedTokens = k.reserved
	m.release(k, freed)
	return st, nil
}

var _ Ledger = (*Memory)(nil)

// Tracked reports how many quota keys and live reservations the ledger holds (for metrics and
// tests; reservations whose lease ran out count until a sweep reaches them).
func (m *Memory) Tracked() (keys, reservations int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.keys), int(m.active.Load())
}
