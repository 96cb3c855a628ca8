package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/quotaqual/quotaqual/topology"
)

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
		fits := sent[s]*usage+env.admitCost() <= env.Profile.Capacity
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
		r.Key("%d/%d admitted, provider calls +%d, sites %v", countAdmitted(outs), len(outs), d, SitesCovered(SiteDelta(before, after)))
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
	r.Key("%d/%d admitted, provider calls +%d, sites %v", countAdmitted(outs), len(outs), d, SitesCovered(SiteDelta(before, after)))
	return r
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
