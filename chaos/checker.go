package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/quotaqual/quotaqual/ledger"
	"github.com/quotaqual/quotaqual/ledger/ledgermodel"
)

// Bounds are what the checker judges a history against, all from the contract and the run's
// profile: the rule's capacity per window and reservation per request, how soon a gateway
// must decide again after a fault is released, and how long porcupine may take per key.
type Bounds struct {
	Capacity, Estimate int64
	Window             time.Duration
	Recovery           time.Duration
	LinearizeTimeout   time.Duration
}

// Check is one decided property of the history.
type Check struct {
	Name     string `json:"name"`
	Expected any    `json:"expected"`
	Observed any    `json:"observed"`
	OK       bool   `json:"ok"`
	// ExposedBy names the faults held around the first violation (their schedule numbers).
	ExposedBy []int `json:"exposed_by,omitempty"`
}

// Verdict is the checker's answer: every check, and the figures behind them.
type Verdict struct {
	Checks []Check        `json:"checks"`
	Facts  map[string]any `json:"facts"`
	Failed bool           `json:"failed"`
	// NotMade are the checks the history cannot decide for this gateway (it echoes no request
	// id, …), each with why: never counted as passed.
	NotMade []NotMade `json:"not_made,omitempty"`
}

// NotMade is a check the checker could not make, and why.
type NotMade struct {
	Check string `json:"check"`
	Why   string `json:"why"`
}

// FailedChecks names the checks that failed.
func (v Verdict) FailedChecks() []string {
	var out []string
	for _, c := range v.Checks {
		if !c.OK {
			out = append(out, c.Name)
		}
	}
	return out
}

// Exposing lists the faults named by the failed checks, in order, once each.
func (v Verdict) Exposing() []int {
	seen := map[int]bool{}
	var out []int
	for _, c := range v.Checks {
		if c.OK {
			continue
		}
		for _, n := range c.ExposedBy {
			if !seen[n] {
				seen[n] = true
				out = append(out, n)
			}
		}
	}
	sort.Ints(out)
	return out
}

func (v *Verdict) check(c Check) {
	v.Checks = append(v.Checks, c)
	if !c.OK {
		v.Failed = true
	}
}

// Judge decides a history. It reads only h — the client's requests, the faults as they were
// pulled and released, the providers' call logs — and b.
func Judge(h History, b Bounds) Verdict {
	v := Verdict{Facts: map[string]any{}}
	reqs := append([]Request(nil), h.Requests...)
	sort.SliceStable(reqs, func(i, j int) bool { return reqs[i].Start.Before(reqs[j].Start) })
	counts := map[string]int{}
	for _, r := range reqs {
		counts[statusName(r.Status)]++
	}
	v.Facts["requests"] = len(reqs)
	v.Facts["answers"] = counts
	injected := 0
	for _, f := range h.Faults {
		if f.Injected() {
			injected++
		}
	}
	v.Facts["faults_injected"] = injected

	var admitted int
	for _, r := range reqs {
		if r.Admitted() {
			admitted++
		}
	}
	v.check(Check{Name: "the load was admitted somewhere (the checks are not vacuous)", Expected: "≥ 1 admitted and ≥ 1 denied",
		Observed: fmt.Sprintf("%d admitted, %d denied", admitted, counts["429"]), OK: admitted > 0 && counts["429"] > 0})
	for _, f := range h.Faults {
		if f.Err != "" {
			v.check(Check{Name: "every scheduled fault was pulled and released", Expected: "no lever error",
				Observed: f.String() + ": " + f.Err, OK: false, ExposedBy: []int{f.N}})
		}
	}

	losses := failoverLosses(h, reqs)
	recordTimelines(&v, h, b, losses)
	checkUsagePerResponse(&v, reqs, b)
	checkHardGate(&v, h, reqs, b, losses, PhaseLoad, "hard gate: no subject's admitted usage within any window-long stretch exceeds the capacity")
	checkHardGate(&v, h, reqs, b, losses, "", "no acknowledged reservation lost: after the faults, draining every subject admits none past its capacity")
	checkCutOff(&v, h, reqs)
	checkProviders(&v, h, reqs)
	checkRecovery(&v, h, reqs, b)
	checkLinearizable(&v, h, reqs, b, losses)
	return v
}

func statusName(s int) string {
	if s == 0 {
		return "no answer"
	}
	return fmt.Sprint(s)
}

// checkUsagePerResponse: the hard gate holds usage to the capacity only if no admitted
// request used more than it reserved (the rule's reservation), so that is checked first.
func checkUsagePerResponse(v *Verdict, reqs []Request, b Bounds) {
	var over []string
	for _, r := range reqs {
		if r.Admitted() && r.Tokens > b.Estimate {
			over = append(over, fmt.Sprintf("%s %s: %d", r.Subject, r.RequestID, r.Tokens))
		}
	}
	v.check(Check{Name: "every admitted response billed no more than its reservation", Expected: fmt.Sprintf("≤ %d tokens each", b.Estimate),
		Observed: firstFew(over), OK: len(over) == 0})
}

// charged is what a 200 certainly cost its subject: the usage it billed, or the reservation
// when it reported none.
func charged(r Request, b Bounds) int64 {
	if r.UsageKnown {
		return r.Tokens
	}
	return b.Estimate
}

// checkHardGate: per subject, the usage of the 200s started within any window-long stretch
// stays within the capacity — the largest in effect on any gateway during the stretch (a
// policy change, limits.go), plus the tokens of the subject's admissions a failover may have
// lost there (async replication only). phase "" counts every phase (the drain included).
func checkHardGate(v *Verdict, h History, reqs []Request, b Bounds, losses map[string][]lossAllowed, phase, name string) {
	by := map[string][]Request{}
	for _, r := range reqs {
		if r.Admitted() && (phase == "" || r.Phase == phase) {
			by[r.Subject] = append(by[r.Subject], r)
		}
	}
	var over []string
	var worst int64
	var at time.Time
	for _, s := range sortedKeys(by) {
		adm := by[s]
		var excess, worstBound int64
		var when time.Time
		for i := range adm {
			var sum int64
			for _, r := range adm[i:] {
				if r.Start.Sub(adm[i].Start) >= b.Window {
					break
				}
				bound := limitBetween(h, b.Capacity, adm[i].Start, r.End) + allowance(losses[s], b, adm[i].Start, r.End)
				if sum += charged(r, b); sum-bound > excess {
					excess, when, worstBound = sum-bound, r.Start, bound
				}
			}
		}
		if excess > 0 {
			over = append(over, fmt.Sprintf("%s: %d tokens over %d (worst at %s)", s, excess, worstBound, since(h.Start, when)))
			if excess > worst {
				worst, at = excess, when
			}
		}
	}
	v.Facts["over_admission_worst_tokens_"+phaseName(phase)] = worst
	expected := fmt.Sprintf("≤ %d tokens per subject per %s", b.Capacity, b.Window)
	if len(h.Limits) > 0 {
		expected = fmt.Sprintf("≤ the largest capacity in effect on any gateway (the rule's %d, or a policy change's) per subject per %s", b.Capacity, b.Window)
	}
	if len(losses) > 0 {
		expected += ", plus a subject's admissions a failover may have lost (async replication)"
	}
	c := Check{Name: name, Expected: expected,
		Observed: firstFew(over), OK: len(over) == 0}
	if !c.OK {
		c.ExposedBy = faultsAround(h, at, b.Window)
	}
	v.check(c)
}

// checkCutOff: a gateway that cannot reach the deciding store cannot know the budget, so it
// admits nothing: no 200 from it for a request that started after the fault took hold and
// ended before its release began. The contract allows none (fail closed).
func checkCutOff(v *Verdict, h History, reqs []Request) {
	var bad []string
	var exposing []int
	judged := 0
	for _, f := range h.Faults {
		if !f.Injected() || len(f.CutsOff) == 0 {
			continue
		}
		for _, r := range reqs {
			if !contains(f.CutsOff, r.Gateway) || r.Start.Before(f.Held) || r.End.After(f.Releasing) {
				continue
			}
			judged++
			if r.Admitted() {
				bad = append(bad, fmt.Sprintf("%s admitted %s (%s) during %s", r.Gateway, r.RequestID, r.Subject, f.Fault))
				if !containsInt(exposing, f.N) {
					exposing = append(exposing, f.N)
				}
			}
		}
	}
	v.Facts["requests_to_cut_off_gateways"] = judged
	v.check(Check{Name: "no 200 from a gateway cut off from the deciding store", Expected: "0 admitted while cut off",
		Observed: firstFew(bad), OK: len(bad) == 0, ExposedBy: exposing})
}

// checkProviders: the providers' counts against the client's answers. Every 200 reached a
// provider (its request id is in a call log), and a provider served nothing the client was
// refused: calls ≤ admitted + answers that may have reached one (no answer, a 5xx but the
// store's 503).
func checkProviders(v *Verdict, h History, reqs []Request) {
	logged := map[string]bool{}
	var consumed int64
	for _, p := range h.Providers {
		logged[p.RequestID] = true
		if p.GeneratedTokens > 0 {
			consumed += p.PromptTokens + p.GeneratedTokens
		}
	}
	var admitted, mayHave, withoutID int64
	var unlogged []string
	for _, r := range reqs {
		switch {
		case r.Admitted():
			admitted++
			if r.RequestID == "" {
				withoutID++
			} else if !logged[r.RequestID] && h.ProviderDropped == 0 {
				unlogged = append(unlogged, r.RequestID)
			}
		case r.Status == 0 || (r.Status >= 500 && r.Status != h.storeFailure()):
			mayHave++
		}
	}
	v.Facts["provider_calls"] = h.ProviderCalls
	v.Facts["provider_tokens_consumed"] = consumed
	if h.ProviderScope != "" {
		v.Facts["provider_calls_read"] = h.ProviderScope
	}
	const served = "every 200 was served by a provider (its request id in a call log)"
	switch {
	case h.RequestIDHeader == "":
		// A 200 without an id cannot be looked up: counting calls is the next check's, and
		// passing this one on no evidence would be a skip dressed as a pass.
		v.NotMade = append(v.NotMade, NotMade{Check: served,
			Why: "the gateway's profile names no response header echoing the request id it forwards (expect.request_id_header)"})
	case h.ProviderDropped > 0:
		v.NotMade = append(v.NotMade, NotMade{Check: served,
			Why: fmt.Sprintf("the providers dropped %d call log entries to stay bounded", h.ProviderDropped)})
	default:
		if withoutID > 0 {
			unlogged = append(unlogged, fmt.Sprintf("%d admitted without the %s header", withoutID, h.RequestIDHeader))
		}
		v.check(Check{Name: served, Expected: "none missing", Observed: firstFew(unlogged), OK: len(unlogged) == 0})
	}
	v.check(Check{Name: "no refused request reached a provider", Expected: fmt.Sprintf("≤ %d calls (%d admitted + %d without a decision)", admitted+mayHave, admitted, mayHave),
		Observed: h.ProviderCalls, OK: h.ProviderCalls <= admitted+mayHave})
}

// checkRecovery: after each fault is released, every gateway it touched decides again (a 200
// or a 429) within the bound. A heal followed by the next fault on that gateway, or by the
// end of the history, sooner than the bound and before any decision is not judged (counted).
func checkRecovery(v *Verdict, h History, reqs []Request, b Bounds) {
	var slow []string
	var exposing []int
	var worst time.Duration
	unjudged := 0
	end := h.Start
	for _, r := range reqs {
		if r.End.After(end) {
			end = r.End
		}
	}
	for _, f := range h.Faults {
		if !f.Injected() {
			continue
		}
		touched := f.CutsOff
		if len(f.Touches) > 0 {
			touched = f.Touches
		}
		if len(touched) == 0 && isGatewayHost(f.Target.Host) {
			touched = []string{f.Target.Host}
		}
		for _, g := range touched {
			next := nextFaultOn(h, f, g, end)
			var first *Request
			for i := range reqs {
				r := &reqs[i]
				if r.Gateway == g && r.Decided() && !r.Start.Before(f.Released) && r.End.Before(next) {
					first = r
					break
				}
			}
			switch {
			case first != nil:
				d := first.End.Sub(f.Released)
				worst = max(worst, d)
				if d > b.Recovery {
					slow = append(slow, fmt.Sprintf("%s decided again %s after %s", g, d.Round(time.Millisecond), f.Fault))
					exposing = append(exposing, f.N)
				}
			case next.Sub(f.Released) >= b.Recovery:
				slow = append(slow, fmt.Sprintf("%s never decided again within %s after %s", g, b.Recovery, f.Fault))
				exposing = append(exposing, f.N)
			default:
				unjudged++
			}
		}
	}
	v.Facts["recovery_worst_ms"] = worst.Milliseconds()
	v.Facts["recoveries_not_judged"] = unjudged
	v.check(Check{Name: "every gateway a fault touched decides again within the recovery bound after its release",
		Expected: fmt.Sprintf("≤ %s", b.Recovery), Observed: firstFew(slow), OK: len(slow) == 0, ExposedBy: exposing})
}

func nextFaultOn(h History, after FaultEvent, g string, end time.Time) time.Time {
	next := end
	for _, f := range h.Faults {
		if !f.Injected() || !f.Pulled.After(after.Released) || !f.Pulled.Before(next) {
			continue
		}
		if contains(f.CutsOff, g) || contains(f.Touches, g) || f.Target.Host == g {
			next = f.Pulled
		}
	}
	return next
}

// checkLinearizable: each subject's key, as the client saw it, against the ledger's sequential
// model (ledger/ledgermodel) with porcupine. A request is a reserve: admitted (a 200, with
// its request id), denied (a 429), or of unknown effect (anything else: it may have taken a
// hold, at any time after it was sent, and that hold may be released at zero at any later time).
// A 200 is also a settlement of its billed usage whose effect the client never sees: unknown,
// from the request on. The model lets nothing leave the window, so only keys whose history fits
// in one window are checked (the others are counted).
func checkLinearizable(v *Verdict, h History, reqs []Request, b Bounds, losses map[string][]lossAllowed) {
	by := map[string][]Request{}
	for _, r := range reqs {
		by[r.Subject] = append(by[r.Subject], r)
	}
	var illegal, unknown []string
	var exposing []int
	outlast, lossy := 0, 0
	// All keys together get at most linearizeBudget: on a machine so loaded that every request
	// of a subject overlaps every other, a key can take porcupine its whole timeout.
	deadline := time.Now().Add(linearizeBudget)
	for _, s := range sortedKeys(by) {
		hist := by[s]
		first, last := hist[0].Start, hist[0].End
		for _, r := range hist {
			last = later(last, r.End)
		}
		if last.Sub(first) >= b.Window {
			outlast++
			continue
		}
		if len(losses[s]) > 0 {
			lossy++ // a hold the contract lets a failover lose is not linearizable, by design
			continue
		}
		timeout := min(b.LinearizeTimeout, time.Until(deadline))
		if timeout <= 0 {
			unknown = append(unknown, s+" (not tried: the budget was spent)")
			continue
		}
		switch res := porcupine.CheckOperationsTimeout(ledgermodel.Model(b.Capacity), operations(h, hist, first, b), timeout); res {
		case porcupine.Illegal:
			illegal = append(illegal, s)
			// Porcupine says the key's history cannot be ordered, not where: the faults held
			// while it was written are the suspects.
			for _, f := range h.Faults {
				if f.Injected() && f.Pulled.Before(last) && f.Released.After(first) && !containsInt(exposing, f.N) {
					exposing = append(exposing, f.N)
				}
			}
		case porcupine.Unknown:
			unknown = append(unknown, s)
		}
	}
	v.Facts["keys_checked_by_porcupine"] = len(by) - outlast - lossy
	v.Facts["keys_longer_than_a_window"] = outlast
	if h.StoreGroup {
		v.Facts["keys_left_out_failover_may_lose"] = lossy
	}
	// A key porcupine could not decide within its timeout is no violation found, and no proof
	// of its absence either: it is named in the check and counted apart, never hidden.
	v.Facts["keys_porcupine_left_undecided"] = len(unknown)
	v.check(Check{Name: "every subject's history is linearizable against the ledger model (porcupine)",
		Expected: "no key illegal (keys left undecided within the timeout are listed)",
		Observed: map[string]any{"illegal": firstFew(illegal), "undecided": firstFew(unknown)}, OK: len(illegal) == 0, ExposedBy: sorted(exposing)})
}

// linearizeBudget bounds porcupine over all keys of one history.
const linearizeBudget = time.Minute

// operations turns one subject's requests into porcupine operations, in nanoseconds since t0.
// Each reserve carries the capacity its gateway decided by (a policy change, h.Limits): where
// the gateway may have run two, an admission is judged by the larger, a denial by the smaller.
func operations(h History, hist []Request, t0 time.Time, b Bounds) []porcupine.Operation {
	var ops []porcupine.Operation
	var last int64
	for _, r := range hist {
		last = max(last, int64(r.End.Sub(t0)))
	}
	pending := last + 1 // an unknown outcome may take effect at any time after its call
	for i, r := range hist {
		if r.NotSent {
			continue // no gateway saw it: no operation on the key
		}
		call, ret := int64(r.Start.Sub(t0)), int64(r.End.Sub(t0))
		in := ledgermodel.Input{Kind: ledgermodel.OpReserve, Client: i, Seq: r.Seq, Estimate: b.Estimate}
		if len(h.Limits) > 0 {
			lo, hi := capacitiesOn(h, b.Capacity, r.Gateway, r.Start, r.End)
			if in.Capacity = hi; r.Denied() {
				in.Capacity = lo
			}
		}
		var out ledgermodel.Output
		switch {
		case r.Admitted():
			id := r.RequestID
			if id == "" {
				id = fmt.Sprintf("request-%d", r.Seq)
			}
			out = ledgermodel.Output{Admitted: true, ID: id}
			settle := ledgermodel.Input{Kind: ledgermodel.OpSettle, Client: i, Seq: r.Seq, Estimate: b.Estimate, ID: id,
				Actual: r.Tokens, Known: r.UsageKnown}
			ops = append(ops, porcupine.Operation{ClientId: i, Input: settle, Call: call,
				Output: ledgermodel.Output{Err: "settlement not seen by the client"}, Return: pending})
		case r.Denied():
			out = ledgermodel.Output{Reason: ledger.ReasonWindowCapacity}
		default:
			out = ledgermodel.Output{Err: statusName(r.Status)}
			ret = pending
			// Every unknown reserve of a key names its possible hold alike: nobody can settle
			// such a hold, so which request left it makes no difference, and the model's hold
			// set, a multiset, then counts them instead of telling 2^n subsets apart (a store
			// outage answers dozens of a subject's requests with 503).
			in.Seq = 0
			// Such a hold need not last: the ledger settles an ambiguous reserve's id at zero in
			// the background, which the contract allows ("released at zero, or held to its
			// lease and charged its estimate"). So the hold may also end at any time after the
			// call — a denial while it stood and an admission once it was gone are both legal.
			release := ledgermodel.Input{Kind: ledgermodel.OpSettle, Client: i, ID: ledgermodel.AmbiguousID(in.Seq),
				Estimate: b.Estimate, Known: true}
			ops = append(ops, porcupine.Operation{ClientId: i, Input: release, Call: call,
				Output: ledgermodel.Output{Err: "release not seen by the client"}, Return: pending})
		}
		ops = append(ops, porcupine.Operation{ClientId: i, Input: in, Call: call, Output: out, Return: ret})
	}
	return withoutImpliedDenials(ops)
}

// withoutImpliedDenials drops each denial whose interval contains another denial's: a denial
// changes no state, so wherever the inner one is linearized the outer one can follow it at once,
// and the history is linearizable with the outer one exactly when it is without. It matters when
// the machine stalls and dozens of a subject's requests overlap: porcupine tells every subset of
// concurrent operations apart, and identical denials would multiply its search for nothing.
func withoutImpliedDenials(ops []porcupine.Operation) []porcupine.Operation {
	denied := func(op porcupine.Operation) bool {
		in, out := op.Input.(ledgermodel.Input), op.Output.(ledgermodel.Output)
		return in.Kind == ledgermodel.OpReserve && out.Err == "" && !out.Admitted
	}
	var keep []porcupine.Operation
	for i, a := range ops {
		implied := false
		if denied(a) {
			for j, b := range ops {
				if j == i || !denied(b) || b.Call < a.Call || b.Return > a.Return {
					continue
				}
				// b lies within a; of two identical intervals the later one goes.
				if b.Call != a.Call || b.Return != a.Return || j < i {
					implied = true
					break
				}
			}
		}
		if !implied {
			keep = append(keep, a)
		}
	}
	return keep
}

// faultsAround names the faults held, or released less than a window, before t.
func faultsAround(h History, t time.Time, window time.Duration) []int {
	var out []int
	for _, f := range h.Faults {
		if f.Injected() && !f.Pulled.After(t) && f.Released.Add(window).After(t) {
			out = append(out, f.N)
		}
	}
	return out
}

func sorted(xs []int) []int {
	sort.Ints(xs)
	return xs
}

func isGatewayHost(h string) bool { return strings.HasPrefix(h, "gateway-") }

func since(t0, t time.Time) string { return "+" + t.Sub(t0).Round(time.Millisecond).String() }

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

func contains(xs []string, x string) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

func containsInt(xs []int, x int) bool {
	for _, s := range xs {
		if s == x {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func phaseName(p string) string {
	if p == "" {
		return "all"
	}
	return p
}

// firstFew keeps a list short enough for a report line, saying how many were left out.
func firstFew(xs []string) any {
	const keep = 5
	if len(xs) <= keep {
		if xs == nil {
			return []string{}
		}
		return xs
	}
	return append(append([]string(nil), xs[:keep]...), fmt.Sprintf("… and %d more", len(xs)-keep))
}
