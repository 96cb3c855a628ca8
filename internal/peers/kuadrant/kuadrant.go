// Package kuadrant is the shim of Kuadrant's TokenRateLimitPolicy flow — the wasm-shim's
// check before the request and its report after the response — on envoyproxy/ratelimit, the
// nearest engine obtainable here: Limitador, the engine Kuadrant ships, is Rust and cannot be
// built on these machines (crates.io is not reachable; it is not in Debian). The flow is
// Kuadrant's; the counters are envoy ratelimit's fixed, epoch-aligned windows, where
// Limitador's start at a key's first hit, so window-expiry timings are the engine's, not
// Limitador's.
//
// What it does, and where that comes from:
//
//   - Check (Kuadrant/wasm-shim src/kuadrant/pipeline/tasks/ratelimit.rs; the example
//     examples/ratelimit_check_report/envoy.yaml builds the check with hits_addend 1;
//     Kuadrant/limitador limitador-server/src/envoy_rls/kuadrant_service.rs CheckRateLimit):
//     Limitador runs is_rate_limited(…, 1) without incrementing: over iff count + 1 > limit.
//     On envoy ratelimit that is a ShouldRateLimit with hits_addend 0 (no increment) and
//     "over" when the answer is OVER_LIMIT or leaves less than one remaining.
//   - Report (same sources, Report): after the response, hits_addend =
//     responseBodyJSON("/usage/total_tokens"); the report never denies. "If token parsing
//     fails, falls back to request counting" and "only supports non-streaming" responses
//     (Kuadrant/kuadrant-operator doc/overviews/token-rate-limiting.md @052900d): a streamed
//     answer, or one without usage, is reported as one hit.
//   - The denial: 429 with {"error": {"message": "Too Many Requests", "type":
//     "rate_limit_exceeded", "code": 429}} (kuadrant-operator internal/wasm, the check's deny
//     action); the services' failure mode is "allow" and their timeout 100 ms unless set
//     (kuadrant-operator internal/wasm: RatelimitCheckServiceFailureMode,
//     RatelimitCheckServiceTimeout, RatelimitReportService…).
//
// What it does not do: no reservation, no estimate, no lease; the report is fire and forget.
// `quotaqual shim kuadrant --config F` runs it (undertest/profiles/kuadrant.yaml).
package kuadrant

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/quotaqual/quotaqual/internal/peers/rls"
	"github.com/quotaqual/quotaqual/internal/peers/shim"
)

// Config is the shim's JSON config.
type Config struct {
	Front     shim.Front `json:"front"`
	RateLimit RateLimit  `json:"rate_limit"`
}

// RateLimit is the wasm-shim's rate-limit services and the policy's descriptor.
type RateLimit struct {
	Service string `json:"service"` // the rate-limit service's gRPC host:port
	Domain  string `json:"domain"`  // the policy's limits namespace
	// LimitKey is the descriptor entry's key; its value is the authenticated user.
	LimitKey string `json:"limit_key"`
	// TimeoutMS bounds each call: 0 means Kuadrant's default, 100 ms.
	TimeoutMS int `json:"timeout_ms"`
	// FailureMode is "allow" (Kuadrant's default) or "deny".
	FailureMode string `json:"failure_mode"`
}

// DefaultTimeout is Kuadrant's rate-limit service timeout.
const DefaultTimeout = 100 * time.Millisecond

// DenyBody is the check's denial body.
const DenyBody = `{"error": {"message": "Too Many Requests", "type": "rate_limit_exceeded", "code": 429}}`

// Load reads and checks the config and resolves the users' passwords from getenv.
func Load(path string, getenv func(string) (string, bool)) (*Config, map[string]string, error) {
	var c Config
	users, err := shim.Load("kuadrant", path, &c, getenv)
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
	if r.Domain == "" || r.LimitKey == "" {
		errs = append(errs, errors.New("rate_limit.domain and limit_key must be set"))
	}
	if r.FailureMode != "allow" && r.FailureMode != "deny" {
		errs = append(errs, fmt.Errorf("rate_limit.failure_mode %q is unknown: use allow or deny", r.FailureMode))
	}
	return errors.Join(errs...)
}

// Limiter is the check and the report.
type Limiter struct {
	c       RateLimit
	client  *rls.Client
	timeout time.Duration
	log     *slog.Logger
}

func (l *Limiter) entries(subject string) []rls.Entry {
	return []rls.Entry{{Key: l.c.LimitKey, Value: subject}}
}

// Admit is the check: over iff count + 1 > limit.
func (l *Limiter) Admit(ctx context.Context, subject string) shim.Admission {
	st, err := l.client.Should(ctx, l.c.Domain, l.entries(subject), 0, l.timeout)
	if err != nil {
		if l.c.FailureMode == "deny" {
			l.log.Warn("rate-limit check failed: failing closed (failureMode deny)", "error", err.Error())
			return shim.Admission{Deny: &shim.Answer{Status: http.StatusInternalServerError}}
		}
		l.log.Warn("rate-limit check failed: failing open (failureMode allow)", "error", err.Error())
		return shim.Admission{Settle: l.report(subject)}
	}
	if st.OverLimit || (st.Limit > 0 && st.Remaining < 1) {
		return shim.Admission{Deny: &shim.Answer{Status: http.StatusTooManyRequests, ContentType: "application/json", Body: []byte(DenyBody)}}
	}
	return shim.Admission{Settle: l.report(subject)}
}

// report sends the response's usage (one hit when none could be parsed), fire and forget.
func (l *Limiter) report(subject string) func(shim.Usage) {
	return func(u shim.Usage) {
		hits := uint64(1)
		if u.Known && !u.Streamed && u.TotalTokens > 0 {
			hits = uint64(u.TotalTokens)
		}
		go func() {
			if _, err := l.client.Should(context.Background(), l.c.Domain, l.entries(subject), hits, l.timeout); err != nil {
				l.log.Warn("rate-limit report failed: the tokens are not counted", "hits", hits, "error", err.Error())
			}
		}()
	}
}

// Run serves the shim from its config until ctx ends.
func Run(ctx context.Context, c *Config, users map[string]string, log *slog.Logger) error {
	client, err := rls.Dial(c.RateLimit.Service)
	if err != nil {
		return err
	}
	defer client.Close()
	t := DefaultTimeout
	if c.RateLimit.TimeoutMS > 0 {
		t = time.Duration(c.RateLimit.TimeoutMS) * time.Millisecond
	}
	// Kuadrant's denials are OpenAI-style JSON, and so are its 401s here (AuthPolicy's own
	// answer is the harness's front door).
	return shim.RunWithReady(ctx, "kuadrant", c.Front, users, &Limiter{c: c.RateLimit, client: client, timeout: t, log: log}, nil, true, log)
}
