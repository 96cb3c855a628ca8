package scenarios

import (
	"context"
	"fmt"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/topology"
)

func init() { register(1100, networkPolicy) }

func networkPolicy() Scenario {
	return Scenario{
		Name:      "network-policy",
		Summary:   "gateways reach Valkey and the providers; the client cannot reach Valkey or a provider; a provider cannot reach Valkey",
		Invariant: "isolation: only the gateways reach Valkey and the providers; every denial is backed by a positive control from the same host",
		Needs:     []Need{NeedNetworkPolicy},
		BlackBox: "sees every connection attempt from each host (denials, each backed by a positive control from the same host); " +
			"it needs no inspection: everything it checks is seen from the network",
		Run: runNetworkPolicy,
	}
}

// probeSpec is one reachability probe and whether the policy allows it.
type probeSpec struct {
	From, To string
	Port     int
	Allowed  bool
	Why      string
}

// policyProbes lists the probes of the scenario, following topology.DefaultPolicy (a unit
// test holds the two in agreement). Positive controls, one or more from every host that is the
// source of a negative control:
//   - gateway-a, gateway-b → valkey and → each provider's data port (the policy's allowances);
//   - client → each gateway's data port;
//   - each provider → its own data port: the policy allows a provider no egress target, but a
//     host always reaches itself, so this proves the probe runs and connects from that host;
//     the gateways' probes of the same provider prove the host is on the network.
//
// Negative controls: client → valkey, client → each provider's data port, each provider →
// valkey, and client → the admin ports of every gateway and provider-west (observer only).
//
// A refused connection looks the same whether a policy refused it or nothing listens, so a
// denial also counts only when a positive control reached the same target port: the gateways'
// probes for valkey and the providers' data ports, the observer's for the admin ports.
func policyProbes(ports topology.Ports, gateways []string) []probeSpec {
	var ps []probeSpec
	for _, gw := range gateways {
		ps = append(ps, probeSpec{gw, topology.HostValkey, ports.Valkey, true, "valkey accepts the gateways"})
		for _, pr := range topology.Providers {
			ps = append(ps, probeSpec{gw, pr, ports.ProviderData, true, "providers accept the gateways"})
		}
		ps = append(ps, probeSpec{topology.HostClient, gw, ports.GatewayData, true, "gateways accept the client"})
	}
	for _, pr := range topology.Providers {
		ps = append(ps, probeSpec{pr, pr, ports.ProviderData, true, "a host reaches itself: the probe works from this host"})
	}
	ps = append(ps, probeSpec{topology.HostClient, topology.HostValkey, ports.Valkey, false, "valkey accepts only the gateways"})
	for _, pr := range topology.Providers {
		ps = append(ps, probeSpec{topology.HostClient, pr, ports.ProviderData, false, "providers accept only the gateways"})
	}
	for _, pr := range topology.Providers {
		ps = append(ps, probeSpec{pr, topology.HostValkey, ports.Valkey, false, "valkey accepts only the gateways"})
	}
	for _, gw := range gateways {
		ps = append(ps,
			probeSpec{topology.HostObserver, gw, ports.GatewayAdmin, true, "admin ports accept the observer"},
			probeSpec{topology.HostClient, gw, ports.GatewayAdmin, false, "admin ports accept only the observer"},
		)
	}
	ps = append(ps,
		probeSpec{topology.HostObserver, topology.HostProviderWest, ports.ProviderAdmin, true, "admin ports accept the observer"},
		probeSpec{topology.HostClient, topology.HostProviderWest, ports.ProviderAdmin, false, "admin ports accept only the observer"},
	)
	return ps
}

func runNetworkPolicy(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	specs := policyProbes(env.Topo.Ports(), env.Topo.Gateways())
	var facts []evidence.Probe
	positiveOK := map[string]bool{} // host → at least one positive control from it reached
	listening := map[string]bool{}  // "host:port" → a positive control reached it
	target := func(s probeSpec) string { return fmt.Sprintf("%s:%d", s.To, s.Port) }
	results := make([]topology.ProbeResult, len(specs))
	for i, s := range specs {
		pctx, cancel := context.WithTimeout(ctx, adminTimeout(env.Profile))
		start := time.Now()
		pr := env.Topo.Probe(pctx, s.From, s.To, s.Port)
		cancel()
		if pr.Elapsed == 0 {
			pr.Elapsed = time.Since(start)
		}
		results[i] = pr
		exp := "denied"
		if s.Allowed {
			exp = "reached"
		}
		facts = append(facts, evidence.Probe{From: s.From, To: s.To, Port: s.Port, Expected: exp, Reached: pr.Reached,
			Supported: pr.Supported, Error: pr.Error, ElapsedMS: ms(pr.Elapsed)})
		if s.Allowed {
			positiveOK[s.From] = positiveOK[s.From] || (pr.Supported && pr.Reached)
			if s.From != s.To {
				listening[target(s)] = listening[target(s)] || (pr.Supported && pr.Reached)
			}
		}
	}
	r.Fact(evidence.ProbesFact, facts)
	var denied, negatives, reached, positives int
	for i, s := range specs {
		pr := results[i]
		name := fmt.Sprintf("%s → %s:%d", s.From, s.To, s.Port)
		if s.Allowed {
			positives++
			if r.Check("positive control "+name+" reached ("+s.Why+")", "reached", probeWord(pr), pr.Supported && pr.Reached) {
				reached++
			}
			continue
		}
		negatives++
		backed, live := positiveOK[s.From], listening[target(s)]
		ok := pr.Supported && !pr.Reached && backed && live
		if ok {
			denied++
		}
		obs := probeWord(pr)
		if !backed {
			obs += fmt.Sprintf(" (no positive control from %s succeeded: the denial does not count)", s.From)
		}
		if !live {
			obs += fmt.Sprintf(" (no positive control reached %s: it may not be listening, the denial does not count)", target(s))
		}
		r.Check("negative control "+name+" denied ("+s.Why+")",
			fmt.Sprintf("denied, with positive controls from %s and to %s", s.From, target(s)), obs, ok)
	}
	r.Key("%d/%d denials backed by positive controls; %d/%d positive controls reached", denied, negatives, reached, positives)
	return r
}

func probeWord(pr topology.ProbeResult) string {
	switch {
	case !pr.Supported:
		return "probe not supported from this host"
	case pr.Reached:
		return fmt.Sprintf("reached in %s", pr.Elapsed.Round(time.Microsecond))
	default:
		return fmt.Sprintf("denied in %s: %s", pr.Elapsed.Round(time.Microsecond), pr.Error)
	}
}
