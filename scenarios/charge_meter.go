package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/quotaqual/quotaqual/providerstub"
)

// chargeMeter reads, from outside, what one subject's key holds under a rule that estimates
// from the output bound (strategy max_tokens), from the remaining header of admitted responses:
// capacity − (settled + held) − the request's own estimate, at its admission (as the gateway
// profile declares it: expect.quota_headers.remaining). So a request's reservation and its
// charge are seen without quota inspection — all a gateway that renders the scenario's rule but
// offers no /admin/quota shows.
//
// A request's reservation is read from its own response: the key held exactly what the meter
// knows before it (each case is sent after the previous one was charged). Its charge is read
// from the responses of neutral probes sent after it: each probe's estimate (its max_tokens)
// equals what the provider counts for it (prompt + completion), so whether its own settlement
// has landed changes nothing in what the next probe reads. A charge still pending shows as the
// case's estimate; probes are sent until the charge read is the one wanted or a deadline passes,
// and the cases are built so that a pending estimate is never what is wanted.
type chargeMeter struct {
	env      *Env
	subject  string
	header   string // the remaining header's name
	capacity int64
	probe    ChatCall
	cost     int64 // a probe's estimate, equal to its usage
	held     int64 // settled + held tokens of the key that the meter accounts for
	spent    bool  // a probe found no room left: held is only a floor (the capacity)
	probes   int   // sent so far
	gateway  func() string
	turn     int
}

// newChargeMeter starts a meter of subject's key, which holds nothing yet (its rule is the
// scenario's own and the scenario sends the subject nothing else), under a rule of capacity.
// It has no remaining header to read when ok is false.
func (env *Env) newChargeMeter(subject, label string, capacity int64) (m *chargeMeter, ok bool) {
	h := env.gateway().Expect.QuotaHeaders.Remaining
	if h == "" {
		return nil, false
	}
	// max_tokens = prompt + completion, when the stub generates its configured completion
	// tokens (fewer than max_tokens): estimate and usage agree.
	u := chatUsage(env.Profile, 0)
	m = &chargeMeter{env: env, subject: subject, header: h, capacity: capacity, cost: u.TotalTokens,
		probe: ChatCall{Label: label + "-probe", Subject: subject, MaxTokens: u.TotalTokens}}
	m.gateway = func() string { m.turn++; return env.alternate(m.turn) }
	return m, true
}

// remaining reads the remaining header of an admitted response.
func (m *chargeMeter) remaining(o Outcome) (int64, error) {
	v := headerOf(o.Headers, m.header)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: the admitted response's %s is %q, not a number of tokens: %w", o.RequestID, m.header, v, err)
	}
	return n, nil
}

// reserved is what an admitted request, sent when the key held exactly what the meter knows,
// reserved at its admission.
func (m *chargeMeter) reserved(o Outcome) (int64, error) {
	rem, err := m.remaining(o)
	return m.capacity - m.held - rem, err
}

// charged is what probing found a request charged after it was sent: the charge read, whether
// it was the one wanted, how many probes read it, and the last probe's outcome (not admitted
// when the key has no room left, which is what a charge beyond the capacity leaves).
type charged struct {
	tokens int64
	wanted bool
	probes int
	last   Outcome
}

// charge probes until the charge of the request sent since the last reading is one that want
// accepts, or until the settlement deadline (the longest a gateway may take to settle, as
// WaitIdle allows), and accounts for it. Probes back off from 10 ms to 250 ms.
func (m *chargeMeter) charge(ctx context.Context, want func(int64) bool) (charged, error) {
	var c charged
	deadline := time.Now().Add(adminTimeout(m.env.Profile) + m.env.Profile.StoreTimeout)
	wait := 10 * time.Millisecond
	base := m.held
	for {
		p := m.probe
		p.Gateway = m.gateway()
		m.probes++
		c.probes++
		p.Label = fmt.Sprintf("%s-%d", m.probe.Label, m.probes)
		c.last = m.env.Chat(ctx, p)
		if c.last.Status != http.StatusOK {
			// Not admitted: the caller reports the status. A 429 says no room was left, so
			// the case took at least what the key had left; the meter can read no further.
			m.held, m.spent = m.capacity, true
			c.tokens = m.capacity - base
			return c, nil
		}
		rem, err := m.remaining(c.last)
		if err != nil {
			return c, err
		}
		// rem = capacity − (base + case + probes before this one) − this probe's estimate.
		before := m.capacity - rem - m.cost
		c.tokens = before - base - int64(c.probes-1)*m.cost
		if c.wanted = want(c.tokens); c.wanted || !time.Now().Before(deadline) {
			m.held = before + m.cost
			return c, nil
		}
		if err := waitUntil(ctx, time.Now().Add(wait)); err != nil {
			return c, err
		}
		wait = min(2*wait, 250*time.Millisecond)
	}
}

// checkLedger checks, with quota inspection, that the ledger's settled usage of the meter's key
// under rule is what the remaining header showed (at least the capacity, when it showed no room
// left). It returns the ledger's figure for the facts.
func (m *chargeMeter) checkLedger(ctx context.Context, r *sharedResult, what, rule string) any {
	if !m.env.inspects() {
		return "not read (no quota inspection)"
	}
	q, err := m.env.Quotas().WaitIdle(ctx, gwA, Key{Rule: rule, Subject: m.subject})
	if err != nil {
		r.do(func(r *Result) { r.Error(fmt.Errorf("%s: %w", what, err)) })
		return "not read: " + err.Error()
	}
	got, want := q.Settled(), m.held
	r.do(func(r *Result) {
		if m.spent {
			r.Check(what+": the ledger's settled usage is at least what the remaining header showed (no room left)", fmt.Sprintf("≥ %d", want), got, got >= want)
			return
		}
		r.Check(what+": the ledger's settled usage equals what the remaining header showed", want, got, got == want)
	})
	return got
}

// providerRecord finds o's request, by the request id the gateway echoes, in the providers'
// call logs once none is in flight.
func (env *Env) providerRecord(ctx context.Context, o Outcome) (providerstub.CallRecord, error) {
	after, err := env.settledProviders(ctx)
	if err != nil {
		return providerstub.CallRecord{}, fmt.Errorf("reading the provider call logs: %w", err)
	}
	if _, pr, ok := after.FindRequest(o.RequestID); ok {
		return pr, nil
	}
	return providerstub.CallRecord{}, fmt.Errorf("request %q (%d) is in no provider's call log", o.RequestID, o.Status)
}

// echoesRequestID says whether the gateway echoes the request id it forwards, so each request
// can be matched to its provider's log entry while several are in flight.
func (env *Env) echoesRequestID() bool { return env.gateway().Expect.RequestIDHeader != "" }

// needsRequestID is the skip reason of a scenario that matches each of many requests, some in
// flight together, to its provider's log entry.
func needsRequestID(env *Env) string {
	return "needs the request id the gateway forwards echoed on its responses (expect.request_id_header), which gateway profile " +
		env.gateway().Name + " does not declare: each case is judged against its own provider log entry while others are in flight"
}

// errNoRemainingHeader words the checks a gateway without a remaining header cannot have made.
var errNoRemainingHeader = errors.New("the gateway sends no remaining-tokens header, and without it no reservation or charge can be read from outside")

// boundOf is the output bound per choice a request states, as the provider honours it:
// max_completion_tokens, else max_tokens (0 when it states none).
func boundOf(c ChatCall) int64 {
	if v, ok := c.Fields["max_completion_tokens"].(int); ok {
		return int64(v)
	}
	return max(0, c.MaxTokens)
}

// choicesOf is a request's n (1 when it states none).
func choicesOf(c ChatCall) int64 {
	if v, ok := c.Fields["n"].(int); ok {
		return int64(v)
	}
	return 1
}

// generate asks the provider stub for tokens per choice (what it generates under a larger
// bound), plus mode's hostile usage ("" for the truth).
func generate(tokens int, mode string) map[string]string {
	md := map[string]string{providerstub.TokensMetadata: strconv.Itoa(tokens)}
	if mode != "" {
		md[providerstub.UsageMetadata] = mode
	}
	return md
}
