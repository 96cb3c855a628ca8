package ledgermodel

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/quotaqual/quotaqual/ledger"
)

// Recorder wraps ledger calls and records each as a porcupine.Operation: the input, the output,
// and call/return timestamps in monotonic nanoseconds since the recorder was made. It is safe for
// concurrent use; every client should use its own ClientId (zero-based, for the visualization).
type Recorder struct {
	start time.Time // carries a monotonic reading: time.Since is monotonic
	seq   atomic.Int64

	mu  sync.Mutex
	ops []porcupine.Operation
}

// NewRecorder starts an empty history.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

func (r *Recorder) now() int64 { return int64(time.Since(r.start)) }

func (r *Recorder) add(op porcupine.Operation) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}

// Reserve calls l.Reserve and records it.
func (r *Recorder) Reserve(ctx context.Context, l ledger.Ledger, client int, q *ledger.Quota, key string, estimate int64) (ledger.Decision, error) {
	in := Input{Kind: OpReserve, Client: client, Seq: int(r.seq.Add(1)), Estimate: estimate}
	call := r.now()
	d, err := l.Reserve(ctx, q, key, estimate)
	ret := r.now()
	out := Output{}
	switch {
	case err != nil:
		out.Err = err.Error()
	case d.Admitted:
		out.Admitted, out.ID = true, d.Reservation.ID
	case d.Denial != nil:
		out.Reason = d.Denial.Reason
	}
	r.add(porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret, Metadata: d.Reservation.Estimate})
	return d, err
}

// Settle calls l.Settle and records it.
func (r *Recorder) Settle(ctx context.Context, l ledger.Ledger, client int, res ledger.Reservation, u ledger.Usage) (ledger.Settlement, error) {
	in := Input{Kind: OpSettle, Client: client, Seq: int(r.seq.Add(1)), Estimate: res.Estimate, ID: res.ID,
		Actual: u.Tokens, Known: u.Known}
	call := r.now()
	s, err := l.Settle(ctx, res, u)
	ret := r.now()
	out := Output{Applied: s.Applied, Charged: s.Charged}
	if err != nil {
		out = Output{Err: err.Error()}
	}
	r.add(porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
	return s, err
}

// Operations returns the history for porcupine. An errored operation may take effect at any time
// after its call — even after the caller saw the error (a timed-out script still runs) — so its
// return is moved past the end of the history: it stays pending, and the model allows both of
// its outcomes.
func (r *Recorder) Operations() []porcupine.Operation {
	r.mu.Lock()
	ops := append([]porcupine.Operation(nil), r.ops...)
	r.mu.Unlock()
	var last int64
	for _, op := range ops {
		last = max(last, op.Return)
	}
	for i := range ops {
		if ops[i].Output.(Output).Err != "" {
			ops[i].Return = last + 1
		}
	}
	sort.SliceStable(ops, func(i, j int) bool { return ops[i].Call < ops[j].Call })
	return ops
}

// Facts counts what a history holds: the figures a test or a scenario reports next to its verdict.
type Facts struct {
	Reserves, Admitted, Denied, ReserveErrors int
	Settles, Applied, SettleErrors            int
	DuplicateIDs                              int // ids reported by two admissions
	EstimateMismatches                        int // admitted reservations not carrying the estimate asked for
	Errors                                    []string
}

// Facts summarises the recorded history.
func (r *Recorder) Facts() Facts {
	var f Facts
	seen := map[string]bool{}
	for _, op := range r.Operations() {
		in, out := op.Input.(Input), op.Output.(Output)
		if out.Err != "" && len(f.Errors) < 10 {
			f.Errors = append(f.Errors, out.Err)
		}
		switch in.Kind {
		case OpReserve:
			f.Reserves++
			switch {
			case out.Err != "":
				f.ReserveErrors++
			case out.Admitted:
				f.Admitted++
				if seen[out.ID] {
					f.DuplicateIDs++
				}
				seen[out.ID] = true
				if est, _ := op.Metadata.(int64); est != in.Estimate {
					f.EstimateMismatches++
				}
			default:
				f.Denied++
			}
		case OpSettle:
			f.Settles++
			switch {
			case out.Err != "":
				f.SettleErrors++
			case out.Applied:
				f.Applied++
			}
		}
	}
	return f
}

func (f Facts) String() string {
	return fmt.Sprintf("reserves=%d (admitted %d, denied %d, errors %d) settles=%d (applied %d, errors %d) duplicate-ids=%d estimate-mismatches=%d",
		f.Reserves, f.Admitted, f.Denied, f.ReserveErrors, f.Settles, f.Applied, f.SettleErrors, f.DuplicateIDs, f.EstimateMismatches)
}

// PeakReserved reconstructs, from the history alone, the largest sum of estimates held by
// reservations that were certainly live at the same instant, and when (ns since the recorder's
// start). A reservation is certainly live from its admission's return until its settle's call
// (until the end of the history when it was never settled). This is a lower bound of the true
// peak, so it can only exceed the capacity when the ledger really over-admitted.
func PeakReserved(ops []porcupine.Operation) (peak int64, at int64) {
	type edge struct {
		t     int64
		delta int64
	}
	var end int64
	admitted := map[string]porcupine.Operation{}
	settleCall := map[string]int64{}
	for _, op := range ops {
		end = max(end, op.Return)
		in, out := op.Input.(Input), op.Output.(Output)
		switch {
		case in.Kind == OpReserve && out.Err == "" && out.Admitted:
			admitted[out.ID] = op
		case in.Kind == OpSettle:
			if c, ok := settleCall[in.ID]; !ok || op.Call < c {
				settleCall[in.ID] = op.Call
			}
		}
	}
	var edges []edge
	for id, op := range admitted {
		stop, ok := settleCall[id]
		if !ok {
			stop = end
		}
		if stop < op.Return {
			continue // settled while the admission had not yet returned: never certainly live
		}
		est := op.Input.(Input).Estimate
		edges = append(edges, edge{op.Return, est}, edge{stop, -est})
	}
	// At equal timestamps, releases go first: the bound stays a lower bound.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].t != edges[j].t {
			return edges[i].t < edges[j].t
		}
		return edges[i].delta < edges[j].delta
	})
	var cur int64
	for _, e := range edges {
		cur += e.delta
		if cur > peak {
			peak, at = cur, e.t
		}
	}
	return peak, at
}

// Check runs porcupine on ops against the model of one key with the given capacity (the
// deterministic model when no operation errored). When the result is not Ok and vizPath is not
// empty, it checks again collecting the partial linearizations and writes porcupine's HTML
// visualization there (the first pass skips that bookkeeping, which slows the search).
func Check(capacity int64, ops []porcupine.Operation, timeout time.Duration, vizPath string) (porcupine.CheckResult, error) {
	model := DeterministicModel(capacity)
	for _, op := range ops {
		if op.Output.(Output).Err != "" {
			model = Model(capacity)
			break
		}
	}
	res := porcupine.CheckOperationsTimeout(model, ops, timeout)
	if res != porcupine.Ok && vizPath != "" {
		_, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
		if err := porcupine.VisualizePath(model, info, vizPath); err != nil {
			return res, fmt.Errorf("write linearizability visualization to %s: %w", vizPath, err)
		}
	}
	return res, nil
}

// CheckPrefixes looks for a violation in growing prefixes of ops, each cut at a quiescent
// point (every operation before the cut returned before any operation after it was called) at
// least step operations after the previous cut, each checked with the given timeout; then the
// whole history. Every such prefix of a linearizable history is linearizable, so an Illegal
// prefix proves the whole history Illegal. It returns the first Illegal result and how many
// operations the deciding prefix held, or the whole history's result. Use it where a violation
// is expected: an early violation is decided in milliseconds, while proving a long
// non-linearizable history Illegal can take porcupine longer than any timeout.
func CheckPrefixes(capacity int64, ops []porcupine.Operation, step int, timeout time.Duration) (porcupine.CheckResult, int) {
	sorted := append([]porcupine.Operation(nil), ops...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Call < sorted[j].Call })
	var lastReturn int64
	checked := 0
	for n := 1; n < len(sorted); n++ {
		lastReturn = max(lastReturn, sorted[n-1].Return)
		if n-checked < step || lastReturn >= sorted[n].Call {
			continue
		}
		checked = n
		res, _ := Check(capacity, sorted[:n], timeout, "")
		if res == porcupine.Illegal {
			return res, n
		}
		if res == porcupine.Unknown {
			break // longer prefixes will not be decided faster
		}
	}
	res, _ := Check(capacity, sorted, timeout, "")
	return res, len(sorted)
}
