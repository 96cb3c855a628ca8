package scenarios

import (
	"fmt"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/undertest"
)

// The gateway's admission model decides what a scenario predicts, never quotaqual's own
// behaviour: a reserving gateway (fixed-estimate, max-tokens) admits iff settled + estimate ≤
// capacity and holds the estimate while the request is in flight; a check-then-charge gateway
// (undertest.AdmitCheckThenCharge: Envoy AI Gateway's and Kuadrant's token limits) admits iff
// charged + its check's cost ≤ capacity and holds nothing, so every request in flight is
// admitted against the same charged usage. The contract's invariants (nothing admitted past
// the capacity, denials reach no provider, fail closed) stay what they are: a model that
// cannot keep them fails them, and the verdict says so.

// admitCost is what one admission counts against a rule of profile p (the run's: env.Profile)
// before it is compared with the capacity: p's estimate, or the check's own cost for a
// check-then-charge gateway.
func (env *Env) admitCost(p deployment.Profile) int64 {
	if g := env.gateway(); g.ChecksThenCharges() {
		return g.Expect.Admission.CheckCost
	}
	return p.Estimate
}

// checksThenCharges reports whether the gateway under test reserves nothing at admission.
func (env *Env) checksThenCharges() bool { return env.gateway().ChecksThenCharges() }

// admissionRule names the admission rule a prediction replays, for check names.
func (env *Env) admissionRule() string {
	if env.checksThenCharges() {
		return fmt.Sprintf("check-then-charge: charged + %d ≤ capacity", env.gateway().Expect.Admission.CheckCost)
	}
	return "settled + estimate ≤ capacity"
}

// epochWindows reports whether the gateway's windows are fixed and aligned to the Unix epoch (a
// counter keyed by now/window), so that a sequence must start after a boundary to fit in one.
func (env *Env) epochWindows() bool {
	a := env.gateway().Expect.Admission
	return a.Window == undertest.WindowFixed && a.Anchor != undertest.AnchorFirstHit
}

// inOneWindow reports whether t falls in the window a sequence started at start (with its
// subject's first charge) is in: the same epoch window for epoch-aligned fixed windows, within a
// window of start for windows anchored at a key's first hit; always for sliding windows.
func (env *Env) inOneWindow(start, t time.Time, w time.Duration) bool {
	a := env.gateway().Expect.Admission
	switch {
	case a.Window != undertest.WindowFixed:
		return true
	case a.Anchor == undertest.AnchorFirstHit:
		return t.Sub(start) < w
	}
	return t.UnixNano()/int64(w) == start.UnixNano()/int64(w)
}

// chargeLag is how long a sequential exhaustion waits after each admitted response of a
// check-then-charge gateway for its fire-and-forget charge to land (one RPC and one store write
// on this machine; far below a window).
const chargeLag = 100 * time.Millisecond

// maxPredicted bounds a pure prediction's admissions (a rule that would admit for ever).
const maxPredicted = 10_000

// limitValue is the limit a quota-limit header states: the whole value (quotaqual's "60"), or
// the first element of an IETF RateLimit-draft value ("60, 60;w=60", Envoy's
// DRAFT_VERSION_03 X-RateLimit-Limit: the limit, then its quota policies).
func limitValue(v string) string {
	first, _, _ := strings.Cut(v, ",")
	return strings.TrimSpace(first)
}
