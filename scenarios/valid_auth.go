package scenarios

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/quotaqual/quotaqual/topology"
)

func init() { register(200, validAuth) }

func validAuth() Scenario {
	return Scenario{
		Name:      "valid-auth",
		Summary:   "every subject is admitted on both gateways, with provider attribution",
		Invariant: "each authenticated subject is admitted on both gateways; attribution and call counts are confirmed at the providers; credentials are not forwarded",
		Prefers:   []Need{NeedAttribution},
		BlackBox: "sees every subject admitted on every gateway and, at the providers, the calls and sites that served them and the " +
			"headers they received (no credentials forwarded); without an attribution header it cannot see which site served which response, only how many each site got",
		Run: runValidAuth,
	}
}

func runValidAuth(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	attributed := env.gateway().Expect.Attribution.Header != "" && env.gateway().Expect.RequestIDHeader != ""
	limitHeader := env.gateway().Expect.QuotaHeaders.Limit
	before, ok := env.readProviders(ctx, r, "provider call counts before")
	if !ok {
		return r
	}
	// Requests go round the gateways and the subjects together, at least two per subject and
	// one per replica (six with two gateways: each subject on both). Past about five requests
	// a subject's budget is spent (sixteen replicas, three subjects): such a request must be
	// denied, as the rule predicts from the stub's usage, and counts as the replica's answer.
	subs := subjects()
	usage := chatUsage(env.Profile, 1).TotalTokens
	sent := map[string]int64{}
	var outs []Outcome
	for k := range max(2*len(subs), len(env.gateways())) {
		s, gw := subs[k%len(subs)], env.alternate(k)
		fits := sent[s]*usage+env.admitCost(env.Profile) <= env.Profile.Capacity
		sent[s]++
		o := env.Chat(ctx, ChatCall{Gateway: gw, Label: "valid-" + s, Subject: s})
		outs = append(outs, o)
		if !fits {
			r.Check(fmt.Sprintf("%s on %s: past its budget, decided (429, or 200 once the window moved)", s, gw), "429 or 200", o.Status, o.Status == http.StatusTooManyRequests || o.Admitted())
			continue
		}
		r.Check(fmt.Sprintf("%s admitted on %s", s, gw), http.StatusOK, o.Status, o.Admitted())
		if attributed {
			r.Check(fmt.Sprintf("%s on %s names a provider site", s, gw), "one of west, central, east", o.Site, isSite(o.Site))
		}
		if limitHeader != "" {
			limit := limitValue(headerOf(o.Headers, limitHeader))
			r.Check(fmt.Sprintf("%s on %s: %s is the capacity", s, gw, strings.ToLower(limitHeader)),
				strconv.FormatInt(env.Profile.Capacity, 10), limit, limit == strconv.FormatInt(env.Profile.Capacity, 10))
		}
	}
	if !attributed {
		r.NotMade("each response names its provider site", "the gateway sends no attribution header: sites counted at the providers")
	}
	if limitHeader == "" {
		r.NotMade("the limit header is the capacity", "the gateway sends none")
	}
	after, err := env.settledProviders(ctx)
	if err != nil {
		return r.Error(fmt.Errorf("provider call counts after: %w", err))
	}
	d := TotalDelta(before, after)
	r.Fact("statuses", statuses(outs))
	r.Fact("sites", sitesOf(outs))
	r.Fact("provider_calls_by_site", SiteDelta(before, after))
	perGateway := env.tallyByGateway(outs, env.alternate)
	r.Fact("per_gateway", perGateway)
	env.checkEveryReplicaDecided(r, "the valid requests", perGateway)
	r.Check("provider calls grew by exactly the admitted requests", countAdmitted(outs), d, d == int64(countAdmitted(outs)))
	refused := env.refuseMalformed(ctx, r, subs[0], sent[subs[0]]*usage, usage)

	// Attribution, confirmed at the providers: the request id each response carries is in the
	// log of the provider whose site the response names, and no provider saw credentials.
	var mismatched, authForwarded []string
	if !attributed {
		// Black-box: no response names its provider, so every request the providers logged
		// since before is checked for forwarded credentials.
		for _, h := range topology.Providers {
			for _, pr := range after.ByHost[h].Requests {
				if !pr.Time.Before(before.At) && pr.AuthorizationPresent {
					authForwarded = append(authForwarded, fmt.Sprintf("a request at %s", after.ByHost[h].Site))
				}
			}
		}
		r.Check("no credentials forwarded to a provider", "authorization_present false everywhere", authForwarded, len(authForwarded) == 0)
		r.Key("%d/%d admitted, provider calls +%d, sites %v; %s", countAdmitted(outs), len(outs), d, SitesCovered(SiteDelta(before, after)), refused)
		return r
	}
	for i, o := range outs {
		if !o.Admitted() {
			continue // denied past its budget: no provider saw it
		}
		site, pr, found := after.FindRequest(o.RequestID)
		switch {
		case !found:
			mismatched = append(mismatched, fmt.Sprintf("#%d request id %q in no provider log", i+1, o.RequestID))
		case site != o.Site:
			mismatched = append(mismatched, fmt.Sprintf("#%d header %q but served by %q", i+1, o.Site, site))
		}
		if found && pr.AuthorizationPresent {
			authForwarded = append(authForwarded, fmt.Sprintf("#%d at %s", i+1, site))
		}
	}
	r.Check("each response's site confirmed by the provider that logged its request id", fmt.Sprintf("all %d admitted", countAdmitted(outs)), mismatched, len(mismatched) == 0)
	r.Check("no credentials forwarded to a provider", "authorization_present false everywhere", authForwarded, len(authForwarded) == 0)
	r.Key("%d/%d admitted, provider calls +%d, sites %v; %s", countAdmitted(outs), len(outs), d, SitesCovered(SiteDelta(before, after)), refused)
	return r
}

// refusalsPerGateway is how many malformed requests one subject sends each gateway before it
// is admitted there: more than any per-subject bound a gateway keeps on requests in flight
// (quotaqual's server.max_in_flight_per_subject is 64 by default), so a refusal that leaves
// its slot taken locks the subject out of that gateway by the time it asks in earnest.
const refusalsPerGateway = 100

// refuseMalformed sends subject's refusalsPerGateway requests with a max_tokens that is not a
// number to every gateway, one at a time, and then one valid request to each. A gateway that
// refuses them itself must answer each 400, never 429 for a bound they must not have kept,
// and then admit the subject on every gateway where its budget (charged so far) still fits.
// A gateway that forwards them leaves the refusal to the provider and its charge for that to
// its rule: the checks are then not made. It returns a summary for the key fact.
func (env *Env) refuseMalformed(ctx context.Context, r *Result, subject string, charged, usage int64) string {
	before, ok := env.readProviders(ctx, r, "provider call counts before the malformed requests")
	if !ok {
		return ""
	}
	answers := map[int]int{}
	for _, gw := range env.gateways() {
		for i := range refusalsPerGateway {
			o := env.Chat(ctx, ChatCall{Gateway: gw, Label: fmt.Sprintf("malformed-%s-%d", gw[len(gw)-1:], i+1), Subject: subject,
				Fields: map[string]any{"max_tokens": "many"}})
			answers[o.Status]++
		}
	}
	total := refusalsPerGateway * len(env.gateways())
	r.Fact("malformed_answers", answers)
	after, err := env.settledProviders(ctx)
	if err != nil {
		r.Error(fmt.Errorf("provider call counts after the malformed requests: %w", err))
		return ""
	}
	if forwarded := TotalDelta(before, after); forwarded > 0 {
		const what = "a subject refused many times on a gateway (400) is admitted there after"
		r.NotMade(what, fmt.Sprintf("the gateway forwarded %d of the %d malformed requests to a provider, which refused them: "+
			"what the gateway charges for a provider's refusal decides the admissions after, not a bound the refusals kept", forwarded, total))
		return fmt.Sprintf("%d malformed requests forwarded to a provider", forwarded)
	}
	r.Check(fmt.Sprintf("%d malformed requests of %s on each gateway are each refused with 400 (none for a bound they kept, 429)",
		refusalsPerGateway, subject), fmt.Sprintf("400×%d", total), answers, answers[http.StatusBadRequest] == total)
	admitted := 0
	for _, gw := range env.gateways() {
		fits := charged+env.admitCost(env.Profile) <= env.Profile.Capacity
		o := env.Chat(ctx, ChatCall{Gateway: gw, Label: "after-malformed-" + gw[len(gw)-1:], Subject: subject})
		if !fits {
			continue // its budget is spent by now: nothing to judge on this replica
		}
		charged += usage
		if r.Check(fmt.Sprintf("%s admitted on %s after its %d refusals there", subject, gw, refusalsPerGateway), http.StatusOK, o.Status, o.Admitted()) {
			admitted++
		}
	}
	return fmt.Sprintf("%s's %d malformed requests answered %s, then admitted on %d/%d gateways", subject, total, statusCounts(answers), admitted, len(env.gateways()))
}

// statusCounts writes answers as "400×128 429×72", by status.
func statusCounts(answers map[int]int) string {
	codes := slices.Sorted(maps.Keys(answers))
	parts := make([]string, len(codes))
	for i, c := range codes {
		parts[i] = fmt.Sprintf("%d×%d", c, answers[c])
	}
	return strings.Join(parts, " ")
}

func countAdmitted(os []Outcome) int {
	n := 0
	for _, o := range os {
		if o.Admitted() {
			n++
		}
	}
	return n
}
