//go:build linux

package netnsengine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/internal/valkeyproc"
	"github.com/quotaqual/quotaqual/topology"
)

// storeGroup is the netns engine's replicated store group (see store.go): each node a real
// valkey-server in its own namespace, so a partition between any two of them is real.
type storeGroup struct {
	mu sync.Mutex
	r  *valkeyproc.Replicated
}

// storeNodeOptions are the options of one group node on host.
func (t *netnsTopo) storeNodeOptions(host string, port int) valkeyproc.Options {
	return valkeyproc.Options{
		Host: t.hostAddr(host), Port: port,
		Dir:      filepath.Join(t.Spec.WorkDir, "store", host),
		LogFile:  t.LogPath(host),
		Password: t.Spec.Deployment.ValkeyPassword,
		// As for the single Valkey: `env` marks the process with the run id for `quotaqual down`.
		Wrap:        append([]string{"env", topology.EnvRunID + "=" + t.Spec.RunID}, t.wrap(host)...),
		SysProcAttr: topology.ComponentAttr(),
	}
}

// startStore starts the group: valkey-1 primary, valkey-2 and valkey-3 its replicas, three
// Sentinels with quorum 2 that deem a node down after 1 s. It does not wait for the Sentinels
// to find each other (WaitStoreReady does, where a scenario needs it).
func (t *netnsTopo) startStore(ctx context.Context) error {
	if t.Spec.Store == topology.StoreCluster || t.Spec.WithoutStoreGroup {
		return nil // see StoreGroupReason
	}
	sentinels := make([]valkeyproc.Options, len(topology.StoreSentinels))
	for i, h := range topology.StoreSentinels {
		sentinels[i] = t.storeNodeOptions(h, topology.SentinelPort)
		sentinels[i].Password = "" // the policy guards the Sentinels; they hold auth-pass for the nodes
	}
	r, err := valkeyproc.StartReplicated(ctx, valkeyproc.ReplicatedOptions{
		MasterName:   topology.StoreMasterName,
		Primary:      t.storeNodeOptions(topology.HostStore1, netnsPorts.Valkey),
		Replica:      t.storeNodeOptions(topology.HostStore2, netnsPorts.Valkey),
		MoreReplicas: []valkeyproc.Options{t.storeNodeOptions(topology.HostStore3, netnsPorts.Valkey)},
		Sentinels:    sentinels,
		DownAfter:    time.Second,
		// failover-timeout also spaces a second failover attempt; 3 s keeps a stuck one short.
		FailoverTimeout: 3 * time.Second,
	})
	if err != nil {
		return err
	}
	t.store.mu.Lock()
	t.store.r = r
	t.store.mu.Unlock()
	return nil
}

// stopStore kills the group's processes and records them.
func (t *netnsTopo) stopStore(td *topology.Teardown) {
	t.store.mu.Lock()
	r := t.store.r
	t.store.mu.Unlock()
	if r == nil {
		return
	}
	for i, s := range append(r.Nodes(), r.Sentinels...) {
		if pid := s.PID(); pid != 0 && s.Running() {
			_ = s.Resume()
			_ = s.Kill()
			td.Removed = append(td.Removed, fmt.Sprintf("process %s pid %d", topology.StoreHosts[i], pid))
		}
	}
}

// storeGatewayConfig renders the gateway's launch on the group (<gateway>-store) beside its
// usual one, when the gateway under test can be put on the group.
func (t *netnsTopo) storeGatewayConfig(gateway string, a deployment.Addresses) error {
	if t.StoreGroupReason() != "" || !t.GatewayUnderTest().Caps.StoreGroup {
		return nil
	}
	a.Store = &deployment.StoreAddrs{MasterName: topology.StoreMasterName, Sentinels: topology.StoreSentinelAddrs(t.hostAddr),
		Replication: t.Spec.StoreReplication}
	_, err := t.LaunchGateway(gateway, gateway+"-store", a, t.Spec.Deployment.Profile, t.wrap(gateway))
	return err
}

func (t *netnsTopo) StoreGroupReason() string {
	if t.Spec.Deployment.Backend == deployment.BackendMemory {
		return "the gateways run the memory backend: they use no store"
	}
	if t.Spec.Store == topology.StoreCluster {
		return topology.ClusterNoStoreGroup
	}
	if t.Spec.WithoutStoreGroup {
		return topology.NoStoreGroupSelected
	}
	return ""
}

func (t *netnsTopo) replicated() (*valkeyproc.Replicated, error) {
	t.store.mu.Lock()
	defer t.store.mu.Unlock()
	if t.store.r == nil {
		return nil, errors.New("the replicated store group is not running: bring the topology up first")
	}
	return t.store.r, nil
}

func (t *netnsTopo) WaitStoreReady(ctx context.Context) error {
	r, err := t.replicated()
	if err != nil {
		return err
	}
	return r.WaitSentinelsReady(ctx, 15*time.Second)
}

func (t *netnsTopo) StorePrimary(ctx context.Context) (string, error) {
	r, err := t.replicated()
	if err != nil {
		return "", err
	}
	return topology.StorePrimary(ctx, r)
}

func (t *netnsTopo) StoreNode(ctx context.Context, host string) (topology.StoreNodeState, error) {
	r, err := t.replicated()
	if err != nil {
		return topology.StoreNodeState{Host: host}, err
	}
	return topology.ReadStoreNodeState(ctx, r, host)
}

func (t *netnsTopo) StoreEvents() ([]topology.StoreEvent, error) {
	return topology.ReadStoreEvents(t.LogPath)
}

func (t *netnsTopo) UseReplicatedStore(ctx context.Context, gateway string, on bool) error {
	stem := gateway
	if on {
		stem = gateway + "-store"
	}
	if err := t.RelaunchAs(gateway, stem); err != nil {
		return err
	}
	return t.RestartGateway(ctx, gateway)
}

func (t *netnsTopo) storeFacts() map[string]any {
	if t.Spec.WithoutStoreGroup {
		return map[string]any{"started": false, "reason": topology.NoStoreGroupSelected}
	}
	addrs := map[string]string{}
	for _, h := range topology.StoreHosts {
		addrs[h] = t.hostAddr(h)
	}
	return topology.StoreGroupFacts(addrs, t.Spec.StoreReplication)
}

var _ topology.StoreGroup = (*netnsTopo)(nil)

// The store as a Valkey Cluster (--store cluster): every node a real valkey-server in the
// valkey namespace, node i on port 6379+i (its cluster bus on port+10000, over the namespace's
// loopback). All in one namespace rather than one each, because the cluster stands where the
// single Valkey stands: the partition lever gateway↔valkey then cuts a gateway off from every
// node, as valkey-partition means, and the policy's "only the gateways reach valkey" holds for
// every node port; a namespace per node would add nothing the scenarios look at (no lever cuts
// one shard off). The harness asks the nodes its questions from inside the namespace, as it
// does the single Valkey.

// clusterPort is node i's port.
func clusterPort(i int) int { return netnsPorts.Valkey + i }

// launchValkey starts the run's store where the gateways reach "valkey": the single Valkey, or
// the Valkey Cluster.
func (t *netnsTopo) launchValkey(ctx context.Context) error {
	if t.Spec.Store != topology.StoreCluster {
		if err := t.LaunchValkey(ctx, valkeyproc.Options{
			Host: t.hostAddr(topology.HostValkey), Port: netnsPorts.Valkey, Wrap: t.wrap(topology.HostValkey),
		}); err != nil {
			return fmt.Errorf("starting valkey: %w", err)
		}
		t.Mu.Lock()
		t.ValkeyAt = net.JoinHostPort(t.hostAddr(topology.HostValkey), strconv.Itoa(netnsPorts.Valkey))
		t.Mu.Unlock()
		return nil
	}
	start := time.Now()
	nodes := make([]valkeyproc.Options, topology.ClusterPrimaries)
	for i := range nodes {
		nodes[i] = valkeyproc.Options{
			Host: t.hostAddr(topology.HostValkey), Port: clusterPort(i),
			Dir:  filepath.Join(t.Spec.WorkDir, "valkey", topology.ClusterNodeName(i)),
			Wrap: t.wrap(topology.HostValkey),
		}
	}
	dial := func(ctx context.Context, addr string) (net.Conn, error) {
		return t.dialFrom(ctx, topology.HostValkey, "tcp", addr, time.Second)
	}
	if err := t.LaunchCluster(ctx, nodes, dial); err != nil {
		return fmt.Errorf("starting the valkey cluster: %w", err)
	}
	t.Spec.Progress("valkey cluster up: %d primaries on %s in %s", topology.ClusterPrimaries, strings.Join(t.ClusterAddrs(), ", "), topology.ElapsedSince(start))
	return nil
}

// withClusterPolicy lets every gateway of the run reach the cluster's other node ports as it
// reaches the single Valkey's (node 0 keeps its port, 6379, and its rule). It once named
// gateway-a and gateway-b: with --gateways 4 --store cluster, gateway-c and gateway-d were
// refused by every node but the first.
func withClusterPolicy(p topology.Policy, gateways []string) topology.Policy {
	p.Rules = append([]topology.PolicyRule(nil), p.Rules...)
	for i := 1; i < topology.ClusterPrimaries; i++ {
		p.Rules = append(p.Rules, topology.PolicyRule{Name: topology.ClusterNodeName(i) + "-from-gateways",
			Host: topology.HostValkey, Port: clusterPort(i), From: append([]string(nil), gateways...)})
	}
	return p
}
