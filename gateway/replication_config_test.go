package gateway

import (
	"strings"
	"testing"
)

// The Sentinel and replication settings are checked with the gateway config's paths, and a
// valid replicated-store config passes.
func TestConfigSentinelAndReplication(t *testing.T) {
	sentinel := "    kind: valkey\n    sentinel: {master_name: quotaqual, addresses: ['10.0.0.31:26379', '10.0.0.32:26379'], master_password_env: QQ_PASSWORD_2}\n"
	ok := repl("    kind: memory\n", sentinel+"    replication: {mode: acknowledged, min_replicas: 1, ack_timeout: 50ms}\n")(validConfig)
	cfg, err := ParseConfig([]byte(ok), testEnv)
	if err != nil {
		t.Fatalf("%v\n%s", err, ok)
	}
	if b := cfg.Policy().Backend; b.Sentinel == nil || b.Replication == nil || b.Replication.MinReplicas != 1 {
		t.Errorf("compiled backend %+v", b)
	}
	bad := repl("    kind: memory\n", sentinel+"    replication: {mode: acknowledged, ack_timeout: 100ms}\n")(validConfig)
	_, err = ParseConfig([]byte(bad), testEnv)
	want := "quota.backend.replication.ack_timeout: is 100ms; it must be at least 1ms and shorter than backend.timeout (100ms)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("want %q, got %v", want, err)
	}
	if strings.Contains(err.Error(), secretValue) {
		t.Fatalf("error prints a secret: %v", err)
	}
}
