package gateway

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	dto "github.com/prometheus/client_model/go"

	"github.com/quotaqual/quotaqual/ledger"
	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/wire"
)

// slowFailingSettle wraps a real ledger so that every Settle takes a while and then fails:
// the store is there for admission but settlement cannot get through.
type slowFailingSettle struct {
	ledger.Ledger
	calls atomic.Int64
}

func (l *slowFailingSettle) Settle(ctx context.Context, r ledger.Reservation, u ledger.Usage) (ledger.Settlement, error) {
	l.calls.Add(1)
	select {
	case <-time.After(80 * time.Millisecond):
	case <-ctx.Done():
	}
	return ledger.Settlement{}, fmt.Errorf("%w: injected settle failure", ledger.ErrStore)
}

func inProcessGateway(t *testing.T, policy string, led func(*ledger.CompiledPolicy) ledger.Ledger) (*Server, string) {
	t.Helper()
	prov := httptest.NewServer(providerstub.NewProvider(providerstub.ProviderConfig{Site: "inproc", CompletionTokens: 4}).DataHandler())
	t.Cleanup(prov.Close)
	return inProcessGatewayTo(t, prov.URL, policy, led)
}

// stubbedGateway is an in-process gateway in front of a provider stub (cfg, at site inproc)
// whose call log the test reads; url is the gateway's chat completions URL.
func stubbedGateway(t *testing.T, cfg providerstub.ProviderConfig, policy string) (s *Server, url string, prov *providerstub.Provider) {
	t.Helper()
	cfg.Site = "inproc"
	prov = providerstub.NewProvider(cfg)
	srv := httptest.NewServer(prov.DataHandler())
	t.Cleanup(srv.Close)
	s, url = inProcessGatewayTo(t, srv.URL, policy, nil)
	return s, url, prov
}

// sdkGateway is stubbedGateway with an openai-go client for it, signed in as alice.
func sdkGateway(t *testing.T, cfg providerstub.ProviderConfig, policy string) (*Server, *providerstub.Provider, openai.Client) {
	t.Helper()
	s, _, prov := stubbedGateway(t, cfg, policy)
	c := openai.NewClient(option.WithBaseURL("http://"+s.DataAddr()+"/v1/"),
		option.WithHeader("Authorization", basicAuth("alice", "pw")), option.WithMaxRetries(0))
	return s, prov, c
}

// inProcessGatewayTo is inProcessGateway with the provider at providerURL.
func inProcessGatewayTo(t *testing.T, providerURL, policy string, led func(*ledger.CompiledPolicy) ledger.Ledger) (*Server, string) {
	t.Helper()
	return inProcessGatewayWith(t, providerURL, "", policy, led)
}

// inProcessGatewayWith is inProcessGatewayTo with top-level config lines (e.g. a server block).
func inProcessGatewayWith(t *testing.T, providerURL, top, policy string, led func(*ledger.CompiledPolicy) ledger.Ledger) (*Server, string) {
	t.Helper()
	doc := top + `
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
auth:
  basic:
    - username: alice
      password_env: QQI_PW
providers:
  - site: inproc
    url: ` + providerURL + `
quota:
` + policy
	cfg, err := ParseConfig([]byte(doc), func(k string) (string, bool) {
		if k == "QQI_PW" {
			return "pw", true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	var opts Options
	if led != nil {
		l, err := ledger.Open(cfg.Policy())
		if err != nil {
			t.Fatal(err)
		}
		opts.Ledger = led(cfg.Policy())
		_ = l.Close()
	}
	s, err := New(cfg, slog.New(slog.DiscardHandler), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	return s, "http://" + s.DataAddr() + "/v1/chat/completions"
}

const memoryPolicy = `
  backend: {kind: memory, timeout: 100ms}
  limits: {max_body_bytes: 4096}
  rules:
    - name: mt
      budgets: [{window: 60s, capacity: 100}]
      reservation_timeout: 30s
      estimation: {strategy: max_tokens, fallback_estimate: 10}
`

func TestSettlementFailureNeverDelaysOrFailsTheResponse(t *testing.T) {
	var wrapped *slowFailingSettle
	s, url := inProcessGateway(t, memoryPolicy, func(p *ledger.CompiledPolicy) ledger.Ledger {
		wrapped = &slowFailingSettle{Ledger: ledger.NewMemory(p.Limits, nil)}
		return wrapped
	})
	r := chat(url, chatOpts{auth: basicAuth("alice", "pw"), body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`})
	if r.status != 200 || !strings.Contains(string(r.body), `"usage"`) {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	// Three attempts of 80 ms plus 75 ms of backoff take ~315 ms; the response did not wait.
	if r.latency > 200*time.Millisecond {
		t.Errorf("response took %s: settlement is on the response path", r.latency)
	}
	eventually(t, 3*time.Second, func() string {
		if got := counterValue(s.m.settlements.WithLabelValues("mt", "failed")); got != 1 {
			return fmt.Sprintf("settlements failed = %v", got)
		}
		return ""
	})
	if n := wrapped.calls.Load(); n != settleAttempts {
		t.Errorf("settle attempted %d times, want %d", n, settleAttempts)
	}
}

func TestBadRequestsAreAnsweredByTheGateway(t *testing.T) {
	_, url := inProcessGateway(t, memoryPolicy, nil)
	auth := basicAuth("alice", "pw")
	for _, tc := range []struct {
		name, body string
		status     int
		code       string
	}{
		{"estimate larger than the window", `{"model":"m","max_tokens":1000,"messages":[]}`, 400, "estimate_exceeds_capacity"},
		{"body too large", `{"model":"m","messages":[{"role":"user","content":"` + strings.Repeat("x", 5000) + `"}]}`, 413, "request_too_large"},
		{"not JSON", `{"model":`, 400, "invalid_json"},
		{"max_tokens not a number", `{"model":"m","max_tokens":"many"}`, 400, "invalid_json"},
		{"max_tokens out of range names the field", `{"model":"m","max_tokens":1e30}`, 400, "invalid_json"},
		{"n out of range names the field", `{"model":"m","n":99999999999999999999}`, 400, "invalid_json"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := chat(url, chatOpts{auth: auth, body: tc.body})
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %s", r.status, tc.status, r.body)
			}
			if e := decodeErr(t, r.body); e.Error.Code != tc.code {
				t.Fatalf("code %q, want %q (%s)", e.Error.Code, tc.code, e.Error.Message)
			}
			if field, ok := map[string]string{"max_tokens out of range names the field": "max_tokens",
				"n out of range names the field": "n"}[tc.name]; ok {
				if msg := decodeErr(t, r.body).Error.Message; !strings.Contains(msg, `field "`+field+`" must be a whole number`) {
					t.Errorf("message does not name the field %s: %s", field, msg)
				}
			}
			if tc.code == "estimate_exceeds_capacity" && !strings.Contains(string(r.body), "lower max_tokens") {
				t.Errorf("message does not say to lower max_tokens: %s", r.body)
			}
		})
	}
}

func TestProbesConsumeNoQuota(t *testing.T) {
	s, url := inProcessGateway(t, memoryPolicy, nil)
	admin := "http://" + s.AdminAddr()
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/admin/quota?rule=mt&subject=alice"} {
		resp, err := testHTTP.Get(admin + p)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s: %d", p, resp.StatusCode)
		}
	}
	// The data port has no probe endpoints that could be mistaken for free traffic.
	if r := chat(strings.Replace(url, "/v1/chat/completions", "/healthz", 1), chatOpts{}); r.status != 404 {
		t.Errorf("data /healthz: %d", r.status)
	}
	qs := wire.QuotaState{}
	getJSON(t, admin+"/admin/quota?rule=mt&subject=alice", &qs)
	if qs.ActiveReservations != 0 || qs.Windows[0].Settled != 0 {
		t.Fatalf("probes consumed quota: %+v", qs)
	}
	if r := chat(url, chatOpts{auth: basicAuth("alice", "pw"), body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`}); r.status != 200 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	eventually(t, 2*time.Second, func() string {
		getJSON(t, admin+"/admin/quota?rule=mt&subject=alice", &qs)
		if qs.Windows[0].Settled == 0 {
			return "not settled"
		}
		return ""
	})
	_ = http.StatusOK
}

func counterValue(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil || m.Counter == nil {
		return -1
	}
	return m.Counter.GetValue()
}
