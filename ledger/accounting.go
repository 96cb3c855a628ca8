package ledger

import (
	"crypto/rand"
	"encoding/hex"
	"sort"
	"sync"
	"time"
)

// Shared bucket arithmetic of both backends. All times are integer milliseconds on the store's
// clock (the memory backend's Clock, Valkey's TIME); bucket indexes are floor(t / width).
// ledger/scripts/common.lua implements the same functions for the Valkey backend; the
// conformance suite (ledger/ledgertest) holds both to identical results.

const (
	defaultMaxKeys               = 100000
	defaultMaxKeyLength          = 256
	defaultMaxActiveReservations = 200000

	// capacityRetryAfter is the Retry-After of the per-instance bounds (key_capacity,
	// reservation_capacity): they free as soon as some request finishes.
	capacityRetryAfter = time.Second
	// minLeaseRetryAfter is the least Retry-After when only live reservations hold capacity.
	minLeaseRetryAfter = time.Second
)

// withDefaults fills zero fields of l with the defaults.
func (l Limits) withDefaults() Limits {
	if l.MaxKeys <= 0 {
		l.MaxKeys = defaultMaxKeys
	}
	if l.MaxKeyLength <= 0 {
		l.MaxKeyLength = defaultMaxKeyLength
	}
	if l.MaxActiveReservations <= 0 {
		l.MaxActiveReservations = defaultMaxActiveReservations
	}
	return l
}

// bucketWidthMs is the accounting bucket width of a window: one second for windows up to a
// minute, otherwise window/60 rounded up to whole seconds, so a window spans at most ~61
// buckets whatever its length.
func bucketWidthMs(window time.Duration) int64 {
	if window <= 60*time.Second {
		return 1000
	}
	ms := window.Milliseconds()
	w := (ms + 59) / 60            // ceil(window/60)
	return (w + 999) / 1000 * 1000 // rounded up to whole seconds
}

// floorDiv is floor(a/b) for b > 0, also for negative a.
func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && (a < 0) {
		q--
	}
	return q
}

// windowRange is the inclusive bucket index range a window counts at now: every bucket that
// overlaps (now-window, now], the oldest one counted whole, so usage leaves late, never early.
func windowRange(nowMs, windowMs, widthMs int64) (lo, hi int64) {
	return floorDiv(nowMs-windowMs, widthMs), floorDiv(nowMs, widthMs)
}

// leaveMs is the time at which bucket b stops being counted by a window.
func leaveMs(b, windowMs, widthMs int64) int64 {
	return (b+1)*widthMs + windowMs
}

// checkedBudget is one budget prepared for the arithmetic.
type checkedBudget struct {
	windowMs, widthMs, capacity int64
}

func prepareBudgets(q *Quota) []checkedBudget {
	out := make([]checkedBudget, len(q.Budgets))
	for i, b := range q.Budgets {
		out[i] = checkedBudget{windowMs: b.Window.Milliseconds(), widthMs: bucketWidthMs(b.Window), capacity: b.Capacity}
	}
	return out
}

// validateReserve applies the checks that need no store: it returns a denial or nil.
func validateReserve(limits Limits, q *Quota, key string, estimate int64) *Denial {
	if key == "" || len(key) > limits.MaxKeyLength || estimate <= 0 || q == nil || len(q.Budgets) == 0 {
		return &Denial{Reason: ReasonInvalidKey}
	}
	var worst *Budget
	for i := range q.Budgets {
		b := &q.Budgets[i]
		if b.Window <= 0 || b.Capacity <= 0 {
			return &Denial{Reason: ReasonInvalidKey}
		}
		if estimate > b.Capacity && (worst == nil || b.Capacity < worst.Capacity) {
			worst = b
		}
	}
	if worst != nil {
		return &Denial{Reason: ReasonEstimateTooLarge, Window: worst.Window, Limit: worst.Capacity}
	}
	return nil
}

// storeTTLMs is how long a quota key's store state must outlive its last write: the longest
// window, plus a lease (a reservation renewed at the last write expires a lease later and is
// charged then), plus one bucket (usage leaves up to a bucket late).
func storeTTLMs(q *Quota) int64 {
	var longest, widest int64
	for _, b := range q.Budgets {
		longest = max(longest, b.Window.Milliseconds())
		widest = max(widest, bucketWidthMs(b.Window))
	}
	return longest + max(q.Lease.Milliseconds(), 1) + widest
}

// bucketTokens is one non-empty bucket of a width.
type bucketTokens struct {
	index, tokens int64
}

// windowView is the arithmetic's input for one budget: the settled usage the window counts
// now, the newest non-empty bucket it counts (noBucket if none) and, for a refusing window
// only, its non-empty buckets in any order.
type windowView struct {
	budget  checkedBudget
	settled int64
	newest  int64
	buckets []bucketTokens
}

// resetMs is the time until every usage now counted in the window has left it: the newest
// non-empty bucket's leave time; live reservations count as usage settled now.
func (v windowView) resetMs(nowMs, reserved int64) int64 {
	newest := v.newest
	if reserved > 0 {
		newest = max(newest, floorDiv(nowMs, v.budget.widthMs))
	}
	if newest == noBucket {
		return 0
	}
	return max(0, leaveMs(newest, v.budget.windowMs, v.budget.widthMs)-nowMs)
}

// retryAfterMs is the time until enough settled usage leaves the window for estimate to fit:
// buckets are walked oldest first accumulating what they free. When settled usage leaving
// cannot make room because live reservations hold it, the answer is the time until the
// earliest lease deadline (at least a second). earliestDeadline < 0 means none.
func (v windowView) retryAfterMs(nowMs, reserved, estimate, earliestDeadlineMs int64) int64 {
	need := v.settled + reserved + estimate - v.budget.capacity
	if need <= 0 {
		return 0
	}
	bs := append([]bucketTokens(nil), v.buckets...)
	sort.Slice(bs, func(i, j int) bool { return bs[i].index < bs[j].index })
	var freed int64
	for _, b := range bs {
		if b.tokens <= 0 {
			continue
		}
		freed += b.tokens
		if freed >= need {
			return max(1, leaveMs(b.index, v.budget.windowMs, v.budget.widthMs)-nowMs)
		}
	}
	wait := minLeaseRetryAfter.Milliseconds()
	if earliestDeadlineMs >= 0 {
		wait = max(wait, earliestDeadlineMs-nowMs)
	}
	return wait
}

// fits reports whether estimate fits every window.
func fits(views []windowView, reserved, estimate int64) bool {
	for _, v := range views {
		if v.settled+reserved+estimate > v.budget.capacity {
			return false
		}
	}
	return true
}

// decide applies the admission rule to the views (one per budget, in the quota's order).
// reserved is the tokens held by live reservations of the key. It returns the window states
// and, when denied, the denial (refusing windows' views must carry their buckets).
func decide(q *Quota, views []windowView, nowMs, reserved, estimate, earliestDeadlineMs int64) ([]WindowState, *Denial) {
	admit := fits(views, reserved, estimate)
	held := reserved
	if admit {
		held += estimate
	}
	states := make([]WindowState, len(views))
	var denial *Denial
	var worstWait int64 = -1
	for i, v := range views {
		settled := v.settled
		states[i] = WindowState{
			Window:    q.Budgets[i].Window,
			Limit:     v.budget.capacity,
			Remaining: max(0, v.budget.capacity-settled-held),
			Reset:     time.Duration(v.resetMs(nowMs, held)) * time.Millisecond,
		}
		if admit || settled+reserved+estimate <= v.budget.capacity {
			continue
		}
		wait := v.retryAfterMs(nowMs, reserved, estimate, earliestDeadlineMs)
		if wait > worstWait {
			worstWait = wait
			denial = &Denial{
				Reason:     ReasonWindowCapacity,
				Window:     q.Budgets[i].Window,
				Limit:      v.budget.capacity,
				Remaining:  states[i].Remaining,
				RetryAfter: time.Duration(wait) * time.Millisecond,
			}
		}
	}
	return states, denial
}

// newReservationID is a random 128-bit hex id from crypto/rand: unique across instances
// without a shared sequence. Random bytes are read in blocks (one read per 64 ids) to keep
// the read off the per-request path.
func newReservationID() string {
	buf := idPool.Get().(*idBuf)
	if buf.off+16 > len(buf.b) {
		_, _ = rand.Read(buf.b[:]) // crypto/rand.Read never fails (it panics on an unusable source)
		buf.off = 0
	}
	id := hex.EncodeToString(buf.b[buf.off : buf.off+16])
	clear(buf.b[buf.off : buf.off+16]) // each random byte serves one id only
	buf.off += 16
	idPool.Put(buf)
	return id
}

type idBuf struct {
	b   [1024]byte
	off int
}

var idPool = sync.Pool{New: func() any { return &idBuf{off: 1024} }}

// settlement computes Settle's figures.
func settlement(estimate int64, usage Usage) Settlement {
	charged := estimate
	if usage.Known {
		charged = min(max(0, usage.Tokens), MaxEstimate) // one charge saturates at 2^53
	}
	return Settlement{Applied: true, Charged: charged, Refund: max(0, estimate-charged), Overage: max(0, charged-estimate)}
}

// compositeKey is the identity of a quota key inside one ledger: rule and key, separated by a
// byte no rule name contains.
func compositeKey(rule, key string) string {
	return rule + "\x00" + key
}

// distinctWidths lists the bucket widths of bs, each once, in first-seen order: usage is
// charged once per width, and every budget of that width reads it.
func distinctWidths(bs []checkedBudget) []int64 {
	out := make([]int64, 0, len(bs))
outer:
	for _, b := range bs {
		for _, w := range out {
			if w == b.widthMs {
				continue outer
			}
		}
		out = append(out, b.widthMs)
	}
	return out
}

// BucketWidth is the accounting bucket width of a window: one second for windows up to a
// minute, window/60 rounded up to whole seconds beyond. Usage leaves a window up to one bucket
// late, never early.
func BucketWidth(window time.Duration) time.Duration {
	return time.Duration(bucketWidthMs(window)) * time.Millisecond
}
