package scenarios

import (
	"context"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/spellings"
	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { register(450, quotaBypass) }

func quotaBypass() Scenario {
	return Scenario{
		Name: "quota-bypass",
		Summary: "every spelling of a metered request — other path spellings, request-target forms, HTTP/1.0, method overrides, " +
			"conflicting framing, an h2c upgrade, a body longer than announced — is refused or metered like the canonical one",
		Invariant: "hard gate: no provider call without a reservation: each spelling is refused (4xx, no provider call) or " +
			"admitted as one provider call; with the subject spent, every spelling is refused and none reaches a provider",
		BlackBox: "sees each spelling's answers on the wire and the providers' call counts (and, where the gateway forwards the " +
			"client's request id, which spelling a provider call came from); cannot see a spelling that is reserved for but " +
			"settled at another charge than the canonical request, which no inspection is used to compare",
		Run: runQuotaBypass,
	}
}

// runQuotaBypass sends every spelling (internal/spellings) on raw connections from the client
// host, where Go's HTTP client would have normalised them. Two passes:
//
//   - fresh (application-b): each answer is a 2xx or a 4xx, and the providers receive exactly
//     one call per admitted request — none for a refusal;
//   - spent (application-a): canonical requests spend the subject's window until one is denied,
//     then every spelling is sent within that window: each must be refused with a 4xx (the canonical request with a
//     429: the check is not vacuous) and none may reach a provider. A gateway that forwards a
//     spelling past its quota shows here as a provider call the spent budget cannot have paid.
func runQuotaBypass(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	all := spellings.All()
	r.Fact("spellings", len(all))
	r.DecidedBy("answers read off raw connections from the client host", "the providers' call logs")

	// Fresh: admitted ⇔ forwarded once.
	var freshRows []string
	for i, sp := range all {
		gw := env.alternate(i)
		before, err := env.settledProviders(ctx)
		if err != nil {
			return r.Error(err)
		}
		answers, err := env.sendSpelling(ctx, gw, appB, "fresh", sp)
		if err != nil {
			return r.Error(err)
		}
		after, err := env.settledProviders(ctx)
		if err != nil {
			return r.Error(err)
		}
		admitted, _, other := classify(answers)
		d := TotalDelta(before, after)
		r.Check(fmt.Sprintf("fresh %s: each answer admitted or refused with a 4xx", sp.Name), "2xx or 4xx", statusList(answers),
			len(other) == 0 && len(answers) > 0)
		r.Check(fmt.Sprintf("fresh %s: one provider call per admitted request, none for a refusal", sp.Name), admitted, d, d == int64(admitted))
		if sp.Name == "canonical" {
			r.Check("fresh canonical: the control is admitted", http.StatusOK, statusList(answers), admitted == 1)
		}
		freshRows = append(freshRows, fmt.Sprintf("%s: %v, provider calls +%d", sp.Name, statusList(answers), d))
	}
	r.Fact("fresh", freshRows)

	// Spent: nothing gets through.
	// Spent by canonical requests until the first denial, seen before any spelling is sent.
	first, before, ok := env.spendUntilDenied(ctx, r, "the subject spent by canonical requests: the last one denied 429")
	if !ok {
		return r
	}
	var spentRows, through []string
	var spentStatuses []int
	var last time.Time
	for i, sp := range all {
		gw := env.alternate(i)
		answers, err := env.sendSpelling(ctx, gw, appA, "spent", sp)
		last = time.Now()
		if err != nil {
			return r.Error(err)
		}
		admitted, refused, other := classify(answers)
		r.Check(fmt.Sprintf("spent %s: refused with a 4xx", sp.Name), "4xx", statusList(answers),
			admitted == 0 && len(other) == 0 && refused > 0)
		if sp.Name == "canonical" {
			r.Check("spent canonical: the control is denied 429 (the subject is spent: the checks are not vacuous)",
				http.StatusTooManyRequests, statusList(answers), len(answers) == 1 && answers[0].Status == http.StatusTooManyRequests)
		}
		spentRows = append(spentRows, fmt.Sprintf("%s: %v", sp.Name, statusList(answers)))
		spentStatuses = append(spentStatuses, statusList(answers)...)
	}
	after, err := env.settledProviders(ctx)
	if err != nil {
		return r.Error(err)
	}
	d := TotalDelta(before, after)
	for _, h := range after.ByHost {
		for _, rq := range h.Requests {
			if name, ok := strings.CutPrefix(rq.RequestID, spellingIDPrefix("spent", "")); ok {
				through = append(through, name+" → "+h.Site)
			}
		}
	}
	sort.Strings(through)
	r.Fact("spent", spentRows)
	r.Check("spent: no spelling reached a provider (a call there had no reservation to pay it)", 0, d, d == 0)
	if len(through) > 0 {
		r.Fact("spellings_the_providers_received", through)
	}
	env.checkSpentInWindow(r, "spent pass finished within the first spending request's window (no charge could have left)", first, last)
	r.Key("%d spellings, with the subject spent: %s, provider calls +%d", len(all), tally(spentStatuses), d)
	return r
}

// spellingIDPrefix is the x-request-id a spelling's request carries (gateways that forward the
// client's id let the providers' logs name the spelling that reached them).
func spellingIDPrefix(pass, name string) string { return "qq-bypass-" + pass + "-" + name }

// sendSpelling writes one spelling of subject's chat request on a fresh connection from the
// client host to gw, reads every answer and records the exchange (the first answer's status).
func (env *Env) sendSpelling(ctx context.Context, gw, subject, pass string, sp spellings.Spelling) ([]spellings.Answer, error) {
	cred, ok := env.credential(subject)
	if !ok {
		return nil, fmt.Errorf("no credential for %s in scenario %s", subject, env.scenario)
	}
	u, err := url.Parse(env.Topo.Gateway(gw).DataURL)
	if err != nil {
		return nil, fmt.Errorf("gateway %s's data URL: %w", gw, err)
	}
	h := http.Header{}
	h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(cred.Username+":"+cred.Password)))
	h.Set("Content-Type", "application/json")
	h.Set(wire.RequestIDHeader, spellingIDPrefix(pass, sp.Name))
	if env.scenario != "" {
		h.Set(providerstub.ScenarioHeader, env.scenario)
	}
	req := spellings.Request{Host: u.Host, Path: ChatPath, Header: h, Body: chatBody(ChatCall{MaxTokens: 1})}
	rec := evidence.RequestRecord{Scenario: env.scenario, Label: pass + "/" + sp.Name, Gateway: gw, Subject: subject,
		Credential: string(CredValid), Method: http.MethodPost, Path: ChatPath}
	start := time.Now()
	rec.Time = start.UTC()
	answers, err := func() ([]spellings.Answer, error) {
		rctx, cancel := context.WithTimeout(ctx, requestTimeout(env.Profile))
		defer cancel()
		conn, err := env.dialClient(rctx, u.Host)
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		return spellings.Exchange(rctx, conn, sp.Write(req), sp.Requests, requestTimeout(env.Profile))
	}()
	rec.Latency = time.Since(start)
	if len(answers) > 0 {
		rec.Status = answers[0].Status
		rec.ErrorType = errorType(answers[0].Body)
	}
	if err != nil {
		rec.Error = err.Error()
	}
	env.record(rec)
	if err != nil && len(answers) == 0 {
		return nil, fmt.Errorf("spelling %s to %s: %w", sp.Name, gw, err)
	}
	return answers, nil
}

// dialClient opens a TCP connection from the client host (the client's own dialer: the netns
// engine dials from inside the client's namespace).
func (env *Env) dialClient(ctx context.Context, addr string) (net.Conn, error) {
	if tr, ok := env.Topo.Client().Transport.(*http.Transport); ok && tr.DialContext != nil {
		return tr.DialContext(ctx, "tcp", addr)
	}
	var d net.Dialer
	return d.DialContext(ctx, "tcp", addr)
}

// classify counts a spelling's answers: 2xx admitted, 4xx refused, and the statuses of any
// other (a redirect a client could follow elsewhere, a 5xx).
func classify(answers []spellings.Answer) (admitted, refused int, other []int) {
	for _, a := range answers {
		switch a.Status / 100 {
		case 2:
			admitted++
		case 4:
			refused++
		default:
			other = append(other, a.Status)
		}
	}
	return admitted, refused, other
}

func statusList(answers []spellings.Answer) []int {
	out := make([]int, len(answers))
	for i, a := range answers {
		out[i] = a.Status
	}
	return out
}
