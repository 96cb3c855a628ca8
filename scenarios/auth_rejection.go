package scenarios

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { register(300, authRejection) }

func authRejection() Scenario {
	return Scenario{
		Name:      "auth-rejection",
		Summary:   "missing, malformed, wrong-password and cross-subject credentials get 401 on both gateways; no provider call, no ledger change",
		Invariant: "hard gate: an unauthenticated request reaches neither the ledger nor a provider",
		Prefers:   []Need{NeedQuotaInspection},
		BlackBox: "sees every bad credential answered 401 with its challenge and body, and the providers' call counts unchanged; " +
			"cannot see the subjects' ledger state, so it does not report it: a gateway that charged a rejected request's subject is not caught here",
		Run: runAuthRejection,
	}
}

// rejectedKinds are the credentials that must be refused, each sent as application-a.
var rejectedKinds = []CredKind{CredMissing, CredMalformed, CredBearer, CredNoColon, CredWrongPassword, CredCrossSubject}

func runAuthRejection(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	challenge := env.gateway().Expect.AuthChallenge
	before := map[string]wire.QuotaState{}
	for _, s := range subjects() {
		if !env.inspects() {
			break
		}
		q, err := env.Quotas().Read(ctx, gwA, Key{Rule: RuleName, Subject: s})
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
	for _, gw := range env.gateways() {
		for _, k := range rejectedKinds {
			// Cross-subject: application-b's username with application-a's password.
			o := env.Chat(ctx, ChatCall{Gateway: gw, Label: "reject-" + string(k), Subject: appA, Cred: k, CrossWith: appB})
			outs = append(outs, o)
			www := headerOf(o.Headers, "WWW-Authenticate")
			r.Check(fmt.Sprintf("%s on %s → 401", k, gw), http.StatusUnauthorized, o.Status, o.Status == http.StatusUnauthorized)
			if challenge != "" {
				r.Check(fmt.Sprintf("%s on %s carries WWW-Authenticate", k, gw), challenge+" realm=…", www, strings.HasPrefix(www, challenge+" "))
			}
			if env.gateway().Expect.Denial.ErrorType != "" {
				r.Check(fmt.Sprintf("%s on %s has an OpenAI-style error body", k, gw), "error.type set", o.ErrorType, o.ErrorType != "")
			}
			if env.gateway().Expect.Attribution.Header != "" {
				r.Check(fmt.Sprintf("%s on %s names no provider site", k, gw), "", o.Site, o.Site == "")
			}
		}
	}
	// A client that announces a body and never sends it (issue 10, item 14) must still get its
	// 401 at once: a gateway that waits for the body holds a connection and a goroutine per
	// such request, before anyone is authenticated.
	for _, gw := range env.gateways() {
		status, took, err := env.stalledBodyProbe(ctx, gw)
		r.Fact("stalled-body probe on "+gw, map[string]any{"status": status, "ms": ms(took), "error": errString(err)})
		r.Check(fmt.Sprintf("a POST announcing a body it never sends gets 401 from %s within %s", gw, stalledBodyBound),
			fmt.Sprintf("401 within %s", stalledBodyBound), fmt.Sprintf("%d after %s", status, took.Round(time.Millisecond)),
			status == http.StatusUnauthorized && took <= stalledBodyBound)
	}
	pAfter, ok := env.readProviders(ctx, r, "provider call counts after")
	if ok {
		d := TotalDelta(pBefore, pAfter)
		r.Check("provider calls unchanged", 0, d, d == 0)
		r.Fact("provider_calls_delta", d)
	}
	if challenge == "" {
		r.NotMade("401s carry WWW-Authenticate", "the profile expects no challenge")
	}
	if env.gateway().Expect.Denial.ErrorType == "" {
		r.NotMade("401s have an OpenAI-style error body", "the gateway writes error bodies of its own")
	}
	if !env.inspects() {
		r.NotMade("ledger state unchanged", "no quota inspection: provider calls counted instead")
	}
	for _, s := range subjects() {
		if !env.inspects() {
			break
		}
		q, err := env.Quotas().Read(ctx, gwB, Key{Rule: RuleName, Subject: s})
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
	// Control, after the measurements: the same gateways accept the valid credential, so the
	// 401s above are rejections, not a broken gateway. The controls go round the subjects
	// (application-a on gateway-a, application-b on gateway-b, …) so that even sixteen
	// replicas stay within the budgets; a subject met again past its budget may answer 429,
	// which still shows the credential accepted (a 429 comes only after authentication).
	subs := subjects()
	for i, gw := range env.gateways() {
		s := subs[i%len(subs)]
		o := env.Chat(ctx, ChatCall{Gateway: gw, Label: "control-valid", Subject: s})
		if i < len(subs) {
			r.Check("control: valid "+s+" admitted on "+gw, http.StatusOK, o.Status, o.Admitted())
		} else {
			r.Check("control: valid "+s+" accepted on "+gw, "200 or 429", o.Status, o.Decided())
		}
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

// stalledBodyBound is how long the stalled-body probe waits for the 401: far above a loopback
// answer, far below any read timeout a gateway would use to give up on the body.
const stalledBodyBound = 2 * time.Second

// stalledBodyProbe sends an unauthenticated POST with Content-Length 1000 from the client host
// and never sends the body, and reports the answer and how long it took (the probe gives up
// after 2 × stalledBodyBound). It is recorded like every exchange.
func (env *Env) stalledBodyProbe(ctx context.Context, gw string) (int, time.Duration, error) {
	rctx, cancel := context.WithTimeout(ctx, 2*stalledBodyBound)
	defer cancel()
	u := strings.TrimRight(env.Topo.Gateway(gw).DataURL, "/") + ChatPath
	rec := evidence.RequestRecord{Scenario: env.scenario, Label: "stalled-body", Gateway: gw, Credential: string(CredMissing),
		Method: http.MethodPost, Path: ChatPath}
	start := time.Now()
	rec.Time = start.UTC()
	status, err := func() (int, error) {
		req, err := http.NewRequestWithContext(rctx, http.MethodPost, u, stalledBody{rctx})
		if err != nil {
			return 0, err
		}
		req.ContentLength = 1000
		req.Header.Set("Content-Type", "application/json")
		env.label(req)
		resp, err := env.Topo.Client().Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
		return resp.StatusCode, nil
	}()
	rec.Latency, rec.Status = time.Since(start), status
	if err != nil {
		rec.Error = err.Error()
	}
	env.record(rec)
	return status, rec.Latency, err
}

// stalledBody is a request body that never delivers a byte: its reads wait until the probe
// gives up.
type stalledBody struct{ ctx context.Context }

func (b stalledBody) Read([]byte) (int, error) {
	<-b.ctx.Done()
	return 0, b.ctx.Err()
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
