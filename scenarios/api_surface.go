package scenarios

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/undertest"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { register(460, apiSurface) }

func apiSurface() Scenario {
	return Scenario{
		Name: "api-surface",
		Summary: "every endpoint the gateway declares meters on the one budget per key: a subject spent on chat is denied on " +
			"responses, embeddings and completions; each is charged what the provider counted; /v1/models spends nothing",
		Invariant: "hard gate: no metered endpoint is a path around the quota: with the subject spent, each declared metered endpoint " +
			"is refused and reaches no provider; /v1/models makes no provider call",
		Prefers: []Need{NeedQuotaInspection},
		BlackBox: "sees each endpoint's answers, the providers' call counts and the endpoint each call was logged under; cannot see " +
			"what each endpoint was charged, nor that /v1/models left the ledger unchanged (both read from the quota inspection)",
		Run: runAPISurface,
	}
}

// surfaceEndpoint is one metered endpoint as a client calls it.
type surfaceEndpoint struct {
	name     string // undertest.Endpoint*
	path     string
	provider string // the endpoint the provider stub logs the call under ("" is chat too)
	// body is the request body; its output bound is max, its input text pad.
	body func(max int64, pad string) map[string]any
}

var meteredSurface = []surfaceEndpoint{
	{undertest.EndpointChat, ChatPath, providerstub.EndpointChat, func(max int64, pad string) map[string]any {
		return map[string]any{"messages": []map[string]string{{"role": "user", "content": "hello" + pad}}, "max_tokens": max}
	}},
	{undertest.EndpointResponses, providerstub.EndpointResponses, providerstub.EndpointResponses, func(max int64, pad string) map[string]any {
		return map[string]any{"input": "hello" + pad, "max_output_tokens": max}
	}},
	{undertest.EndpointEmbeddings, providerstub.EndpointEmbeddings, providerstub.EndpointEmbeddings, func(_ int64, pad string) map[string]any {
		return map[string]any{"input": "hello" + pad} // no output: the rule's fallback is its estimate
	}},
	{undertest.EndpointCompletions, providerstub.EndpointCompletions, providerstub.EndpointCompletions, func(max int64, pad string) map[string]any {
		return map[string]any{"prompt": "hello" + pad, "max_tokens": max}
	}},
}

const modelsPath = "/v1/models"

// runAPISurface, black-box first:
//
//   - fresh (application-b): one request to each declared metered endpoint is admitted, reaches
//     the provider as one call logged under that endpoint, and (with inspection) is charged
//     exactly the input and output tokens the provider counted; GET /v1/models is answered
//     without a provider call and (with inspection) leaves the subject's quota unchanged;
//   - spent (application-a): chat spends the subject's window until a request is denied, then
//     every other declared metered endpoint — each body at least as long, and its output bound
//     at least chat's, so no estimate is smaller — must be refused, with no provider call.
//
// Endpoints the profile does not declare (capabilities.endpoints) are not called, and say so;
// a gateway declaring chat alone is still probed for the admin paths on its data port.
func runAPISurface(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	gw := env.gateway()
	var declared []surfaceEndpoint
	var undeclared []string
	for _, ep := range meteredSurface {
		if gw.Serves(ep.name) {
			declared = append(declared, ep)
		} else {
			undeclared = append(undeclared, ep.name)
		}
	}
	models := gw.Serves(undertest.EndpointModels)
	if !models {
		undeclared = append(undeclared, undertest.EndpointModels)
	}
	for _, name := range undeclared {
		r.NotMade(name, "the gateway profile does not declare it (capabilities.endpoints)")
	}
	if len(declared) == 1 && !models {
		// Chat alone: no other endpoint to hold against its quota, but the data port is still a
		// surface a client reaches, and any gateway can answer an admin path on it.
		if !env.inspects() {
			r.DecidedBy("the answers on the wire")
		}
		r.Key("no endpoint but chat declared (capabilities.endpoints); %s", env.probeAdminOnDataPort(ctx, r))
		return r
	}
	r.Fact("endpoints", endpointNames(declared, models))
	inspect := env.inspects()
	if !inspect {
		r.DecidedBy("the answers on the wire", "the providers' call logs")
	}
	chatBytes := len(surfaceBody(meteredSurface[0], 1, ""))

	// Fresh: each endpoint admitted, forwarded once under its own endpoint, charged the truth.
	var rows []string
	for i, ep := range declared {
		gwName := env.alternate(i)
		var before int64
		if inspect {
			q, err := env.Quotas().WaitIdle(ctx, gwName, Key{Rule: RuleName, Subject: appB})
			if err != nil {
				return r.Error(err)
			}
			before = q.Settled()
		}
		pBefore, err := env.settledProviders(ctx)
		if err != nil {
			return r.Error(err)
		}
		id := "qq-surface-fresh-" + ep.name
		st, _ := env.surfaceDo(ctx, gwName, appB, CredValid, http.MethodPost, ep.path, id, surfaceBody(ep, 1, ""))
		pAfter, err := env.settledProviders(ctx)
		if err != nil {
			return r.Error(err)
		}
		d := TotalDelta(pBefore, pAfter)
		r.Check(fmt.Sprintf("fresh %s: admitted", ep.name), http.StatusOK, st, st == http.StatusOK)
		r.Check(fmt.Sprintf("fresh %s: one provider call", ep.name), 1, d, d == 1)
		row := fmt.Sprintf("%s: %d, provider calls +%d", ep.name, st, d)
		if _, call, ok := pAfter.FindRequest(id); ok {
			logged := call.Endpoint
			if logged == "" {
				logged = providerstub.EndpointChat
			}
			r.Check(fmt.Sprintf("fresh %s: the provider served it as %s", ep.name, ep.provider), ep.provider, logged, logged == ep.provider)
			counted := call.PromptTokens + call.CompletionTokens
			row += fmt.Sprintf(", the provider counted %d", counted)
			if inspect {
				q, err := env.Quotas().WaitIdle(ctx, gwName, Key{Rule: RuleName, Subject: appB})
				if err != nil {
					return r.Error(err)
				}
				charged := q.Settled() - before
				r.Check(fmt.Sprintf("fresh %s: charged what the provider counted", ep.name), counted, charged, charged == counted)
				row += fmt.Sprintf(", charged %d", charged)
			}
		} else {
			r.NotMade(fmt.Sprintf("fresh %s: the provider served it under its endpoint", ep.name),
				"the gateway did not forward the client's request id, so the provider's call cannot be named")
		}
		rows = append(rows, row)
	}
	if !inspect {
		r.NotMade("each endpoint charged what the provider counted", "the gateway offers no quota inspection")
	}

	if models {
		var before wireState
		if inspect {
			q, err := env.Quotas().WaitIdle(ctx, gwA, Key{Rule: RuleName, Subject: appB})
			if err != nil {
				return r.Error(err)
			}
			before = wireState{q.Settled(), q.ReservedTokens}
		}
		pBefore, err := env.settledProviders(ctx)
		if err != nil {
			return r.Error(err)
		}
		st, _ := env.surfaceDo(ctx, gwA, appB, CredValid, http.MethodGet, modelsPath, "qq-surface-models", nil)
		pAfter, err := env.settledProviders(ctx)
		if err != nil {
			return r.Error(err)
		}
		d := TotalDelta(pBefore, pAfter)
		r.Check("models: answered", http.StatusOK, st, st == http.StatusOK)
		r.Check("models: no provider call", 0, d, d == 0)
		rows = append(rows, fmt.Sprintf("models: %d, provider calls +%d", st, d))
		if inspect {
			q, err := env.Quotas().Read(ctx, gwA, Key{Rule: RuleName, Subject: appB})
			if err != nil {
				return r.Error(err)
			}
			after := wireState{q.Settled(), q.ReservedTokens}
			r.Check("models: the quota unchanged (settled, reserved)", before, after, after == before)
		} else {
			r.NotMade("models: the quota unchanged", "the gateway offers no quota inspection")
		}
	}
	r.Fact("fresh", rows)
	admin := env.probeAdminOnDataPort(ctx, r)
	if len(declared) == 1 {
		r.Key("no other metered endpoint declared; %s; %s", strings.Join(rows, "; "), admin)
		return r
	}

	// Spent: chat spends the window; no other endpoint gets through.
	first, before, ok := env.spendUntilDenied(ctx, r, "the subject spent by chat: the last request denied 429")
	if !ok {
		return r
	}
	var spent []string
	var last time.Time
	for i, ep := range declared[1:] {
		body := surfaceBody(ep, 1, "")
		if n := chatBytes - len(body); n > 0 {
			body = surfaceBody(ep, 1, strings.Repeat(" x", (n+1)/2)) // as long as chat's: no smaller input estimate
		}
		st, _ := env.surfaceDo(ctx, env.alternate(i), appA, CredValid, http.MethodPost, ep.path, "qq-surface-spent-"+ep.name, body)
		last = time.Now()
		r.Check(fmt.Sprintf("spent %s: refused (the budget chat spent is its budget too)", ep.name), "4xx", st, st/100 == 4)
		spent = append(spent, fmt.Sprintf("%s: %d", ep.name, st))
	}
	after, err := env.settledProviders(ctx)
	if err != nil {
		return r.Error(err)
	}
	d := TotalDelta(before, after)
	r.Check("spent: no endpoint reached a provider", 0, d, d == 0)
	env.checkSpentInWindow(r, "spent pass finished within the first spending request's window", first, last)
	r.Fact("spent", spent)
	r.Key("%d metered endpoints; with the subject spent by chat: %s, provider calls +%d; %s", len(declared), strings.Join(spent, ", "), d, admin)
	return r
}

// adminProbes are the paths quotaqual's gateway serves on its admin listener (adminHandler),
// asked on the data port: the quota inspection as the admin endpoint takes it (a subject the
// pass above charged) and without its query, the metrics, and the health paths.
var adminProbes = []string{
	"/admin/quota?rule=" + RuleName + "&subject=" + appB,
	"/admin/quota",
	"/metrics",
	"/healthz",
	"/readyz",
}

// probeAdminOnDataPort asks gateway-a's data port, without credentials, for each admin path,
// and checks no answer is a 200 carrying quota figures (contract §1: no quota information
// without authentication; §10: the admin surface is the admin listener's). A health answer
// that names no quota (status, store reachability) is allowed: a load balancer may probe the
// data port. It returns the answers, for the key fact.
func (env *Env) probeAdminOnDataPort(ctx context.Context, r *Result) string {
	var answers []string
	for i, path := range adminProbes {
		st, raw := env.surfaceDo(ctx, gwA, "", CredMissing, http.MethodGet, path, fmt.Sprintf("qq-surface-admin-%d", i), nil)
		fields := quotaFields(raw)
		observed := fmt.Sprintf("%d", st)
		if st == http.StatusOK && len(fields) > 0 {
			observed += " naming " + strings.Join(fields, ", ")
		}
		r.Check(fmt.Sprintf("data port, no credentials, GET %s: no quota information", path),
			"no 200 naming settled, held or remaining quota", observed, st != http.StatusOK || len(fields) == 0)
		answers = append(answers, path+": "+observed)
	}
	r.Fact("admin paths on the data port, unauthenticated", answers)
	return "unauthenticated admin paths on the data port: " + strings.Join(answers, ", ")
}

// quotaFields names the quota figures a JSON answer carries (any key, at any depth, naming
// settled, reserved/held or remaining tokens, a capacity or windows); none for any other body.
func quotaFields(raw []byte) []string {
	var v any
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	seen := map[string]bool{}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				lk := strings.ToLower(k)
				for _, w := range []string{"settled", "reserved", "held", "remaining", "capacity", "windows"} {
					if strings.Contains(lk, w) && !seen[k] {
						seen[k] = true
						out = append(out, k)
					}
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	walk(v)
	slices.Sort(out)
	return out
}

// wireState is the part of a quota state /v1/models must leave alone.
type wireState struct{ Settled, Reserved int64 }

func endpointNames(eps []surfaceEndpoint, models bool) []string {
	var out []string
	for _, ep := range eps {
		out = append(out, ep.name)
	}
	if models {
		out = append(out, undertest.EndpointModels)
	}
	return out
}

// surfaceBody is ep's request body for the default model.
func surfaceBody(ep surfaceEndpoint, max int64, pad string) []byte {
	body := ep.body(max, pad)
	body["model"] = providerstub.DefaultModel
	b, _ := json.Marshal(body)
	return b
}

// surfaceDo sends one request as subject with the credential given (CredValid; CredMissing:
// none) to gw's path (a nil body: none), records it, and returns its status (0 when it got no
// answer: the error is recorded) and the answer's body (at most 1 MiB).
func (env *Env) surfaceDo(ctx context.Context, gw, subject string, cred CredKind, method, path, id string, body []byte) (int, []byte) {
	rec := evidence.RequestRecord{Scenario: env.scenario, Label: id, Gateway: gw, Subject: subject,
		Credential: string(cred), Method: method, Path: path}
	start := time.Now()
	rec.Time = start.UTC()
	defer func() { rec.Latency = time.Since(start); env.record(rec) }()
	rctx, cancel := context.WithTimeout(ctx, requestTimeout(env.Profile))
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(rctx, method, strings.TrimRight(env.Topo.Gateway(gw).DataURL, "/")+path, rd)
	if err != nil {
		rec.Error = err.Error()
		return 0, nil
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set(wire.RequestIDHeader, id)
	env.label(req)
	if err := env.authorize(req, ChatCall{Subject: subject, Cred: cred}); err != nil {
		rec.Error = err.Error()
		return 0, nil
	}
	resp, err := env.Topo.Client().Do(req)
	if err != nil {
		rec.Error = err.Error()
		return 0, nil
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		rec.Error = "reading the response body: " + err.Error()
	}
	rec.Status, rec.RequestID = resp.StatusCode, headerOf(resp.Header, env.gateway().Expect.RequestIDHeader)
	if resp.StatusCode != http.StatusOK {
		rec.ErrorType = errorType(raw)
	}
	return resp.StatusCode, raw
}
