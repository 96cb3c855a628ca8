package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quotaqual/quotaqual/internal/mutant"
	"github.com/quotaqual/quotaqual/ledger"
	"github.com/quotaqual/quotaqual/wire"
)

// Request outcomes (log "decision", metric result).
const (
	resultAdmitted        = "admitted"
	resultDenied          = "denied"
	resultUnauthenticated = "unauthenticated"
	resultStoreError      = "store_error"
	resultBadRequest      = "bad_request"
)

// How an admitted request ended (log "end").
const (
	endCompleted        = "completed"
	endClientDisconnect = "client_disconnect"
	endProviderError    = "provider_error"
	endUpstreamTimeout  = "upstream_timeout"
)

const maxModelBytes = 256

// chatRequest holds the request body fields the gateway reads. Everything else is forwarded
// untouched.
type chatRequest struct {
	Model               *string `json:"model"`
	MaxTokens           *int64  `json:"max_tokens"`
	MaxCompletionTokens *int64  `json:"max_completion_tokens"`
	MaxOutputTokens     *int64  `json:"max_output_tokens"` // the Responses API's bound
	N                   *int64  `json:"n"`
	Stream              *bool   `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage *bool `json:"include_usage"`
	} `json:"stream_options"`

	// forwardModel, when set, is written into the forwarded body: the model came from the
	// x-model header and the body had none.
	forwardModel string
	// clampOutput, when positive, is the output bound per choice written into the forwarded
	// body (enforcement hard): max_completion_tokens, and max_tokens when the client sent it.
	clampOutput int64
	// clampField, when set, is the one output-bound field the clamp writes (the endpoint's
	// own: max_output_tokens, or legacy max_tokens) instead of chat's two.
	clampField string
	// noStreamUsage: the endpoint reports usage in its stream unasked and takes no
	// stream_options (the Responses API).
	noStreamUsage bool
}

// requestRecord is what the per-request log line reports. It never holds credentials, prompts
// or completions; the subject appears only as its quota hash.
type requestRecord struct {
	id       string
	start    time.Time
	decision string
	reason   string
	rule     string
	subject  string // ledger.SubjectKey hash
	estimate int64
	actual   int64
	known    bool // actual is the usage the provider reported
	floor    bool // actual is the least known to have been consumed (usage unreported)
	site     string
	status   int
	stream   bool
	end      string
	latency  time.Duration

	// unreadBody: the client announced a body the gateway has not read. A denial then closes
	// the connection rather than let net/http drain a body that may never come.
	unreadBody bool
}

// logRequest writes the request's log line. Its attributes are typed (slog.Attr, no boxing)
// and gathered on the stack: the line is written once per request.
func (s *Server) logRequest(rec *requestRecord, extra ...slog.Attr) {
	var buf [20]slog.Attr
	attrs := append(buf[:0],
		slog.String("request_id", rec.id),
		slog.String("decision", rec.decision),
		slog.String("reason", rec.reason),
		slog.String("rule", rec.rule),
		slog.String("subject_hash", rec.subject),
		slog.Int64("estimate", rec.estimate),
		slog.Int("status", rec.status),
		slog.Float64("latency_ms", float64(rec.latency.Microseconds())/1000),
	)
	if rec.decision == resultAdmitted {
		attrs = append(attrs, slog.String("site", rec.site), slog.Bool("stream", rec.stream),
			slog.String("end", rec.end), slog.Bool("usage_known", rec.known))
		if rec.known || rec.floor {
			attrs = append(attrs, slog.Int64("actual", rec.actual))
		}
		if rec.floor {
			attrs = append(attrs, slog.Bool("usage_floor", true))
		}
	}
	// Straight to the handler: Logger.LogAttrs would also record the caller's program counter
	// (runtime.Callers, a stack walk per request) for a source the handler never writes.
	h, ctx := s.log.Handler(), context.Background()
	if !h.Enabled(ctx, slog.LevelInfo) {
		return
	}
	r := slog.NewRecord(time.Now(), slog.LevelInfo, "request", 0)
	r.AddAttrs(append(attrs, extra...)...)
	_ = h.Handle(ctx, r)
}

// deny finishes a request the gateway refused: metric, log line, response.
func (s *Server) deny(w http.ResponseWriter, rec *requestRecord, status int, result, reason, typ, code, msg string) {
	rec.decision, rec.reason, rec.status = result, reason, status
	if rec.unreadBody {
		w.Header().Set("Connection", "close")
	}
	s.m.requests.WithLabelValues(rec.rule, result, reason).Inc()
	writeError(w, status, typ, code, msg)
	rec.latency = time.Since(rec.start)
	s.logRequest(rec)
}

// serveChat is the shared admission and settlement path of every metered endpoint (ep).
func (s *Server) serveChat(w http.ResponseWriter, r *http.Request, ep *endpoint) {
	rec := &requestRecord{start: time.Now(), id: s.requestID(r), unreadBody: r.ContentLength != 0 && !mutant.Is(mutant.NoRequestBounds)}
	w.Header()[hRequestID] = []string{rec.id}
	// The request must arrive, and every write leave, in bounded time: a connection whose
	// client stalls holds no goroutine, lease or settlement forever.
	rc := http.NewResponseController(w)
	if !mutant.Is(mutant.NoRequestBounds) {
		_ = rc.SetReadDeadline(rec.start.Add(s.cfg.Server.readTimeout))
	}
	_ = rc.SetWriteDeadline(rec.start.Add(s.cfg.Server.readTimeout + s.cfg.Server.writeTimeout))

	// 1. Authenticate, before anything else is looked at.
	subject, ok := s.auth.authenticate(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", s.auth.challenge)
		mutateChallenge(w.Header())
		s.deny(w, rec, http.StatusUnauthorized, resultUnauthenticated, wire.CodeInvalidCredentials,
			wire.TypeAuthentication, wire.CodeInvalidCredentials,
			"missing or invalid credentials; authenticate with HTTP Basic or a bearer API key")
		return
	}
	rec.subject = ledger.SubjectKey(subject)
	if !s.inFlight.acquire(subject) {
		w.Header().Set(wire.RetryAfterHeader, "1")
		s.deny(w, rec, http.StatusTooManyRequests, resultDenied, wire.CodeSubjectInFlight,
			wire.TypeRateLimit, wire.CodeSubjectInFlight, fmt.Sprintf(
				"this caller already has %d requests in flight on this gateway (server.max_in_flight_per_subject); retry when one finishes", s.inFlight.max))
		return
	}
	defer s.inFlight.release(subject)
	if s.draining.Load() {
		w.Header().Set("Connection", "close")
		w.Header().Set(wire.RetryAfterHeader, "1")
		s.deny(w, rec, http.StatusServiceUnavailable, resultBadRequest, wire.CodeDraining,
			wire.TypeServer, wire.CodeDraining, "the gateway is shutting down; retry on another gateway")
		return
	}

	// 2. Body and model.
	limit := s.policy.Limits.MaxBodyBytes
	if r.ContentLength > limit {
		s.deny(w, rec, http.StatusRequestEntityTooLarge, resultBadRequest, wire.CodeBodyTooLarge,
			wire.TypeInvalidRequest, wire.CodeBodyTooLarge, fmt.Sprintf("request body is larger than %d bytes", limit))
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err == nil {
		// Read whole: lift the deadline, or net/http's watch for the client going away
		// would time out mid-stream and cancel the request.
		rec.unreadBody = false
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			s.deny(w, rec, http.StatusRequestEntityTooLarge, resultBadRequest, wire.CodeBodyTooLarge,
				wire.TypeInvalidRequest, wire.CodeBodyTooLarge, fmt.Sprintf("request body is larger than %d bytes", limit))
			return
		}
		// The client went away while sending, or sent a malformed body: answer anyway (a
		// handler that writes nothing would send 200 OK).
		s.deny(w, rec, http.StatusBadRequest, resultBadRequest, "body_read",
			wire.TypeInvalidRequest, wire.CodeInvalidJSON, "the request body could not be read")
		return
	}
	cr, err := parseChatRequest(body)
	cr = ep.read(cr)
	if err != nil {
		s.deny(w, rec, http.StatusBadRequest, resultBadRequest, wire.CodeInvalidJSON,
			wire.TypeInvalidRequest, wire.CodeInvalidJSON, "request body is not a valid chat completion JSON object: "+jsonErrorSummary(err))
		return
	}
	if err := cr.checkEstimable(); err != nil {
		s.deny(w, rec, http.StatusBadRequest, resultBadRequest, wire.CodeInvalidValue,
			wire.TypeInvalidRequest, wire.CodeInvalidValue, err.Error())
		return
	}
	// One model decides the rule and is what the provider serves: the body's, else the x-model
	// header's, which is then written into the forwarded body. Both, disagreeing, is refused.
	model, headerModel := "", r.Header.Get("x-model")
	switch {
	case cr.Model != nil && headerModel != "" && *cr.Model != headerModel:
		s.deny(w, rec, http.StatusBadRequest, resultBadRequest, "model_conflict",
			wire.TypeInvalidRequest, wire.CodeModelNotAllowed, "the body's model and the x-model header disagree; send one model")
		return
	case cr.Model != nil:
		model = *cr.Model
	default:
		model = headerModel
		cr.forwardModel = headerModel
	}
	if len(model) > maxModelBytes {
		s.deny(w, rec, http.StatusBadRequest, resultBadRequest, "model_too_long",
			wire.TypeInvalidRequest, wire.CodeModelNotAllowed, fmt.Sprintf("model name is longer than %d bytes", maxModelBytes))
		return
	}

	// 3. Rule and model.
	rule, ok := s.policy.Match(subject, model)
	if !ok {
		s.deny(w, rec, http.StatusForbidden, resultDenied, wire.CodeNoRule,
			wire.TypePermission, wire.CodeNoRule, "no quota rule applies to this caller and model")
		return
	}
	rec.rule = rule.Name
	if !rule.ModelAllowed(model) {
		if model == "" {
			s.deny(w, rec, http.StatusBadRequest, resultBadRequest, wire.CodeModelMissing,
				wire.TypeInvalidRequest, wire.CodeModelMissing,
				"model is required (JSON \"model\" or the x-model header); allowed: "+strings.Join(rule.AllowedModels, ", "))
			return
		}
		s.deny(w, rec, http.StatusNotFound, resultBadRequest, "model_not_allowed",
			wire.TypeInvalidRequest, wire.CodeModelNotAllowed,
			"model is not allowed under quota rule "+rule.Name+"; allowed: "+strings.Join(rule.AllowedModels, ", "))
		return
	}

	// 4. Estimate and reserve.
	facts := ledger.RequestFacts{Model: model, MaxTokens: cr.MaxTokens, MaxCompletionTokens: cr.MaxCompletionTokens,
		Choices: cr.N, BodyBytes: int64(len(body))}
	if mutant.Is(mutant.LegacyEstimate) {
		facts.Choices = nil
		if facts.MaxTokens != nil && *facts.MaxTokens > 0 {
			facts.MaxCompletionTokens = nil
		}
	}
	est := rule.Estimate(facts)
	rec.estimate = est
	if rule.Enforcement == ledger.EnforcementHard && !ep.inputOnly {
		// The provider is asked for no more than the reservation covers after the prompt.
		limit, ok := rule.OutputLimit(mutateClampFacts(facts), est)
		if !ok {
			s.deny(w, rec, http.StatusBadRequest, resultBadRequest, wire.CodePromptFillsQuota,
				wire.TypeInvalidRequest, wire.CodePromptFillsQuota, fmt.Sprintf(
					"the prompt alone is estimated at %d tokens, leaving no output within the request's reservation of %d under rule %s (enforcement hard); shorten the prompt or lower n",
					rule.InputEstimate(facts.BodyBytes), est, rule.Name))
			return
		}
		cr.clampOutput = limit
	}
	key := rule.Key(subject, model)
	if mutant.Is(mutant.ModelLeftOutOfKey) {
		key = ledger.SubjectKey(subject)
	}
	t0 := time.Now()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), s.storeTimeout)
	dec, err := s.led.Reserve(rctx, rule.Quota, key, est)
	cancel()
	backend := s.led.Backend()
	if err != nil {
		s.m.admission.WithLabelValues(backend, resultStoreError).Observe(time.Since(t0).Seconds())
		s.m.backendErrors.WithLabelValues(backend, "reserve").Inc()
		w.Header().Set(wire.RetryAfterHeader, "1")
		s.log.Warn("quota store error", "request_id", rec.id, "rule", rule.Name, "operation", "reserve", "error", redactErr(err))
		s.deny(w, rec, http.StatusServiceUnavailable, resultStoreError, "store_unavailable",
			wire.TypeStore, wire.CodeStore, "the quota store is unavailable; the request was not admitted (fail closed). Retry later")
		return
	}
	if !dec.Admitted {
		s.m.admission.WithLabelValues(backend, resultDenied).Observe(time.Since(t0).Seconds())
		s.denyQuota(w, rec, rule, est, dec.Denial)
		return
	}
	s.admittedSeconds.get(func() prometheus.Observer { return s.m.admission.WithLabelValues(backend, resultAdmitted) }).
		Observe(time.Since(t0).Seconds())
	rs := s.seriesOf(rule.Name)
	rs.requestsAdmitted().Inc()
	rs.tokensReserved().Add(float64(est))
	rs.reservationsInFlight().Inc()
	rec.decision = resultAdmitted
	res := dec.Reservation

	var rn *renewer
	if s.renew {
		rn = s.startRenewal(res)
	}
	queued := false
	defer func() {
		// forward panicked (net/http recovers it): settle at the estimate rather than leave a
		// hold that the renewer would keep alive for the life of the process.
		if !queued {
			rec.latency = time.Since(rec.start)
			s.settler.enqueue(settleJob{res: res, usage: ledger.Usage{}, rec: rec, rn: rn, series: rs})
		}
	}()
	m := s.forward(w, r, rec, rule.Quota, dec, body, &cr, ep)
	usage := m.charge(est, rule.InputEstimate(int64(len(body))))
	if mutant.Is(mutant.EstimateOnDisconnect) && !m.notSent && !(m.reported() && m.status/100 == 2 && !m.fromTail) {
		usage = ledger.Usage{}
	}
	rec.known, rec.floor = m.reported(), !m.reported() && usage.Known
	rec.latency = time.Since(rec.start)
	queued = true
	s.settler.enqueue(settleJob{res: res, usage: usage, rec: rec, rn: rn, series: rs})
}

// denyQuota writes the 429 (or the 400 for an estimate no window can ever hold).
//
// Header formats: Retry-After is whole seconds S = max(1, ceil(RetryAfter)); x-ratelimit-
// reset-tokens is the same S written as a Go/OpenAI-style duration in whole seconds ("7s",
// "61s" — never "1m1s", so clients can parse it with a trailing-"s" strip or
// time.ParseDuration); x-ratelimit-limit-tokens is the rule's smallest window capacity
// (Quota.Limit); x-ratelimit-remaining-tokens is the refusing window's remaining capacity (on
// admitted responses: the smallest remaining capacity after the reservation).
func (s *Server) denyQuota(w http.ResponseWriter, rec *requestRecord, rule *ledger.CompiledRule, est int64, d *ledger.Denial) {
	if d == nil {
		d = &ledger.Denial{Reason: ledger.ReasonWindowCapacity, Limit: rule.Quota.Limit()}
	}
	reason := string(d.Reason)
	h := w.Header()
	limit := rule.Quota.Limit()
	h.Set(wire.LimitTokensHeader, strconv.FormatInt(limit, 10))
	h.Set(wire.RemainingTokensHeader, strconv.FormatInt(max(d.Remaining, 0), 10))
	if d.Reason == ledger.ReasonEstimateTooLarge {
		s.deny(w, rec, http.StatusBadRequest, resultDenied, reason, wire.TypeInvalidRequest, wire.CodeEstimateTooLarge,
			fmt.Sprintf("the request's token estimate (%d) is larger than the %s window's whole capacity (%d); lower max_tokens",
				est, ledger.Duration(d.Window), d.Limit))
		return
	}
	secs := retryAfterSeconds(d.RetryAfter)
	h.Set(wire.RetryAfterHeader, strconv.FormatInt(secs, 10))
	h.Set(wire.ResetTokensHeader, strconv.FormatInt(secs, 10)+"s")
	var msg, code string
	switch d.Reason {
	case ledger.ReasonWindowCapacity:
		code = wire.CodeTokenQuota
		msg = fmt.Sprintf("token quota exceeded for the %s window of rule %s: %d tokens requested, %d of %d remaining; retry after %ds",
			ledger.Duration(d.Window), rule.Name, est, max(d.Remaining, 0), d.Limit, secs)
	case ledger.ReasonKeyCapacity:
		code = reason
		msg = "this gateway tracks as many quota keys as it may (limits.max_keys); retry later"
	case ledger.ReasonReservationCapacity:
		code = reason
		msg = "this gateway holds as many in-flight reservations as it may (limits.max_active_reservations); retry later"
	default:
		code = reason
		msg = "the request cannot be admitted under quota rule " + rule.Name + " (" + reason + ")"
	}
	s.mutateDenial(h, rule, d)
	s.deny(w, rec, http.StatusTooManyRequests, resultDenied, reason, mutateDenialType(wire.TypeRateLimit), code, msg)
}

// retryAfterSeconds is max(1, ceil(d in seconds)).
func retryAfterSeconds(d time.Duration) int64 {
	s := int64(math.Ceil(d.Seconds()))
	if s < 1 {
		s = 1
	}
	return s
}

// hopHeaders are never forwarded in either direction (RFC 9110 §7.6.1), nor are the
// credential headers in credentialHeaders forwarded upstream.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

var credentialHeaders = []string{
	"Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key", "Api-Key",
}

// methodOverrideHeaders ask frameworks to serve a request as another method. The gateway
// admitted and meters a POST, so a provider is never asked to treat it as anything else.
var methodOverrideHeaders = []string{"X-Http-Method-Override", "X-Http-Method", "X-Method-Override"}

// Canonical names of the headers the gateway sets, so that setting one on every request does
// not canonicalize (allocate) the name again.
var (
	hRequestID      = http.CanonicalHeaderKey(wire.RequestIDHeader)
	hSite           = http.CanonicalHeaderKey(wire.SiteHeader)
	hLimitTokens    = http.CanonicalHeaderKey(wire.LimitTokensHeader)
	hRemainingToken = http.CanonicalHeaderKey(wire.RemainingTokensHeader)
)

// notUpstream are the canonical names never sent to a provider: hop-by-hop, credentials, method
// overrides, and those the gateway sets or decides itself (identity upstream: the gateway reads usage from
// the body).
var notUpstream = headerSet(slices.Concat([]string{"Content-Length", "Accept-Encoding", "Host"}, hopHeaders, credentialHeaders, methodOverrideHeaders))

// notDownstream are the canonical names of a provider's response never relayed to the client.
var notDownstream = headerSet(hopHeaders)

func headerSet(names []string) map[string]bool {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[http.CanonicalHeaderKey(n)] = true
	}
	return set
}

// upstreamHeaders builds the headers sent to the provider: the client's, minus hop-by-hop
// and credential headers, plus the request id.
func upstreamHeaders(in http.Header, reqID string) http.Header {
	out := make(http.Header, len(in)+1)
	copyHeaders(out, in, notUpstream)
	out[hRequestID] = []string{reqID}
	if out.Get("Content-Type") == "" {
		out.Set("Content-Type", "application/json")
	}
	mutateUpstreamHeaders(out, in)
	return out
}

// copyHeaders copies the fields of src into dst but those named in skip and those src's
// Connection header lists (hop-by-hop by declaration). Names are compared canonical, as
// Header.Del compares them; net/http canonicalizes what it reads off the wire.
func copyHeaders(dst, src http.Header, skip map[string]bool) {
	var listed []string
	for _, f := range src["Connection"] {
		for _, sf := range strings.Split(f, ",") {
			if sf = strings.TrimSpace(sf); sf != "" {
				listed = append(listed, http.CanonicalHeaderKey(sf))
			}
		}
	}
	for k, v := range src {
		if !skip[k] && !slices.Contains(listed, k) {
			dst[k] = v
		}
	}
}

// upstreamBody returns the body to send and whether the gateway added include_usage (so the
// usage-only final chunk must be removed from the client's stream).
func upstreamBody(body []byte, cr *chatRequest) ([]byte, bool) {
	stream := cr.Stream != nil && *cr.Stream
	wantsUsage := cr.StreamOptions != nil && cr.StreamOptions.IncludeUsage != nil && *cr.StreamOptions.IncludeUsage
	if cr.noStreamUsage {
		wantsUsage = true
	}
	if cr.forwardModel == "" && cr.clampOutput <= 0 && (!stream || wantsUsage) {
		return body, false
	}
	var obj map[string]json.RawMessage
	if len(bytes.TrimSpace(body)) == 0 {
		obj = map[string]json.RawMessage{}
	} else if err := json.Unmarshal(body, &obj); err != nil {
		return body, false
	}
	if cr.forwardModel != "" {
		m, _ := json.Marshal(cr.forwardModel)
		obj["model"] = m
	}
	if cr.clampOutput > 0 && cr.clampField != "" {
		obj[cr.clampField] = json.RawMessage(strconv.FormatInt(cr.clampOutput, 10))
	} else if cr.clampOutput > 0 {
		// Both output-bound fields, so a provider honouring either stays within the bound.
		obj["max_completion_tokens"] = json.RawMessage(strconv.FormatInt(cr.clampOutput, 10))
		if cr.MaxTokens != nil {
			obj["max_tokens"] = json.RawMessage(strconv.FormatInt(min(max(*cr.MaxTokens, 1), cr.clampOutput), 10))
		}
		mutateClamp(obj, cr)
	}
	if !stream || wantsUsage {
		nb, err := json.Marshal(obj)
		if err != nil {
			return body, false
		}
		return nb, false
	}
	opts := map[string]json.RawMessage{}
	if raw, ok := obj["stream_options"]; ok {
		_ = json.Unmarshal(raw, &opts) // a non-object is replaced
		if opts == nil {
			opts = map[string]json.RawMessage{}
		}
	}
	opts["include_usage"] = json.RawMessage("true")
	ob, err := json.Marshal(opts)
	if err != nil {
		return body, false
	}
	obj["stream_options"] = ob
	nb, err := json.Marshal(obj)
	if err != nil {
		return body, false
	}
	return nb, true
}

var relayBufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// maxJSONUsageBuffer bounds how much of a non-streaming response is kept whole to read its
// usage. Of a larger response only the last usageTailBytes are kept, and usage is read from
// them (providers write usage last).
const (
	maxJSONUsageBuffer = 8 << 20
	usageTailBytes     = 64 << 10
)

// forward sends the admitted request to the next provider and relays the response. It
// returns what was seen of the consumption; metered.charge turns it into the settlement.
func (s *Server) forward(w http.ResponseWriter, r *http.Request, rec *requestRecord, q *ledger.Quota, dec ledger.Decision, body []byte, cr *chatRequest, ep *endpoint) (m metered) {
	p := s.pick()
	rec.site = p.site
	rec.stream = cr.Stream != nil && *cr.Stream
	start := time.Now()
	defer func() { p.series.upstreamSeconds().Observe(time.Since(start).Seconds()) }()

	upBody, dropUsage := upstreamBody(body, cr)
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.upstreamTimeout)
	defer cancel()
	target := p.chatURL
	if ep != chatEndpoint {
		target = p.base + ep.path
	}
	if r.URL.RawQuery != "" {
		target += "?" + r.URL.RawQuery
	}
	// Whether the request reached the wire: one that never did (connection refused, DNS,
	// client gone first) consumed nothing and is settled at zero, not at the estimate.
	var wrote atomic.Bool
	traced := httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { wrote.Store(true) },
	})
	out, err := http.NewRequestWithContext(traced, http.MethodPost, target, bytes.NewReader(upBody))
	if err != nil {
		rec.end = endProviderError
		s.m.upstreamErrors.WithLabelValues(p.site, "transport").Inc()
		rec.status = http.StatusBadGateway
		writeError(w, http.StatusBadGateway, wire.TypeUpstream, wire.CodeUpstream, "the provider could not be contacted")
		m.notSent = true
		return m
	}
	out.Header = upstreamHeaders(r.Header, rec.id)
	out.ContentLength = int64(len(upBody))

	resp, err := s.transport.RoundTrip(out)
	resp, err = s.mutateRetry(out, upBody, resp, err)
	if err != nil {
		s.upstreamFailed(w, r, ctx, rec, p, err)
		m.notSent = !wrote.Load()
		return m
	}
	defer resp.Body.Close()
	p.series.upstreamRequests(resp.StatusCode).Inc()

	// Response headers: the provider's minus hop-by-hop, plus attribution and quota headers.
	h := w.Header()
	for _, hh := range hopHeaders {
		delete(h, hh) // none set by the gateway may reach the client either (names canonical)
	}
	copyHeaders(h, resp.Header, notDownstream)
	h[hSite] = []string{p.site}
	h[hRequestID] = []string{rec.id}
	h[hLimitTokens] = []string{strconv.FormatInt(q.Limit(), 10)}
	if rem, ok := minRemaining(dec.Windows); ok {
		h[hRemainingToken] = []string{strconv.FormatInt(rem, 10)}
	}
	s.mutateAdmitted(h, q, p)
	isSSE := strings.HasPrefix(strings.ToLower(h.Get("Content-Type")), "text/event-stream")
	if isSSE {
		h.Del("Content-Length") // events may be removed
	}
	rec.status = resp.StatusCode
	m.status = resp.StatusCode
	rc := http.NewResponseController(w)
	writeBy := func() { _ = rc.SetWriteDeadline(time.Now().Add(s.cfg.Server.writeTimeout)) }
	writeBy()
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	if isSSE && flusher != nil {
		flusher.Flush() // the client sees the stream start before the first token
	}

	bp := relayBufPool.Get().(*[]byte)
	defer relayBufPool.Put(bp)
	buf := *bp
	var (
		sse    *sseFilter
		js     = jsonUsageReader{ep: ep}
		outBuf []byte
	)
	if isSSE {
		sse = &sseFilter{dropUsageChunk: dropUsage, ep: ep}
	}
	// Whatever ends the relay, what was read so far is accounted.
	defer func() {
		if sse != nil {
			m.usage, m.usageSeen, m.usageGarbled, m.relayed = sse.usage, sse.seen, sse.garbled || sse.understated(), sse.relayed
			return
		}
		m.usage, m.usageSeen = js.result()
		m.fromTail = js.tooBig
		if m.status/100 == 2 {
			m.relayed = js.relayedTokens() // an error body is not output
		}
	}()
	rec.end = endCompleted
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			if sse != nil {
				outBuf = sse.feed(chunk, outBuf[:0])
				chunk = outBuf
			} else {
				js.feed(chunk)
			}
			if len(chunk) > 0 {
				writeBy() // a client that stops reading is cut off, and settles as gone
				if _, werr := w.Write(chunk); werr != nil {
					rec.end = endClientDisconnect
					s.m.upstreamErrors.WithLabelValues(p.site, "client_disconnect").Inc()
					return m
				}
				if flusher != nil {
					flusher.Flush()
				}
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			if sse != nil && sse.ended && r.Context().Err() != nil {
				// The stream's terminal event ([DONE], response.completed) was relayed and the
				// client then closed the connection before the provider's EOF reached the
				// gateway: the response was whole, and its usage is what it reported.
				m.finished = true
				return m
			}
			switch {
			case r.Context().Err() != nil:
				rec.end = endClientDisconnect
				s.m.upstreamErrors.WithLabelValues(p.site, "client_disconnect").Inc()
			case errors.Is(ctx.Err(), context.DeadlineExceeded):
				rec.end = endUpstreamTimeout
				s.m.upstreamErrors.WithLabelValues(p.site, "timeout").Inc()
			default:
				rec.end = endProviderError
				s.m.upstreamErrors.WithLabelValues(p.site, "body").Inc()
			}
			// A partial response is charged at least what it showed (metered.charge).
			return m
		}
	}
	if sse != nil {
		if tail := sse.finish(outBuf[:0]); len(tail) > 0 {
			writeBy()
			if _, werr := w.Write(tail); werr != nil {
				rec.end = endClientDisconnect
				return m
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
		m.finished = true
		return m
	}
	m.finished = true
	return m
}

// upstreamFailed answers a request whose provider call failed before any response header.
func (s *Server) upstreamFailed(w http.ResponseWriter, r *http.Request, ctx context.Context, rec *requestRecord, p *upstream, err error) {
	s.m.upstreamRequests.WithLabelValues(p.site, "error").Inc()
	switch {
	case r.Context().Err() != nil:
		rec.end, rec.status = endClientDisconnect, 499
		s.m.upstreamErrors.WithLabelValues(p.site, "client_disconnect").Inc()
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		rec.end, rec.status = endUpstreamTimeout, http.StatusGatewayTimeout
		s.m.upstreamErrors.WithLabelValues(p.site, "timeout").Inc()
		w.Header().Set(wire.SiteHeader, p.site)
		writeError(w, http.StatusGatewayTimeout, wire.TypeUpstream, wire.CodeUpstreamTimeout,
			"the provider did not answer within upstream_timeout")
	default:
		rec.end, rec.status = endProviderError, http.StatusBadGateway
		s.m.upstreamErrors.WithLabelValues(p.site, "transport").Inc()
		s.log.Warn("provider unreachable", "request_id", rec.id, "site", p.site, "error", err.Error())
		w.Header().Set(wire.SiteHeader, p.site)
		writeError(w, http.StatusBadGateway, wire.TypeUpstream, wire.CodeUpstream, "the provider could not be reached")
	}
}

func minRemaining(ws []ledger.WindowState) (int64, bool) {
	if len(ws) == 0 {
		return 0, false
	}
	m := ws[0].Remaining
	for _, w := range ws[1:] {
		if w.Remaining < m {
			m = w.Remaining
		}
	}
	return max(m, 0), true
}

// statusClasses are the classes upstream_requests_total counts a response status under.
var statusClasses = [...]string{"2xx", "3xx", "4xx", "5xx"}

// statusClass is the index in statusClasses of code's class: anything but 2xx, 3xx and 4xx
// counts as 5xx.
func statusClass(code int) int {
	switch code / 100 {
	case 2, 3, 4:
		return code/100 - 2
	default:
		return 3
	}
}

// jsonErrorSummary describes a JSON decoding error without echoing request content.
func jsonErrorSummary(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("syntax error at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("field %q must be a %s, not a JSON %s", te.Field, jsonKind(te.Type.Kind().String()), te.Value)
	default:
		return "not a JSON object"
	}
}

func jsonKind(k string) string {
	switch k {
	case "int64":
		return "whole number"
	case "ptr", "string":
		return "string"
	case "bool":
		return "boolean"
	case "struct":
		return "object"
	}
	return k
}

// redactErr renders a store error for logs without any URL (which may hold a password).
func redactErr(err error) string {
	msg := err.Error()
	for _, scheme := range []string{"redis://", "rediss://", "valkey://", "valkeys://"} {
		for {
			i := strings.Index(msg, scheme)
			if i < 0 {
				break
			}
			j := i + len(scheme)
			for j < len(msg) && msg[j] != ' ' && msg[j] != '"' && msg[j] != '\'' {
				j++
			}
			msg = msg[:i] + "<redacted-url>" + msg[j:]
		}
	}
	return msg
}
