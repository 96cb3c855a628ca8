package topology

import (
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/undertest"
)

// TestServicePolicy checks a profile's services join the policy as the profile says: each
// replica's from_gateways port from every gateway, its readiness port from the observer, its
// between_replicas ports from the other replicas over TCP and UDP, Valkey from the replicas of
// a service on the store — and nothing else (a gateway does not reach a replica's gossip port).
func TestServicePolicy(t *testing.T) {
	gw, err := undertest.Shipped("gubernator")
	if err != nil {
		t.Fatal(err)
	}
	ports := Ports{GatewayData: 8080, GatewayAdmin: 9090, ProviderData: 8000, ProviderAdmin: 9000, Valkey: 6379}
	gws := []string{HostGatewayA, HostGatewayB}
	pol := WithServicePolicy(DefaultPolicy(ports, gws), gw, gws, ports.Valkey)
	if err := pol.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		from, to string
		port     int
		want     bool
	}{
		{HostGatewayA, "gubernator-2", 1050, true},
		{HostObserver, "gubernator-3", 1050, true},
		{"gubernator-1", "gubernator-2", 7946, true},
		{"gubernator-3", "gubernator-1", 1051, true},
		{HostGatewayA, "gubernator-1", 7946, false},
		{HostClient, "gubernator-1", 1050, false},
		{"gubernator-1", HostValkey, 6379, false}, // gubernator keeps no state in Valkey
	} {
		if got := pol.Allows(c.from, c.to, c.port); got != c.want {
			t.Errorf("%s → %s:%d allowed %v, want %v", c.from, c.to, c.port, got, c.want)
		}
	}
	addrs := map[string]string{HostObserver: "198.18.0.1", HostClient: "198.18.0.10", HostGatewayA: "198.18.0.100", HostGatewayB: "198.18.0.101",
		HostValkey: "198.18.0.31", "gubernator-1": "198.18.0.60", "gubernator-2": "198.18.0.61", "gubernator-3": "198.18.0.62",
		HostProviderWest: "198.18.0.21", HostProviderCentral: "198.18.0.22", HostProviderEast: "198.18.0.23"}
	rules, err := CompileNFT(pol, "gubernator-1", addrs, DenyReject)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(rules, "udp dport 7946 accept") || !strings.Contains(rules, "tcp dport 7946 accept") {
		t.Errorf("gossip is not allowed over both TCP and UDP:\n%s", rules)
	}
	rls, err := undertest.Shipped("envoy-ai-gateway")
	if err != nil {
		t.Fatal(err)
	}
	pol = WithServicePolicy(DefaultPolicy(ports, gws), rls, gws, ports.Valkey)
	if !pol.Allows("ratelimit", HostValkey, 6379) || !pol.Allows(HostGatewayB, "ratelimit", 8081) || pol.Allows(HostGatewayB, "ratelimit", 6070) {
		t.Error("envoy ratelimit: Valkey from the service and its gRPC port from the gateways, its debug port from no one")
	}
}
