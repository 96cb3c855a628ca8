package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/ledger"
	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/wire"
)

func TestChargeIsAtLeastWhatWasSeen(t *testing.T) {
	const est, input = 15, 20
	cases := []struct {
		name string
		m    metered
		want ledger.Usage
	}{
		{"never sent: nothing", metered{notSent: true}, ledger.Usage{Tokens: 0, Known: true}},
		{"sent, no answer: the estimate", metered{}, ledger.Usage{}},
		{"finished with usage: the usage, even below the estimate", metered{status: 200, finished: true, usage: 9, usageSeen: true}, ledger.Usage{Tokens: 9, Known: true}},
		{"stream cut short: relayed plus input above the estimate", metered{status: 200, relayed: 200}, ledger.Usage{Tokens: 220, Known: true}},
		{"stream cut short early: never below the estimate", metered{status: 200, relayed: 1}, ledger.Usage{Tokens: 21, Known: true}},
		{"cut short after a running usage: the usage seen when larger", metered{status: 200, relayed: 10, usage: 300, usageSeen: true}, ledger.Usage{Tokens: 300, Known: true}},
		{"finished without usage: relayed plus input", metered{status: 200, finished: true, relayed: 100}, ledger.Usage{Tokens: 120, Known: true}},
		{"finished with garbled usage: not trusted below what was seen", metered{status: 200, finished: true, usage: 3, usageSeen: true, usageGarbled: true, relayed: 50}, ledger.Usage{Tokens: 70, Known: true}},
		{"provider error with usage: the usage", metered{status: 500, finished: true, usage: 49, usageSeen: true}, ledger.Usage{Tokens: 49, Known: true}},
		{"provider error without usage: what was relayed", metered{status: 503, finished: true}, ledger.Usage{Tokens: 0, Known: true}},
		{"provider error mid-stream: what was relayed", metered{status: 500, relayed: 7}, ledger.Usage{Tokens: 7, Known: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.m.charge(est, input); got != tc.want {
				t.Fatalf("charge = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestUsageFromTheTailOfALargeBody(t *testing.T) {
	content := strings.Repeat("tok ", (maxJSONUsageBuffer/4)+1000)
	body, _ := json.Marshal(map[string]any{
		"choices": []map[string]any{{"message": map[string]string{"content": content + ` and "usage": {"prompt_tokens":1,"completion_tokens":1}`}}},
		"usage":   map[string]int64{"prompt_tokens": 9, "completion_tokens": 2_100_000, "total_tokens": 2_100_009},
	})
	var j jsonUsageReader
	for p := body; len(p) > 0; {
		n := min(len(p), 32<<10)
		j.feed(p[:n])
		p = p[n:]
	}
	if !j.tooBig || len(j.buf) > 2*usageTailBytes {
		t.Fatalf("tooBig %v, kept %d bytes: the reader must keep only a bounded tail", j.tooBig, len(j.buf))
	}
	if n, ok := j.result(); !ok || n != 2_100_009 {
		t.Fatalf("usage = %d, %v; want 2100009 read from the tail", n, ok)
	}
	if n, ok := usageFromTail([]byte(`"content":"x \"usage\": {\"prompt_tokens\":1,\"completion_tokens\":1}"}]}`), chatEndpoint); ok {
		t.Fatalf("read %d from a usage inside a string", n)
	}
}

func TestRelayedOutputCountsContentChunks(t *testing.T) {
	for _, tc := range []struct {
		data          string
		tokens, words int64
	}{
		{`{"choices":[{"index":0,"delta":{"content":" tok"}}]}`, 1, 1},
		{`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, 0, 0},
		{`{"choices":[{"index":0,"delta":{"content":"tok"}},{"index":1,"delta":{"content":"tok"}}]}`, 2, 2},
		{`{"choices":[{"index":0,"delta":{"content":"` + strings.Repeat("x", 40) + `"}}]}`, 10, 1},
		{`{"choices":[{"index":0,"delta":{"content":" a b\tc\n\nd "}}]}`, 3, 4},
		{`{"choices":[{"index":0,"delta":{"tool_calls":[{"function":{"arguments":"{\"a\":1}"}}]}}]}`, 2, 1},
		{`{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}`, 0, 0},
		{`[DONE]`, 0, 0},
	} {
		if tokens, words := relayedOutput([]byte(tc.data)); tokens != tc.tokens || words != tc.words {
			t.Errorf("relayedOutput(%s) = %d tokens, %d words; want %d, %d", tc.data, tokens, words, tc.tokens, tc.words)
		}
	}
}

// meterPolicy estimates from the output bound (fallback 15) with room for everything.
const meterPolicy = `
  backend: {kind: memory, timeout: 100ms}
  rules:
    - name: mt
      budgets: [{window: 600s, capacity: 1099511627776}]
      reservation_timeout: 30s
      estimation: {strategy: max_tokens, fallback_estimate: 15}
`

// meteredGateway is an in-process gateway on a memory ledger in front of a provider stub
// whose call log the test reads.
func meteredGateway(t *testing.T, policy string) (url, admin string, prov *providerstub.Provider) {
	t.Helper()
	s, url, prov := stubbedGateway(t, providerstub.ProviderConfig{CompletionTokens: 4}, policy)
	return url, "http://" + s.AdminAddr(), prov
}

func settledAfterIdle(t *testing.T, admin, rule string) int64 {
	t.Helper()
	var qs wire.QuotaState
	eventually(t, 5*time.Second, func() string {
		getJSON(t, admin+"/admin/quota?rule="+rule+"&subject=alice", &qs)
		if qs.ActiveReservations != 0 {
			return fmt.Sprintf("%d reservations still active", qs.ActiveReservations)
		}
		return ""
	})
	return qs.Windows[0].Settled
}

func lastCall(t *testing.T, prov *providerstub.Provider) providerstub.CallRecord {
	t.Helper()
	var rec providerstub.CallRecord
	eventually(t, 5*time.Second, func() string {
		c := prov.Calls()
		if c.InFlight > 0 || len(c.Requests) == 0 {
			return "the provider has not finished the request"
		}
		rec = c.Requests[len(c.Requests)-1]
		return ""
	})
	return rec
}

// TestAStreamClosedEarlyIsChargedWhatWasGenerated is the reproduction: a stream of 400
// tokens closed by the client after about a hundred is charged what was relayed, not the
// estimate of 15.
func TestAStreamClosedEarlyIsChargedWhatWasGenerated(t *testing.T) {
	url, admin, prov := meteredGateway(t, meterPolicy)
	body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hello"}],"metadata":{"quotaqual_tokens":"400","quotaqual_inter_token":"2ms"}}`
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Authorization", basicAuth("alice", "pw"))
	resp, err := testHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(resp.Body)
	seen := 0
	for seen < 100 {
		line, err := br.ReadBytes('\n')
		if err != nil {
			t.Fatalf("after %d chunks: %v", seen, err)
		}
		if bytes.Contains(line, []byte(`"content"`)) {
			seen++
		}
	}
	cancel()
	resp.Body.Close()
	call := lastCall(t, prov)
	settled := settledAfterIdle(t, admin, "mt")
	if !call.ClientGone || call.GeneratedTokens >= 400 {
		t.Fatalf("the provider generated %d tokens (client gone %v): the stream was not cut short", call.GeneratedTokens, call.ClientGone)
	}
	// At least every token generated (a few may be in flight between the provider and the
	// gateway when the client left), plus the input estimate (ceil(body bytes / 4)).
	input := int64(len(body)+3) / 4
	if settled < call.GeneratedTokens-8 || settled > call.GeneratedTokens+call.PromptTokens+input+8 {
		t.Fatalf("settled %d for %d tokens generated (prompt %d, input estimate %d): a stream closed early must be charged what was generated", settled, call.GeneratedTokens, call.PromptTokens, input)
	}
	t.Logf("client read %d chunks; the provider generated %d; settled %d", seen, call.GeneratedTokens, settled)
}

func TestOversizedAndFailedResponsesAreChargedTheirUsage(t *testing.T) {
	url, admin, prov := meteredGateway(t, meterPolicy)
	auth := basicAuth("alice", "pw")
	var before int64
	for _, tc := range []struct {
		name, metadata string
		status         int
	}{
		{"a body larger than the usage buffer", `"quotaqual_tokens":"2200000"`, 200},
		{"a provider error after generating", `"quotaqual_tokens":"40","quotaqual_fail_status":"500"`, 500},
		{"a provider error before generating", `"quotaqual_tokens":"0","quotaqual_fail_status":"503"`, 503},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := chat(url, chatOpts{auth: auth, body: `{"model":"m","messages":[{"role":"user","content":"hello"}],"metadata":{` + tc.metadata + `}}`})
			if r.status != tc.status {
				t.Fatalf("status %d, want %d: %.200s", r.status, tc.status, r.body)
			}
			call := lastCall(t, prov)
			settled := settledAfterIdle(t, admin, "mt")
			want := call.GeneratedTokens
			if want > 0 {
				want += call.PromptTokens
			}
			if got := settled - before; got != want {
				t.Fatalf("charged %d, want %d (the provider generated %d, prompt %d)", got, want, call.GeneratedTokens, call.PromptTokens)
			}
			before = settled
		})
	}
}

// TestTheEstimateReadsTheBoundTheProviderHonoursTimesN: with a capacity of 29, a request the
// provider serves with 30 completion tokens must be estimated at 30 and refused as larger than
// the window, not admitted at a fraction of it.
func TestTheEstimateReadsTheBoundTheProviderHonoursTimesN(t *testing.T) {
	url, _, prov := meteredGateway(t, `
  backend: {kind: memory, timeout: 100ms}
  rules:
    - name: mt
      budgets: [{window: 600s, capacity: 29}]
      reservation_timeout: 30s
      estimation: {strategy: max_tokens, fallback_estimate: 15}
`)
	auth := basicAuth("alice", "pw")
	for _, tc := range []struct{ name, fields string }{
		{"max_completion_tokens before max_tokens", `"max_tokens":1,"max_completion_tokens":30`},
		{"n choices", `"max_completion_tokens":10,"n":3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := chat(url, chatOpts{auth: auth, body: `{"model":"m",` + tc.fields + `,"messages":[{"role":"user","content":"hello"}],"metadata":{"quotaqual_tokens":"100"}}`})
			if r.status != 400 || decodeErr(t, r.body).Error.Code != wire.CodeEstimateTooLarge {
				t.Fatalf("status %d (%.300s): a request served with 30 completion tokens was not estimated at 30", r.status, r.body)
			}
		})
	}
	if n := prov.Calls().Calls; n != 0 {
		t.Errorf("the provider got %d calls", n)
	}
	t.Run("n outside 1..128 is refused, naming the field", func(t *testing.T) {
		r := chat(url, chatOpts{auth: auth, body: `{"model":"m","n":0,"messages":[{"role":"user","content":"x"}]}`})
		if r.status != 400 || !strings.Contains(string(r.body), `field \"n\"`) {
			t.Fatalf("status %d: %s", r.status, r.body)
		}
	})
}
