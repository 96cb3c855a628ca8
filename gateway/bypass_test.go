package gateway

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/spellings"
	"github.com/quotaqual/quotaqual/providerstub"
)

// spellingRequest is the canonical chat request the spellings rewrite, as alice.
func spellingRequest(addr, body string) spellings.Request {
	return spellings.Request{Host: addr, Path: "/v1/chat/completions", Body: []byte(body),
		Header: http.Header{"Authorization": {basicAuth("alice", "pw")}, "Content-Type": {"application/json"}}}
}

// sendSpelling sends one spelling on a fresh connection and returns its answers.
func sendSpelling(t *testing.T, addr string, sp spellings.Spelling, req spellings.Request) []spellings.Answer {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	answers, err := spellings.Exchange(context.Background(), conn, sp.Write(req), sp.Requests, 10*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", sp.Name, err)
	}
	if len(answers) == 0 {
		t.Fatalf("%s: no answer", sp.Name)
	}
	return answers
}

// providerIdleCalls waits until the provider holds no request and returns its call count.
func providerIdleCalls(t *testing.T, prov *providerstub.Provider) int64 {
	t.Helper()
	var n int64
	eventually(t, 5*time.Second, func() string {
		c := prov.Calls()
		if c.InFlight > 0 {
			return "the provider still holds a request"
		}
		n = c.Calls
		return ""
	})
	return n
}

// TestEverySpellingIsRefusedOrMeteredLikeTheCanonicalRequest is issue 26's "no path around the
// quota" on the gateway alone: each spelling of a chat request (internal/spellings) is either
// refused with a 4xx that reaches no provider, or admitted, forwarded once and charged its
// usage exactly like the canonical request; and once the subject is spent, every spelling is
// refused without a provider call.
func TestEverySpellingIsRefusedOrMeteredLikeTheCanonicalRequest(t *testing.T) {
	s, _, prov := stubbedGateway(t, providerstub.ProviderConfig{CompletionTokens: 40}, meterPolicy)
	addr, admin := s.DataAddr(), "http://"+s.AdminAddr()
	req := spellingRequest(addr, `{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"hello"}]}`)

	for _, sp := range spellings.All() {
		calls0, settled0 := providerIdleCalls(t, prov), settledAfterIdle(t, admin, "mt")
		answers := sendSpelling(t, addr, sp, req)
		calls1, settled1 := providerIdleCalls(t, prov), settledAfterIdle(t, admin, "mt")
		var admitted, usage int64
		var statuses []int
		for _, a := range answers {
			statuses = append(statuses, a.Status)
			switch {
			case a.Status == http.StatusOK:
				admitted++
				var body struct {
					Usage struct {
						TotalTokens int64 `json:"total_tokens"`
					} `json:"usage"`
				}
				if err := json.Unmarshal(a.Body, &body); err != nil || body.Usage.TotalTokens == 0 {
					t.Errorf("%s: a 200 without usage: %s", sp.Name, a.Body)
				}
				usage += body.Usage.TotalTokens
			case a.Status < 400 || a.Status >= 500:
				t.Errorf("%s: answered %d, neither admitted nor refused with a 4xx", sp.Name, a.Status)
			}
		}
		if sp.Name == "canonical" && admitted != 1 {
			t.Fatalf("the control was not admitted: %v", statuses)
		}
		if calls1-calls0 != admitted {
			t.Errorf("%s: answers %v (%d admitted) but %d provider calls", sp.Name, statuses, admitted, calls1-calls0)
		}
		if settled1-settled0 != usage {
			t.Errorf("%s: answers %v charged %d, the responses' usage is %d", sp.Name, statuses, settled1-settled0, usage)
		}
		t.Logf("%-38s %v, provider calls +%d, charged %d", sp.Name, statuses, calls1-calls0, settled1-settled0)
	}
}

// spentPolicy's capacity is spent by one request for 14 output tokens.
const spentPolicy = `
  backend: {kind: memory, timeout: 100ms}
  rules:
    - name: mt
      budgets: [{window: 600s, capacity: 16}]
      reservation_timeout: 30s
      estimation: {strategy: max_tokens, fallback_estimate: 15}
`

// TestNoSpellingReachesAProviderOnceTheSubjectIsSpent: after one request spends the subject's
// budget, every spelling — also those the gateway would otherwise admit — is refused (4xx)
// and reaches no provider.
func TestNoSpellingReachesAProviderOnceTheSubjectIsSpent(t *testing.T) {
	s, url, prov := stubbedGateway(t, providerstub.ProviderConfig{CompletionTokens: 40}, spentPolicy)
	addr := s.DataAddr()
	if r := chat(url, chatOpts{auth: basicAuth("alice", "pw"), body: `{"model":"m","max_tokens":14,"messages":[{"role":"user","content":"hello"}]}`}); r.status != 200 {
		t.Fatalf("the spending request: %d %s", r.status, r.body)
	}
	settledAfterIdle(t, "http://"+s.AdminAddr(), "mt")
	req := spellingRequest(addr, `{"model":"m","max_tokens":1,"messages":[{"role":"user","content":"hi"}]}`)
	for _, sp := range spellings.All() {
		calls0 := providerIdleCalls(t, prov)
		answers := sendSpelling(t, addr, sp, req)
		calls1 := providerIdleCalls(t, prov)
		var statuses []int
		for _, a := range answers {
			statuses = append(statuses, a.Status)
			if a.Status < 400 || a.Status >= 500 {
				t.Errorf("%s: answered %d with the subject spent", sp.Name, a.Status)
			}
		}
		if sp.Name == "canonical" && statuses[0] != http.StatusTooManyRequests {
			t.Errorf("the control: want 429, got %v", statuses)
		}
		if calls1 != calls0 {
			t.Errorf("%s: answers %v, but %d provider calls", sp.Name, statuses, calls1-calls0)
		}
	}
}
