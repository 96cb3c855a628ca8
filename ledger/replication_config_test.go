package ledger

import (
	"strings"
	"testing"
	"time"
)

func TestCompileSentinelAndReplication(t *testing.T) {
	env := func(k string) (string, bool) {
		v, ok := map[string]string{"QQ_SENTINEL_PW": "sentinel-canary", "QQ_EMPTY": ""}[k]
		return v, ok
	}
	rule := okBudget + "\nreserved_tokens: 1"
	rejects := []struct{ name, backend, want string }{
		{"url and sentinel", "backend: {kind: valkey, url: 'redis://h:1', sentinel: {master_name: m, addresses: ['h:26379']}}",
			"backend.url: not used with backend.sentinel (the Sentinels name the primary); remove one of them"},
		{"neither url nor sentinel", "backend: {kind: valkey}",
			"backend.url: required for kind valkey; write redis://host:6379 or a whole ${ENV_VAR} reference, or configure backend.sentinel instead"},
		{"sentinel on memory", "backend: {sentinel: {master_name: m, addresses: ['h:26379']}}",
			"backend.sentinel: not used by kind memory; remove it or set kind: valkey"},
		{"no master name", "backend: {kind: valkey, sentinel: {addresses: ['h:26379']}}",
			"backend.sentinel.master_name: required; write the name the Sentinels monitor"},
		{"no addresses", "backend: {kind: valkey, sentinel: {master_name: m}}",
			"backend.sentinel.addresses: required; list the Sentinels as host:port"},
		{"an address without a port", "backend: {kind: valkey, sentinel: {master_name: m, addresses: ['h:26379', 'h2']}}",
			`backend.sentinel.addresses[1]: "h2" is not host:port; write it like 10.0.0.31:26379`},
		{"an address twice", "backend: {kind: valkey, sentinel: {master_name: m, addresses: ['h:26379', 'h:26379']}}",
			`backend.sentinel.addresses[1]: "h:26379" is listed twice`},
		{"an unset password variable", "backend: {kind: valkey, sentinel: {master_name: m, addresses: ['h:1'], password_env: QQ_UNSET}}",
			"backend.sentinel.password_env: environment variable QQ_UNSET is not set"},
		{"an empty password variable", "backend: {kind: valkey, sentinel: {master_name: m, addresses: ['h:1'], master_password_env: QQ_EMPTY}}",
			"backend.sentinel.master_password_env: environment variable QQ_EMPTY is empty"},
		{"an unknown sentinel field", "backend: {kind: valkey, sentinel: {master: m, addresses: ['h:1']}}",
			"backend.sentinel.master: unknown field"},
		{"no mode", "backend: {kind: valkey, url: 'redis://h:1', replication: {min_replicas: 1}}",
			"backend.replication.mode: required; write acknowledged"},
		{"an unknown mode", "backend: {kind: valkey, url: 'redis://h:1', replication: {mode: sync}}",
			`backend.replication.mode: "sync" is not a mode; write acknowledged or async`},
		{"min_replicas with async", "backend: {kind: valkey, url: 'redis://h:1', replication: {mode: async, min_replicas: 1}}",
			"backend.replication.min_replicas: not used by mode async; remove it or write mode: acknowledged"},
		{"ack_timeout with async", "backend: {kind: valkey, url: 'redis://h:1', replication: {mode: async, ack_timeout: 50ms}}",
			"backend.replication.ack_timeout: not used by mode async"},
		{"acknowledged on memory", "backend: {replication: {mode: acknowledged}}",
			"backend.replication: mode acknowledged needs kind valkey"},
		{"too many replicas", "backend: {kind: valkey, url: 'redis://h:1', replication: {mode: acknowledged, min_replicas: 17}}",
			"backend.replication.min_replicas: 17 is out of bounds; write 1 to 16"},
		{"an ack timeout as long as the store timeout", "backend: {kind: valkey, url: 'redis://h:1', timeout: 300ms, replication: {mode: acknowledged, ack_timeout: 300ms}}",
			"backend.replication.ack_timeout: is 300ms; it must be at least 1ms and shorter than backend.timeout (300ms)"},
	}
	for _, tc := range rejects {
		t.Run("rejects "+tc.name, func(t *testing.T) {
			_, err := LoadPolicy([]byte(oneRule(rule, tc.backend)), env)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want %q, got: %v", tc.want, err)
			}
			if err != nil && strings.Contains(err.Error(), "sentinel-canary") {
				t.Fatalf("the error shows a password: %v", err)
			}
		})
	}

	p, err := LoadPolicy([]byte(oneRule(rule, `backend:
  kind: valkey
  timeout: 500ms
  sentinel: {master_name: quotaqual, addresses: ['10.0.0.31:26379', '[::1]:26380'], password_env: QQ_SENTINEL_PW}
  replication: {mode: acknowledged}`)), env)
	if err != nil {
		t.Fatal(err)
	}
	s, r := p.Backend.Sentinel, p.Backend.Replication
	if s.MasterName != "quotaqual" || len(s.Addresses) != 2 || s.Password != "sentinel-canary" || s.MasterPassword != "" {
		t.Errorf("sentinel compiled to %+v", s)
	}
	if r == nil || r.Mode != ReplicationAcknowledged || r.MinReplicas != 1 || r.AckTimeout.D() != 100*time.Millisecond {
		t.Errorf("replication defaults: %+v; want acknowledged, 1 replica, 100ms", r)
	}
	p, err = LoadPolicy([]byte(oneRule(rule, "backend: {kind: valkey, url: 'redis://h:1', replication: {mode: async}}")), env)
	if err != nil || p.Backend.Replication != nil {
		t.Errorf("mode async compiles to no acknowledgement; got %+v, %v", p.Backend.Replication, err)
	}
	p, err = LoadPolicy([]byte(oneRule(rule, "backend: {kind: valkey, url: 'redis://h:1', timeout: 100ms, replication: {mode: acknowledged, min_replicas: 2}}")), env)
	if err != nil || p.Backend.Replication.AckTimeout.D() != 50*time.Millisecond || p.Backend.Replication.MinReplicas != 2 {
		t.Errorf("a 100ms store timeout defaults ack_timeout to half of it; got %+v, %v", p.Backend.Replication, err)
	}
}
