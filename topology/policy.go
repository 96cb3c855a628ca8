package topology

import (
	"fmt"
	"slices"
	"sort"
)

// HostObserver is the harness's own vantage point: the namespace (or host) the quotaqual process
// runs in. It is a source in the policy (it scrapes admin ports) but runs no component.
const HostObserver = "observer"

// Policy is the qualification's network policy with Kubernetes NetworkPolicy semantics: every
// host denies all ingress by default, and each rule allows TCP to one port of one host from a
// list of source hosts. It is engine-neutral: the netns engine compiles it to nftables (nft.go),
// the kind engine will render it as NetworkPolicy objects. Traffic of a host to itself
// (loopback) is not subject to it.
type Policy struct {
	Rules []PolicyRule
	// ServiceHosts are the gateway profile's service replicas (WithServicePolicy), hosts the
	// policy knows beside the fixed ones.
	ServiceHosts []string
}

// PolicyRule allows TCP connections to Host:Port from each host in From.
type PolicyRule struct {
	Name string // what the rule is for, e.g. "valkey-from-gateways"
	Host string // the target host (a Kubernetes NetworkPolicy's podSelector)
	Port int    // the target TCP port
	From []string
	// UDP allows the same port over UDP too (a membership protocol's gossip).
	UDP bool
}

// DefaultPolicy is the qualification's policy for the given ports and gateways:
//   - valkey:Valkey from the gateways only;
//   - each provider's data port from the gateways only;
//   - each provider's and each gateway's admin port from the observer only;
//   - each gateway's data port from the client and the observer;
//   - everything else denied.
func DefaultPolicy(p Ports, gateways []string) Policy {
	var pol Policy
	pol.Rules = append(pol.Rules, PolicyRule{
		Name: "valkey-from-gateways", Host: HostValkey, Port: p.Valkey,
		From: slices.Clone(gateways),
	})
	for _, g := range gateways {
		pol.Rules = append(pol.Rules,
			PolicyRule{Name: g + "-data-from-client", Host: g, Port: p.GatewayData,
				From: []string{HostClient, HostObserver}},
			PolicyRule{Name: g + "-admin-from-observer", Host: g, Port: p.GatewayAdmin,
				From: []string{HostObserver}},
		)
	}
	for _, pr := range Providers {
		pol.Rules = append(pol.Rules,
			PolicyRule{Name: pr + "-data-from-gateways", Host: pr, Port: p.ProviderData,
				From: slices.Clone(gateways)},
			PolicyRule{Name: pr + "-admin-from-observer", Host: pr, Port: p.ProviderAdmin,
				From: []string{HostObserver}},
		)
	}
	return pol
}

// Allows reports whether the policy lets from open a TCP connection to to:port. A host always
// reaches itself (loopback is not policed).
func (p Policy) Allows(from, to string, port int) bool {
	if from == to {
		return true
	}
	for _, r := range p.Rules {
		if r.Host == to && r.Port == port && slices.Contains(r.From, from) {
			return true
		}
	}
	return false
}

// RulesFor returns the rules whose target is host, ordered by port.
func (p Policy) RulesFor(host string) []PolicyRule {
	var out []PolicyRule
	for _, r := range p.Rules {
		if r.Host == host {
			out = append(out, r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Port < out[j].Port })
	return out
}

// Validate checks that every rule names known hosts (a gateway of any run size counts) and a
// valid port.
func (p Policy) Validate() error {
	component := func(h string) bool {
		return h == HostClient || h == HostValkey || IsGateway(h) || slices.Contains(Providers, h) || IsStoreHost(h) || slices.Contains(p.ServiceHosts, h)
	}
	known := func(h string) bool { return h == HostObserver || component(h) }
	for _, r := range p.Rules {
		if !component(r.Host) {
			return fmt.Errorf("policy rule %q targets unknown host %q", r.Name, r.Host)
		}
		if r.Port < 1 || r.Port > 65535 {
			return fmt.Errorf("policy rule %q has port %d: use 1-65535", r.Name, r.Port)
		}
		if len(r.From) == 0 {
			return fmt.Errorf("policy rule %q allows no source: list at least one host", r.Name)
		}
		for _, f := range r.From {
			if !known(f) {
				return fmt.Errorf("policy rule %q allows unknown source %q", r.Name, f)
			}
		}
	}
	return nil
}
