// Package ledgermodel is the sequential model of one quota key for the porcupine linearizability
// checker, and a recorder that turns concurrent ledger calls into a porcupine history. The
// ledger's tests and the scenarios share both (the scenarios against a whole gateway topology);
// it is apart from ledgertest, the conformance suite, so the shipped binary does not link the
// testing package.
package ledgermodel

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/quotaqual/quotaqual/ledger"
)

// OpKind says which ledger call an Input describes.
type OpKind uint8

const (
	// OpReserve is Ledger.Reserve.
	OpReserve OpKind = iota + 1
	// OpSettle is Ledger.Settle.
	OpSettle
)

// Input is what a caller asked for. Seq is unique within one history: it names the hold an
// ambiguous (errored) Reserve may have left behind, whose id the caller never learned.
type Input struct {
	Kind     OpKind
	Client   int
	Seq      int
	Estimate int64  // OpReserve: tokens asked for; OpSettle: the reservation's estimate
	ID       string // OpSettle: the reservation settled
	Actual   int64  // OpSettle: usage reported (when Known)
	Known    bool   // OpSettle: usage was known
	// Capacity, when set, is the capacity this Reserve was decided by instead of the model's:
	// callers on different policies of one key (a rolling policy change) each admit by their own.
	Capacity int64
}

// Output is what the ledger answered. A non-empty Err means the call failed: its effect is
// unknown, and the model accepts both "it happened" and "it did not" (see Model).
type Output struct {
	Err      string
	Admitted bool          // OpReserve
	ID       string        // OpReserve: the id the implementation chose
	Reason   ledger.Reason // OpReserve, denied
	Applied  bool          // OpSettle
	Charged  int64         // OpSettle
}

// State is the model's state for ONE quota key whose window outlasts the test and whose lease
// outlasts the test: nothing leaves the window and nothing expires. States are immutable values;
// compare them with Equal (Hash is an order-independent digest of the live reservations, kept
// incrementally, so the checker's state cache stays cheap).
type State struct {
	Settled  int64
	Reserved int64 // Σ estimates of the live reservations
	hash     uint64
	active   *holdSet // nil: none
}

type hold struct {
	id       string
	estimate int64
}

// holdSet is an immutable slice of live reservations sorted by id.
type holdSet struct{ holds []hold }

func holdHash(id string, estimate int64) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64() ^ uint64(estimate)*0x9E3779B97F4A7C15
}

// Active returns the live reservations, id → estimate.
func (s State) Active() map[string]int64 {
	m := map[string]int64{}
	if s.active != nil {
		for _, h := range s.active.holds {
			m[h.id] = h.estimate
		}
	}
	return m
}

func (s State) find(id string) (int, bool) {
	if s.active == nil {
		return 0, false
	}
	hs := s.active.holds
	i := sort.Search(len(hs), func(i int) bool { return hs[i].id >= id })
	return i, i < len(hs) && hs[i].id == id
}

func (s State) lookup(id string) (int64, bool) {
	i, ok := s.find(id)
	if !ok {
		return 0, false
	}
	return s.active.holds[i].estimate, true
}

func (s State) with(id string, estimate int64) State {
	i, _ := s.find(id)
	var old []hold
	if s.active != nil {
		old = s.active.holds
	}
	hs := make([]hold, 0, len(old)+1)
	hs = append(append(append(hs, old[:i]...), hold{id, estimate}), old[i:]...)
	return State{Settled: s.Settled, Reserved: s.Reserved + estimate, hash: s.hash ^ holdHash(id, estimate), active: &holdSet{hs}}
}

func (s State) without(id string, charged int64) State {
	i, ok := s.find(id)
	if !ok {
		return s
	}
	old := s.active.holds
	est := old[i].estimate
	next := State{Settled: s.Settled + charged, Reserved: s.Reserved - est, hash: s.hash ^ holdHash(id, est)}
	if len(old) > 1 {
		hs := make([]hold, 0, len(old)-1)
		next.active = &holdSet{append(append(hs, old[:i]...), old[i+1:]...)}
	}
	return next
}

// Equal reports whether two states are the same.
func (s State) Equal(o State) bool {
	if s.Settled != o.Settled || s.Reserved != o.Reserved || s.hash != o.hash {
		return false
	}
	var a, b []hold
	if s.active != nil {
		a = s.active.holds
	}
	if o.active != nil {
		b = o.active.holds
	}
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Hash digests the state; equal states have equal hashes.
func (s State) Hash() uint64 {
	return s.hash ^ uint64(s.Settled)*0xBF58476D1CE4E5B9 ^ uint64(s.Reserved)*0x94D049BB133111EB
}

func (s State) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "settled=%d reserved=%d active={", s.Settled, s.Reserved)
	if s.active != nil {
		for i, h := range s.active.holds {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s:%d", h.id, h.estimate)
		}
	}
	b.WriteString("}")
	return b.String()
}

// AmbiguousID names the hold an errored Reserve with this Seq may have taken; an errored
// Settle of it at zero is that hold's possible release (the ledger releases an ambiguous
// reserve in the background). Admitted outputs with ids starting with '?' are rejected, so it
// cannot collide with a real id.
func AmbiguousID(seq int) string { return "?" + strconv.Itoa(seq) }

// Step returns every state the key can be in after the operation, given that the operation
// returned output; none when the output is impossible. It is the sequential specification:
//
//   - Reserve admitted  ⇔ settled + Σactive + estimate ≤ capacity, with a fresh id (the one the
//     implementation reported) holding the estimate;
//   - Reserve denied     ⇔ settled + Σactive + estimate > capacity, for reason window_capacity
//     (or estimate_exceeds_capacity when the estimate alone exceeds the capacity) — so a
//     spurious denial is as illegal as an over-admission;
//   - Settle applied     ⇔ the id is active; it charges the actual usage (the estimate when the
//     usage is unknown), frees the hold and adds the charge to settled;
//     otherwise Applied false, Charged 0 and nothing changes;
//   - an errored call may or may not have taken effect: both successors are allowed (an errored
//     Reserve that took effect leaves a hold named by its Seq that nobody can settle).
func Step(capacity int64, s State, in Input, out Output) []State {
	switch in.Kind {
	case OpReserve:
		if in.Capacity > 0 {
			capacity = in.Capacity
		}
		fits := s.Settled+s.Reserved+in.Estimate <= capacity
		if out.Err != "" {
			if fits {
				return []State{s, s.with(AmbiguousID(in.Seq), in.Estimate)}
			}
			return []State{s}
		}
		if out.Admitted {
			if !fits || out.ID == "" || strings.HasPrefix(out.ID, "?") {
				return nil
			}
			if _, dup := s.lookup(out.ID); dup {
				return nil
			}
			return []State{s.with(out.ID, in.Estimate)}
		}
		if fits {
			return nil
		}
		switch out.Reason {
		case ledger.ReasonWindowCapacity:
			return []State{s}
		case ledger.ReasonEstimateTooLarge:
			if in.Estimate > capacity {
				return []State{s}
			}
		}
		return nil
	case OpSettle:
		est, active := s.lookup(in.ID)
		charge := est
		if in.Known {
			charge = in.Actual
		}
		if out.Err != "" {
			if active {
				return []State{s, s.without(in.ID, charge)}
			}
			return []State{s}
		}
		if !active {
			if out.Applied || out.Charged != 0 {
				return nil
			}
			return []State{s}
		}
		if !out.Applied || out.Charged != charge {
			return nil
		}
		return []State{s.without(in.ID, charge)}
	}
	return nil
}

// Model is the porcupine model of one quota key with the given capacity (see Step). Errored
// operations make it nondeterministic, so it is built with porcupine's power-set construction;
// for a history without errors, DeterministicModel checks the same thing faster.
func Model(capacity int64) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Init: func() []interface{} { return []interface{}{State{}} },
		Step: func(state, input, output interface{}) []interface{} {
			next := Step(capacity, state.(State), input.(Input), output.(Output))
			r := make([]interface{}, len(next))
			for i, n := range next {
				r[i] = n
			}
			return r
		},
		Equal:             func(a, b interface{}) bool { return a.(State).Equal(b.(State)) },
		Hash:              func(state interface{}) uint64 { return state.(State).Hash() },
		DescribeOperation: DescribeOperation,
		DescribeState:     describeState(capacity),
	}
	return nm.ToModel()
}

// DeterministicModel is Model for histories in which no operation returned an error: it rejects
// errored outputs outright (use Model when there are some).
func DeterministicModel(capacity int64) porcupine.Model {
	return porcupine.Model{
		Init: func() interface{} { return State{} },
		Step: func(state, input, output interface{}) (bool, interface{}) {
			out := output.(Output)
			if out.Err != "" {
				return false, state
			}
			next := Step(capacity, state.(State), input.(Input), out)
			if len(next) != 1 {
				return false, state
			}
			return true, next[0]
		},
		Equal:             func(a, b interface{}) bool { return a.(State).Equal(b.(State)) },
		Hash:              func(state interface{}) uint64 { return state.(State).Hash() },
		DescribeOperation: DescribeOperation,
		DescribeState:     describeState(capacity),
	}
}

func describeState(capacity int64) func(interface{}) string {
	return func(state interface{}) string { return fmt.Sprintf("capacity=%d %s", capacity, state.(State)) }
}

// DescribeOperation renders one operation for porcupine's visualization.
func DescribeOperation(input, output interface{}) string {
	in, out := input.(Input), output.(Output)
	switch in.Kind {
	case OpReserve:
		switch {
		case out.Err != "":
			return fmt.Sprintf("reserve(%d) -> error (unknown)", in.Estimate)
		case out.Admitted:
			return fmt.Sprintf("reserve(%d) -> %s", in.Estimate, out.ID)
		default:
			return fmt.Sprintf("reserve(%d) -> denied %s", in.Estimate, out.Reason)
		}
	case OpSettle:
		usage := "unknown"
		if in.Known {
			usage = strconv.FormatInt(in.Actual, 10)
		}
		switch {
		case out.Err != "":
			return fmt.Sprintf("settle(%s, %s) -> error (unknown)", in.ID, usage)
		case out.Applied:
			return fmt.Sprintf("settle(%s, %s) -> charged %d", in.ID, usage, out.Charged)
		default:
			return fmt.Sprintf("settle(%s, %s) -> no-op", in.ID, usage)
		}
	}
	return "?"
}
