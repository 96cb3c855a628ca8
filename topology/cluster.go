package topology

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/internal/valkeyproc"
)

// The store as a Valkey Cluster (Spec.Store == StoreCluster): ClusterPrimaries primaries that
// split the hash slots, no replicas, in place of the single Valkey. The cluster stands where
// the single Valkey stands — the host "valkey" on every engine that can — so the store levers
// keep their meaning: StopValkey stops every node (fail closed), StartValkey starts them all
// again and waits until the cluster is whole, and a partition of a gateway from "valkey" cuts
// it off from every node.

// ClusterNoStoreGroup is why a cluster run has no replicated store group (valkey-failover and
// replica-loss report it when they skip).
const ClusterNoStoreGroup = "the run's store is a Valkey Cluster (--store cluster): valkey-failover and replica-loss are about the replicated store group (a primary, replicas and Sentinels), which a cluster run does not start; run them with --store single"

// ClusterNodeName is the name of cluster node i in logs and facts: valkey-cluster-0, -1, ….
func ClusterNodeName(i int) string { return "valkey-cluster-" + strconv.Itoa(i) }

// ClusterReadyTimeout bounds the wait for cluster_state:ok after a start or a restart of every
// node (the gossip runs every 100 ms, but a loaded 2-core machine is slow).
const ClusterReadyTimeout = 60 * time.Second

// ClusterStore is implemented by engines that can run the store as a Valkey Cluster.
type ClusterStore interface {
	// ClusterView reads, from every primary, its slot ranges and the keys whose names start
	// with prefix (SCAN on that node alone): where the quota state really lies. An error when
	// this run's store is no cluster.
	ClusterView(ctx context.Context, prefix string) (ClusterView, error)
	// ClusterEndpoints are the nodes as Probe names them (host and port), once the cluster is
	// up; nil when the run's store is no cluster. Every gateway must reach each of them.
	ClusterEndpoints() []Endpoint
}

// ClusterView is the cluster as its nodes report it.
type ClusterView struct {
	Nodes []ClusterNodeView `json:"nodes"`
}

// ClusterNodeView is one primary: its slot ranges (from CLUSTER NODES, as the node itself
// reports them) and the keys found on it.
type ClusterNodeView struct {
	Name  string   `json:"name"` // valkey-cluster-<i>
	Addr  string   `json:"addr"` // host:port as the gateways reach it
	ID    string   `json:"id"`
	Slots []string `json:"slots"` // e.g. ["0-5460"]
	Keys  []string `json:"-"`     // the keys SCAN found here (summarised by the evidence)
}

// Owner names the node whose slot ranges hold slot, or "".
func (v ClusterView) Owner(slot int) string {
	for _, n := range v.Nodes {
		for _, r := range n.Slots {
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, errA := strconv.Atoi(lo)
			b, errB := strconv.Atoi(hi)
			if errA == nil && errB == nil && slot >= a && slot <= b {
				return n.Name
			}
		}
	}
	return ""
}

// ReadClusterView asks every primary of c for its own view (CLUSTER NODES, myself line) and
// its keys under prefix.
func ReadClusterView(ctx context.Context, c *valkeyproc.Cluster, prefix string) (ClusterView, error) {
	var v ClusterView
	for i := range c.Primaries {
		n := ClusterNodeView{Name: ClusterNodeName(i), Addr: c.NodeAddr(i), ID: c.NodeID(i)}
		nodes, err := c.ClusterNodes(ctx, i)
		if err != nil {
			return v, fmt.Errorf("%s: CLUSTER NODES: %w", n.Name, err)
		}
		for _, cn := range nodes {
			if strings.Contains(cn.Flags, "myself") {
				n.Slots = cn.Slots
			}
		}
		keys, err := scanKeys(ctx, c, i, prefix)
		if err != nil {
			return v, fmt.Errorf("%s: SCAN: %w", n.Name, err)
		}
		n.Keys = keys
		v.Nodes = append(v.Nodes, n)
	}
	return v, nil
}

// scanKeys lists node i's keys that start with prefix. SCAN on a cluster node walks that node's
// keys only, which is what shows where the state lies.
func scanKeys(ctx context.Context, c *valkeyproc.Cluster, i int, prefix string) ([]string, error) {
	var out []string
	cursor := "0"
	for range 100000 {
		rep, err := valkeyproc.DoVia(ctx, c.Dial, c.Nodes[i].Addr(), c.Password(), "SCAN", cursor, "MATCH", prefix+"*", "COUNT", "1000")
		if err != nil {
			return nil, err
		}
		arr, ok := rep.([]any)
		if !ok || len(arr) != 2 {
			return nil, fmt.Errorf("unexpected SCAN reply %v", rep)
		}
		cursor, _ = arr[0].(string)
		keys, _ := arr[1].([]any)
		for _, k := range keys {
			if s, ok := k.(string); ok {
				out = append(out, s)
			}
		}
		if cursor == "0" {
			slices.Sort(out)
			return out, nil
		}
	}
	return nil, errors.New("SCAN did not finish")
}

// ClusterFacts describe a cluster for the evidence manifest: every node's address, id and
// slot range, as formed.
func ClusterFacts(c *valkeyproc.Cluster) map[string]any {
	var nodes []map[string]any
	ranges := valkeyproc.SlotRanges(c.Primaries)
	for i := range c.Nodes {
		n := map[string]any{"name": ClusterNodeName(i), "addr": c.NodeAddr(i), "id": c.NodeID(i)}
		if i < len(ranges) {
			n["slots"] = fmt.Sprintf("%d-%d", ranges[i][0], ranges[i][1])
			n["role"] = "primary"
		}
		nodes = append(nodes, n)
	}
	return map[string]any{"primaries": c.Primaries, "replicas_per_primary": 0, "nodes": nodes,
		"slot_hash": "CRC16 of the key's hash tag modulo 16384 (ledger.HashSlot)"}
}

// The process engines' cluster: Base's levers and facts use it when LaunchCluster started one.

// LaunchCluster starts the run's Valkey Cluster from nodes (Dir, Host, Port, Wrap set by the
// engine; the password, log file and run id marking are set here) and makes it the store:
// ValkeyAt becomes node 0's address. dial, when set, is how the harness reaches the nodes.
func (b *Base) LaunchCluster(ctx context.Context, nodes []valkeyproc.Options, dial valkeyproc.Dialer) error {
	for i := range nodes {
		nodes[i].LogFile = b.LogPath(ClusterNodeName(i))
		nodes[i].Wrap = append([]string{"env", EnvRunID + "=" + b.Spec.RunID}, nodes[i].Wrap...)
		nodes[i].SysProcAttr = ComponentAttr()
	}
	o := valkeyproc.ClusterOptions{
		Primaries: ClusterPrimaries, Nodes: nodes, Password: b.Spec.Deployment.ValkeyPassword,
		ReadyTimeout: ClusterReadyTimeout, Dial: dial,
	}
	var c *valkeyproc.Cluster
	var err error
	if nodes[0].Port == 0 {
		// Free ports picked by valkeyproc, whose bus ports (port+10000) must be free too.
		run := func() error { c, err = valkeyproc.StartCluster(ctx, o); return err }
		if b.InValkeyNet != nil {
			err = b.InValkeyNet(run)
		} else {
			err = run()
		}
	} else {
		c, err = b.startClusterNodes(ctx, o)
	}
	if err != nil {
		return err
	}
	b.Mu.Lock()
	b.ValkeyCluster = c
	b.ValkeyAt = c.NodeAddr(0)
	b.Mu.Unlock()
	return nil
}

// startClusterNodes starts nodes on fixed ports all at once (each readiness PING where it
// reaches them), then forms the cluster: a start as long as one node's, not N.
func (b *Base) startClusterNodes(ctx context.Context, o valkeyproc.ClusterOptions) (*valkeyproc.Cluster, error) {
	servers := make([]*valkeyproc.Server, len(o.Nodes))
	errs := make([]error, len(o.Nodes))
	var wg sync.WaitGroup
	for i, no := range o.Nodes {
		no.Password, no.MasterAuth = o.Password, o.Password
		no.ExtraArgs = append(append([]string{}, no.ExtraArgs...), o.NodeArgs(i)...)
		wg.Go(func() {
			start := func() error {
				s, err := valkeyproc.Start(ctx, no)
				servers[i] = s
				return err
			}
			if b.InValkeyNet != nil {
				errs[i] = b.InValkeyNet(start)
			} else {
				errs[i] = start()
			}
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", ClusterNodeName(i), errs[i])
			}
		})
	}
	wg.Wait()
	kill := func() {
		for _, s := range servers {
			if s != nil {
				_ = s.Kill()
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		kill()
		return nil, err
	}
	c, err := valkeyproc.FormCluster(ctx, servers, o)
	if err != nil {
		kill()
		return nil, err
	}
	return c, nil
}

// ClusterAddrs are the cluster nodes' addresses as the gateways reach them; nil when the run's
// store is the single Valkey.
func (b *Base) ClusterAddrs() []string {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	if b.ValkeyCluster == nil {
		return nil
	}
	return b.ValkeyCluster.Addrs()
}

// ClusterEndpoints implements ClusterStore: the process engines' nodes all stand on host
// valkey (netns: in its namespace, each on its own port; process: on loopback).
func (b *Base) ClusterEndpoints() []Endpoint {
	var out []Endpoint
	for _, a := range b.ClusterAddrs() {
		_, port, err := net.SplitHostPort(a)
		if n, _ := strconv.Atoi(port); err == nil && n > 0 {
			out = append(out, Endpoint{HostValkey, n})
		}
	}
	return out
}

// ClusterView implements ClusterStore.
func (b *Base) ClusterView(ctx context.Context, prefix string) (ClusterView, error) {
	b.Mu.Lock()
	c := b.ValkeyCluster
	b.Mu.Unlock()
	if c == nil {
		return ClusterView{}, errors.New("the run's store is no Valkey Cluster: run with --store cluster")
	}
	return ReadClusterView(ctx, c, prefix)
}

// stopCluster stops every node at once (SIGTERM: each flushes its AOF).
func stopCluster(c *valkeyproc.Cluster) error {
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, s := range c.Nodes {
		wg.Go(func() {
			if err := s.Stop(); err != nil {
				errs[i] = fmt.Errorf("%s: %w", ClusterNodeName(i), err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startCluster starts every node again, all at once (each on its port, directory and
// nodes.conf, so with its identity and slots) and waits until the cluster is whole. in runs
// each start where the node's readiness PING reaches it (nil: here).
func startCluster(ctx context.Context, c *valkeyproc.Cluster, in func(func() error) error) error {
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, s := range c.Nodes {
		wg.Go(func() {
			restart := func() error { return s.Restart(ctx) }
			if in != nil {
				errs[i] = in(restart)
			} else {
				errs[i] = restart()
			}
			if errs[i] != nil {
				errs[i] = fmt.Errorf("%s: %w", ClusterNodeName(i), errs[i])
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return c.WaitOK(ctx, ClusterReadyTimeout)
}
