package gateway

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/valkeyproc"
	"github.com/quotaqual/quotaqual/internal/valkeytest"
)

const clusterE2EConfig = `
listen: {{listen}}
admin_listen: {{admin}}
auth:
  basic:
{{users}}
providers:
  - site: west
    url: http://{{provider}}
quota:
  backend:
    kind: valkey
    cluster:
      addresses: [{{seeds}}]
      password_env: QQT_CLUSTER_PW
    namespace: qqcluster
    timeout: 200ms
  rules:
    - name: default
      budgets: [{window: 60s, capacity: 60}]
      reservation_timeout: 2s
      reserved_tokens: 15
`

// Two gateway processes on a real three-primary Valkey Cluster (with a password): subjects are
// admitted through either gateway, their quota state lands on more than one shard, and one
// subject's budget is shared by both gateways (429 on both, and no provider call, while it is
// held).
func TestEndToEndOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: starts a Valkey Cluster, two gateways and a provider; not in -short")
	}
	const pw = "e2e-cluster-canary-Pw5"
	cl := valkeytest.StartCluster(t, 3, 0, valkeytest.WithClusterPassword(pw))
	prov := startProvider(t, "west", "--completion-tokens", "50", "--inter-token", "20ms")
	subjects := []string{"shared"}
	for i := range 8 {
		subjects = append(subjects, fmt.Sprintf("app-%d", i))
	}
	env := []string{"QQT_CLUSTER_PW=" + pw}
	passwords := map[string]string{}
	var users strings.Builder
	for i, u := range subjects {
		passwords[u] = randomSecret(t)
		fmt.Fprintf(&users, "    - username: %s\n      password_env: QQT_PW_%d\n", u, i)
		env = append(env, fmt.Sprintf("QQT_PW_%d=%s", i, passwords[u]))
	}
	cfg := strings.NewReplacer("{{users}}", strings.TrimRight(users.String(), "\n"), "{{provider}}", prov.data,
		"{{seeds}}", strings.Join(cl.Addrs(), ", ")).Replace(clusterE2EConfig)
	gwA := startGateway(t, "gateway-a", cfg, env)
	gwB := startGateway(t, "gateway-b", cfg, env)
	gws := []*gatewayProc{gwA, gwB}

	for i, s := range subjects[1:] {
		r := chat(gws[i%2].url(), chatOpts{auth: basicAuth(s, passwords[s])})
		if r.status != 200 {
			t.Fatalf("%s: status %d: %s", s, r.status, r.body)
		}
	}
	shards := 0
	for p := range cl.Primaries {
		rep, err := valkeyproc.Do(context.Background(), cl.NodeAddr(p), pw, "KEYS", "qqcluster:*")
		if err != nil {
			t.Fatal(err)
		}
		if n := len(rep.([]any)); n > 0 {
			shards++
			t.Logf("primary %d (%s): %d quota keys", p, cl.NodeAddr(p), n)
		}
	}
	if shards < 2 {
		t.Fatalf("eight subjects' quota state on %d shard(s); want at least two", shards)
	}

	// Four requests held 1.5s reserve 4 × 15 = 60 = capacity, two through each gateway.
	var wg sync.WaitGroup
	held := make([]chatResult, 4)
	for i := range held {
		wg.Add(1)
		go func() {
			defer wg.Done()
			held[i] = chat(gws[i%2].url(), chatOpts{auth: basicAuth("shared", passwords["shared"]), headers: map[string]string{"x-quotaqual-hold": "1500ms"}})
		}()
	}
	eventually(t, 3*time.Second, func() string {
		if qs := gwB.quota(t, "default", "shared"); qs.ActiveReservations != 4 || qs.ReservedTokens != 60 {
			return fmt.Sprintf("active %d reserved %d, want 4 and 60", qs.ActiveReservations, qs.ReservedTokens)
		}
		return ""
	})
	// The reservations are taken before the requests reach the provider: wait for all four.
	before := int64(len(subjects) - 1 + len(held))
	eventually(t, 3*time.Second, func() string {
		if n := prov.calls(t).Calls; n != before {
			return fmt.Sprintf("provider calls %d, want %d", n, before)
		}
		return ""
	})
	for i, g := range gws {
		if r := chat(g.url(), chatOpts{auth: basicAuth("shared", passwords["shared"])}); r.status != 429 {
			t.Errorf("gateway %d over the shared budget: status %d, want 429: %s", i, r.status, r.body)
		}
	}
	if after := prov.calls(t).Calls; after != before {
		t.Errorf("provider calls went from %d to %d: a 429 reached the provider", before, after)
	}
	wg.Wait()
	for i, r := range held {
		if r.status != 200 {
			t.Errorf("held request %d: %d %s", i, r.status, r.body)
		}
	}
	for _, g := range gws {
		if strings.Contains(g.log(), pw) {
			t.Fatal("a gateway log shows the cluster password")
		}
	}
}
