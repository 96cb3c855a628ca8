package ledger

import (
	"strings"
	"testing"
)

// backend.cluster: exactly one of url, sentinel and cluster; each seed a host:port listed once;
// the password by environment reference, never printed.
func TestCompileCluster(t *testing.T) {
	env := func(k string) (string, bool) {
		v, ok := map[string]string{"QQ_CLUSTER_PW": "cluster-canary", "QQ_EMPTY": ""}[k]
		return v, ok
	}
	rule := okBudget + "\nreserved_tokens: 1"
	rejects := []struct{ name, backend, want string }{
		{"url and cluster", "backend: {kind: valkey, url: 'redis://h:1', cluster: {addresses: ['h:6379']}}",
			"backend.url: not used with backend.cluster (the cluster client learns the nodes from backend.cluster.addresses); remove one of them"},
		{"sentinel and cluster", "backend: {kind: valkey, sentinel: {master_name: m, addresses: ['h:26379']}, cluster: {addresses: ['h:6379']}}",
			"backend.sentinel: not used with backend.cluster (a Valkey Cluster promotes its replicas itself, without Sentinels); remove one of them"},
		{"none of them", "backend: {kind: valkey}",
			"backend.url: required for kind valkey; write redis://host:6379 or a whole ${ENV_VAR} reference, or configure backend.sentinel instead (or backend.cluster for a Valkey Cluster)"},
		{"cluster on memory", "backend: {cluster: {addresses: ['h:6379']}}",
			"backend.cluster: not used by kind memory; remove it or set kind: valkey"},
		{"no addresses", "backend: {kind: valkey, cluster: {}}",
			"backend.cluster.addresses: required; list the cluster nodes as host:port, e.g. [10.0.0.41:6379, ...]"},
		{"an address without a port", "backend: {kind: valkey, cluster: {addresses: ['h:6379', 'h2']}}",
			`backend.cluster.addresses[1]: "h2" is not host:port; write it like 10.0.0.41:6379`},
		{"a port out of range", "backend: {kind: valkey, cluster: {addresses: ['h:65536']}}",
			`backend.cluster.addresses[0]: "h:65536" is not host:port`},
		{"an address twice", "backend: {kind: valkey, cluster: {addresses: ['h:6379', 'h:6379']}}",
			`backend.cluster.addresses[1]: "h:6379" is listed twice; list each cluster node once`},
		{"too many seeds", "backend: {kind: valkey, cluster: {addresses: [" + strings.Repeat("'h:1', ", MaxClusterSeeds) + "'h:2']}}",
			"backend.cluster.addresses: lists 65 cluster nodes; at most 64"},
		{"an unset password variable", "backend: {kind: valkey, cluster: {addresses: ['h:1'], password_env: QQ_UNSET}}",
			"backend.cluster.password_env: environment variable QQ_UNSET is not set; set it to the cluster nodes' password"},
		{"an empty password variable", "backend: {kind: valkey, cluster: {addresses: ['h:1'], password_env: QQ_EMPTY}}",
			"backend.cluster.password_env: environment variable QQ_EMPTY is empty"},
		{"a password written inline", "backend: {kind: valkey, cluster: {addresses: ['h:1'], password: cluster-canary}}",
			"backend.cluster.password: unknown field"},
		{"a URL as a seed", "backend: {kind: valkey, cluster: {addresses: ['redis://h:6379']}}",
			`backend.cluster.addresses[0]: "redis://h:6379" is not host:port`},
	}
	for _, tc := range rejects {
		t.Run("rejects "+tc.name, func(t *testing.T) {
			_, err := LoadPolicy([]byte(oneRule(rule, tc.backend)), env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want %q, got: %v", tc.want, err)
			}
			if strings.Contains(err.Error(), "cluster-canary") {
				t.Fatalf("the error shows a password: %v", err)
			}
		})
	}

	p, err := LoadPolicy([]byte(oneRule(rule, `backend:
  kind: valkey
  cluster: {addresses: ['10.0.0.41:6379', '[::1]:6380'], password_env: QQ_CLUSTER_PW}
  replication: {mode: acknowledged}`)), env)
	if err != nil {
		t.Fatal(err)
	}
	c := p.Backend.Cluster
	if c == nil || len(c.Addresses) != 2 || c.Password != "cluster-canary" || p.Backend.Replication == nil {
		t.Errorf("cluster compiled to %+v, replication %+v", c, p.Backend.Replication)
	}
}
