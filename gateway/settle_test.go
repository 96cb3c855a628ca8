package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/valkeytest"
	"github.com/quotaqual/quotaqual/ledger"
	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/wire"
)

// distantStore is a real ledger whose store is storeRTT away, as a store across a network is,
// for reservations and settlements alike: on loopback a Valkey call takes ~0.1 ms and whether
// settlement keeps up with admission depends on the machine's load, not on the gateway's design.
type distantStore struct{ ledger.Ledger }

const storeRTT = 4 * time.Millisecond

func (l distantStore) Reserve(ctx context.Context, q *ledger.Quota, key string, estimate int64) (ledger.Decision, error) {
	time.Sleep(storeRTT)
	return l.Ledger.Reserve(ctx, q, key, estimate)
}

func (l distantStore) Settle(ctx context.Context, r ledger.Reservation, u ledger.Usage) (ledger.Settlement, error) {
	time.Sleep(storeRTT)
	return l.Ledger.Settle(ctx, r, u)
}

// TestSustainedConcurrencySettlesEveryRequestAtItsUsage drives 32 clients as fast as they can
// through a real gateway (Valkey backend, provider stub) whose rule reserves 50 tokens while the
// stub reports far fewer, each store call 4 ms away. Every admitted request must be settled at the usage its response
// reported while the gateway runs: none dropped (a dropped settlement is charged the estimate
// only when its 30 s lease runs out, so the ledger would show less than the usage here) and the
// ledger's settled total equal to the sum of the reported usage.
func TestSustainedConcurrencySettlesEveryRequestAtItsUsage(t *testing.T) {
	if testing.Short() {
		t.Skip("drives a gateway for 3 s")
	}
	vk := valkeytest.Start(t)
	prov := httptest.NewServer(providerstub.NewProvider(providerstub.ProviderConfig{Site: "inproc", CompletionTokens: 3}).DataHandler())
	t.Cleanup(prov.Close)
	s, url := inProcessGatewayTo(t, prov.URL, `
  backend: {kind: valkey, url: "`+vk.URL()+`", namespace: qqsustained, timeout: 1s}
  rules:
    - name: sustained
      budgets: [{window: 600s, capacity: 1000000000000}]
      reservation_timeout: 30s
      reserved_tokens: 50
`, func(p *ledger.CompiledPolicy) ledger.Ledger {
		l, err := ledger.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		return distantStore{l}
	})
	auth := basicAuth("alice", "pw")
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConns: 64, MaxIdleConnsPerHost: 64, DisableCompression: true}}
	t.Cleanup(client.CloseIdleConnections)
	const clients = 32
	var (
		ok, usageSum atomic.Int64
		firstErr     error
		errOnce      sync.Once
		wg           sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(`{"model":"m","max_tokens":3,"messages":[{"role":"user","content":"x"}]}`))
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("Authorization", auth)
				resp, err := client.Do(req)
				if err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				var body struct {
					Usage struct {
						TotalTokens int64 `json:"total_tokens"`
					} `json:"usage"`
				}
				err = json.NewDecoder(resp.Body).Decode(&body)
				resp.Body.Close()
				if err != nil || resp.StatusCode != 200 || body.Usage.TotalTokens <= 0 || body.Usage.TotalTokens >= 50 {
					errOnce.Do(func() {
						firstErr = fmt.Errorf("status %d, usage %d, decode error %v", resp.StatusCode, body.Usage.TotalTokens, err)
					})
					return
				}
				ok.Add(1)
				usageSum.Add(body.Usage.TotalTokens)
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		t.Fatal(firstErr)
	}
	// Idle: every admitted request's settlement has ended one way or another.
	results := []string{"applied", "unacknowledged", "noop", "failed", "dropped"}
	settled := func() (sum float64, by map[string]float64) {
		by = map[string]float64{}
		for _, r := range results {
			by[r] = counterValue(s.m.settlements.WithLabelValues("sustained", r))
			sum += by[r]
		}
		return sum, by
	}
	eventually(t, 30*time.Second, func() string {
		if n, by := settled(); n != float64(ok.Load()) {
			return fmt.Sprintf("%v settlements ended of %d requests: %v", n, ok.Load(), by)
		}
		return ""
	})
	_, by := settled()
	t.Logf("%d requests by %d clients in 3 s; settlements %v", ok.Load(), clients, by)
	if by["dropped"] != 0 || by["failed"] != 0 {
		t.Errorf("settlements dropped %v, failed %v, of %d; want none", by["dropped"], by["failed"], ok.Load())
	}
	var qs wire.QuotaState
	getJSON(t, "http://"+s.AdminAddr()+"/admin/quota?rule=sustained&subject=alice", &qs)
	if got := qs.Settled(); got != usageSum.Load() {
		t.Errorf("ledger settled %d tokens, the responses reported %d (%d requests, estimate 50 each)", got, usageSum.Load(), ok.Load())
	}
}

// A graceful shutdown waits for the settlements still in progress: every one lands, and the
// gateway drops none of them, although each takes a while at the store.
func TestShutdownDrainsPendingSettlements(t *testing.T) {
	var wrapped *delayedSettle
	s, url := inProcessGateway(t, memoryPolicy, func(p *ledger.CompiledPolicy) ledger.Ledger {
		wrapped = &delayedSettle{Ledger: ledger.NewMemory(p.Limits, nil), delay: 300 * time.Millisecond}
		return wrapped
	})
	const n = 8
	for range n {
		if r := chat(url, chatOpts{auth: basicAuth("alice", "pw"), body: `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`}); r.status != 200 {
			t.Fatalf("%d %s", r.status, r.body)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if got := wrapped.applied.Load(); got != n {
		t.Errorf("%d of %d settlements applied by the end of the shutdown", got, n)
	}
	if got := counterValue(s.m.settlements.WithLabelValues("mt", "dropped")); got != 0 {
		t.Errorf("%v settlements dropped", got)
	}
}
