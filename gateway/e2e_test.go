package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/quotaqual/quotaqual/internal/valkeytest"
	"github.com/quotaqual/quotaqual/wire"
)

// e2eStoreTimeout is the gateways' quota.backend.timeout in the end-to-end topology. The lease
// of every rule is 2s, the shortest the validation allows with renewal (3 × 100ms + 1s = 1.3s)
// rounded up, so a 5s request outlives its lease unless renewal works.
const e2eStoreTimeout = 100 * time.Millisecond

var e2eUsers = []string{"shared", "auth", "stream", "stream2", "disc", "drain", "outage",
	"sdk", "sdk429", "headers", "long", "modeluser", "norule", "other"}

const e2eConfig = `
listen: {{listen}}
admin_listen: {{admin}}
upstream_timeout: 30s
shutdown_timeout: 10s
auth:
  realm: quotaqual-test
  basic:
{{users}}
  api_keys:
    - subject: batch
      key_env: QQT_KEY_BATCH
providers:
{{providers}}
quota:
  backend:
    kind: valkey
    url: ${QQT_VALKEY_URL}
    namespace: qqtest
    timeout: 100ms
  rules:
    - name: long
      match: {subjects: [long]}
      budgets: [{window: 60s, capacity: 20}]
      reservation_timeout: 2s
      reserved_tokens: 15
    - name: tiny
      match: {subjects: [sdk429]}
      budgets: [{window: 60s, capacity: 15}]
      reservation_timeout: 2s
      reserved_tokens: 15
    - name: models
      match: {subjects: [modeluser]}
      allowed_models: [qwen3-0.6b]
      budgets: [{window: 60s, capacity: 600}]
      reservation_timeout: 2s
      reserved_tokens: 15
    - name: default
      match: {subjects: [shared, auth, stream, stream2, disc, drain, outage, sdk, headers, batch, other]}
      budgets: [{window: 60s, capacity: 60}]
      reservation_timeout: 2s
      reserved_tokens: 15
`

type topology struct {
	valkey    interface{ Kill() error }
	restartVK func() error
	providers []*providerProc
	gwA, gwB  *gatewayProc
	cfg       string
	env       []string
	passwords map[string]string
	apiKey    string
}

func randomSecret(t testing.TB) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func startTopology(t *testing.T) *topology {
	t.Helper()
	vk := valkeytest.Start(t)
	top := &topology{passwords: map[string]string{}}
	top.valkey = vk
	top.restartVK = func() error { return vk.Restart(context.Background()) }
	var provs []*providerProc
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, site := range []string{"west", "central", "east"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := startProvider(t, site, "--completion-tokens", "50", "--inter-token", "20ms")
			mu.Lock()
			provs = append(provs, p)
			mu.Unlock()
		}()
	}
	wg.Wait()
	// Keep site order stable for readability.
	order := map[string]int{"west": 0, "central": 1, "east": 2}
	top.providers = make([]*providerProc, 3)
	for _, p := range provs {
		top.providers[order[p.site]] = p
	}
	var users, providers strings.Builder
	env := []string{"QQT_VALKEY_URL=" + vk.URL()}
	for i, u := range e2eUsers {
		pw := randomSecret(t)
		top.passwords[u] = pw
		fmt.Fprintf(&users, "    - username: %s\n      password_env: QQT_PW_%d\n", u, i)
		env = append(env, fmt.Sprintf("QQT_PW_%d=%s", i, pw))
	}
	top.apiKey = "sk-" + randomSecret(t)
	env = append(env, "QQT_KEY_BATCH="+top.apiKey)
	for _, p := range top.providers {
		fmt.Fprintf(&providers, "  - site: %s\n    url: http://%s\n", p.site, p.data)
	}
	top.cfg = strings.NewReplacer("{{users}}", strings.TrimRight(users.String(), "\n"),
		"{{providers}}", strings.TrimRight(providers.String(), "\n")).Replace(e2eConfig)
	top.env = env
	top.gwA = startGateway(t, "gateway-a", top.cfg, env)
	top.gwB = startGateway(t, "gateway-b", top.cfg, env)
	return top
}

func (top *topology) auth(user string) string { return basicAuth(user, top.passwords[user]) }

func (top *topology) totalCalls(t testing.TB) int64 {
	var n int64
	for _, p := range top.providers {
		n += p.calls(t).Calls
	}
	return n
}

// usageOf finds the usage a provider reported for request id.
func (top *topology) usageOf(t testing.TB, id string) (int64, bool) {
	for _, p := range top.providers {
		for _, r := range p.calls(t).Requests {
			if r.RequestID == id {
				return r.PromptTokens + r.CompletionTokens, true
			}
		}
	}
	return 0, false
}

func TestEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: starts valkey-server, two gateways and three providers; not in -short")
	}
	top := startTopology(t)

	t.Run("admitted request is routed, attributed and credential-free upstream", func(t *testing.T) {
		sites := map[string]int{}
		for i := 0; i < 3; i++ {
			g := top.gwA
			if i%2 == 1 {
				g = top.gwB
			}
			r := chat(g.url(), chatOpts{auth: top.auth("headers"), headers: map[string]string{
				"Cookie": "session=secret-cookie", "Proxy-Authorization": "Basic eDp5", "x-request-id": fmt.Sprintf("hdr-%d", i)}})
			if r.err != nil || r.status != 200 {
				t.Fatalf("status %d err %v: %s", r.status, r.err, r.body)
			}
			site := r.header.Get(wire.SiteHeader)
			if site == "" {
				t.Fatalf("no %s header", wire.SiteHeader)
			}
			sites[site]++
			if got := r.header.Get(wire.RequestIDHeader); got != fmt.Sprintf("hdr-%d", i) {
				t.Errorf("x-request-id = %q, want the client's", got)
			}
			if r.header.Get("x-ratelimit-limit-tokens") != "60" || r.header.Get("x-ratelimit-remaining-tokens") == "" {
				t.Errorf("admitted response lacks rate-limit headers: %v", r.header)
			}
		}
		for _, p := range top.providers {
			for _, rec := range p.calls(t).Requests {
				if rec.AuthorizationPresent {
					t.Errorf("provider %s received an Authorization header (request %s)", p.site, rec.RequestID)
				}
			}
		}
		t.Logf("sites: %v", sites)
	})

	t.Run("bearer API key authenticates as its subject", func(t *testing.T) {
		r := chat(top.gwA.url(), chatOpts{auth: "Bearer " + top.apiKey})
		if r.status != 200 {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
		r = chat(top.gwA.url(), chatOpts{auth: "Bearer sk-wrong"})
		if r.status != 401 {
			t.Fatalf("wrong key: status %d", r.status)
		}
	})

	t.Run("401 for every bad credential, before ledger or provider", func(t *testing.T) {
		before := top.totalCalls(t)
		cases := map[string]string{
			"missing":        "",
			"bad base64":     "Basic !!!notbase64",
			"no colon":       "Basic " + b64("authnocolon"),
			"wrong scheme":   "Digest " + b64("auth:"+top.passwords["auth"]),
			"wrong password": basicAuth("auth", "not-the-password"),
			"unknown user":   basicAuth("mallory", top.passwords["auth"]),
			"cross-subject":  basicAuth("auth", top.passwords["shared"]),
			"empty user":     basicAuth("", top.passwords["auth"]),
			"bearer unknown": "Bearer " + top.passwords["auth"],
		}
		for name, h := range cases {
			r := chat(top.gwB.url(), chatOpts{auth: h})
			if r.status != 401 {
				t.Errorf("%s: status %d, want 401", name, r.status)
				continue
			}
			if got := r.header.Get("WWW-Authenticate"); got != `Basic realm="quotaqual-test"` {
				t.Errorf("%s: WWW-Authenticate %q", name, got)
			}
			e := decodeErr(t, r.body)
			if e.Error.Type != "authentication_error" || e.Error.Code != "invalid_credentials" {
				t.Errorf("%s: error body %+v", name, e)
			}
		}
		if after := top.totalCalls(t); after != before {
			t.Fatalf("provider calls went from %d to %d: a 401 reached a provider", before, after)
		}
		if qs := top.gwA.quota(t, "default", "auth"); qs.ActiveReservations != 0 || qs.Windows[0].Settled != 0 {
			t.Fatalf("401s touched the ledger: %+v", qs)
		}
	})

	t.Run("no rule is 403 and a disallowed model is 404, neither reaches a provider", func(t *testing.T) {
		before := top.totalCalls(t)
		r := chat(top.gwA.url(), chatOpts{auth: top.auth("norule")})
		if r.status != 403 || !strings.Contains(string(r.body), "no quota rule applies") {
			t.Errorf("no rule: %d %s", r.status, r.body)
		}
		r = chat(top.gwA.url(), chatOpts{auth: top.auth("modeluser"), body: `{"model":"gpt-9","messages":[]}`})
		if r.status != 404 || !strings.Contains(string(r.body), "qwen3-0.6b") {
			t.Errorf("disallowed model: %d %s", r.status, r.body)
		}
		r = chat(top.gwA.url(), chatOpts{auth: top.auth("modeluser"), body: `{"max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`, headers: map[string]string{"x-model": "qwen3-0.6b"}})
		if r.status != 200 {
			t.Errorf("x-model header: %d %s", r.status, r.body)
		}
		if after := top.totalCalls(t); after != before+1 {
			t.Fatalf("provider calls %d → %d, want exactly the one admitted request", before, after)
		}
	})

	t.Run("one budget shared by both gateways; 429 never reaches a provider", func(t *testing.T) {
		// Four requests held 1.5s at the providers reserve 4 × 15 = 60 = capacity, two through
		// each gateway. While they are held, every further request through either gateway is 429.
		var wg sync.WaitGroup
		results := make([]chatResult, 4)
		for i := range 4 {
			g := top.gwA
			if i%2 == 1 {
				g = top.gwB
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i] = chat(g.url(), chatOpts{auth: top.auth("shared"), headers: map[string]string{"x-quotaqual-hold": "1500ms"}})
			}()
		}
		eventually(t, 3*time.Second, func() string {
			qs := top.gwB.quota(t, "default", "shared")
			if qs.ActiveReservations != 4 || qs.ReservedTokens != 60 {
				return fmt.Sprintf("active %d reserved %d, want 4 and 60", qs.ActiveReservations, qs.ReservedTokens)
			}
			return ""
		})
		before := top.totalCalls(t)
		for i, g := range []*gatewayProc{top.gwA, top.gwB, top.gwA, top.gwB} {
			r := chat(g.url(), chatOpts{auth: top.auth("shared")})
			if r.status != 429 {
				t.Fatalf("request %d over the shared budget: status %d, want 429: %s", i, r.status, r.body)
			}
			e := decodeErr(t, r.body)
			if e.Error.Code != "token_quota_exceeded" || !strings.Contains(e.Error.Message, "1m window") {
				t.Errorf("429 body: %+v", e)
			}
			if strings.Contains(string(r.body), "subject:v1:") {
				t.Errorf("429 body names the subject hash: %s", r.body)
			}
			ra := r.header.Get("Retry-After")
			if ra == "" || ra == "0" || r.header.Get("x-ratelimit-reset-tokens") != ra+"s" ||
				r.header.Get("x-ratelimit-limit-tokens") != "60" || r.header.Get("x-ratelimit-remaining-tokens") != "0" {
				t.Errorf("429 headers: %v", r.header)
			}
			if r.header.Get(wire.SiteHeader) != "" {
				t.Errorf("429 carries provider attribution %q", r.header.Get(wire.SiteHeader))
			}
		}
		if after := top.totalCalls(t); after != before {
			t.Fatalf("provider calls went from %d to %d: a 429 reached a provider", before, after)
		}
		wg.Wait()
		for i, r := range results {
			if r.status != 200 {
				t.Errorf("held request %d: %d %s", i, r.status, r.body)
			}
		}
	})

	t.Run("streaming passes through chunk by chunk and settles with the streamed usage", func(t *testing.T) {
		for _, tc := range []struct {
			user         string
			includeUsage bool
		}{{"stream", false}, {"stream2", true}} {
			body := `{"model":"qwen3-0.6b","stream":true,"max_tokens":10,"messages":[{"role":"user","content":"stream please"}]}`
			if tc.includeUsage {
				body = `{"model":"qwen3-0.6b","stream":true,"stream_options":{"include_usage":true},"max_tokens":10,"messages":[{"role":"user","content":"stream please"}]}`
			}
			id := "stream-" + tc.user
			req, _ := http.NewRequest(http.MethodPost, top.gwB.url(), strings.NewReader(body))
			req.Header.Set("Authorization", top.auth(tc.user))
			req.Header.Set("x-request-id", id)
			start := time.Now()
			resp, err := testHTTP.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
				t.Fatalf("status %d content-type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
			}
			data, at, err := sseEvents(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			if len(data) < 11 || data[len(data)-1] != "[DONE]" {
				t.Fatalf("%d events, last %q", len(data), data[len(data)-1])
			}
			// 10 tokens 20ms apart: the first chunk must arrive well before the last.
			if spread := at[len(at)-1].Sub(at[0]); spread < 120*time.Millisecond {
				t.Errorf("chunks arrived within %s of each other: the stream was buffered", spread)
			}
			if first := at[0].Sub(start); first > at[len(at)-1].Sub(start)/2 {
				t.Errorf("first chunk after %s of %s", first, at[len(at)-1].Sub(start))
			}
			var usageChunks int
			for _, d := range data {
				if strings.Contains(d, `"usage":{`) {
					usageChunks++
				}
			}
			want := 0
			if tc.includeUsage {
				want = 1
			}
			if usageChunks != want {
				t.Errorf("client asked include_usage=%v and saw %d usage chunks", tc.includeUsage, usageChunks)
			}
			usage, ok := top.usageOf(t, id)
			if !ok {
				t.Fatalf("provider has no record of %s", id)
			}
			if usage == 15 {
				t.Fatalf("usage equals the estimate; the test cannot tell them apart")
			}
			eventually(t, 3*time.Second, func() string {
				qs := top.gwA.quota(t, "default", tc.user)
				if qs.ActiveReservations != 0 || qs.Windows[0].Settled != usage {
					return fmt.Sprintf("%s: active %d settled %d, want 0 and the streamed usage %d", tc.user, qs.ActiveReservations, qs.Windows[0].Settled, usage)
				}
				return ""
			})
		}
	})

	t.Run("client disconnect mid-stream is charged what was generated, at least the estimate", func(t *testing.T) {
		// Changed with issue 10: this used to settle at exactly the estimate, whatever had
		// been streamed. Now: max(estimate, tokens relayed + input estimate).
		ctx, cancel := context.WithCancel(context.Background())
		body := `{"model":"qwen3-0.6b","stream":true,"max_tokens":50,"messages":[{"role":"user","content":"long"}]}`
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, top.gwA.url(), strings.NewReader(body))
		req.Header.Set("Authorization", top.auth("disc"))
		req.Header.Set("x-request-id", "disc-1")
		resp, err := testHTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		if _, err := resp.Body.Read(buf); err != nil {
			t.Fatal(err)
		}
		cancel()
		resp.Body.Close()
		var generated int64
		eventually(t, 3*time.Second, func() string {
			for _, p := range top.providers {
				for _, r := range p.calls(t).Requests {
					if r.RequestID == "disc-1" {
						generated = r.GeneratedTokens
						return ""
					}
				}
			}
			return "the provider has not finished disc-1"
		})
		// The forwarded body gains stream_options; its input estimate is ceil(bytes / 4).
		lo, hi := max(int64(15), generated), max(int64(15), generated+int64(len(body)+40+3)/4+2)
		eventually(t, 3*time.Second, func() string {
			qs := top.gwB.quota(t, "default", "disc")
			if s := qs.Windows[0].Settled; qs.ActiveReservations != 0 || s < lo || s > hi {
				return fmt.Sprintf("active %d settled %d, want 0 and %d..%d (%d tokens generated)", qs.ActiveReservations, s, lo, hi, generated)
			}
			return ""
		})
	})

	t.Run("a request longer than its lease keeps its hold; no over-admission", func(t *testing.T) {
		// Rule long: capacity 20, estimate 15, lease 2s. One request held 5s; a second request
		// can only be admitted if the first lost its hold.
		done := make(chan chatResult, 1)
		go func() {
			done <- chat(top.gwA.url(), chatOpts{auth: top.auth("long"),
				body:    `{"model":"qwen3-0.6b","max_tokens":1,"messages":[{"role":"user","content":"slow"}]}`,
				headers: map[string]string{"x-quotaqual-hold": "5s", "x-request-id": "long-1"}})
		}()
		eventually(t, 2*time.Second, func() string {
			if qs := top.gwA.quota(t, "long", "long"); qs.ActiveReservations != 1 {
				return "first request not yet admitted"
			}
			return ""
		})
		start := time.Now()
		probes := 0
		for time.Since(start) < 4500*time.Millisecond {
			g := top.gwB
			if probes%2 == 1 {
				g = top.gwA
			}
			r := chat(g.url(), chatOpts{auth: top.auth("long")})
			probes++
			if r.status != 429 {
				t.Fatalf("after %s a concurrent request got %d: the held request lost its reservation (over-admission)", time.Since(start), r.status)
			}
			if qs := top.gwB.quota(t, "long", "long"); qs.ActiveReservations != 1 || qs.ReservedTokens != 15 {
				t.Fatalf("after %s: active %d reserved %d, want 1 and 15", time.Since(start), qs.ActiveReservations, qs.ReservedTokens)
			}
			time.Sleep(250 * time.Millisecond)
		}
		r := <-done
		if r.status != 200 {
			t.Fatalf("long request: %d %s", r.status, r.body)
		}
		if r.latency < 5*time.Second {
			t.Fatalf("long request took %s, expected ≥ 5s", r.latency)
		}
		usage, _ := top.usageOf(t, "long-1")
		// Settled with its real usage: the reservation was still live at settlement (an expired
		// one would have been charged the estimate, 15).
		eventually(t, 3*time.Second, func() string {
			qs := top.gwB.quota(t, "long", "long")
			if qs.ActiveReservations != 0 || qs.Windows[0].Settled != usage {
				return fmt.Sprintf("active %d settled %d, want 0 and the real usage %d", qs.ActiveReservations, qs.Windows[0].Settled, usage)
			}
			return ""
		})
		t.Logf("%d concurrent probes over %s all 429; settled %d", probes, time.Since(start), usage)
	})

	t.Run("official OpenAI Go SDK completes a chat and sees a 429 as its error", func(t *testing.T) {
		t.Setenv("OPENAI_API_KEY", "")
		t.Setenv("OPENAI_BASE_URL", "")
		client := func(user string) openai.Client {
			return openai.NewClient(
				option.WithBaseURL("http://"+top.gwA.data+"/v1/"),
				option.WithHeader("Authorization", top.auth(user)),
				option.WithMaxRetries(0),
			)
		}
		c := client("sdk")
		resp, err := c.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model:     "qwen3-0.6b",
			Messages:  []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hello from the sdk")},
			MaxTokens: openai.Int(3),
		})
		if err != nil {
			t.Fatalf("SDK chat: %v", err)
		}
		if len(resp.Choices) != 1 || resp.Usage.TotalTokens == 0 {
			t.Fatalf("SDK response: %+v", resp)
		}
		c = client("sdk429")
		params := openai.ChatCompletionNewParams{
			Model:    "qwen3-0.6b",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")},
		}
		var apiErr *openai.Error
		for i := 0; i < 3; i++ {
			_, err = c.Chat.Completions.New(context.Background(), params)
			if errors.As(err, &apiErr) {
				break
			}
		}
		if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests {
			t.Fatalf("want *openai.Error with status 429, got %T %v", err, err)
		}
		if apiErr.Code != "token_quota_exceeded" {
			t.Errorf("SDK error code %q", apiErr.Code)
		}
	})

	t.Run("SIGTERM drains an in-flight request and exits 0", func(t *testing.T) {
		gwC := startGateway(t, "gateway-c", top.cfg, top.env)
		done := make(chan chatResult, 1)
		go func() {
			done <- chat(gwC.url(), chatOpts{auth: top.auth("drain"),
				body:    `{"model":"qwen3-0.6b","max_tokens":3,"messages":[{"role":"user","content":"drain me"}]}`,
				headers: map[string]string{"x-quotaqual-hold": "1500ms", "x-request-id": "drain-1"}})
		}()
		eventually(t, 2*time.Second, func() string {
			if qs := top.gwA.quota(t, "default", "drain"); qs.ActiveReservations != 1 {
				return "request not in flight"
			}
			return ""
		})
		if err := gwC.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.status != 200 || !strings.Contains(string(r.body), `"usage"`) {
			t.Fatalf("in-flight request during drain: %d %v %s", r.status, r.err, r.body)
		}
		exited, code := gwC.waitExit(10 * time.Second)
		if !exited || code != 0 {
			t.Fatalf("gateway after SIGTERM: exited=%v code=%d\n%s", exited, code, gwC.log())
		}
		usage, _ := top.usageOf(t, "drain-1")
		qs := top.gwA.quota(t, "default", "drain")
		if qs.ActiveReservations != 0 || qs.Windows[0].Settled != usage {
			t.Fatalf("after drain: active %d settled %d, want 0 and %d (settled before exit)", qs.ActiveReservations, qs.Windows[0].Settled, usage)
		}
		if r := chat(gwC.url(), chatOpts{auth: top.auth("drain")}); r.err == nil {
			t.Fatalf("stopped gateway still answers: %d", r.status)
		}
	})

	// Last: it stops Valkey.
	t.Run("Valkey killed: 503 within the store timeout, never reaching a provider; recovery", func(t *testing.T) {
		if err := top.valkey.Kill(); err != nil {
			t.Fatal(err)
		}
		before := top.totalCalls(t)
		var worst time.Duration
		for i := 0; i < 6; i++ {
			g := top.gwA
			if i%2 == 1 {
				g = top.gwB
			}
			r := chat(g.url(), chatOpts{auth: top.auth("outage")})
			if r.status != 503 {
				t.Fatalf("with Valkey down: status %d, want 503: %s", r.status, r.body)
			}
			if e := decodeErr(t, r.body); e.Error.Type != "quota_store_unavailable" {
				t.Errorf("503 type %q", e.Error.Type)
			}
			worst = max(worst, r.latency)
		}
		t.Logf("503 latency, worst of 6: %s (store timeout %s)", worst, e2eStoreTimeout)
		if worst >= e2eStoreTimeout+300*time.Millisecond {
			t.Errorf("503 took %s, want < store timeout + 300ms = %s", worst, e2eStoreTimeout+300*time.Millisecond)
		}
		if after := top.totalCalls(t); after != before {
			t.Fatalf("provider calls went from %d to %d: a 503 reached a provider", before, after)
		}
		// /readyz stays ready (fail closed with 503s), reporting the store.
		var ready struct{ Status, Store string }
		if code := getJSON(t, "http://"+top.gwA.admin+"/readyz", &ready); code != 200 || ready.Store != "unavailable" {
			t.Errorf("/readyz during outage: %d %+v", code, ready)
		}
		if code := getJSON(t, "http://"+top.gwA.admin+"/readyz?store=required", nil); code != 503 {
			t.Errorf("/readyz?store=required during outage: %d", code)
		}
		if err := top.restartVK(); err != nil {
			t.Fatal(err)
		}
		for _, g := range []*gatewayProc{top.gwA, top.gwB} {
			eventually(t, 10*time.Second, func() string {
				r := chat(g.url(), chatOpts{auth: top.auth("outage")})
				if r.status != 200 {
					return fmt.Sprintf("after Valkey restart: status %d", r.status)
				}
				return ""
			})
		}
	})

	t.Run("metrics carry bounded labels only", func(t *testing.T) {
		resp, err := testHTTP.Get("http://" + top.gwA.admin + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var sb strings.Builder
		buf := make([]byte, 64<<10)
		for {
			n, err := resp.Body.Read(buf)
			sb.Write(buf[:n])
			if err != nil {
				break
			}
		}
		m := sb.String()
		for _, want := range []string{
			`quotaqual_gateway_requests_total{reason="",result="admitted",rule="default"}`,
			`quotaqual_gateway_requests_total{reason="window_capacity",result="denied",rule="default"}`,
			`quotaqual_gateway_requests_total{reason="invalid_credentials",result="unauthenticated",rule=""}`,
			`quotaqual_gateway_requests_total{reason="store_unavailable",result="store_error",rule="default"}`,
			`quotaqual_gateway_settlements_total{result="applied",rule="default"}`,
			`quotaqual_gateway_admission_seconds_bucket`,
			`quotaqual_gateway_upstream_seconds_bucket`,
			`quotaqual_gateway_renewals_total{result="renewed",rule="long"}`,
			`quotaqual_gateway_ambiguous_reserve_releases_total{result="released"}`,
		} {
			if !strings.Contains(m, want) {
				t.Errorf("metrics lack %s", want)
			}
		}
		for _, secret := range []string{"subject:v1:", "shared", "qwen3", top.passwords["shared"], "redis://"} {
			if strings.Contains(m, secret) {
				t.Errorf("metrics contain %q", secret)
			}
		}
	})

	t.Run("logs never contain credentials or the Valkey URL", func(t *testing.T) {
		logs := top.gwA.log() + top.gwB.log()
		for u, pw := range top.passwords {
			if strings.Contains(logs, pw) {
				t.Errorf("gateway logs contain the password of %s", u)
			}
		}
		for _, bad := range []string{top.apiKey, "redis://", "Basic ", "hello from the sdk"} {
			if strings.Contains(logs, bad) {
				t.Errorf("gateway logs contain %q", bad)
			}
		}
		// One JSON line per request with the documented fields.
		var found bool
		for _, line := range strings.Split(logs, "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil || rec["msg"] != "request" {
				continue
			}
			if rec["request_id"] == "long-1" {
				found = true
				for _, k := range []string{"decision", "rule", "estimate", "actual", "charged", "site", "status", "latency_ms"} {
					if _, ok := rec[k]; !ok {
						t.Errorf("request log line lacks %q: %s", k, line)
					}
				}
			}
		}
		if !found {
			t.Errorf("no request log line for long-1")
		}
	})
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
