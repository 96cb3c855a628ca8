//go:build !linux

package netnsengine

import "github.com/quotaqual/quotaqual/topology"

// newNetns refuses off Linux: there are no network namespaces.
func newNetns(spec topology.Spec) (topology.Topology, error) { return nil, topology.NetnsUnavailable() }
