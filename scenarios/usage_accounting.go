package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/providerstub"
)

func init() { register(1300, usageAccounting) }

func usageAccounting() Scenario {
	return Scenario{
		Name: "usage-accounting",
		Summary: "requests whose usage the gateway cannot simply read — a stream the client closes mid-generation, a response larger " +
			"than the usage buffer, provider errors, n > 1 and both output-bound fields — are each charged what the provider generated; " +
			"so are many responses that end at one instant, their settlements handed over together",
		Invariant: "meter: each request's settled charge equals what the provider stub counted (prompt + generated tokens), and never less " +
			"than what it generated, also when many settle at once (none dropped to its lease); the reservation covers the output bound " +
			"the provider honours, times n",
		// Without the scenario's rule or without inspection, the one case phrased in admissions
		// on the run's rule (usage_accounting_blackbox.go).
		Prefers: []Need{NeedScenarioRules, NeedQuotaInspection},
		BlackBox: "sees whether the next request is admitted after a stream the client cut short (on the run's rule, where a " +
			"charge of at least what the provider generated leaves less than an estimate) and what the provider logged; cannot " +
			"see any charge exactly, nor the charges of the oversized response, the provider errors, n > 1 and both output " +
			"bounds, nor settlements handed over together: those it reports as checks not made",
		Rules: usageAccountingRules,
		Run:   runUsageAccounting,
	}
}

// usageAccountingRule is the scenario's own rule: it estimates from the request's output bound
// (max_tokens strategy) and has room for every case in a window long enough that nothing leaves
// it mid-scenario. It holds application-a only (usageAccountingRuleSubject): a capacity no case
// reaches shows no charge in an admission, so the black-box path phrases its case on the run's
// rule, with application-b. output-bound's meter rule and provider-usage's share its shape.
const (
	usageAccountingRule        = "usage-accounting"
	usageAccountingRuleSubject = "application-a"
	usageAccountingWindow      = 10 * time.Minute
	usageAccountingCapacity    = int64(1) << 40
)

func usageAccountingRules(p deployment.Profile) []deployment.ScenarioRule {
	return []deployment.ScenarioRule{{Name: usageAccountingRule, Labels: []string{usageAccountingRuleSubject}, Window: deployment.FormatDuration(usageAccountingWindow),
		Capacity: usageAccountingCapacity, Lease: deployment.FormatDuration(p.Lease), Strategy: "max_tokens", Estimate: p.Estimate}}
}

// accountingCase is one request of usage-accounting.
type accountingCase struct {
	label string
	call  ChatCall
	// exact: the charge must equal what the provider counted; otherwise (a stream cut short,
	// whose last tokens may be in flight when the client leaves) it must lie between what was
	// generated, less inFlightSlack, and that plus the gateway's input estimate.
	exact bool
	// reserveAtLeastGenerated: the reservation (read from x-ratelimit-remaining-tokens) must
	// cover every completion token generated.
	reserveAtLeastGenerated bool
	status                  int
}

// inFlightSlack bounds the tokens a provider may have sent after the gateway last relayed
// (one inter-token delay of 5 ms at most, a few chunks in socket buffers).
const inFlightSlack = 8

func accountingCases() []accountingCase {
	tok := func(n int, extra ...string) map[string]string {
		md := map[string]string{providerstub.TokensMetadata: strconv.Itoa(n)}
		for i := 0; i+1 < len(extra); i += 2 {
			md[extra[i]] = extra[i+1]
		}
		return md
	}
	return []accountingCase{
		{label: "stream-closed-mid-generation", status: http.StatusOK, call: ChatCall{Stream: true, MaxTokens: -1,
			Metadata: tok(400, providerstub.InterTokenMetadata, "5ms"), StopAfterChunks: 100}},
		{label: "oversized-response", status: http.StatusOK, exact: true, call: ChatCall{MaxTokens: -1,
			Metadata: tok(2_200_000)}}, // ~8.8 MB of content: beyond the gateway's 8 MiB usage buffer
		{label: "provider-error-after-generating", status: http.StatusInternalServerError, exact: true, call: ChatCall{MaxTokens: -1,
			Metadata: tok(40, providerstub.FailMetadata, "500")}},
		{label: "provider-error-before-generating", status: http.StatusServiceUnavailable, exact: true, call: ChatCall{MaxTokens: -1,
			Metadata: tok(0, providerstub.FailMetadata, "503")}},
		{label: "n-choices", status: http.StatusOK, exact: true, reserveAtLeastGenerated: true, call: ChatCall{MaxTokens: -1,
			Fields: map[string]any{"n": 3, "max_completion_tokens": 10}, Metadata: tok(100)}},
		{label: "both-output-bounds", status: http.StatusOK, exact: true, reserveAtLeastGenerated: true, call: ChatCall{MaxTokens: 1,
			Fields: map[string]any{"max_completion_tokens": 30}, Metadata: tok(100)}},
	}
}

func runUsageAccounting(ctx context.Context, env *Env) *Result {
	if !env.hasOwnRule(usageAccountingRule) || !env.inspects() {
		return runUsageAccountingBlackBox(ctx, env)
	}
	r := env.NewResult()
	const rule = usageAccountingRule
	r.Fact("rule", fmt.Sprintf("%s: strategy max_tokens, fallback %d, capacity %d per %s", rule, env.Profile.Estimate,
		usageAccountingCapacity, usageAccountingWindow))
	q, err := env.Quotas().WaitIdle(ctx, gwA, Key{Rule: rule, Subject: appA})
	if err != nil {
		return r.Error(err)
	}
	settled := q.Settled()
	var summary []string
	for i, c := range accountingCases() {
		gw := env.alternate(i)
		c.call.Gateway, c.call.Label, c.call.Subject = gw, c.label, appA
		o := env.Chat(ctx, c.call)
		r.Check(c.label+": answered "+strconv.Itoa(c.status), c.status, o.Status, o.Status == c.status)
		after, err := env.settledProviders(ctx)
		if err != nil {
			return r.Error(fmt.Errorf("%s: reading the provider call logs: %w", c.label, err))
		}
		_, pr, found := after.FindRequest(o.RequestID)
		if !r.Check(c.label+": the provider logged the request", "found", found, found) {
			continue
		}
		q, err := env.Quotas().WaitIdle(ctx, gw, Key{Rule: rule, Subject: appA})
		if err != nil {
			return r.Error(fmt.Errorf("%s: %w", c.label, err))
		}
		charged := q.Settled() - settled
		consumed := pr.Consumed()
		r.Fact(c.label, map[string]any{"status": o.Status, "charged": charged, "prompt_tokens": pr.PromptTokens,
			"generated_tokens": pr.GeneratedTokens, "client_gone": pr.ClientGone})
		if c.exact {
			r.Check(c.label+": charged what the provider counted", consumed, charged, charged == consumed)
		} else {
			// The gateway's input estimate (ceil(body bytes / 4)) stands in for the prompt.
			input := int64(len(chatBody(c.call))+3) / 4
			lo, hi := pr.GeneratedTokens-inFlightSlack, pr.GeneratedTokens+pr.PromptTokens+input+inFlightSlack
			r.Check(c.label+": charged at least what the provider generated", fmt.Sprintf("≥ %d", lo), charged, charged >= lo)
			r.Check(c.label+": charged no more than generated + the input estimate", fmt.Sprintf("≤ %d", hi), charged, charged <= hi)
			r.Check(c.label+": the client left mid-generation", true, pr.ClientGone, pr.ClientGone)
		}
		if c.reserveAtLeastGenerated {
			// x-ratelimit-remaining-tokens = capacity − settled − reserved, at admission.
			rem, err := strconv.ParseInt(o.Headers.Get("x-ratelimit-remaining-tokens"), 10, 64)
			reserved := usageAccountingCapacity - settled - rem
			ok := err == nil && reserved >= pr.GeneratedTokens
			r.Check(c.label+": reserved ≥ completion tokens generated", fmt.Sprintf("≥ %d", pr.GeneratedTokens), reserved, ok)
		}
		summary = append(summary, fmt.Sprintf("%d/%d", charged, consumed))
		settled = q.Settled()
	}
	together := checkSettledTogether(ctx, env, r, rule)
	r.Key("charged/counted at the provider: %v; %s", summary, together)
	return r
}

// Responses ending together: every gateway relays togetherPerGateway responses that the
// providers release at one instant, so their settlements are handed over at once — what a
// gateway that settles one job at a time, or through a bounded pool, drops (it lets the lease
// run out and charge the estimate). The sequential cases above settle one at a time, and
// concurrency's few admitted requests end milliseconds apart, about as long as one settlement
// takes: neither makes settlements overlap reliably.
const (
	togetherPerGateway = 8
	// togetherLead, plus the store's timeout, is how long after sending the providers release
	// the responses: room for every request to be admitted and reach its provider first (all
	// 16 arrived within 30 ms of sending on 2 cores, beside the other scenarios), also when
	// admission waits on a store slow to answer (up to its timeout; longer is a 503 anyway).
	togetherLead = 200 * time.Millisecond
	// togetherTokens is what each response generates, under a bound (togetherMaxTokens) that
	// makes the estimate larger: a reservation left to run out would charge more than the
	// provider counted.
	togetherTokens    = 5
	togetherMaxTokens = 40
)

// checkSettledTogether sends the responses-ending-together case and checks that each was
// settled at what its provider counted, none left to its lease. It returns the key fact's part.
func checkSettledTogether(ctx context.Context, env *Env, r *Result, rule string) string {
	const label = "responses-ending-together"
	base, err := env.Quotas().WaitIdle(ctx, gwA, Key{Rule: rule, Subject: appA})
	if err != nil {
		r.Error(fmt.Errorf("%s: %w", label, err))
		return label + " not run"
	}
	n := togetherPerGateway * len(env.gateways())
	lead := togetherLead + env.Profile.StoreTimeout
	release := time.Now().Add(lead)
	md := map[string]string{providerstub.TokensMetadata: strconv.Itoa(togetherTokens),
		providerstub.ReleaseAtMetadata: release.UTC().Format(time.RFC3339Nano)}
	outs := env.chatAtOnce(ctx, n, func(i int) ChatCall {
		return ChatCall{Gateway: env.alternate(i), Label: fmt.Sprintf("%s-%d", label, i+1), Subject: appA,
			MaxTokens: togetherMaxTokens, Metadata: md}
	})
	snap, err := env.settledProviders(ctx)
	if err != nil {
		r.Error(fmt.Errorf("%s: reading the provider call logs: %w", label, err))
		return label + " not decided"
	}

	var answered, logged, early int
	var counted int64
	var lastArrival time.Time
	var clocks clockDisagreement
	first, last := outs[0].End, outs[0].End
	for _, o := range outs {
		if o.End.Before(first) {
			first = o.End
		}
		if o.End.After(last) {
			last = o.End
		}
		if o.Status == http.StatusOK {
			answered++
		}
		if _, pr, ok := snap.FindRequest(o.RequestID); ok {
			logged++
			counted += pr.Consumed()
			if pr.Time.Before(release) {
				early++
			}
			if pr.Time.After(lastArrival) {
				lastArrival = pr.Time
			}
			clocks.add(o, pr)
		}
	}
	r.Check(label+": every request answered 200", n, answered, answered == n)
	r.Check(label+": the provider logged every request", n, logged, logged == n)
	r.Fact(label, map[string]any{"requests": n, "per_gateway": togetherPerGateway, "received_before_release": early,
		"last_received_ms_before_release": ms(release.Sub(lastArrival)),
		"responses_ended_within_ms":       ms(last.Sub(first)), "counted_at_the_providers": counted,
		"provider_clock_ahead_ms_at_least": ms(clocks.ahead), "provider_clock_behind_ms_at_least": ms(clocks.behind)})
	if early < n/2 {
		r.Error(fmt.Errorf("%s: the providers received only %d of %d requests before the release instant (%s after sending): "+
			"the responses did not end together, not decided%s", label, early, n, lead, clocks.cause()))
	} else if answered < n && clocks.behind > 0 {
		r.Error(fmt.Errorf("%s: %d of %d requests not answered 200%s", label, n-answered, n, clocks.cause()))
	}

	// Settlement runs off the response path: wait until nothing is held. A correct gateway
	// keeps renewing a reservation's lease until its settlement lands, however long its
	// retries against a slow store take; a dropped settlement's lease stops being renewed when
	// its response ends, so it runs out by the last response's end plus one lease, and the next
	// read charges it its estimate (more than counted). Waiting that long, plus the longest
	// read, decides both ways and never fails a correct gateway on a loaded machine, whose
	// settlement may take three store timeouts and their backoffs.
	limit := max(0, time.Until(last.Add(env.Profile.Lease))) + adminTimeout(env.Profile) + env.Profile.StoreTimeout
	q, err := env.Quotas().WaitIdleWithin(ctx, gwA, Key{Rule: rule, Subject: appA}, limit)
	if err != nil && (errors.Is(err, errInspectionUnanswered) || !errors.Is(err, errPollDeadline)) {
		r.Error(fmt.Errorf("%s: reading the quota after the responses: %w", label, err))
		return label + " not decided"
	}
	settled := q.Settled() - base.Settled()
	r.Check(label+": settled at what the providers counted, none left to its lease",
		fmt.Sprintf("%d settled, no reservation held", counted),
		fmt.Sprintf("%d settled, %d reservations held (%d tokens)", settled, q.ActiveReservations, q.ReservedTokens),
		settled == counted && q.ActiveReservations == 0 && q.ReservedTokens == 0)
	return fmt.Sprintf("%d ending together %d/%d", n, settled, counted)
}

// clockDisagreement is how far the providers' clock at least disagrees with the harness's, from
// requests both saw: on one clock a request reaches its provider after the harness sent it and
// before the harness read its answer. quotaqual_release_at is an instant the stub reads on its
// own clock, so the release works as planned only when the two agree (one machine: process,
// netns, docker, a local kind cluster; not necessarily a remote cluster named by --kubeconfig).
type clockDisagreement struct{ ahead, behind time.Duration }

// add takes one request in. Of a request the harness sent twice (a transport retry) only the
// answer bounds the arrival: the log's entry may be the first attempt's, sent before o.Start.
func (c *clockDisagreement) add(o Outcome, pr providerstub.CallRecord) {
	if o.Start.IsZero() || o.End.IsZero() || pr.Time.IsZero() {
		return
	}
	c.ahead = max(c.ahead, pr.Time.Sub(o.End))
	if o.Attempts <= 1 {
		c.behind = max(c.behind, o.Start.Sub(pr.Time))
	}
}

// cause names the disagreement as the likely cause of a release that went wrong, and the fix;
// "" when the clocks agreed as far as the requests show.
func (c clockDisagreement) cause() string {
	var by string
	switch {
	case c.ahead > 0:
		by = fmt.Sprintf("at least %s ahead of", c.ahead.Round(time.Millisecond))
	case c.behind > 0:
		by = fmt.Sprintf("at least %s behind", c.behind.Round(time.Millisecond))
	default:
		return ""
	}
	return fmt.Sprintf("; the providers' clock reads %s the harness's, and the stub holds a request until metadata.%s "+
		"on its own clock: synchronise the clocks of the harness and the cluster's nodes (NTP), or run the providers on "+
		"the harness's machine", by, providerstub.ReleaseAtMetadata)
}
