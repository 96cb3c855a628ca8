// Package envoyaigw is the shim of Envoy AI Gateway's usage-based token rate limit on
// envoyproxy/ratelimit: exactly what Envoy (configured by Envoy Gateway from the AI Gateway's
// documented BackendTrafficPolicy) does around the rate-limit service, and nothing it does not.
//
// What it does, and where that comes from:
//
//   - The policy (envoyproxy/ai-gateway site/docs/capabilities/traffic/usage-based-ratelimiting.md
//     @c217da8a5): cost.request {from: Number, number: 0} ("Always set the request cost number
//     to 0") and cost.response {from: Metadata, io.envoy.ai_gateway/llm_total_token}.
//   - Envoy Gateway turns the rule into two route RateLimit entries with the same descriptor
//     actions (envoyproxy/gateway internal/xds/translator/ratelimit.go @03456e2e,
//     buildRouteRateLimits and rateLimitCostToHitsAddend): the request-path one with
//     hits_addend 0, and one with apply_on_stream_done and hits_addend = the metadata's token
//     count. The descriptor is (route, route) then (rule-0-match-0, <the user's header value>).
//   - The filter (same file, buildRateLimitFilter): domain = the listener; X-RateLimit headers
//     DRAFT_VERSION_03 unless disabled; failure_mode_deny only when the global rate limit is
//     FailClosed (so fail open by default); the timeout only when configured, else Envoy's
//     20 ms (go-control-plane envoy v1.37.0 extensions/filters/http/ratelimit/v3/rate_limit.pb.go,
//     Timeout; StatusOnError "The default status is 500").
//   - Envoy's filter (envoyproxy/envoy source/extensions/filters/http/ratelimit/ratelimit.cc,
//     Filter::complete): OVER_LIMIT → a local 429 with x-envoy-ratelimited: true and the
//     service's (empty) body; an RPC error → continue when failure_mode_deny is false, else a
//     local reply with status_on_error (500); every answer carries the X-RateLimit headers of
//     the descriptor closest to its limit (ratelimit_headers.cc: "N, N;w=<window s>",
//     remaining, seconds to reset).
//   - At stream done the second call's answer is ignored (the limit is not enforced there),
//     and a metadata value that does not resolve — no usage seen, as when the client went away
//     before the usage chunk — drops the descriptor: nothing is charged
//     (go-control-plane config/route/v3/route_components.pb.go RateLimit.hits_addend,
//     apply_on_stream_done).
//
// What it does not do: no reservation, no estimate, no lease, no retry, no refund; the
// stream-done call is fire and forget. A request is admitted iff the tokens already charged
// are within the limit (envoy ratelimit: OVER_LIMIT iff count + hits_addend > limit, so with
// hits_addend 0 exactly at the limit still passes), and every request in flight is admitted
// against the same count. `quotaqual shim envoy-ai-gateway --config F` runs it
// (undertest/profiles/envoy-ai-gateway*.yaml).
package envoyaigw

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/quotaqual/quotaqual/internal/peers/rls"
	"github.com/quotaqual/quotaqual/internal/peers/shim"
)

// Config is the shim's JSON config.
type Config struct {
	Front     shim.Front `json:"front"`
	RateLimit RateLimit  `json:"rate_limit"`
}

// RateLimit is the rate-limit filter's configuration and the route's descriptor.
type RateLimit struct {
	Service string `json:"service"` // the rate-limit service's gRPC host:port
	Domain  string `json:"domain"`  // Envoy Gateway: the listener's name
	// Route is the route descriptor's key and value (Envoy Gateway: the route's name); the
	// user's descriptor key is RuleDescriptor (rule-0-match-0).
	Route          string `json:"route"`
	RuleDescriptor string `json:"rule_descriptor"`
	// TimeoutMS is the filter's RPC timeout: 0 means Envoy's default, 20 ms.
	TimeoutMS       int  `json:"timeout_ms"`
	FailureModeDeny bool `json:"failure_mode_deny"`
}

// EnvoyDefaultTimeout is the rate-limit filter's RPC timeout when none is configured.
const EnvoyDefaultTimeout = 20 * time.Millisecond

// Limiter is the filter: the request-phase check and the stream-done charge.
type Limiter struct {
	c       RateLimit
	client  *rls.Client
	timeout time.Duration
	log     *slog.Logger
}

// Load reads and checks the config and resolves the users' passwords from getenv.
func Load(path string, getenv func(string) (string, bool)) (*Config, map[string]string, error) {
	var c Config
	users, err := shim.Load("envoy-ai-gateway", path, &c, getenv)
	if err != nil {
		return nil, nil, err
	}
	return &c, users, nil
}

// FrontConfig and CheckEngine make Config a shim.Config.
func (c *Config) FrontConfig() shim.Front { return c.Front }
func (c *Config) CheckEngine() error      { return c.RateLimit.check() }

func (r RateLimit) check() error {
	var errs []error
	if _, _, err := net.SplitHostPort(r.Service); err != nil {
		errs = append(errs, fmt.Errorf("rate_limit.service %q is not host:port", r.Service))
	}
	if r.Domain == "" || r.Route == "" || r.RuleDescriptor == "" {
		errs = append(errs, errors.New("rate_limit.domain, route and rule_descriptor must all be set"))
	}
	if r.TimeoutMS < 0 {
		errs = append(errs, errors.New("rate_limit.timeout_ms must not be negative (0: Envoy's 20 ms)"))
	}
	return errors.Join(errs...)
}

// New connects the filter to its rate-limit service.
func New(c RateLimit, log *slog.Logger) (*Limiter, error) {
	client, err := rls.Dial(c.Service)
	if err != nil {
		return nil, err
	}
	t := EnvoyDefaultTimeout
	if c.TimeoutMS > 0 {
		t = time.Duration(c.TimeoutMS) * time.Millisecond
	}
	return &Limiter{c: c, client: client, timeout: t, log: log}, nil
}

func (l *Limiter) entries(subject string) []rls.Entry {
	return []rls.Entry{{Key: l.c.Route, Value: l.c.Route}, {Key: l.c.RuleDescriptor, Value: subject}}
}

// Admit is the request path: ShouldRateLimit with hits_addend 0.
func (l *Limiter) Admit(ctx context.Context, subject string) shim.Admission {
	st, err := l.client.Should(ctx, l.c.Domain, l.entries(subject), 0, l.timeout)
	if err != nil {
		if l.c.FailureModeDeny {
			l.log.Warn("rate-limit service error: failing closed (failure_mode_deny)", "error", err.Error())
			return shim.Admission{Deny: &shim.Answer{Status: http.StatusInternalServerError}}
		}
		l.log.Warn("rate-limit service error: failing open (failure_mode_deny false)", "error", err.Error())
		return shim.Admission{Settle: l.settle(subject)}
	}
	h := RateLimitHeaders(st)
	if st.OverLimit {
		h.Set("x-envoy-ratelimited", "true")
		return shim.Admission{Deny: &shim.Answer{Status: http.StatusTooManyRequests}, Header: h}
	}
	return shim.Admission{Header: h, Settle: l.settle(subject)}
}

// settle is the stream-done entry: hits_addend = the response's total tokens, fire and
// forget; no usage seen, no call.
func (l *Limiter) settle(subject string) func(shim.Usage) {
	return func(u shim.Usage) {
		if !u.Known || u.TotalTokens < 0 {
			return
		}
		go func() {
			if _, err := l.client.Should(context.Background(), l.c.Domain, l.entries(subject), uint64(u.TotalTokens), l.timeout); err != nil {
				l.log.Warn("stream-done rate-limit call failed: the tokens are not charged", "tokens", u.TotalTokens, "error", err.Error())
			}
		}()
	}
}

// RateLimitHeaders are Envoy's DRAFT_VERSION_03 X-RateLimit headers for one descriptor status
// (none when no limit matched).
func RateLimitHeaders(st rls.Status) http.Header {
	h := http.Header{}
	if st.Limit == 0 {
		return h
	}
	lim := strconv.FormatUint(uint64(st.Limit), 10)
	if w := int64(st.Window / time.Second); w > 0 {
		lim += ", " + lim + ";w=" + strconv.FormatInt(w, 10)
	}
	h.Set("x-ratelimit-limit", lim)
	h.Set("x-ratelimit-remaining", strconv.FormatUint(uint64(st.Remaining), 10))
	h.Set("x-ratelimit-reset", strconv.FormatInt(int64(st.Reset/time.Second), 10))
	return h
}

// Run serves the shim from its config until ctx ends.
func Run(ctx context.Context, c *Config, users map[string]string, log *slog.Logger) error {
	l, err := New(c.RateLimit, log)
	if err != nil {
		return err
	}
	defer l.client.Close()
	return shim.Run(ctx, "envoy-ai-gateway", c.Front, users, l, log)
}
