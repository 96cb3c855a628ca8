package gateway

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"

	"github.com/quotaqual/quotaqual/providerstub"
)

// TestEmbeddingsAreMeteredOnTheSameBudgetAsChat: /v1/embeddings through the gateway and the
// provider stub, called with openai-go — forwarded to the provider's /v1/embeddings, charged
// exactly the input tokens the provider counted (no output), refused 401 without credentials
// (no provider call), and denied 429 without a provider call once chat has spent the subject:
// one budget per key across the metered endpoints.
func TestEmbeddingsAreMeteredOnTheSameBudgetAsChat(t *testing.T) {
	s, prov, c := sdkGateway(t, providerstub.ProviderConfig{CompletionTokens: 40}, endpointsPolicy)
	admin, chatURL := "http://"+s.AdminAddr(), "http://"+s.DataAddr()+"/v1/chat/completions"
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	res, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "m",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"one", "two words"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := providerstub.PromptTokens([]int{3, 9})
	if len(res.Data) != 2 || res.Usage.PromptTokens != want {
		t.Fatalf("embeddings: %d vectors, usage %+v", len(res.Data), res.Usage)
	}
	rec := lastCall(t, prov)
	if rec.Endpoint != providerstub.EndpointEmbeddings || rec.PromptTokens != want || rec.AuthorizationPresent {
		t.Errorf("provider record: %+v", rec)
	}
	if settled := settledAfterIdle(t, admin, "mt"); settled != want {
		t.Errorf("charged %d, the provider counted %d input tokens", settled, want)
	}

	calls := prov.Calls().Calls
	req, _ := http.NewRequest(http.MethodPost, "http://"+s.DataAddr()+"/v1/embeddings", strings.NewReader(`{"model":"m","input":"x"}`))
	resp, err := testHTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") == "" {
		t.Errorf("unauthenticated embeddings: %d", resp.StatusCode)
	}
	if n := prov.Calls().Calls - calls; n != 0 {
		t.Errorf("the unauthenticated request reached the provider %d times", n)
	}

	// Chat spends the capacity (40) but less than an embeddings estimate (15); embeddings are
	// then denied.
	if r := chat(chatURL, chatOpts{auth: basicAuth("alice", "pw"), body: `{"model":"m","max_tokens":14,"messages":[{"role":"user","content":"hello"}]}`}); r.status != 200 {
		t.Fatalf("the spending chat request: %d %s", r.status, r.body)
	}
	settledAfterIdle(t, admin, "mt")
	calls = prov.Calls().Calls
	_, err = c.Embeddings.New(ctx, openai.EmbeddingNewParams{Model: "m", Input: openai.EmbeddingNewParamsInputUnion{OfString: openai.String("x")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusTooManyRequests {
		t.Errorf("embeddings with the subject spent by chat: %v", err)
	}
	if n := prov.Calls().Calls - calls; n != 0 {
		t.Errorf("the denied embeddings request reached the provider %d times", n)
	}
}

// endpointsPolicy holds an embeddings charge (15), a chat charge (9 + 14) and not one more
// embeddings estimate (15).
const endpointsPolicy = `
  backend: {kind: memory, timeout: 100ms}
  rules:
    - name: mt
      budgets: [{window: 600s, capacity: 40}]
      reservation_timeout: 30s
      estimation: {strategy: max_tokens, fallback_estimate: 15}
`
