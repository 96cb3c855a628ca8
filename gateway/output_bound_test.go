package gateway

import (
	"fmt"
	"testing"
)

// hardPolicy reserves 60 tokens per choice under enforcement hard, with room for everything.
const hardPolicy = `
  backend: {kind: memory, timeout: 100ms}
  rules:
    - name: hard
      budgets: [{window: 600s, capacity: 1099511627776}]
      reservation_timeout: 30s
      reserved_tokens: 60
      enforcement: hard
`

// TestTheHardClampBoundsEveryFormOfTheOutputBound: whatever output-bound fields a request
// carries — max_completion_tokens, max_tokens, both (disagreeing either way), neither, n > 1 —
// streamed or not, the provider is asked for no more than the reservation (60 per choice)
// covers after the prompt, never for more than the client's own bound, and generates no more.
func TestTheHardClampBoundsEveryFormOfTheOutputBound(t *testing.T) {
	url, _, prov := meteredGateway(t, hardPolicy)
	auth := basicAuth("alice", "pw")
	for _, tc := range []struct {
		name   string
		fields string
		n      int64
		own    int64 // the client's own bound (max_completion_tokens before max_tokens); 0: none
	}{
		{"max_completion_tokens only", `"max_completion_tokens":5000`, 1, 5000},
		{"max_tokens only", `"max_tokens":5000`, 1, 5000},
		{"both, max_completion_tokens larger", `"max_completion_tokens":5000,"max_tokens":500`, 1, 5000},
		{"both, max_tokens larger", `"max_completion_tokens":500,"max_tokens":5000`, 1, 500},
		{"both, the client's own bound below the clamp", `"max_completion_tokens":3,"max_tokens":5000`, 1, 3},
		{"neither", ``, 1, 0},
		{"n choices, max_completion_tokens", `"max_completion_tokens":5000,"n":3`, 3, 5000},
		{"n choices, max_tokens", `"max_tokens":5000,"n":3`, 3, 5000},
		{"n choices, neither", `"n":3`, 3, 0},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, stream %v", tc.name, stream), func(t *testing.T) {
				body := `{"model":"m","messages":[{"role":"user","content":"hello"}],"metadata":{"quotaqual_tokens":"500"}`
				if tc.fields != "" {
					body += "," + tc.fields
				}
				if stream {
					body += `,"stream":true,"stream_options":{"include_usage":true}`
				}
				if r := chat(url, chatOpts{auth: auth, body: body + "}"}); r.status != 200 {
					t.Fatalf("status %d: %.300s", r.status, r.body)
				}
				call := lastCall(t, prov)
				reservation := 60 * tc.n
				if call.MaxTokens == nil || call.BoundField != "max_completion_tokens" {
					t.Fatalf("the provider honoured %s %v: the gateway must bound max_completion_tokens", call.BoundField, call.MaxTokens)
				}
				bound := *call.MaxTokens
				if bound*tc.n > reservation-call.PromptTokens || (tc.own > 0 && bound > tc.own) {
					t.Errorf("bound %d per choice × %d: want ≤ (%d reserved − %d prompt), and ≤ the client's own %d", bound, tc.n, reservation, call.PromptTokens, tc.own)
				}
				if consumed := call.PromptTokens + call.GeneratedTokens; consumed > reservation || call.GeneratedTokens > bound*tc.n {
					t.Errorf("the provider generated %d (prompt %d) under a bound of %d × %d: more than the reservation %d", call.GeneratedTokens, call.PromptTokens, bound, tc.n, reservation)
				}
			})
		}
	}
}
