// Package gubershim is a gateway on gubernator (gubernator-io/gubernator v2.13.0): the closest
// gubernator gets to a token reservation and its reconciliation, done the way its API says.
// No LLM gateway of its own ships on gubernator, so this shim is a client written from
// gubernator's documentation and proto, and nothing more:
//
//   - at admission, GetRateLimits with hits = the run's per-request estimate, limit = the
//     capacity, duration = the window in milliseconds, TOKEN_BUCKET (gubernator.proto
//     RateLimitReq @v2.13.0: "hits … the number of hits a request adds"; a request over the
//     limit consumes nothing — algorithms.go tokenBucket — so admission is all or nothing:
//     admitted iff remaining ≥ estimate);
//   - once the response has ended, GetRateLimits with hits = used − estimate, positive or
//     negative (a negative hit is a refund; gubernator does not clamp it, and a positive one
//     that does not fit the remaining budget is refused like any over-limit hit, charging
//     nothing); no usage seen (the client went away first): no second call, the estimate
//     stays charged;
//   - an answer whose error is set, or no answer within the timeout, fails closed with 503
//     ("error: Contains the error; If set all other values should be ignored",
//     RateLimitResp.error) — reading only the status would fail open: gubernator answers
//     UNDER_LIMIT with limit 0 while the owner is unreachable;
//   - behavior BATCHING (gubernator's default: the request is forwarded to the key's owner,
//     which decides) or GLOBAL (each node answers from its cached copy and forwards the hits
//     to the owner asynchronously, "we lose some accuracy … allowing some requests beyond the
//     chosen rate limit", gubernator.proto Behavior.GLOBAL);
//   - each gateway asks one node (gateway-a the first, gateway-b the second, …) over the HTTP
//     API (POST /v1/GetRateLimits, the grpc-gateway mapping of the gRPC API).
//
// The windows are gubernator's: TOKEN_BUCKET resets a key's whole budget one duration after
// the hit that created it (a fixed window anchored at a key's first hit, not at the epoch).
// The counters live in the owning node's memory only: no store, nothing survives the owner.
// `quotaqual shim gubernator --config F` runs it (undertest/profiles/gubernator*.yaml).
package gubershim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/quotaqual/quotaqual/internal/peers/shim"
)

// Config is the shim's JSON config.
type Config struct {
	Front shim.Front `json:"front"`
	Limit Limit      `json:"limit"`
}

// Limit is the rate limit the shim asks gubernator for, and where.
type Limit struct {
	Node       string `json:"node"` // the gubernator node's HTTP host:port this gateway asks
	Name       string `json:"name"` // the rate limit's name
	Capacity   int64  `json:"capacity"`
	Estimate   int64  `json:"estimate"`
	DurationMS int64  `json:"duration_ms"`
	Behavior   string `json:"behavior"` // BATCHING or GLOBAL
	TimeoutMS  int    `json:"timeout_ms"`
	// ExpectPeers: /readyz answers 200 only once the node reports this many peers (the
	// cluster formed), so no gateway decides before its node knows the others.
	ExpectPeers int `json:"expect_peers"`
}

// Load reads and checks the config and resolves the users' passwords from getenv.
func Load(path string, getenv func(string) (string, bool)) (*Config, map[string]string, error) {
	var c Config
	users, err := shim.Load("gubernator", path, &c, getenv)
	if err != nil {
		return nil, nil, err
	}
	return &c, users, nil
}

// FrontConfig and CheckEngine make Config a shim.Config.
func (c *Config) FrontConfig() shim.Front { return c.Front }
func (c *Config) CheckEngine() error      { return c.Limit.check() }

func (l Limit) check() error {
	var errs []error
	if _, _, err := net.SplitHostPort(l.Node); err != nil {
		errs = append(errs, fmt.Errorf("limit.node %q is not host:port", l.Node))
	}
	if l.Name == "" || l.Capacity <= 0 || l.Estimate <= 0 || l.DurationMS <= 0 || l.TimeoutMS <= 0 {
		errs = append(errs, errors.New("limit.name, capacity, estimate, duration_ms and timeout_ms must all be set and positive"))
	}
	if _, ok := behaviors[l.Behavior]; !ok {
		errs = append(errs, fmt.Errorf("limit.behavior %q is unknown: use BATCHING or GLOBAL", l.Behavior))
	}
	return errors.Join(errs...)
}

// behaviors are gubernator's Behavior flags the shim uses (gubernator.proto).
var behaviors = map[string]int{"BATCHING": 0, "GLOBAL": 2}

// Limiter asks one gubernator node.
type Limiter struct {
	l      Limit
	client *http.Client
	log    *slog.Logger
}

type rateLimitReq struct {
	Name      string `json:"name"`
	UniqueKey string `json:"unique_key"`
	Hits      int64  `json:"hits,string"`
	Limit     int64  `json:"limit,string"`
	Duration  int64  `json:"duration,string"`
	Algorithm int    `json:"algorithm"`
	Behavior  int    `json:"behavior"`
}

type rateLimitResp struct {
	Status    string `json:"status"`
	Limit     string `json:"limit"`
	Remaining string `json:"remaining"`
	ResetTime string `json:"reset_time"`
	Error     string `json:"error"`
}

// ask sends one GetRateLimits for subject with hits.
func (g *Limiter) ask(ctx context.Context, subject string, hits int64) (rateLimitResp, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Duration(g.l.TimeoutMS)*time.Millisecond)
	defer cancel()
	body, _ := json.Marshal(map[string][]rateLimitReq{"requests": {{Name: g.l.Name, UniqueKey: subject, Hits: hits,
		Limit: g.l.Capacity, Duration: g.l.DurationMS, Algorithm: 0, Behavior: behaviors[g.l.Behavior]}}})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+g.l.Node+"/v1/GetRateLimits", bytes.NewReader(body))
	if err != nil {
		return rateLimitResp{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := g.client.Do(req)
	if err != nil {
		return rateLimitResp{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return rateLimitResp{}, err
	}
	if resp.StatusCode != http.StatusOK {
		return rateLimitResp{}, fmt.Errorf("GetRateLimits: status %d: %.200s", resp.StatusCode, b)
	}
	var out struct {
		Responses []rateLimitResp `json:"responses"`
	}
	if err := json.Unmarshal(b, &out); err != nil || len(out.Responses) != 1 {
		return rateLimitResp{}, fmt.Errorf("GetRateLimits: an answer of %d responses (%v): %.200s", len(out.Responses), err, b)
	}
	r := out.Responses[0]
	if r.Error != "" {
		return r, errors.New("gubernator: " + r.Error)
	}
	return r, nil
}

// NewLimiter is a client of the node l names, as the shim's (internal/peers/peerbench times
// its calls beside quotaqual's admission). l.TimeoutMS bounds each call.
func NewLimiter(l Limit, client *http.Client, log *slog.Logger) *Limiter {
	return &Limiter{l: l, client: client, log: log}
}

// Hit sends one GetRateLimits of hits for subject: whether the node answered under the limit.
func (g *Limiter) Hit(ctx context.Context, subject string, hits int64) (under bool, err error) {
	r, err := g.ask(ctx, subject, hits)
	return err == nil && r.Status != "OVER_LIMIT", err
}

// Admit charges the estimate; an over-limit answer charged nothing and is a 429.
func (g *Limiter) Admit(ctx context.Context, subject string) shim.Admission {
	r, err := g.ask(ctx, subject, g.l.Estimate)
	if err != nil {
		g.log.Warn("gubernator did not decide: failing closed", "error", err.Error())
		return shim.Admission{Deny: &shim.Answer{Status: http.StatusServiceUnavailable, ContentType: "application/json",
			Body: []byte(`{"error": {"message": "the rate limiter did not answer", "type": "rate_limiter_unavailable"}}`)}}
	}
	h := http.Header{}
	h.Set("x-ratelimit-limit", r.Limit)
	h.Set("x-ratelimit-remaining", r.Remaining)
	if r.Status == "OVER_LIMIT" {
		if reset, err := strconv.ParseInt(r.ResetTime, 10, 64); err == nil {
			secs := max(1, (reset-time.Now().UnixMilli()+999)/1000)
			h.Set("Retry-After", strconv.FormatInt(secs, 10))
		}
		return shim.Admission{Header: h, Deny: &shim.Answer{Status: http.StatusTooManyRequests, ContentType: "application/json",
			Body: []byte(`{"error": {"message": "token budget exceeded", "type": "rate_limit_exceeded", "code": 429}}`)}}
	}
	return shim.Admission{Header: h, Settle: func(u shim.Usage) { g.settle(subject, u) }}
}

// settle sends the difference between the usage and the estimate (no usage: nothing).
func (g *Limiter) settle(subject string, u shim.Usage) {
	if !u.Known {
		return
	}
	diff := u.TotalTokens - g.l.Estimate
	if diff == 0 {
		return
	}
	r, err := g.ask(context.Background(), subject, diff)
	switch {
	case err != nil:
		g.log.Warn("settling with gubernator failed: the difference is not applied", "difference", diff, "error", err.Error())
	case r.Status == "OVER_LIMIT":
		g.log.Warn("gubernator refused the settlement's extra tokens (over the limit): they are not charged", "difference", diff)
	}
}

// ready reports whether the node is healthy and knows ExpectPeers peers.
func (g *Limiter) ready(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+g.l.Node+"/v1/HealthCheck", nil)
	resp, err := g.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var h struct {
		Status    string `json:"status"`
		PeerCount int    `json:"peer_count"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		return err
	}
	if h.Status != "healthy" || h.PeerCount < g.l.ExpectPeers {
		return fmt.Errorf("gubernator node %s: %s with %d of %d peers", g.l.Node, h.Status, h.PeerCount, g.l.ExpectPeers)
	}
	return nil
}

// Run serves the shim from its config until ctx ends.
func Run(ctx context.Context, c *Config, users map[string]string, log *slog.Logger) error {
	g := &Limiter{l: c.Limit, client: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256}}, log: log}
	return shim.RunWithReady(ctx, "gubernator", c.Front, users, g, g.ready, true, log)
}
