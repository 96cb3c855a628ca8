package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/quotaqual/quotaqual/providerstub"
)

const modelsPolicy = `
  backend: {kind: memory, timeout: 100ms}
  rules:
    - name: mt
      allowed_models: [small, large]
      budgets: [{window: 600s, capacity: 100}]
      reservation_timeout: 30s
      estimation: {strategy: max_tokens, fallback_estimate: 15}
`

// TestModelsIsUnmeteredAndAuthenticated: GET /v1/models lists the caller's allowed models
// without a reservation, a charge or a provider call; unauthenticated it is 401 with the
// challenge, like chat; any other method is 405.
func TestModelsIsUnmeteredAndAuthenticated(t *testing.T) {
	s, _, prov := stubbedGateway(t, providerstub.ProviderConfig{}, modelsPolicy)
	url, admin := "http://"+s.DataAddr()+"/v1/models", "http://"+s.AdminAddr()
	get := func(method, auth string) (int, http.Header, []byte) {
		req, _ := http.NewRequest(method, url, nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := testHTTP.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	if st, h, b := get(http.MethodGet, ""); st != http.StatusUnauthorized || h.Get("WWW-Authenticate") == "" {
		t.Errorf("unauthenticated: %d %q %s", st, h.Get("WWW-Authenticate"), b)
	}
	if st, _, b := get(http.MethodPost, basicAuth("alice", "pw")); st != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d %s", st, b)
	}
	for range 5 {
		st, _, b := get(http.MethodGet, basicAuth("alice", "pw"))
		var list struct {
			Object string `json:"object"`
			Data   []struct {
				ID string `json:"id"`
			} `json:"data"`
		}
		if err := json.Unmarshal(b, &list); st != http.StatusOK || err != nil || list.Object != "list" ||
			len(list.Data) != 2 || list.Data[0].ID != "large" || list.Data[1].ID != "small" {
			t.Fatalf("models: %d %s", st, b)
		}
	}
	if n := prov.Calls().Calls; n != 0 {
		t.Errorf("the listing reached the provider %d times", n)
	}
	if settled := settledAfterIdle(t, admin, "mt"); settled != 0 {
		t.Errorf("the listing charged %d tokens", settled)
	}
}
