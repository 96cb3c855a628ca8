package scenarios

import (
	"context"
	"fmt"
	"net/http"
)

func authRejection() Scenario {
	return Scenario{
		Name:      "auth-rejection",
		Summary:   "missing, malformed, wrong-password and cross-subject credentials get 401 on both gateways; no provider call, no ledger change",
		Invariant: "hard gate: an unauthenticated request reaches neither the ledger nor a provider",
		Run:       runAuthRejection,
	}
}

// rejectedKinds are the credentials that must be refused, each sent as application-a.
var rejectedKinds = []CredKind{CredMissing, CredMalformed, CredBearer, CredNoColon, CredWrongPassword, CredCrossSubject}

func runAuthRejection(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	before := map[string]QuotaState{}
	for _, s := range subjects() {
		q, err := env.Quota(ctx, gwA, s)
		if err != nil {
			return r.Error(err)
		}
		before[s] = q
	}
	pBefore, ok := env.readProviders(ctx, r, "provider call counts before")
	if !ok {
		return r
	}
	var outs []Outcome
	for _, gw := range []string{gwA, gwB} {
		for _, k := range rejectedKinds {
			// Cross-subject: application-b's username with application-a's password.
			o := env.Chat(ctx, ChatCall{Gateway: gw, Label: "reject-" + string(k), Subject: appA, Cred: k, CrossWith: appB})
			outs = append(outs, o)
			www := ""
			if o.Headers != nil {
				www = o.Headers.Get("WWW-Authenticate")
			}
			r.Check(fmt.Sprintf("%s on %s → 401", k, gw), http.StatusUnauthorized, o.Status, o.Status == http.StatusUnauthorized)
			r.Check(fmt.Sprintf("%s on %s carries WWW-Authenticate", k, gw), "Basic realm=…", www, len(www) > 6 && www[:6] == "Basic ")
			r.Check(fmt.Sprintf("%s on %s has an OpenAI-style error body", k, gw), "error.type set", o.ErrorType, o.ErrorType != "")
			r.Check(fmt.Sprintf("%s on %s names no provider site", k, gw), "", o.Site, o.Site == "")
		}
	}
	pAfter, ok := env.readProviders(ctx, r, "provider call counts after")
	if ok {
		d := TotalDelta(pBefore, pAfter)
		r.Check("provider calls unchanged", 0, d, d == 0)
		r.Fact("provider_calls_delta", d)
	}
	for _, s := range subjects() {
		q, err := env.Quota(ctx, gwB, s)
		if err != nil {
			r.Error(err)
			continue
		}
		b := before[s]
		r.Check(s+": ledger state unchanged", fmt.Sprintf("settled %d, reserved %d, active %d", b.Settled(), b.ReservedTokens, b.ActiveReservations),
			fmt.Sprintf("settled %d, reserved %d, active %d", q.Settled(), q.ReservedTokens, q.ActiveReservations),
			q.Settled() == b.Settled() && q.ReservedTokens == b.ReservedTokens && q.ActiveReservations == b.ActiveReservations)
	}
	r.Fact("statuses", statuses(outs))
	// Control, after the measurements: the same gateways admit the valid credential, so the
	// 401s above are rejections, not a broken gateway.
	for _, gw := range []string{gwA, gwB} {
		o := env.Chat(ctx, ChatCall{Gateway: gw, Label: "control-valid", Subject: appA})
		r.Check("control: valid application-a admitted on "+gw, http.StatusOK, o.Status, o.Admitted())
	}
	n401 := 0
	for _, o := range outs {
		if o.Status == http.StatusUnauthorized {
			n401++
		}
	}
	r.Key("%d/%d rejected with 401, provider calls +%d", n401, len(outs), TotalDelta(pBefore, pAfter))
	return r
}
