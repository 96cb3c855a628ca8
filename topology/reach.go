package topology

import (
	"fmt"
	"slices"
)

// Endpoint is one host:port of a run, as Probe names it.
type Endpoint struct {
	Host string
	Port int
}

func (e Endpoint) String() string { return fmt.Sprintf("%s:%d", e.Host, e.Port) }

// StoreEndpoints lists every place each gateway of t must reach for the run's store, by shape:
// the single Valkey, or each node of the Valkey Cluster (ClusterStore.ClusterEndpoints: the
// engine knows where its nodes stand), and, when the replicated store group runs
// (StoreGroupReason empty), its data nodes and Sentinels. It is what the engines' policies
// must admit from every gateway, whatever the number of gateways — the one list the
// conformance suite probes, so that a combination an engine wires by hand cannot leave one
// gateway out unnoticed. Call it once t is up (the cluster's nodes are known then).
func StoreEndpoints(t Topology) ([]Endpoint, error) {
	var out []Endpoint
	if cs, ok := t.(ClusterStore); ok && len(cs.ClusterEndpoints()) > 0 {
		out = append(out, cs.ClusterEndpoints()...)
	} else {
		out = append(out, Endpoint{HostValkey, t.Ports().Valkey})
	}
	if sg, ok := t.(StoreGroup); ok && sg.StoreGroupReason() == "" {
		for _, n := range StoreNodes {
			out = append(out, Endpoint{n, t.Ports().Valkey})
		}
		for _, s := range StoreSentinels {
			out = append(out, Endpoint{s, SentinelPort})
		}
	}
	if slices.ContainsFunc(out, func(e Endpoint) bool { return e.Port == 0 }) {
		return nil, fmt.Errorf("the %s topology names a store endpoint without a port: %v", t.Engine(), out)
	}
	return out, nil
}
