package valkeyproc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// A Valkey Cluster: N primaries that split the 16384 hash slots in equal ranges, each with
// optional replicas, all real valkey-server processes with `cluster-enabled yes`. The cluster
// is formed by our own code (CLUSTER SET-CONFIG-EPOCH, ADDSLOTSRANGE, MEET, REPLICATE) over
// DoVia rather than by `valkey-cli --cluster create`: the same questions then reach nodes the
// harness cannot dial directly (a docker engine passes a relaying Dialer), and the start needs
// no second binary.

// ClusterSlots is the number of hash slots of a Valkey Cluster.
const ClusterSlots = 16384

// ClusterOptions configure a cluster.
type ClusterOptions struct {
	Primaries          int // default 3
	ReplicasPerPrimary int // default 0
	// Nodes are where each node runs (Dir required; Host, Wrap, ... as for Start): the
	// primaries first, then primary 0's replicas, primary 1's replicas, and so on, so primary
	// i's r-th replica is Nodes[Primaries + i*ReplicasPerPrimary + r]. Port 0 picks a free one.
	// Their Password and MasterAuth are replaced by Password.
	Nodes []Options
	// Password is every node's requirepass and masterauth; empty: none.
	Password string
	// AnnounceHosts, when set, holds one address per node (in Nodes order) that the node gives
	// the other nodes and the clients instead of its bind address (cluster-announce-ip): for a
	// node bound to 0.0.0.0 or reached through NAT. Empty entries keep the bind address.
	AnnounceHosts []string
	// NodeTimeout is cluster-node-timeout: how long a primary may not answer before its
	// replica is promoted (default 2s, short so a failover test finishes in seconds).
	NodeTimeout time.Duration
	// ReadyTimeout bounds the wait for cluster_state:ok on every node (default 60s: the
	// gossip that spreads the slot map runs every 100 ms but a loaded machine is slow).
	ReadyTimeout time.Duration
	// Dial, when set, connects the questions the harness asks the nodes; nil dials directly.
	Dial Dialer
}

// Cluster is a running Valkey Cluster.
type Cluster struct {
	Nodes     []*Server // in ClusterOptions.Nodes order: the primaries first
	Primaries int       // how many of Nodes were started as primaries
	Dial      Dialer
	announce  []string // the address each node announces ("" : its bind address)
	ids       []string // each node's cluster node id
	password  string
}

// StartCluster starts every node, assigns each primary its slot range, joins the nodes, makes
// the replicas replicate their primaries and waits until every node reports cluster_state:ok
// and knows every other node. On error, whatever started is killed.
func StartCluster(ctx context.Context, o ClusterOptions) (*Cluster, error) {
	o, err := o.withDefaults(len(o.Nodes))
	if err != nil {
		return nil, err
	}
	var nodes []*Server
	for i, no := range o.Nodes {
		no.Password, no.MasterAuth = o.Password, o.Password
		no.ExtraArgs = append(append([]string{}, no.ExtraArgs...), o.NodeArgs(i)...)
		s, err := startClusterNode(ctx, no)
		if err != nil {
			for _, s := range nodes {
				_ = s.Kill()
			}
			return nil, fmt.Errorf("cluster node %d: %w", i, err)
		}
		nodes = append(nodes, s)
	}
	c, err := FormCluster(ctx, nodes, o)
	if err != nil {
		for _, s := range nodes {
			_ = s.Kill()
		}
		return nil, err
	}
	return c, nil
}

// FormCluster makes a cluster of nodes that run already, each started with o.NodeArgs (an
// engine that starts them itself, e.g. in containers, passes Remote servers and a Dial), in
// o.Nodes order, and waits for cluster_state:ok. o.Nodes is not used.
func FormCluster(ctx context.Context, nodes []*Server, o ClusterOptions) (*Cluster, error) {
	o, err := o.withDefaults(len(nodes))
	if err != nil {
		return nil, err
	}
	n := len(nodes)
	c := &Cluster{Nodes: nodes, Primaries: o.Primaries, Dial: o.Dial, announce: make([]string, n), ids: make([]string, n), password: o.Password}
	copy(c.announce, o.AnnounceHosts)
	if err := c.form(ctx, o); err != nil {
		return nil, err
	}
	if err := c.WaitOK(ctx, o.ReadyTimeout); err != nil {
		return nil, err
	}
	return c, nil
}

// withDefaults fills in the defaults and checks that n nodes make the cluster o describes.
func (o ClusterOptions) withDefaults(n int) (ClusterOptions, error) {
	if o.Primaries == 0 {
		o.Primaries = 3
	}
	if o.NodeTimeout == 0 {
		o.NodeTimeout = defaultNodeTimeout
	}
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = 60 * time.Second
	}
	want := o.Primaries * (1 + o.ReplicasPerPrimary)
	switch {
	case o.Primaries < 1 || o.Primaries > ClusterSlots || o.ReplicasPerPrimary < 0:
		return o, fmt.Errorf("valkeyproc: a cluster needs 1 or more primaries and 0 or more replicas per primary (got %d and %d)", o.Primaries, o.ReplicasPerPrimary)
	case n != want:
		return o, fmt.Errorf("valkeyproc: a cluster of %d primaries with %d replicas each needs %d nodes (Nodes), got %d", o.Primaries, o.ReplicasPerPrimary, want, n)
	case len(o.AnnounceHosts) != 0 && len(o.AnnounceHosts) != n:
		return o, fmt.Errorf("valkeyproc: AnnounceHosts lists %d addresses for %d nodes", len(o.AnnounceHosts), n)
	}
	return o, nil
}

const defaultNodeTimeout = 2 * time.Second

// NodeArgs are the valkey-server arguments that make node i a cluster node (besides the
// password, which Options keeps off the command line).
func (o ClusterOptions) NodeArgs(i int) []string {
	timeout := o.NodeTimeout
	if timeout == 0 {
		timeout = defaultNodeTimeout
	}
	args := []string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf", // in the node's Dir, so a restart keeps its identity
		"--cluster-node-timeout", strconv.FormatInt(timeout.Milliseconds(), 10),
		"--repl-diskless-sync-delay", "0", // see StartReplicated
	}
	if i < len(o.AnnounceHosts) && o.AnnounceHosts[i] != "" {
		args = append(args, "--cluster-announce-ip", o.AnnounceHosts[i])
	}
	return args
}

// clusterBusOffset: a node's cluster bus listens on its port + 10000, so the port must be at
// most 55535 (valkey-server exits otherwise) and both ports free.
const clusterBusOffset = 10000

// startClusterNode starts one node. For Port 0 it picks the port itself, because a random
// ephemeral port is above 55535 about one time in five; a port lost to a race is picked anew.
func startClusterNode(ctx context.Context, o Options) (*Server, error) {
	if o.Port != 0 {
		return Start(ctx, o)
	}
	host := o.Host
	if host == "" {
		host = "127.0.0.1"
	}
	var lastErr error
	for range 5 {
		p, err := clusterPort(host)
		if err != nil {
			return nil, err
		}
		o.Port = p
		s, err := Start(ctx, o)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// clusterPort picks a free port on host whose cluster bus port is free and in range.
func clusterPort(host string) (int, error) {
	for range 100 {
		p, err := freePort(host)
		if err != nil {
			return 0, err
		}
		if p > 65535-clusterBusOffset {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(host, strconv.Itoa(p+clusterBusOffset)))
		if err != nil {
			continue
		}
		l.Close()
		return p, nil
	}
	return 0, fmt.Errorf("valkeyproc: no free port pair (port, port+%d) on %s", clusterBusOffset, host)
}

// form gives the nodes distinct config epochs (as valkey-cli does, so no collision needs
// resolving), the primaries their slots, introduces every node to the first and attaches the
// replicas.
func (c *Cluster) form(ctx context.Context, o ClusterOptions) error {
	for i, s := range c.Nodes {
		id, err := c.do(ctx, s, "CLUSTER", "MYID")
		if err != nil {
			return fmt.Errorf("valkeyproc: cluster node %d: CLUSTER MYID: %w", i, err)
		}
		c.ids[i], _ = id.(string)
		if _, err := c.do(ctx, s, "CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return fmt.Errorf("valkeyproc: cluster node %d: CLUSTER SET-CONFIG-EPOCH: %w", i, err)
		}
	}
	for i, r := range SlotRanges(o.Primaries) {
		if _, err := c.do(ctx, c.Nodes[i], "CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(r[0]), strconv.Itoa(r[1])); err != nil {
			return fmt.Errorf("valkeyproc: cluster primary %d: CLUSTER ADDSLOTSRANGE %d %d: %w", i, r[0], r[1], err)
		}
	}
	for i := 1; i < len(c.Nodes); i++ {
		host, port, _ := net.SplitHostPort(c.NodeAddr(i))
		if _, err := c.do(ctx, c.Nodes[0], "CLUSTER", "MEET", host, port); err != nil {
			return fmt.Errorf("valkeyproc: cluster node 0: CLUSTER MEET node %d: %w", i, err)
		}
	}
	if err := c.waitKnown(ctx, o.ReadyTimeout); err != nil {
		return err
	}
	for i := o.Primaries; i < len(c.Nodes); i++ {
		primary := (i - o.Primaries) / max(1, o.ReplicasPerPrimary)
		if _, err := c.do(ctx, c.Nodes[i], "CLUSTER", "REPLICATE", c.ids[primary]); err != nil {
			return fmt.Errorf("valkeyproc: cluster node %d: CLUSTER REPLICATE primary %d: %w", i, primary, err)
		}
	}
	// A replica counts for WAIT only once its primary lists it online, which may follow the
	// replica's own "link up" by a moment: wait for the primaries' side.
	for i := 0; i < o.Primaries && o.ReplicasPerPrimary > 0; i++ {
		s := c.Nodes[i]
		if err := waitFor(ctx, o.ReadyTimeout, fmt.Sprintf("cluster primary %d's replicas online", i), func(ctx context.Context) (bool, error) {
			info, err := InfoVia(ctx, c.Dial, s.Addr(), c.password, "replication")
			if err != nil {
				return false, err
			}
			for r := range o.ReplicasPerPrimary {
				if !strings.Contains(info["slave"+strconv.Itoa(r)], "state=online") {
					return false, fmt.Errorf("replica %d: %q", r, info["slave"+strconv.Itoa(r)])
				}
			}
			return true, nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// SlotRanges splits the hash slots into n contiguous ranges [first, last] of nearly equal size,
// as valkey-cli does.
func SlotRanges(n int) [][2]int {
	out := make([][2]int, n)
	for i := range out {
		out[i] = [2]int{i * ClusterSlots / n, (i+1)*ClusterSlots/n - 1}
	}
	return out
}

// waitKnown waits until every node knows every other as connected (not in handshake): a
// REPLICATE naming a node still in handshake is refused.
func (c *Cluster) waitKnown(ctx context.Context, timeout time.Duration) error {
	return waitFor(ctx, timeout, "the cluster nodes to know each other", func(ctx context.Context) (bool, error) {
		for i, s := range c.Nodes {
			nodes, err := c.ClusterNodes(ctx, i)
			if err != nil {
				return false, err
			}
			known := 0
			for _, n := range nodes {
				if n.Link == "connected" && !strings.Contains(n.Flags, "handshake") && !strings.Contains(n.Flags, "noaddr") {
					known++
				}
			}
			if known != len(c.Nodes) {
				return false, fmt.Errorf("node %s knows %d of %d nodes", s.Addr(), known, len(c.Nodes))
			}
		}
		return true, nil
	})
}

// WaitOK waits until every running node reports cluster_state:ok with every slot assigned.
func (c *Cluster) WaitOK(ctx context.Context, timeout time.Duration) error {
	return waitFor(ctx, timeout, "cluster_state:ok on every node", func(ctx context.Context) (bool, error) {
		for _, s := range c.Nodes {
			if s.exited() {
				continue // stopped on purpose (a failover test); the others must still agree
			}
			info, err := c.clusterInfo(ctx, s)
			if err != nil {
				return false, err
			}
			if info["cluster_state"] != "ok" || info["cluster_slots_assigned"] != strconv.Itoa(ClusterSlots) {
				return false, fmt.Errorf("node %s: cluster_state %s, %s slots assigned", s.Addr(), info["cluster_state"], info["cluster_slots_assigned"])
			}
		}
		return true, nil
	})
}

func (c *Cluster) clusterInfo(ctx context.Context, s *Server) (map[string]string, error) {
	rep, err := c.do(ctx, s, "CLUSTER", "INFO")
	if err != nil {
		return nil, err
	}
	text, _ := rep.(string)
	out := map[string]string{}
	for _, line := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

// ClusterNode is one line of CLUSTER NODES as a node sees it.
type ClusterNode struct {
	ID       string
	Addr     string // host:port (the announced address)
	Flags    string // e.g. "myself,master", "slave", "master,fail"
	MasterID string // "-" for a primary
	Link     string // connected | disconnected
	Slots    []string
}

// Primary reports whether the node is a primary.
func (n ClusterNode) Primary() bool { return strings.Contains(n.Flags, "master") }

// ClusterNodes asks node i for its view of the cluster (CLUSTER NODES).
func (c *Cluster) ClusterNodes(ctx context.Context, i int) ([]ClusterNode, error) {
	rep, err := c.do(ctx, c.Nodes[i], "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	text, _ := rep.(string)
	var out []ClusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@") // host:port@cport[,hostname]
		out = append(out, ClusterNode{ID: f[0], Addr: addr, Flags: f[2], MasterID: f[3], Link: f[7], Slots: f[8:]})
	}
	return out, nil
}

// NodeAddr is the address node i gives clients: its announced host, or its bind address.
func (c *Cluster) NodeAddr(i int) string {
	s := c.Nodes[i]
	if c.announce[i] != "" {
		return net.JoinHostPort(c.announce[i], strconv.Itoa(s.Port()))
	}
	return s.Addr()
}

// Addrs are every node's client address, the seed list a cluster client starts from.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i := range c.Nodes {
		out[i] = c.NodeAddr(i)
	}
	return out
}

// NodeID is node i's cluster node id.
func (c *Cluster) NodeID(i int) string { return c.ids[i] }

// Password is every node's requirepass.
func (c *Cluster) Password() string { return c.password }

// Kill kills every node (ignoring ones that never started).
func (c *Cluster) Kill() {
	for _, s := range c.Nodes {
		if s != nil {
			_ = s.Kill()
		}
	}
}

func (c *Cluster) do(ctx context.Context, s *Server, args ...string) (any, error) {
	rep, err := DoVia(ctx, c.Dial, s.Addr(), c.password, args...)
	if err != nil {
		return nil, err
	}
	if rep == nil {
		return nil, errors.New("valkeyproc: null reply")
	}
	return rep, nil
}

// exited reports whether this package started the server and it has exited since. A Remote
// server (not started here) never has.
func (s *Server) exited() bool {
	s.mu.Lock()
	started := s.done != nil
	s.mu.Unlock()
	return started && !s.Running()
}
