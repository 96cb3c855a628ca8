//go:build quotaqual_mutants

package gateway

// The gateway's mutants (internal/mutant has the catalogue): deliberately broken variants of
// the code around each hook, compiled only with -tags quotaqual_mutants and armed by
// QUOTAQUAL_MUTANT in the gateway process. The ledger-level ones that need the store's
// scripts live in ledger/mutants_on.go; the rest wrap the ledger here (mutantLedger).

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/internal/mutant"
	"github.com/quotaqual/quotaqual/ledger"
	"github.com/quotaqual/quotaqual/wire"
)

func mutateRenew(renew bool) bool { return renew && !mutant.Is(mutant.NoLeaseRenewal) }

// mutateRenewGivesUp stops the renewer after a failed renewal.
func mutateRenewGivesUp(err error) bool { return err != nil && mutant.Is(mutant.RenewalGivesUp) }

// mutateDropSettlement turns a settlement away while another one is in progress.
func mutateDropSettlement(pending int64) bool {
	return pending > 0 && mutant.Is(mutant.SettlementBacklogDrops)
}

func mutateChallenge(h http.Header) {
	if mutant.Is(mutant.NoWWWAuthenticate) {
		h.Del("WWW-Authenticate")
	}
}

func mutateUpstreamHeaders(out, in http.Header) {
	if mutant.Is(mutant.CredentialsForwarded) {
		if v := in.Values("Authorization"); len(v) > 0 {
			out["Authorization"] = v
		}
	}
}

// mutateAdmin makes every /healthz and /readyz probe charge one token to the last admitted
// subject.
func (s *Server) mutateAdmin(h http.Handler) http.Handler {
	if !mutant.Is(mutant.ProbesConsumeQuota) {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
			if ml, ok := s.led.(*mutantLedger); ok {
				ml.chargeLast(r.Context(), s.storeTimeout)
			}
		}
		h.ServeHTTP(w, r)
	})
}

// mutateDenial breaks a 429: its headers, or its promise that no provider is contacted.
func (s *Server) mutateDenial(h http.Header, rule *ledger.CompiledRule, d *ledger.Denial) {
	switch {
	case mutant.Is(mutant.DenialWithoutHeaders):
		for _, k := range []string{wire.RetryAfterHeader, wire.LimitTokensHeader, wire.RemainingTokensHeader, wire.ResetTokensHeader} {
			h.Del(k)
		}
	case mutant.Is(mutant.RetryAfterOneSecond):
		h.Set(wire.RetryAfterHeader, "1")
		h.Set(wire.ResetTokensHeader, "1s")
	case mutant.Is(mutant.RetryAfterFullWindow):
		var longest time.Duration
		for _, b := range rule.Quota.Budgets {
			longest = max(longest, b.Window)
		}
		secs := strconv.FormatInt(int64(math.Ceil(longest.Seconds())), 10)
		h.Set(wire.RetryAfterHeader, secs)
		h.Set(wire.ResetTokensHeader, secs+"s")
	case mutant.Is(mutant.RemainingAlwaysLimit):
		h.Set(wire.RemainingTokensHeader, strconv.FormatInt(rule.Quota.Limit(), 10))
	case mutant.Is(mutant.DenialCallsProvider):
		s.callProvider(s.pick())
	}
}

// mutateDenialType breaks a 429's error type.
func mutateDenialType(t string) string {
	if mutant.Is(mutant.DenialTypedInsufficientQuota) {
		return "insufficient_quota"
	}
	return t
}

// callProvider sends a minimal chat request to p and discards the answer.
func (s *Server) callProvider(p *upstream) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	body := []byte(`{"model":"mutant","messages":[{"role":"user","content":"hello"}],"max_tokens":1}`)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.chatURL, bytes.NewReader(body))
	if err != nil {
		return
	}
	req.Header.Set("Content-Type", "application/json")
	if resp, err := s.transport.RoundTrip(req); err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
}

// mutateAdmitted breaks an admitted response's headers.
func (s *Server) mutateAdmitted(h http.Header, q *ledger.Quota, p *upstream) {
	switch {
	case mutant.Is(mutant.RemainingAlwaysLimit):
		h.Set(wire.RemainingTokensHeader, strconv.FormatInt(q.Limit(), 10))
	case mutant.Is(mutant.WrongAttributionSite):
		for i, u := range s.providers {
			if u == p {
				h.Set(wire.SiteHeader, s.providers[(i+1)%len(s.providers)].site)
			}
		}
	}
}

// mutateRetry sends a failed provider call once more, to the next provider.
func (s *Server) mutateRetry(out *http.Request, body []byte, resp *http.Response, err error) (*http.Response, error) {
	if !mutant.Is(mutant.TransparentRetry) || (err == nil && resp.StatusCode < 400) {
		return resp, err
	}
	if resp != nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	next := s.pick()
	req, rerr := http.NewRequestWithContext(out.Context(), http.MethodPost, next.chatURL, bytes.NewReader(body))
	if rerr != nil {
		return nil, rerr
	}
	req.Header = out.Header.Clone()
	return s.transport.RoundTrip(req)
}

// mutateLedger wraps the ledger for the mutants that break admission and settlement.
func mutateLedger(l ledger.Ledger, p *ledger.CompiledPolicy) ledger.Ledger {
	switch mutant.Active() {
	case mutant.SeparateMemoryStores:
		_ = l.Close()
		return &mutantLedger{Ledger: ledger.NewMemory(p.Limits, nil)}
	case mutant.ReadThenWriteReserve, mutant.AdmissionIgnoresEstimate, mutant.FailOpen, mutant.StoreErrorAs429,
		mutant.SettleDoubleCharge, mutant.SettleDoubleRefund, mutant.SettleIgnoresUsage, mutant.ProbesConsumeQuota,
		mutant.SettleDropsLostOverage:
		return &mutantLedger{Ledger: l}
	}
	return l
}

// readThenWriteGap is the time between the read and the write of read-then-write-reserve: a
// store round trip across a network plus the decision, so that a burst interleaves with it
// as it would between real hosts rather than only by luck on one machine's loopback.
const readThenWriteGap = 20 * time.Millisecond

type mutantLedger struct {
	ledger.Ledger

	mu      sync.Mutex
	lastQ   *ledger.Quota
	lastKey string
	widened map[widenKey]*ledger.Quota
}

type widenKey struct {
	q     *ledger.Quota
	extra int64
}

// widen returns q with every capacity raised by extra (cached: the Valkey backend caches its
// script layout per *Quota). The windows, and so the store keys, stay q's.
func (m *mutantLedger) widen(q *ledger.Quota, extra int64) *ledger.Quota {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.widened == nil {
		m.widened = make(map[widenKey]*ledger.Quota)
	}
	k := widenKey{q, extra}
	if w, ok := m.widened[k]; ok {
		return w
	}
	w := &ledger.Quota{Rule: q.Rule, Lease: q.Lease, Budgets: append([]ledger.Budget(nil), q.Budgets...)}
	for i := range w.Budgets {
		w.Budgets[i].Capacity += extra
	}
	m.widened[k] = w
	return w
}

// narrow reports a widened decision's windows against q's real capacities.
func narrow(d ledger.Decision, q *ledger.Quota) ledger.Decision {
	for i := range d.Windows {
		if i < len(q.Budgets) {
			used := d.Windows[i].Limit - d.Windows[i].Remaining
			d.Windows[i].Limit = q.Budgets[i].Capacity
			d.Windows[i].Remaining = max(0, q.Budgets[i].Capacity-used)
		}
	}
	return d
}

func (m *mutantLedger) Reserve(ctx context.Context, q *ledger.Quota, key string, est int64) (ledger.Decision, error) {
	m.mu.Lock()
	m.lastQ, m.lastKey = q, key
	m.mu.Unlock()
	switch mutant.Active() {
	case mutant.ReadThenWriteReserve:
		st, err := m.Ledger.Inspect(ctx, q, key)
		if err != nil {
			return ledger.Decision{}, err
		}
		for i, b := range q.Budgets {
			if i < len(st.Windows) && st.Windows[i].Settled+st.ReservedTokens+est > b.Capacity {
				// Denied on the read: the real reserve words the denial (its Retry-After is
				// true), so this mutant breaks atomicity only.
				return m.Ledger.Reserve(ctx, q, key, est)
			}
		}
		// The decision between the read and the write: a round trip and the gateway's own
		// arithmetic, which concurrent requests on both gateways interleave with.
		time.Sleep(readThenWriteGap)
		d, err := m.Ledger.Reserve(ctx, m.widen(q, 1<<40), key, est)
		return narrow(d, q), err
	case mutant.AdmissionIgnoresEstimate:
		// settled + reserved + est ≤ capacity + est − 1  ⇔  settled + reserved + 1 ≤ capacity
		d, err := m.Ledger.Reserve(ctx, m.widen(q, est-1), key, est)
		return narrow(d, q), err
	}
	d, err := m.Ledger.Reserve(ctx, q, key, est)
	if err != nil {
		switch mutant.Active() {
		case mutant.FailOpen:
			var b [16]byte
			_, _ = rand.Read(b[:])
			return ledger.Decision{Admitted: true, Reservation: ledger.Reservation{ID: hex.EncodeToString(b[:]), Key: key, Quota: q, Estimate: est}}, nil
		case mutant.StoreErrorAs429:
			return ledger.Decision{Denial: &ledger.Denial{Reason: ledger.ReasonWindowCapacity, Window: q.Budgets[0].Window,
				Limit: q.Budgets[0].Capacity, RetryAfter: time.Second}}, nil
		}
	}
	return d, err
}

func (m *mutantLedger) Settle(ctx context.Context, r ledger.Reservation, u ledger.Usage) (ledger.Settlement, error) {
	switch mutant.Active() {
	case mutant.SettleIgnoresUsage:
		return m.Ledger.Settle(ctx, r, ledger.Usage{})
	case mutant.SettleDoubleRefund:
		// The refund (estimate − usage) applied twice.
		if u.Known && u.Tokens < r.Estimate {
			u.Tokens = max(0, 2*u.Tokens-r.Estimate)
		}
		return m.Ledger.Settle(ctx, r, u)
	case mutant.SettleDropsLostOverage:
		// "Nothing to settle": a hold whose lease ran out was charged its estimate already.
		if live, err := m.Ledger.Renew(ctx, r); err == nil && !live {
			return ledger.Settlement{}, nil
		}
		return m.Ledger.Settle(ctx, r, u)
	case mutant.SettleDoubleCharge:
		out, err := m.Ledger.Settle(ctx, r, u)
		if err != nil || !out.Applied || out.Charged <= 0 || r.Quota == nil {
			return out, err
		}
		// The repeated settle charges again: one more unconditional charge of the same amount.
		d, err := m.Ledger.Reserve(ctx, m.widen(r.Quota, 1<<40), r.Key, out.Charged)
		if err == nil && d.Admitted {
			_, err = m.Ledger.Settle(ctx, d.Reservation, ledger.Usage{Tokens: out.Charged, Known: true})
		}
		return out, err
	}
	return m.Ledger.Settle(ctx, r, u)
}

// chargeLast charges one token to the key reserved last (probes-consume-quota).
func (m *mutantLedger) chargeLast(parent context.Context, timeout time.Duration) {
	m.mu.Lock()
	q, key := m.lastQ, m.lastKey
	m.mu.Unlock()
	if q == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(parent), timeout)
	defer cancel()
	if d, err := m.Ledger.Reserve(ctx, m.widen(q, 1<<40), key, 1); err == nil && d.Admitted {
		_, _ = m.Ledger.Settle(ctx, d.Reservation, ledger.Usage{Tokens: 1, Known: true})
	}
}

// mutateClampFacts breaks the hard clamp's division among the choices (hard-clamp-ignores-n).
func mutateClampFacts(f ledger.RequestFacts) ledger.RequestFacts {
	if mutant.Is(mutant.HardClampIgnoresN) {
		f.Choices = nil
	}
	return f
}

// mutateClamp undoes part of the hard clamp written into the forwarded body: max_completion_tokens
// goes back to what the client sent (hard-clamp-max-tokens-only: only max_tokens is clamped), or
// is dropped when the client sent none (hard-clamp-sent-fields-only: only the fields sent are).
func mutateClamp(obj map[string]json.RawMessage, cr *chatRequest) {
	switch {
	case mutant.Is(mutant.HardClampMaxTokensOnly) && cr.MaxCompletionTokens != nil:
		obj["max_completion_tokens"] = json.RawMessage(strconv.FormatInt(*cr.MaxCompletionTokens, 10))
	case mutant.Is(mutant.HardClampMaxTokensOnly), mutant.Is(mutant.HardClampSentFieldsOnly) && cr.MaxCompletionTokens == nil:
		delete(obj, "max_completion_tokens")
	}
}

// mutateUsageTokens reads a usage object the broken ways: its total trusted as it is
// (usage-trusts-total), its figures added up whatever their sign (usage-trusts-negative) or
// size, in int64 arithmetic (usage-unbounded). mutated is false when the usage is read as
// always.
func mutateUsageTokens(u *usageJSON) (n int64, ok, mutated bool) {
	if u == nil || u.PromptTokens == nil || u.CompletionTokens == nil {
		return 0, false, false
	}
	p, c := *u.PromptTokens, *u.CompletionTokens
	switch mutant.Active() {
	case mutant.UsageTrustsTotal:
		if t := u.TotalTokens; t != nil && *t >= 0 && *t <= maxUsageTokens {
			return *t, true, true
		}
	case mutant.UsageTrustsNegative:
		if p > maxUsageTokens || c > maxUsageTokens {
			return 0, false, true
		}
		sum := p + c
		if t := u.TotalTokens; t != nil && *t <= maxUsageTokens && *t > sum {
			sum = *t
		}
		return sum, true, true
	case mutant.UsageUnbounded:
		if p < 0 || c < 0 {
			return 0, false, true
		}
		sum := p + c // may overflow
		if t := u.TotalTokens; t != nil && *t > sum {
			sum = *t
		}
		return sum, true, true
	}
	return 0, false, false
}

// mutateRunningUsage breaks how a stream's usage chunks combine: each added to the charge
// (usage-chunks-summed), or the last replacing the others (usage-last-chunk-wins). usage is
// the combination read as always (the largest).
func mutateRunningUsage(seen bool, prev, n, usage int64) int64 {
	switch {
	case mutant.Is(mutant.UsageChunksSummed) && seen:
		return prev + n
	case mutant.Is(mutant.UsageLastChunkWins):
		return n
	}
	return usage
}

// mutateDataHandler serves one path past the quota: the chat path with a trailing slash, as a
// router that strips it would (trailing-slash-unmetered), or /v1/embeddings, as a gateway that
// meters chat alone would (embeddings-unmetered). Authenticated or not, the body goes to the
// next provider's endpoint and its answer back to the client, with no reservation and no charge.
func (s *Server) mutateDataHandler(h http.Handler) http.Handler {
	var path, upstreamPath string
	switch {
	case mutant.Is(mutant.TrailingSlashUnmetered):
		path, upstreamPath = "/v1/chat/completions/", chatEndpoint.path
	case mutant.Is(mutant.EmbeddingsUnmetered):
		path, upstreamPath = embeddingsEndpoint.path, embeddingsEndpoint.path
	default:
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path || r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.policy.Limits.MaxBodyBytes))
		if err != nil {
			writeError(w, http.StatusBadRequest, wire.TypeInvalidRequest, wire.CodeInvalidJSON, "the request body could not be read")
			return
		}
		p := s.pick()
		out, err := http.NewRequestWithContext(r.Context(), http.MethodPost, p.base+upstreamPath, bytes.NewReader(body))
		if err != nil {
			writeError(w, http.StatusBadGateway, wire.TypeUpstream, wire.CodeUpstream, "the provider could not be contacted")
			return
		}
		out.Header = upstreamHeaders(r.Header, s.requestID(r))
		resp, err := s.transport.RoundTrip(out)
		if err != nil {
			writeError(w, http.StatusBadGateway, wire.TypeUpstream, wire.CodeUpstream, "the provider could not be reached")
			return
		}
		defer resp.Body.Close()
		copyHeaders(w.Header(), resp.Header, notDownstream)
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	})
}
