// Package ledger is quotaqual's token-quota limiter: the policy (strict YAML), rule matching,
// estimation, and the Ledger contract with its in-memory and Valkey backends.
//
// The contract, in one paragraph: Reserve admits a request iff, for every window of its rule,
// settled usage in the window + tokens held by live reservations + the estimate ≤ capacity,
// decided atomically across all windows on the store's clock. An admitted request holds a
// reservation (a lease) that Renew extends while the request is in flight. Settle charges the
// actual usage (the estimate when usage is unknown) exactly once per reservation id. A
// reservation whose lease runs out is charged at its estimate, at the moment its lease expired,
// and leaves a tombstone: a settlement arriving later charges only its usage above that estimate,
// once (never a refund).
// Any store failure is an error, and callers fail closed. A reserve that failed after it may
// have reached the store (a timeout) is released by the ledger itself — settled at zero in the
// background, since the caller answered 503 and contacted no provider — instead of holding its
// estimate until the lease runs out; the release leaves a tombstone that refuses the reserve if
// the store executes it only after its release.
//
// Accounting: settled usage is kept in buckets whose width is one second for windows up to a
// minute and window/60 (rounded up to whole seconds) beyond; the Valkey backend also keeps a
// running total per window, so an admission reads O(1) fields when the totals are current and at
// most ~61 buckets per window when they must be rebuilt — whatever the window's length. A window at time now counts every bucket
// that overlaps (now-window, now], so usage leaves a window up to one bucket late, never early.
// Settled usage is charged in the bucket of the settlement time; expired reservations in the
// bucket of their lease deadline. The memory and Valkey backends implement the same algorithm
// and the conformance suite in ledger/ledgertest holds both to it.
//
// Bounds: max_key_length and estimates are checked before any store call. max_keys and
// max_active_reservations bound the quota keys and in-flight reservations one ledger instance
// (one gateway) tracks; in the store, every key of one quota key lives in one hash slot and
// expires its longest window plus its lease after its last write (the fast paths renew a TTL
// with a slack of an eighth of that, at most a minute, to touch it less often), and live
// reservations per key are bounded by capacity (each holds at least one token).
package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Ledger is the contract both backends implement. Implementations are safe for concurrent use.
type Ledger interface {
	// Reserve tries to admit estimate tokens for key under quota q. A denial is a Decision with
	// Admitted false, not an error; an error means the store could not decide and the caller
	// must fail closed.
	Reserve(ctx context.Context, q *Quota, key string, estimate int64) (Decision, error)
	// Renew extends a live reservation's lease by its quota's lease duration from now. It
	// reports false when the reservation is no longer live (settled or expired).
	Renew(ctx context.Context, r Reservation) (bool, error)
	// Settle charges usage against a reservation. A second settle of the same id changes
	// nothing and reports Applied false. A reservation whose lease ran out was charged its
	// estimate then: its first settle charges only the known usage above that estimate
	// (Applied true, Charged = Overage = that excess), or nothing (Applied false).
	Settle(ctx context.Context, r Reservation, usage Usage) (Settlement, error)
	// Inspect reports the state of one quota key without changing it (except for expiring
	// reservations whose lease ran out, which any operation may do).
	Inspect(ctx context.Context, q *Quota, key string) (KeyState, error)
	// Backend names the backend ("memory" or "valkey") for metrics and evidence.
	Backend() string
	// Close releases the backend's resources.
	Close() error
}

// Budget is one sliding window and its token capacity.
type Budget struct {
	Window   time.Duration
	Capacity int64
}

// Quota is what the ledger needs to know about a rule: its name, its budgets and the lease a
// reservation holds before it expires.
type Quota struct {
	Rule    string
	Budgets []Budget
	Lease   time.Duration
}

// Limit is the smallest capacity among the quota's budgets: the figure reported in
// x-ratelimit-limit-tokens.
func (q *Quota) Limit() int64 {
	var min int64
	for i, b := range q.Budgets {
		if i == 0 || b.Capacity < min {
			min = b.Capacity
		}
	}
	return min
}

// Reservation identifies an admitted request's hold on a quota key.
type Reservation struct {
	ID       string
	Key      string
	Quota    *Quota
	Estimate int64
}

// Usage is what a request actually consumed. Known false means the usage could not be read
// and the reservation is charged at its estimate.
type Usage struct {
	Tokens int64
	Known  bool
}

// Settlement is the outcome of Settle.
type Settlement struct {
	Applied bool  // false for a repeated settle or an expired reservation: nothing changed
	Charged int64 // tokens charged to the windows
	Refund  int64 // estimate - charged, when positive
	Overage int64 // charged - estimate, when positive
}

// Reason says why a reservation was denied.
type Reason string

const (
	// ReasonWindowCapacity: some window has not enough capacity left for the estimate.
	ReasonWindowCapacity Reason = "window_capacity"
	// ReasonEstimateTooLarge: the estimate exceeds a window's whole capacity; no wait helps.
	ReasonEstimateTooLarge Reason = "estimate_exceeds_capacity"
	// ReasonKeyCapacity: this ledger already tracks max_keys quota keys.
	ReasonKeyCapacity Reason = "key_capacity"
	// ReasonReservationCapacity: this ledger already holds max_active_reservations.
	ReasonReservationCapacity Reason = "reservation_capacity"
	// ReasonInvalidKey: the key is empty or longer than max_key_length, or the estimate is not
	// positive.
	ReasonInvalidKey Reason = "invalid_key"
)

// WindowState is one window's view after a decision.
type WindowState struct {
	Window    time.Duration
	Limit     int64
	Remaining int64         // capacity - settled - reserved, never negative
	Reset     time.Duration // until all usage now counted in this window has left it
}

// Denial explains a refused reservation.
type Denial struct {
	Reason     Reason
	Window     time.Duration // the window that refused (zero for non-window reasons)
	Limit      int64
	Remaining  int64
	RetryAfter time.Duration // until enough capacity actually frees; zero when waiting cannot help
}

// Decision is the outcome of Reserve.
type Decision struct {
	Admitted    bool
	Reservation Reservation   // when admitted
	Windows     []WindowState // one per budget, in the quota's order (empty for invalid_key)
	Denial      *Denial       // when denied
}

// KeyState is what Inspect reports about one quota key.
type KeyState struct {
	ActiveReservations int
	ReservedTokens     int64
	Windows            []WindowUsage
}

// WindowUsage is the settled usage counted in one window.
type WindowUsage struct {
	Window   time.Duration
	Capacity int64
	Settled  int64
}

// ErrStore marks every error that means the store could not decide. Callers fail closed on it.
var ErrStore = errors.New("quota store unavailable")

// storeError wraps err so that errors.Is(err, ErrStore) holds, without repeating the cause's
// text when it already says enough.
func storeError(op string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrStore, op, err)
}
