// Package netnsengine is the netns topology engine: every host in a network namespace of its
// own on one bridge, inside the run's own user, network, mount and pid namespaces (see
// topology/reexec.go for how the command gets there), with nftables enforcing the policy on
// every host. It registers itself as topology.EngineNetns; import topology/engines rather
// than this package to build every engine in.
package netnsengine

import "github.com/quotaqual/quotaqual/topology"

func init() {
	topology.Register(topology.EngineNetns, topology.Engine{
		New: newNetns,
		// The hosts are built inside the run's own user, network, mount and pid namespaces:
		// a command enters them by running again in there (topology/reexec.go).
		Enter:   topology.ReexecIntoNamespace,
		Entered: func() (string, bool) { return topology.InsideRunID(), topology.Inside() },
		Cluster: true,
	})
}
