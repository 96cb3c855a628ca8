package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"

	"github.com/quotaqual/quotaqual/providerstub"
)

// responsesPolicy: room for a few responses (capacity 200), a small fallback estimate.
const responsesPolicy = `
  backend: {kind: memory, timeout: 100ms}
  rules:
    - name: mt
      budgets: [{window: 600s, capacity: 200}]
      reservation_timeout: 30s
      estimation: {strategy: max_tokens, fallback_estimate: 5}
`

// TestResponsesThroughTheGatewayWithTheSDK: openai-go's Responses client, streamed and not,
// through the gateway to the stub's /v1/responses — the SDK reads the answers, and each
// request is charged exactly what the provider counted (input_tokens + output_tokens; from
// response.completed when streamed, response.incomplete when max_output_tokens cut it).
func TestResponsesThroughTheGatewayWithTheSDK(t *testing.T) {
	s, prov, c := sdkGateway(t, providerstub.ProviderConfig{CompletionTokens: 6}, responsesPolicy)
	admin := "http://" + s.AdminAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	input := responses.ResponseNewParamsInputUnion{OfString: openai.String("hello world")}
	want := providerstub.PromptTokens([]int{len("hello world")})
	var charged int64

	res, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "m", Input: input})
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.InputTokens != want || res.Usage.OutputTokens != 6 || res.OutputText() == "" {
		t.Fatalf("non-streamed: usage %+v, text %q", res.Usage, res.OutputText())
	}
	rec := lastCall(t, prov)
	if rec.Endpoint != providerstub.EndpointResponses || rec.AuthorizationPresent {
		t.Errorf("provider record: %+v", rec)
	}
	charged += want + 6
	if settled := settledAfterIdle(t, admin, "mt"); settled != charged {
		t.Errorf("non-streamed: charged %d in all, the provider counted %d", settled, charged)
	}

	for _, bound := range []int64{0, 3} { // 3: cut short, the stream ends with response.incomplete
		params := responses.ResponseNewParams{Model: "m", Input: input}
		if bound > 0 {
			params.MaxOutputTokens = openai.Int(bound)
		}
		stream := c.Responses.NewStreaming(ctx, params)
		var final string
		var usage responses.ResponseUsage
		for stream.Next() {
			switch ev := stream.Current(); ev.Type {
			case "response.completed":
				final, usage = ev.Type, ev.AsResponseCompleted().Response.Usage
			case "response.incomplete":
				final, usage = ev.Type, ev.AsResponseIncomplete().Response.Usage
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		out := int64(6)
		if bound > 0 {
			out = bound
		}
		if usage.InputTokens != want || usage.OutputTokens != out || (bound > 0) != (final == "response.incomplete") {
			t.Fatalf("streamed (bound %d): final event %q, usage %+v", bound, final, usage)
		}
		if rec := lastCall(t, prov); !rec.Stream || rec.GeneratedTokens != out {
			t.Errorf("streamed record: %+v", rec)
		}
		charged += want + out
		if settled := settledAfterIdle(t, admin, "mt"); settled != charged {
			t.Errorf("streamed (bound %d): charged %d in all, the provider counted %d", bound, settled, charged)
		}
	}
}

// TestResponsesShareTheBudgetAndTheContract: /v1/responses is refused 401 without credentials
// and 429 once chat has spent the subject, both without a provider call; estimated from
// max_output_tokens (an estimate larger than the whole capacity is a 400, never a call).
func TestResponsesShareTheBudgetAndTheContract(t *testing.T) {
	s, prov, c := sdkGateway(t, providerstub.ProviderConfig{CompletionTokens: 40}, endpointsPolicy)
	admin := "http://" + s.AdminAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	post := func(auth, body string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.DataAddr()+"/v1/responses", strings.NewReader(body))
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := testHTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if st := post("", `{"model":"m","input":"x"}`); st != http.StatusUnauthorized {
		t.Errorf("unauthenticated: %d", st)
	}
	if st := post(basicAuth("alice", "pw"), `{"model":"m","input":"x","max_output_tokens":100}`); st != http.StatusBadRequest {
		t.Errorf("max_output_tokens 100 on a capacity of 40: %d, want 400 (the estimate is the bound)", st)
	}
	if n := prov.Calls().Calls; n != 0 {
		t.Fatalf("refused requests reached the provider %d times", n)
	}
	if r := chat("http://"+s.DataAddr()+"/v1/chat/completions", chatOpts{auth: basicAuth("alice", "pw"),
		body: `{"model":"m","max_tokens":14,"messages":[{"role":"user","content":"hello"}]}`}); r.status != 200 {
		t.Fatalf("the spending chat request: %d %s", r.status, r.body)
	}
	settledAfterIdle(t, admin, "mt")
	calls := prov.Calls().Calls
	_, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "m",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("x")}, MaxOutputTokens: openai.Int(30)}) // fits the capacity (40), not what chat left (17)
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests {
		t.Errorf("responses with the subject spent by chat: %v", err)
	}
	if n := prov.Calls().Calls - calls; n != 0 {
		t.Errorf("the denied responses request reached the provider %d times", n)
	}
}

// TestResponsesStreamCutShortIsChargedWhatWasGenerated: a client that leaves a Responses
// stream midway is charged at least the input and the output deltas it was sent — more than
// the small estimate — never the estimate alone, though no response.completed arrived.
func TestResponsesStreamCutShortIsChargedWhatWasGenerated(t *testing.T) {
	s, prov, _ := sdkGateway(t, providerstub.ProviderConfig{CompletionTokens: 60, InterToken: 20 * time.Millisecond}, responsesPolicy)
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.DataAddr()+"/v1/responses",
		strings.NewReader(`{"model":"m","input":"hello","stream":true}`))
	req.Header.Set("Authorization", basicAuth("alice", "pw"))
	resp, err := testHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	var deltas int64
	for deltas < 15 && sc.Scan() {
		if strings.HasPrefix(sc.Text(), "event: response.output_text.delta") {
			deltas++
		}
	}
	resp.Body.Close()
	if deltas < 15 {
		t.Fatalf("only %d deltas before the stream ended", deltas)
	}
	rec := lastCall(t, prov)
	if !rec.ClientGone || rec.GeneratedTokens >= 60 {
		t.Fatalf("the provider did not see the client go: %+v", rec)
	}
	settled := settledAfterIdle(t, "http://"+s.AdminAddr(), "mt")
	if settled < rec.PromptTokens+deltas || settled > rec.PromptTokens+rec.GeneratedTokens+5 {
		t.Errorf("charged %d for a stream cut after %d deltas (the provider generated %d, prompt %d)", settled, deltas, rec.GeneratedTokens, rec.PromptTokens)
	}
}

// TestResponsesHardClampBoundsMaxOutputTokens: under enforcement hard the provider is asked,
// in max_output_tokens (the Responses API's own field), for no more than the reservation
// covers after the prompt, and generates no more.
func TestResponsesHardClampBoundsMaxOutputTokens(t *testing.T) {
	_, prov, c := sdkGateway(t, providerstub.ProviderConfig{CompletionTokens: 500}, hardPolicy)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, stream := range []bool{false, true} {
		params := responses.ResponseNewParams{Model: "m",
			Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello")}, MaxOutputTokens: openai.Int(5000)}
		if stream {
			s := c.Responses.NewStreaming(ctx, params)
			for s.Next() {
			}
			if err := s.Err(); err != nil {
				t.Fatal(err)
			}
		} else if _, err := c.Responses.New(ctx, params); err != nil {
			t.Fatal(err)
		}
		rec := lastCall(t, prov)
		if rec.BoundField != "max_output_tokens" || rec.MaxTokens == nil || *rec.MaxTokens > 60-rec.PromptTokens ||
			rec.PromptTokens+rec.GeneratedTokens > 60 {
			t.Errorf("stream %v: the provider honoured %s %v and generated %d (prompt %d): want ≤ 60 in all", stream, rec.BoundField, rec.MaxTokens, rec.GeneratedTokens, rec.PromptTokens)
		}
	}
}

// TestLegacyCompletionsAreMeteredLikeChat: openai-go's legacy completions client through the
// gateway, streamed and not — charged what the provider counted (the gateway asks for the
// stream's usage and removes the usage-only chunk it added), clamped in max_tokens alone under
// enforcement hard, and denied 429 without a provider call once the subject is spent.
func TestLegacyCompletionsAreMeteredLikeChat(t *testing.T) {
	s, prov, c := sdkGateway(t, providerstub.ProviderConfig{CompletionTokens: 6}, responsesPolicy)
	admin := "http://" + s.AdminAddr()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prompt := openai.CompletionNewParamsPromptUnion{OfString: openai.String("hello world")}
	want := providerstub.PromptTokens([]int{len("hello world")})
	res, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: "m", Prompt: prompt, MaxTokens: openai.Int(4)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.CompletionTokens != 4 || len(res.Choices) != 1 || res.Choices[0].Text == "" {
		t.Fatalf("completion: %+v", res)
	}
	if rec := lastCall(t, prov); rec.Endpoint != providerstub.EndpointCompletions || rec.BoundField != "max_tokens" {
		t.Errorf("provider record: %+v", rec)
	}
	if settled := settledAfterIdle(t, admin, "mt"); settled != want+4 {
		t.Errorf("charged %d, the provider counted %d", settled, want+4)
	}
	stream := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: "m", Prompt: prompt})
	var chunks, usageChunks int
	for stream.Next() {
		chunks++
		if stream.Current().Usage.TotalTokens > 0 {
			usageChunks++
		}
	}
	if err := stream.Err(); err != nil || chunks == 0 || usageChunks != 0 {
		t.Fatalf("stream: %d chunks, %d with usage the client did not ask for, err %v", chunks, usageChunks, err)
	}
	lastCall(t, prov)
	if settled := settledAfterIdle(t, admin, "mt"); settled != 2*want+4+6 {
		t.Errorf("charged %d in all, the provider counted %d", settled, 2*want+4+6)
	}
	// Spend the rest (capacity 200), then a legacy completion is denied without a provider call.
	for i := 0; i < 50; i++ {
		if _, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: "m", Prompt: prompt, MaxTokens: openai.Int(30)}); err != nil {
			break
		}
	}
	calls := prov.Calls().Calls
	_, err = c.Completions.New(ctx, openai.CompletionNewParams{Model: "m", Prompt: prompt, MaxTokens: openai.Int(30)})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests {
		t.Errorf("with the subject spent: %v", err)
	}
	if n := prov.Calls().Calls - calls; n != 0 {
		t.Errorf("the denied request reached the provider %d times", n)
	}

	_, prov, c = sdkGateway(t, providerstub.ProviderConfig{CompletionTokens: 500}, hardPolicy)
	if _, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: "m", Prompt: prompt, MaxTokens: openai.Int(5000)}); err != nil {
		t.Fatal(err)
	}
	if rec := lastCall(t, prov); rec.BoundField != "max_tokens" || rec.MaxTokens == nil || rec.PromptTokens+rec.GeneratedTokens > 60 {
		t.Errorf("hard clamp: the provider honoured %s %v and generated %d (prompt %d): want ≤ 60 in all", rec.BoundField, rec.MaxTokens, rec.GeneratedTokens, rec.PromptTokens)
	}
}

// TestResponsesUnderTheTruthfulMeteringRules: a Responses provider's error is charged the usage
// it reports; a usage understating the output text (1 output token for 40 words) is not
// trusted, in the body and in the stream; a body too large to keep whole is charged the usage
// read from its tail; a stream that ends without response.completed is charged at least the
// output it relayed.
func TestResponsesUnderTheTruthfulMeteringRules(t *testing.T) {
	words := strings.TrimSuffix(strings.Repeat("tok ", 40), " ")
	usage := func(in, out int) string {
		return fmt.Sprintf(`{"input_tokens":%d,"output_tokens":%d,"total_tokens":%d}`, in, out, in+out)
	}
	event := func(typ, data string) string { return "event: " + typ + "\ndata: " + data + "\n\n" }
	big := strings.Repeat("tok ", 3<<20) // 12 MiB of output text: beyond the usage buffer
	cases := []struct {
		name      string
		status    int
		sse       bool
		body      string
		min, max  int64 // the charge's bounds
		clientGot int
	}{
		{"a provider error reporting usage", 500, false,
			`{"error":{"message":"failed","type":"server_error"},"usage":` + usage(3, 4) + `}`, 7, 7, 500},
		{"an understated usage, not streamed", 200, false,
			`{"id":"r","object":"response","status":"completed","output":[{"type":"message","content":[{"type":"output_text","text":"` + words + `"}]}],"usage":` + usage(3, 1) + `}`, 41, 1 << 20, 200},
		{"an understated usage, streamed", 200, true,
			event("response.output_text.delta", `{"type":"response.output_text.delta","delta":"`+words+`"}`) +
				event("response.completed", `{"type":"response.completed","response":{"status":"completed","usage":`+usage(3, 1)+`}}`), 41, 1 << 20, 200},
		{"an honest stream", 200, true,
			event("response.created", `{"type":"response.created","response":{"status":"in_progress","usage":null}}`) +
				event("response.output_text.delta", `{"type":"response.output_text.delta","delta":"`+words+`"}`) +
				event("response.completed", `{"type":"response.completed","response":{"status":"completed","usage":`+usage(3, 40)+`}}`), 43, 43, 200},
		{"a stream without response.completed", 200, true,
			event("response.output_text.delta", `{"type":"response.output_text.delta","delta":"`+words+`"}`), 40, 1 << 20, 200},
		{"a body too large to keep, its usage at the end", 200, false,
			`{"id":"r","object":"response","output":[{"type":"message","content":[{"type":"output_text","text":"` + big + `"}]}],"usage":` + usage(3, 3<<20) + `}`, 3 + 3<<20, 3 + 3<<20, 200},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/responses" {
					http.NotFound(w, r)
					return
				}
				_, _ = io.Copy(io.Discard, r.Body)
				if tc.sse {
					w.Header().Set("Content-Type", "text/event-stream")
				} else {
					w.Header().Set("Content-Type", "application/json")
				}
				w.WriteHeader(tc.status)
				_, _ = io.WriteString(w, tc.body)
			}))
			t.Cleanup(prov.Close)
			s, _ := inProcessGatewayTo(t, prov.URL, `
  backend: {kind: memory, timeout: 100ms}
  rules:
    - name: mt
      budgets: [{window: 600s, capacity: 1099511627776}]
      reservation_timeout: 30s
      estimation: {strategy: max_tokens, fallback_estimate: 5}
`, nil)
			body := `{"model":"m","input":"hello"`
			if tc.sse {
				body += `,"stream":true`
			}
			req, _ := http.NewRequest(http.MethodPost, "http://"+s.DataAddr()+"/v1/responses", strings.NewReader(body+"}"))
			req.Header.Set("Authorization", basicAuth("alice", "pw"))
			resp, err := testHTTP.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.clientGot {
				t.Fatalf("status %d, want the provider's %d", resp.StatusCode, tc.clientGot)
			}
			if charged := settledAfterIdle(t, "http://"+s.AdminAddr(), "mt"); charged < tc.min || charged > tc.max {
				t.Errorf("charged %d, want %d to %d", charged, tc.min, tc.max)
			}
		})
	}
}
