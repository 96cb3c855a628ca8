package chaos

import (
	"fmt"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
)

// What the checker may expect across a policy change and a store failover, from the history
// alone (History.Limits, the failover faults, History.Replication).
//
// Policy change: the gateways share one key per subject and each admits by its own capacity,
// so within a window the store admits up to the largest capacity in effect on any gateway in
// that window — never more. The bound of a stretch is therefore that largest capacity: a
// tightened rollout never excuses over-admission against the looser policy still running
// elsewhere, and a loosened one is no over-admission up to its own capacity.
//
// Failover: with acknowledged replication the contract (docs/ledger.md, "Failover") keeps every
// acknowledged hold on the promoted replica, so nothing is exempted. With asynchronous
// replication an admission the primary had not replicated when it was cut off is lost with it,
// and its tokens can be handed out again; the contract promises nothing more there. The
// checker then allows each subject, in the stretches a window around such an admission, the
// tokens of its admissions that a failover may have lost — and only those — and leaves those
// subjects' keys out of porcupine (a lost hold is, by design, not linearizable); both are
// recorded as facts.

// replicationSlack is how long before a failover's cut a reservation may still be unreplicated
// with asynchronous replication (the lag is milliseconds between namespaces; a second is a
// wide margin): an admission answered earlier than this before the cut is on the replicas.
const replicationSlack = time.Second

// capacitiesOn is the smallest and the largest capacity gateway g may have run at some time
// in [from, to]: the rule's own unless one policy change certainly held g for all of it, and
// every policy change's that may have been in effect on g then.
func capacitiesOn(h History, base int64, g string, from, to time.Time) (lo, hi int64) {
	covered := false
	lo, hi = -1, 0
	for _, l := range h.Limits {
		if l.Gateway != g || !l.From.Before(to) || !l.To.After(from) {
			continue
		}
		if lo < 0 || l.Capacity < lo {
			lo = l.Capacity
		}
		hi = max(hi, l.Capacity)
		if !l.Held.IsZero() && !l.Held.After(from) && !l.Releasing.Before(to) {
			covered = true
		}
	}
	if !covered {
		if lo < 0 || base < lo {
			lo = base
		}
		hi = max(hi, base)
	}
	return lo, hi
}

// limitBetween is the largest capacity in effect on any gateway at some time in [from, to].
func limitBetween(h History, base int64, from, to time.Time) int64 {
	if len(h.Limits) == 0 {
		return base
	}
	gateways := h.Gateways
	if len(gateways) == 0 { // a history that does not name them: every gateway of a limit, and one on the rule's own
		gateways = []string{""}
		for _, l := range h.Limits {
			gateways = append(gateways, l.Gateway)
		}
	}
	var lim int64
	for _, g := range gateways {
		_, hi := capacitiesOn(h, base, g, from, to)
		lim = max(lim, hi)
	}
	return lim
}

// lossAllowed is an admission whose reservation a failover may have lost (asynchronous
// replication only): admitted, sent before the promotion and answered no earlier than
// replicationSlack before the cut.
type lossAllowed struct {
	Request
	fault int
}

// failoverLosses lists, per subject, the admissions a failover may have lost. With
// acknowledged replication (or no store group) there are none.
func failoverLosses(h History, reqs []Request) map[string][]lossAllowed {
	out := map[string][]lossAllowed{}
	if !h.StoreGroup || h.Replication != deployment.ReplicationAsync {
		return out
	}
	for _, f := range h.Faults {
		if f.Lever != topology.StoreFailover.Name() || f.Pulled.IsZero() {
			continue
		}
		promoted := f.Held
		if promoted.IsZero() { // the failover errored: the cut may have lasted until its release
			promoted = later(f.Released, f.Pulled)
		}
		for _, r := range reqs {
			if r.Admitted() && r.Start.Before(promoted) && !r.End.Before(f.Pulled.Add(-replicationSlack)) {
				out[r.Subject] = append(out[r.Subject], lossAllowed{r, f.N})
			}
		}
	}
	return out
}

// allowance is what subject's stretch [from, to] may exceed its limit by: the tokens of the
// admissions a failover may have lost within a window of it.
func allowance(losses []lossAllowed, b Bounds, from, to time.Time) int64 {
	var n int64
	seen := map[int]bool{}
	for _, l := range losses {
		if seen[l.Seq] || l.Start.After(to) || !l.Start.Add(b.Window).After(from) {
			continue
		}
		seen[l.Seq] = true
		n += charged(l.Request, b)
	}
	return n
}

// recordTimelines puts the policy timeline and the failover rule in the verdict's facts.
func recordTimelines(v *Verdict, h History, b Bounds, losses map[string][]lossAllowed) {
	if len(h.Limits) > 0 {
		var tl []string
		for _, l := range h.Limits {
			tl = append(tl, fmt.Sprintf("#%d %s capacity %d: possibly %s–%s, certainly %s–%s", l.Fault, l.Gateway, l.Capacity,
				since(h.Start, l.From), since(h.Start, l.To), since(h.Start, l.Held), since(h.Start, l.Releasing)))
		}
		v.Facts["policy_timeline"] = tl
		v.Facts["policy_rule"] = fmt.Sprintf("each window is bounded by the largest capacity in effect on any gateway in it (the rule's own is %d)", b.Capacity)
	}
	if !h.StoreGroup {
		return
	}
	v.Facts["store"] = "replicated store group, " + h.Replication + " replication"
	if h.Replication != deployment.ReplicationAsync {
		v.Facts["failover_rule"] = "acknowledged replication: the contract keeps every acknowledged hold across a failover (docs/ledger.md), so nothing is exempted"
		return
	}
	v.Facts["failover_rule"] = fmt.Sprintf("async replication: an admission answered within %s before a failover's cut, or later, may be lost with the old primary; "+
		"only its subject's stretches within a window of it may exceed the limit, by those admissions' tokens, and only those subjects' keys are left out of porcupine", replicationSlack)
	var ex []string
	for _, s := range sortedKeys(losses) {
		var tokens int64
		var faults []int
		for _, l := range losses[s] {
			tokens += charged(l.Request, b)
			if !containsInt(faults, l.fault) {
				faults = append(faults, l.fault)
			}
		}
		ex = append(ex, fmt.Sprintf("%s: %d admissions, %d tokens (faults %v)", s, len(losses[s]), tokens, faults))
	}
	if ex == nil {
		ex = []string{}
	}
	v.Facts["failover_exemptions"] = ex
}
