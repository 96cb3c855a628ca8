package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
)

func init() { register(500, sharedBudget) }

// exhaustCap bounds the requests one exhaustion may send.
const exhaustCap = 20

func sharedBudget() Scenario {
	return Scenario{
		Name:    "shared-budget",
		Summary: "one subject alternating between gateways exhausts one shared budget; denied on both; denials reach no provider; other subjects unaffected",
		Invariant: "hard gate: both gateways admit exactly what one budget allows (settled + estimate ≤ capacity, predicted from the responses' usage); " +
			"denials reach no provider; attribution counted at the providers",
		Prefers: []Need{NeedQuotaInspection},
		BlackBox: "sees the admissions of one subject alternating over every gateway against the rule replayed on the responses' " +
			"own usage, the quota headers and error bodies, the other subjects admitted, and the providers' calls and sites; cannot see the " +
			"settled figure after each admission (it sums the responses' usage instead and labels it so)",
		// Its site coverage rides the gateways' round robin, which other scenarios' requests
		// advance: beside them it needed more coverage requests than application-c's budget
		// holds, and the provider-refusal request then met a 429 (seen on process).
		Exclusive: "its provider-site coverage follows the gateways' round robin, which other scenarios' requests would advance",
		Run:       runSharedBudget,
	}
}

func runSharedBudget(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	before, ok := env.readProviders(ctx, r, "provider call counts before")
	if !ok {
		return r
	}

	// The ledger's trace for the report: one budget filling from every gateway.
	defer env.sampleLedger(ctx, Key{Rule: RuleName, Subject: appA}, env.Profile.Window, ledgerTraceInterval).Stop(env, r, appA)
	if err := env.fixedWindowStart(ctx, r, env.Profile.Window, fixedWindowMargin); err != nil {
		return r.Error(err)
	}
	ex, err := env.exhaust(ctx, Key{Rule: RuleName, Subject: appA}, "exhaust", env.gateways(), exhaustCap)
	if err != nil {
		r.Error(err)
	}
	first := ex.Outcomes[0]
	last := ex.Outcomes[len(ex.Outcomes)-1]
	r.Fact("exhaust_statuses", statuses(ex.Outcomes))
	r.Fact("exhaust_sites", sitesOf(ex.Outcomes))
	if ex.Blind {
		r.Fact("settled_after_each_admission_from_responses", ex.Settled)
		r.NotMade("settled usage read from the gateway after each admission", "no quota inspection: summed from the responses' usage")
	} else {
		r.Fact("settled_after_each_admission", ex.Settled)
	}

	expected := chatUsage(p, 1)
	var usageMismatch []string
	for i, o := range ex.Outcomes {
		if o.Admitted() && (o.Usage == nil || o.Usage.TotalTokens != expected.TotalTokens) {
			usageMismatch = append(usageMismatch, fmt.Sprintf("#%d %v", i+1, o.Usage))
		}
	}
	r.Check("admitted responses report the stub's deterministic usage", fmt.Sprintf("total_tokens %d each", expected.TotalTokens), usageMismatch, len(usageMismatch) == 0)
	r.Check("exhaustion ended with 429", http.StatusTooManyRequests, last.Status, ex.Denied)
	predicted := env.checkPredictedAdmissions(r, ex, p)
	env.checkRemainingTruth(r, ex, p.Capacity, env.admitCost(env.Profile))

	// The next request is denied on every gateway: the budget spent is seen by each replica,
	// also by those the exhaustion never reached.
	type denial struct {
		what string
		o    Outcome
	}
	var denials []denial
	if ex.Denied {
		denials = append(denials, denial{"first denial (" + env.alternate(len(ex.Outcomes)-1) + ")", last})
	}
	deniedOn := map[string]int{} // gateway → status of its next request
	var next []Outcome           // the same, in the gateways' order
	for _, gw := range env.gateways() {
		o := env.Chat(ctx, ChatCall{Gateway: gw, Label: "denied-" + gw, Subject: appA})
		deniedOn[gw] = o.Status
		next = append(next, o)
		denials = append(denials, denial{"next request on " + gw, o})
		r.Check("next request on "+gw+" denied", http.StatusTooManyRequests, o.Status, o.Status == http.StatusTooManyRequests)
	}
	r.Fact("next_request_status_per_gateway", deniedOn)
	r.Fact("exhaust_per_gateway", env.tallyByGateway(ex.Outcomes, env.alternate))
	for _, d := range denials {
		env.checkDenialHeaders(r, d.what, d.o, p)
	}
	end := time.Now()
	after, err := env.settledProviders(ctx)
	if err != nil {
		return r.Error(fmt.Errorf("provider call counts after: %w", err))
	}
	delta := SiteDelta(before, after)
	d := TotalDelta(before, after)
	r.Check("denied requests reached no provider (provider calls == admitted)", ex.Admitted, d, d == int64(ex.Admitted))
	r.Fact("provider_distribution", delta)

	// Everything above must have happened inside one window, or usage could have left it and
	// admitted requests a full budget would not: say so rather than pass.
	span := end.Sub(first.Start)
	r.Fact("exhaustion_span_ms", ms(span))
	r.Check("exhaustion and denials within one window (no roll-over)", fmt.Sprintf("< %s", p.Window), span.Round(time.Millisecond).String(), span < p.Window)

	// Coverage of the three sites, counted at the providers. With per-gateway round robin and
	// alternation this is certain only when one gateway admitted at least three; otherwise
	// more admitted traffic, from the other subjects, proves coverage.
	covered := SitesCovered(delta)
	r.Fact("sites_covered_by_exhaustion", covered)
	if len(covered) < len(deployment.Sites) {
		extraBefore := after
		var extra []Outcome
		for i := 0; i < 2*len(deployment.Sites) && len(SitesCovered(delta)) < len(deployment.Sites); i++ {
			s := []string{appB, appC}[i%2]
			extra = append(extra, env.Chat(ctx, ChatCall{Gateway: env.alternate(i / 2), Label: fmt.Sprintf("coverage-%d", i+1), Subject: s}))
			snap, err := env.settledProviders(ctx)
			if err != nil {
				r.Error(fmt.Errorf("provider call counts during coverage: %w", err))
				break
			}
			for site, n := range SiteDelta(extraBefore, snap) {
				delta[site] += n
			}
			extraBefore = snap
		}
		r.Fact("coverage_supplemented", fmt.Sprintf("exhaustion covered %v; %d more admitted requests from application-b/-c", covered, len(extra)))
		r.Fact("coverage_extra_statuses", statuses(extra))
		covered = SitesCovered(delta)
	}
	r.Check("admitted traffic covered all three provider sites (counted at the providers)", deployment.Sites, covered, len(covered) == len(deployment.Sites))

	// The other two subjects are still admitted on two gateways. Two, whatever the run's
	// replicas: the subjects' isolation is the ledger's, the same on every replica, and their
	// budgets (about five requests, some spent on coverage) would not hold one on each of
	// sixteen.
	for _, s := range []string{appB, appC} {
		for _, gw := range []string{gwA, gwB} {
			o := env.Chat(ctx, ChatCall{Gateway: gw, Label: "other-" + s, Subject: s})
			r.Check(s+" still admitted on "+gw, http.StatusOK, o.Status, o.Admitted())
		}
	}
	// Exactly one attempt: a provider call that fails comes back as the provider's answer and
	// is not tried again on another provider.
	if beforeRefusal, err := env.settledProviders(ctx); err != nil {
		r.Error(fmt.Errorf("provider call counts before the refused request: %w", err))
	} else {
		o := env.Chat(ctx, ChatCall{Gateway: gwA, Label: "provider-refuses", Subject: appC, ProviderRefuses: true})
		afterRefusal, err := env.settledProviders(ctx)
		if err != nil {
			r.Error(fmt.Errorf("provider call counts after the refused request: %w", err))
		} else {
			calls := TotalDelta(beforeRefusal, afterRefusal)
			r.Fact("provider_refusal", fmt.Sprintf("status %d from site %q, provider calls +%d", o.Status, o.Site, calls))
			r.Check("a request the provider refuses is relayed as the provider's 400 after exactly one provider call (no transparent retry)",
				"400, +1 call", fmt.Sprintf("%d, +%d", o.Status, calls), o.Status == http.StatusBadRequest && calls == 1)
		}
	}
	r.Key("%d admitted (predicted %d), the next request %s, sites %v", ex.Admitted, predicted, answeredOn(env.gateways(), next, http.StatusTooManyRequests), covered)
	return r
}

// checkDenialHeaders checks a 429's quota headers: Retry-After and the reset within a window
// plus a bucket, the limit equal to the capacity, the remaining tokens within [0, capacity]
// (each under the name the gateway under test uses; a header it does not send is a check
// not made).
func (env *Env) checkDenialHeaders(r *Result, what string, o Outcome, p deployment.Profile) {
	h := env.gateway().Expect.QuotaHeaders
	ok, missing := env.hasQuotaHeaders(o.Headers)
	r.Check(what+": "+env.quotaHeadersLabel()+" headers present", env.quotaHeadersCount(), missing, ok && o.Status == http.StatusTooManyRequests)
	if !ok {
		return
	}
	if h.RetryAfter != "" {
		maxWait := int64((p.Window + env.bucketWidth(p.Window) + time.Second - 1) / time.Second)
		ra, err := strconv.ParseInt(o.Headers.Get(h.RetryAfter), 10, 64)
		r.Check(what+": Retry-After in whole seconds within window + bucket", fmt.Sprintf("1..%d", maxWait), o.Headers.Get(h.RetryAfter), err == nil && ra >= 1 && ra <= maxWait)
	} else {
		r.NotMade(what+": Retry-After", "the gateway sends none")
	}
	if h.Limit != "" {
		lim := limitValue(o.Headers.Get(h.Limit))
		r.Check(what+": "+strings.ToLower(h.Limit)+" is the capacity", strconv.FormatInt(p.Capacity, 10), lim, lim == strconv.FormatInt(p.Capacity, 10))
	} else {
		r.NotMade(what+": the limit header", "the gateway sends none")
	}
	if h.Remaining != "" {
		// A denial leaves less than one admission needs: below the estimate, or, for a
		// check-then-charge gateway, below its check's cost (none left when that is 0).
		need := max(1, env.admitCost(env.Profile))
		rem, err := strconv.ParseInt(o.Headers.Get(h.Remaining), 10, 64)
		r.Check(what+": "+strings.ToLower(h.Remaining)+" below what an admission needs", fmt.Sprintf("0..%d", need-1), o.Headers.Get(h.Remaining), err == nil && rem >= 0 && rem < need)
	} else {
		r.NotMade(what+": the remaining header", "the gateway sends none")
	}
	env.checkErrorBody(r, what, o)
}

// checkErrorBody checks a quota denial's body says what it is: the error.type the gateway
// under test's profile names for a denial (rate_limit_exceeded for quotaqual). Clients act on
// it: insufficient_quota is OpenAI's error for a plan or balance used up, not a rate limit, and
// a client that tells them apart does not retry it.
func (env *Env) checkErrorBody(r *Result, what string, o Outcome) {
	want := env.gateway().Expect.Denial.ErrorType
	if want == "" {
		r.NotMade(what+": OpenAI-style error body", "the gateway writes error bodies of its own")
		return
	}
	r.Check(what+": error.type is the denial's", want, o.ErrorType, o.ErrorType == want)
}

// checkRemainingTruth checks x-ratelimit-remaining-tokens on every response of a sequential
// exhaustion against the ledger's own state: before request i the window held exactly the
// usage settled after request i−1 (read once its reservation had settled) and nothing else,
// so an admitted response must report capacity − settled − its own estimate, and the 429 that
// ended the run capacity − settled (never below zero).
func (env *Env) checkRemainingTruth(r *Result, ex exhaustion, capacity, estimate int64) {
	name := env.gateway().Expect.QuotaHeaders.Remaining
	if name == "" {
		r.NotMade("the remaining header is the truthful remaining", "the gateway sends none")
		return
	}
	var wrong []string
	var settled int64
	for i, o := range ex.Outcomes {
		if i > 0 && i-1 < len(ex.Settled) {
			settled = ex.Settled[i-1]
		}
		var want int64
		switch o.Status {
		case http.StatusOK:
			want = max(0, capacity-settled-estimate)
		case http.StatusTooManyRequests:
			want = max(0, capacity-settled)
		default:
			continue
		}
		got := o.Headers.Get(name)
		if got != strconv.FormatInt(want, 10) {
			wrong = append(wrong, fmt.Sprintf("#%d (%d, settled %d): %q, truthful %d", i+1, o.Status, settled, got, want))
		}
	}
	r.Check(strings.ToLower(name)+" is the truthful remaining on every response (capacity − settled − held)", "all exact", wrong, len(wrong) == 0)
}
