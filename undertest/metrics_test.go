package undertest_test

import (
	"testing"

	"github.com/quotaqual/quotaqual/undertest"
)

// TestCounterSelectorsNameTheRule: the default profile declares the gateway's usage and
// store-error counters, the usage ones filled in with the scenario's rule, and a series
// matches a selector when it carries every label the selector names (others ignored).
func TestCounterSelectorsNameTheRule(t *testing.T) {
	m := undertest.Default().Caps.Metrics
	if !m.Declared() || m.Path != "/metrics" {
		t.Fatalf("quotaqual.yaml declares no counters: %+v", m)
	}
	s, ok, err := m.Counter(m.UsageUnreported, "provider-usage")
	if err != nil || !ok {
		t.Fatalf("usage_unreported: %v (declared %v)", err, ok)
	}
	if got, want := s.String(), `quotaqual_gateway_usage_total{result="unknown",rule="provider-usage"}`; got != want {
		t.Errorf("selector %s, want %s", got, want)
	}
	for _, c := range []struct {
		labels map[string]string
		want   bool
	}{
		{map[string]string{"rule": "provider-usage", "result": "unknown"}, true},
		{map[string]string{"rule": "provider-usage", "result": "unknown", "extra": "x"}, true},
		{map[string]string{"rule": "provider-usage", "result": "known"}, false},
		{map[string]string{"rule": "per-application-budget", "result": "unknown"}, false},
		{map[string]string{"result": "unknown"}, false},
	} {
		if got := s.Matches(c.labels); got != c.want {
			t.Errorf("%v matches %s: %v, want %v", c.labels, s, got, c.want)
		}
	}
	if _, ok, err := (undertest.Metrics{}).Counter("", "r"); ok || err != nil {
		t.Errorf("an undeclared counter: declared %v, %v", ok, err)
	}
	bare, ok, err := m.Counter("up", "r")
	if err != nil || !ok || bare.Name != "up" || len(bare.Labels) != 0 {
		t.Errorf("a bare name: %+v %v %v", bare, ok, err)
	}
}
