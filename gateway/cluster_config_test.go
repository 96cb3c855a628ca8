package gateway

import (
	"strings"
	"testing"
)

// quota.backend.cluster is checked with the gateway config's paths: exactly one of url,
// sentinel and cluster, seeds as host:port, the password by environment reference and never
// printed; a valid cluster config compiles.
func TestConfigCluster(t *testing.T) {
	cluster := "    kind: valkey\n    cluster: {addresses: ['10.0.0.41:6379', '10.0.0.42:6379'], password_env: QQ_PASSWORD_2}\n"
	ok := repl("    kind: memory\n", cluster)(validConfig)
	cfg, err := ParseConfig([]byte(ok), testEnv)
	if err != nil {
		t.Fatalf("%v\n%s", err, ok)
	}
	if c := cfg.Policy().Backend.Cluster; c == nil || len(c.Addresses) != 2 || c.Password != secretValue {
		t.Errorf("compiled cluster %+v", c)
	}
	for _, tc := range []struct{ name, backend, path, want string }{
		{"url and cluster", "    kind: valkey\n    url: redis://10.0.0.41:6379\n    cluster: {addresses: ['10.0.0.41:6379']}\n",
			"quota.backend.url", "not used with backend.cluster"},
		{"sentinel and cluster", "    kind: valkey\n    sentinel: {master_name: m, addresses: ['10.0.0.31:26379']}\n    cluster: {addresses: ['10.0.0.41:6379']}\n",
			"quota.backend.sentinel", "not used with backend.cluster"},
		{"no seeds", "    kind: valkey\n    cluster: {password_env: QQ_PASSWORD_2}\n",
			"quota.backend.cluster.addresses", "required; list the cluster nodes as host:port"},
		{"a seed without a port", "    kind: valkey\n    cluster: {addresses: ['10.0.0.41']}\n",
			"quota.backend.cluster.addresses[0]", "is not host:port; write it like 10.0.0.41:6379"},
		{"a seed twice", "    kind: valkey\n    cluster: {addresses: ['10.0.0.41:6379', '10.0.0.41:6379']}\n",
			"quota.backend.cluster.addresses[1]", "listed twice"},
		{"an unset password variable", "    kind: valkey\n    cluster: {addresses: ['10.0.0.41:6379'], password_env: QQ_UNSET}\n",
			"quota.backend.cluster.password_env", "environment variable QQ_UNSET is not set"},
		{"an unknown field", "    kind: valkey\n    cluster: {addresses: ['10.0.0.41:6379'], nodes: 3}\n",
			"quota.backend.cluster.nodes", "unknown field"},
		{"cluster on memory", "    kind: memory\n    cluster: {addresses: ['10.0.0.41:6379']}\n",
			"quota.backend.cluster", "not used by kind memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			doc := repl("    kind: memory\n", tc.backend)(validConfig)
			_, err := ParseConfig([]byte(doc), testEnv)
			if err == nil {
				t.Fatalf("accepted:\n%s", doc)
			}
			msg := err.Error()
			if strings.Contains(msg, secretValue) {
				t.Fatalf("error prints a secret: %s", msg)
			}
			for _, line := range strings.Split(msg, "\n") {
				if strings.HasPrefix(line, tc.path+": ") && strings.Contains(line, tc.want) {
					return
				}
			}
			t.Fatalf("want a line %q … %q, got:\n%s", tc.path+":", tc.want, msg)
		})
	}
}
