package scenarios

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/providerstub"
)

// CredKind is the kind of credential a request carries.
type CredKind string

const (
	CredValid         CredKind = "valid"              // the subject's own username and password
	CredMissing       CredKind = "missing"            // no Authorization header
	CredMalformed     CredKind = "malformed"          // Basic with a value that is not base64
	CredBearer        CredKind = "unknown-bearer"     // Bearer with a token nobody was given
	CredNoColon       CredKind = "malformed-no-colon" // Basic base64(username) without ":password"
	CredWrongPassword CredKind = "wrong-password"     // the subject's username, a wrong password
	CredCrossSubject  CredKind = "cross-subject"      // another subject's username with this subject's password
)

const (
	// ChatPath is the gateways' chat completions endpoint.
	ChatPath = "/v1/chat/completions"

	wrongPassword       = "not-the-password-0"
	malformedBasicValue = "Basic not-valid-base64"
	unknownBearerValue  = "Bearer x"
)

// ChatCall describes one chat completion request through a gateway.
type ChatCall struct {
	Gateway   string   // topology.HostGatewayA or topology.HostGatewayB
	Label     string   // what the request is for, e.g. "exhaust-3"
	Subject   string   // subject label, e.g. "application-a" (the scenario's own principal)
	Cred      CredKind // default CredValid
	CrossWith string   // CredCrossSubject: the label whose username is sent (default the next subject)
	Stream    bool
	MaxTokens int64         // default 1; negative: the body has no max_tokens
	Hold      time.Duration // asks the provider stub to hold the request (body metadata)
	Timeout   time.Duration // default requestTimeout(profile)

	// Fields are added to the body (e.g. "n", "max_completion_tokens"); Metadata to its
	// metadata (the stub's per-request generation: providerstub.TokensMetadata, …).
	Fields   map[string]any
	Metadata map[string]string
	// StopAfterChunks, for a stream: the client closes the connection once it has read this
	// many content chunks (a client that leaves mid-generation).
	StopAfterChunks int
	// ProviderRefuses asks the provider stub for a hold it refuses, so the provider answers
	// 400: a failed provider call, to see that the gateway relays it and tries no other.
	ProviderRefuses bool
	// NoTransportRetry: a transport failure is not retried. For a request whose gateway is
	// killed under it, so no retry reaches the restarted gateway and holds quota of its own.
	NoTransportRetry bool
	// Headers are sent besides the ones every request carries (a client-controlled identity or
	// model header); they cannot replace Authorization or the scenario header.
	Headers map[string]string
	// Username, with CredValid, is the username sent instead of the subject's own, with the
	// subject's password: a spelling of it ("Application-A@…"), to see whom it is metered as.
	Username string
	// NoModel: the body has no "model" (a model header names it).
	NoModel bool
}

// Outcome is what one request produced.
type Outcome struct {
	Status    int // 0: no HTTP response
	Site      string
	RequestID string
	Headers   http.Header
	ErrorType string
	Usage     *evidence.Usage
	Start     time.Time // when the (last) attempt was sent
	End       time.Time // when its body was fully read
	Latency   time.Duration
	Attempts  int
	Err       error // transport error of the last attempt
	// Body is the start of a refusal's body (non-200; at most errorBodyKept bytes), so a
	// scenario can read what it tells the client. Never recorded as it is.
	Body string
}

// errorBodyKept bounds Outcome.Body: an error body is a short JSON object.
const errorBodyKept = 4 << 10

// Admitted reports a 200 answer.
func (o Outcome) Admitted() bool { return o.Status == http.StatusOK }

// Decided reports whether the gateway decided the request from its quota state: admitted or
// denied (429), not failed.
func (o Outcome) Decided() bool { return o.Admitted() || o.Status == http.StatusTooManyRequests }

// quotaHeaderNames are the response headers kept in the request log: the quota headers the
// gateway under test sends (quotaqual's: Retry-After and x-ratelimit-{limit,remaining,reset}-tokens).
func (env *Env) quotaHeaderNames() []string {
	h := env.gateway().Expect.QuotaHeaders
	var out []string
	for _, n := range []string{h.RetryAfter, h.Limit, h.Remaining, h.Reset} {
		if n != "" {
			out = append(out, n)
		}
	}
	return out
}

// Chat sends one chat completion from the client host and records every attempt. A real HTTP
// response (any status) is never retried; a transport failure (no response) is retried once,
// and both attempts are recorded.
func (env *Env) Chat(ctx context.Context, c ChatCall) Outcome {
	if c.Cred == "" {
		c.Cred = CredValid
	}
	if c.MaxTokens == 0 {
		c.MaxTokens = 1
	}
	if c.Timeout == 0 {
		c.Timeout = requestTimeout(env.Profile) + c.Hold
	}
	var o Outcome
	for attempt := 1; attempt <= 2; attempt++ {
		label := c.Label
		if attempt > 1 {
			label += "/transport-retry"
		}
		o = env.chatOnce(ctx, c, label)
		o.Attempts = attempt
		if o.Status != 0 || ctx.Err() != nil || c.NoTransportRetry {
			break
		}
	}
	return o
}

func (env *Env) chatOnce(ctx context.Context, c ChatCall, label string) Outcome {
	var o Outcome
	rec := evidence.RequestRecord{
		Scenario:   env.scenario,
		Label:      label,
		Gateway:    c.Gateway,
		Subject:    c.Subject,
		Credential: string(c.Cred),
		Method:     http.MethodPost,
		Path:       ChatPath,
	}
	defer func() {
		rec.Time = o.Start.UTC()
		rec.Status = o.Status
		rec.ProviderSite = o.Site
		rec.RequestID = o.RequestID
		rec.ErrorType = o.ErrorType
		rec.Usage = o.Usage
		rec.Latency = o.Latency
		if o.Err != nil {
			rec.Error = o.Err.Error()
		}
		if o.Headers != nil {
			for _, h := range env.quotaHeaderNames() {
				if v := o.Headers.Get(h); v != "" {
					if rec.QuotaHeaders == nil {
						rec.QuotaHeaders = map[string]string{}
					}
					rec.QuotaHeaders[strings.ToLower(h)] = v
				}
			}
		}
		env.record(rec)
	}()

	b := chatBody(c)
	rctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	u := strings.TrimRight(env.Topo.Gateway(c.Gateway).DataURL, "/") + ChatPath
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, u, bytes.NewReader(b))
	o.Start = time.Now()
	if err != nil {
		o.End = o.Start
		o.Err = fmt.Errorf("building the request: %w", err)
		return o
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range c.Headers {
		req.Header.Set(k, v)
	}
	env.label(req)
	if err := env.authorize(req, c); err != nil {
		o.End = o.Start
		o.Err = err
		return o
	}
	o.Start = time.Now()
	resp, err := env.Topo.Client().Do(req)
	if err != nil {
		o.End = time.Now()
		o.Latency = o.End.Sub(o.Start)
		o.Err = err
		return o
	}
	defer resp.Body.Close()
	o.Status = resp.StatusCode
	o.Headers = resp.Header
	o.Site = headerOf(resp.Header, env.gateway().Expect.Attribution.Header)
	o.RequestID = headerOf(resp.Header, env.gateway().Expect.RequestIDHeader)
	if c.StopAfterChunks > 0 {
		n, err := readContentChunks(resp.Body, c.StopAfterChunks)
		o.End = time.Now()
		o.Latency = o.End.Sub(o.Start)
		if err != nil {
			o.Err = fmt.Errorf("reading the stream (%d content chunks read): %w", n, err)
		}
		return o // the deferred Close leaves mid-stream
	}
	// The first 4 MiB are kept for the usage; the rest is read and dropped, so a large
	// response is read to its end like a real client would.
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err == nil {
		_, err = io.Copy(io.Discard, resp.Body)
	}
	o.End = time.Now()
	o.Latency = o.End.Sub(o.Start)
	if err != nil {
		o.Err = fmt.Errorf("reading the response body: %w", err)
	}
	if o.Status == http.StatusOK {
		if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
			o.Usage = streamUsage(raw)
		} else {
			o.Usage = jsonUsage(raw)
		}
	} else {
		o.ErrorType = errorType(raw)
		o.Body = string(raw[:min(len(raw), errorBodyKept)])
	}
	return o
}

// chatBody is the JSON body of c.
func chatBody(c ChatCall) []byte {
	body := map[string]any{
		"model":    providerstub.DefaultModel,
		"messages": []map[string]string{{"role": "user", "content": "hello"}},
	}
	if c.MaxTokens > 0 {
		body["max_tokens"] = c.MaxTokens
	}
	if c.Stream {
		body["stream"] = true
		body["stream_options"] = map[string]bool{"include_usage": true}
	}
	md := map[string]string{}
	if c.Hold > 0 {
		md[providerstub.HoldMetadata] = c.Hold.String()
	}
	if c.ProviderRefuses {
		md[providerstub.HoldMetadata] = "refuse-this-request"
	}
	for k, v := range c.Metadata {
		md[k] = v
	}
	if len(md) > 0 {
		body["metadata"] = md
	}
	for k, v := range c.Fields {
		body[k] = v
	}
	if c.NoModel {
		delete(body, "model")
	}
	b, _ := json.Marshal(body)
	return b
}

// label names the scenario on a request, so the providers count each scenario's calls apart
// while scenarios run side by side (a gateway forwards the header with the request).
func (env *Env) label(req *http.Request) {
	if env.scenario != "" {
		req.Header.Set(providerstub.ScenarioHeader, env.scenario)
	}
}

// readContentChunks reads SSE lines until n data lines carrying non-empty content were read.
func readContentChunks(r io.Reader, n int) (int, error) {
	br := bufio.NewReader(r)
	seen := 0
	for seen < n {
		line, err := br.ReadBytes('\n')
		if bytes.HasPrefix(line, []byte("data:")) && bytes.Contains(line, []byte(`"content":"`)) && !bytes.Contains(line, []byte(`"content":""`)) {
			seen++
		}
		if err != nil {
			return seen, err
		}
	}
	return seen, nil
}

// authorize sets the Authorization header the credential kind calls for. Secrets go only
// into the request header, never into the record.
func (env *Env) authorize(req *http.Request, c ChatCall) error {
	if c.Cred == CredMissing {
		return nil
	}
	switch c.Cred {
	case CredMalformed:
		req.Header.Set("Authorization", malformedBasicValue)
		return nil
	case CredBearer:
		req.Header.Set("Authorization", unknownBearerValue)
		return nil
	}
	own, ok := env.credential(c.Subject)
	if !ok {
		return fmt.Errorf("no credential for %s in scenario %s: build the deployment with this scenario", c.Subject, env.scenario)
	}
	switch c.Cred {
	case CredValid:
		user := own.Username
		if c.Username != "" {
			user = c.Username
		}
		req.SetBasicAuth(user, own.Password)
	case CredNoColon:
		req.Header.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(own.Username)))
	case CredWrongPassword:
		req.SetBasicAuth(own.Username, wrongPassword)
	case CredCrossSubject:
		other := c.CrossWith
		if other == "" {
			other = nextSubject(c.Subject)
		}
		oc, ok := env.credential(other)
		if !ok {
			return fmt.Errorf("no credential for %s in scenario %s", other, env.scenario)
		}
		req.SetBasicAuth(oc.Username, own.Password)
	default:
		return fmt.Errorf("unknown credential kind %q", c.Cred)
	}
	return nil
}

func nextSubject(label string) string {
	s := subjects()
	for i, l := range s {
		if l == label {
			return s[(i+1)%len(s)]
		}
	}
	return s[0]
}

func jsonUsage(raw []byte) *evidence.Usage {
	var v struct {
		Usage *evidence.Usage `json:"usage"`
	}
	if json.Unmarshal(raw, &v) != nil {
		return nil
	}
	return v.Usage
}

// streamUsage returns the last usage object of an SSE stream.
func streamUsage(raw []byte) *evidence.Usage {
	var last *evidence.Usage
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		data, ok := strings.CutPrefix(line, "data:")
		if !ok {
			continue
		}
		data = strings.TrimSpace(data)
		if data == "[DONE]" {
			continue
		}
		if u := jsonUsage([]byte(data)); u != nil {
			last = u
		}
	}
	return last
}

func errorType(raw []byte) string {
	var v struct {
		Error struct {
			Type string `json:"type"`
			Code any    `json:"code"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &v) != nil {
		return ""
	}
	return v.Error.Type
}

// charge is what an admitted response settles at: its reported total, or the estimate when
// it reported none.
func charge(o Outcome, estimate int64) int64 {
	if o.Usage != nil && o.Usage.TotalTokens > 0 {
		return o.Usage.TotalTokens
	}
	if o.Usage != nil && o.Usage.PromptTokens+o.Usage.CompletionTokens > 0 {
		return o.Usage.PromptTokens + o.Usage.CompletionTokens
	}
	return estimate
}

// statuses lists the status codes of outcomes, for facts.
func statuses(os []Outcome) []int {
	out := make([]int, len(os))
	for i, o := range os {
		out[i] = o.Status
	}
	return out
}

// quotaHeadersLabel names the quota headers in check names: quotaqual's as always
// ("Retry-After and x-ratelimit-*"), another gateway's by their names.
func (env *Env) quotaHeadersLabel() string {
	names := env.quotaHeaderNames()
	if slices.Equal(names, defaultQuotaHeaders) {
		return "Retry-After and x-ratelimit-*"
	}
	return strings.ToLower(strings.Join(names, ", "))
}

// quotaHeadersCount is the expected value of the headers-present check.
func (env *Env) quotaHeadersCount() string {
	n := len(env.quotaHeaderNames())
	if n == 4 {
		return "all four"
	}
	return fmt.Sprintf("all %d", n)
}

var defaultQuotaHeaders = (&Env{}).quotaHeaderNames()

// headerOf is h's value of name, "" when the gateway under test sends no such header.
func headerOf(h http.Header, name string) string {
	if name == "" || h == nil {
		return ""
	}
	return h.Get(name)
}

// hasQuotaHeaders reports whether a 429 carries every quota header the gateway under test
// sends (quotaqual's: Retry-After and the three x-ratelimit headers), and which are missing.
func (env *Env) hasQuotaHeaders(h http.Header) (bool, []string) {
	var missing []string
	for _, n := range env.quotaHeaderNames() {
		if h == nil || h.Get(n) == "" {
			missing = append(missing, strings.ToLower(n))
		}
	}
	return len(missing) == 0, missing
}
