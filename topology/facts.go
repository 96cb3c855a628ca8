package topology

import (
	"fmt"
	"strings"
)

// The parts of the evidence manifest's topology facts every engine writes alike. An engine
// adds its own (images, networks, isolation) beside them.

// EndpointFacts lists the gateways' and the providers' endpoints by host.
func EndpointFacts(gateways []GatewayEndpoint, providers []ProviderEndpoint) (gws, prs map[string]any) {
	gws, prs = map[string]any{}, map[string]any{}
	for _, g := range gateways {
		gws[g.Name] = map[string]string{"data_url": g.DataURL, "admin_url": g.AdminURL}
	}
	for _, p := range providers {
		prs[p.Name] = map[string]string{"site": p.Site, "data_url": p.DataURL, "admin_url": p.AdminURL}
	}
	return gws, prs
}

// PortFacts lists the listening ports by role.
func PortFacts(p Ports) map[string]int {
	return map[string]int{
		"gateway_data": p.GatewayData, "gateway_admin": p.GatewayAdmin,
		"provider_data": p.ProviderData, "provider_admin": p.ProviderAdmin,
		"valkey": p.Valkey,
	}
}

// PolicyFacts lists a policy's rules as text, each name prefixed with prefix.
func PolicyFacts(p Policy, prefix string) []string {
	var rules []string
	for _, r := range p.Rules {
		rules = append(rules, fmt.Sprintf("%s%s: %s:%d from %s", prefix, r.Name, r.Host, r.Port, strings.Join(r.From, ",")))
	}
	return rules
}
