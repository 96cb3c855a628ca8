package dockerengine

// The docker engine's Valkey Cluster (--store cluster, see topology/cluster.go): a container
// per node, formed by valkeyproc.FormCluster with the nodes' NodeArgs.
//
// Each node is two containers, as a Kubernetes pod is: a holder of the quotaqual image
// (`sleep`) on the backend network that owns the node's network namespace and address, and the
// Valkey container that joins it (NetworkMode container:<holder>). A stopped and started
// container gets a new address on a docker network, which the other nodes, who know each other
// by address, would not follow; the holder keeps the address while StopValkey stops the Valkey
// container. The holder is also the harness's way in (`quotaqual relay` to the loopback), and
// node 0's holder answers to "valkey" on the backend network, so the probes and partitions of
// "valkey" reach the cluster: a gateway disconnected from the backend network is cut off from
// every node.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/quotaqual/quotaqual/internal/valkeyproc"
	"github.com/quotaqual/quotaqual/topology"
)

// clusterHolder is node i's address holder.
func clusterHolder(i int) string { return topology.ClusterNodeName(i) + "-net" }

func init() {
	for i := range topology.ClusterPrimaries {
		dockerMembership[clusterHolder(i)] = []string{dnetBackend}
	}
}

// dockerCluster is the cluster's state on the docker engine.
type dockerCluster struct {
	mu sync.Mutex
	c  *valkeyproc.Cluster
}

func (t *dockerTopo) cluster() *valkeyproc.Cluster {
	t.vc.mu.Lock()
	defer t.vc.mu.Unlock()
	return t.vc.c
}

// startValkeyStore starts the run's store: the single Valkey, or the cluster.
func (t *dockerTopo) startValkeyStore(ctx context.Context) error {
	if t.spec.Store != topology.StoreCluster {
		return t.startValkeyContainer(ctx)
	}
	o := valkeyproc.ClusterOptions{Primaries: topology.ClusterPrimaries, Password: t.spec.Deployment.ValkeyPassword,
		ReadyTimeout: topology.ClusterReadyTimeout, Dial: t.clusterDial}
	servers := make([]*valkeyproc.Server, topology.ClusterPrimaries)
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i := range servers {
		wg.Go(func() {
			addr, err := t.startClusterNode(ctx, o, i)
			if err != nil {
				errs[i] = fmt.Errorf("%s: %w", topology.ClusterNodeName(i), err)
				return
			}
			servers[i] = valkeyproc.Remote(addr, dockerPorts.Valkey, o.Password)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	t.vc.mu.Lock()
	t.vc.c = &valkeyproc.Cluster{Nodes: servers} // for clusterDial while forming
	t.vc.mu.Unlock()
	c, err := valkeyproc.FormCluster(ctx, servers, o)
	if err != nil {
		return fmt.Errorf("forming the valkey cluster: %w", err)
	}
	t.vc.mu.Lock()
	t.vc.c = c
	t.vc.mu.Unlock()
	t.mu.Lock()
	t.ctrs[topology.HostValkey] = t.ctrs[clusterHolder(0)] // "valkey" is node 0's holder
	t.mu.Unlock()
	t.recordValkeyVersion(topology.ClusterNodeName(0))
	t.spec.Progress("valkey cluster up: %s", strings.Join(c.Addrs(), ", "))
	return nil
}

// startClusterNode starts node i's holder and Valkey container and returns its address.
func (t *dockerTopo) startClusterNode(ctx context.Context, o valkeyproc.ClusterOptions, i int) (string, error) {
	holder := clusterHolder(i)
	req := t.request(holder, t.qqImg, nil)
	req.Cmd = []string{"sleep"}
	if i == 0 {
		n := t.nets[dnetBackend]
		req.NetworkAliases[n] = append(req.NetworkAliases[n], topology.HostValkey)
	}
	if err := t.run(ctx, holder, req); err != nil {
		return "", err
	}
	id := t.ctr(holder).GetContainerID()
	name := topology.ClusterNodeName(i)
	conf := clusterNodeConf(o, i)
	if err := t.run(ctx, name, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Name:   dockerName(t.spec.RunID, name),
			Image:  t.valkeyImg,
			Labels: t.labels(name),
			Cmd:    []string{"valkey-server", dockerValkeyConf},
			// The node writes nodes.conf and its AOF in its data directory, not here.
			Files: []testcontainers.ContainerFile{{Reader: strings.NewReader(conf), ContainerFilePath: dockerValkeyConf, FileMode: 0o444}},
			HostConfigModifier: func(hc *container.HostConfig) {
				hc.NetworkMode = container.NetworkMode("container:" + id)
			},
		},
		Started: true,
		Logger:  tclog.NewNoopLogger(),
	}); err != nil {
		return "", err
	}
	if err := t.waitLogLine(ctx, name, valkeyReadyLogLine, 1); err != nil {
		return "", err
	}
	return t.backendAddr(ctx, holder)
}

// clusterNodeConf is node i's configuration: the single Valkey's, plus the cluster settings
// valkeyproc gives every node (NodeArgs, as file lines) and the password for the cluster bus.
func clusterNodeConf(o valkeyproc.ClusterOptions, i int) string {
	lines := []string{
		"port " + strconv.Itoa(dockerPorts.Valkey), "bind * -::*", "protected-mode no", "dir " + dockerStoreDir,
		`save ""`, "appendonly yes", "loglevel notice",
		"requirepass " + strconv.Quote(o.Password), "masterauth " + strconv.Quote(o.Password),
	}
	args := o.NodeArgs(i)
	for j := 0; j+1 < len(args); j += 2 {
		lines = append(lines, strings.TrimPrefix(args[j], "--")+" "+strconv.Quote(args[j+1]))
	}
	return strings.Join(lines, "\n") + "\n"
}

// clusterDial connects to a node's address from inside its holder: a relay to the loopback.
func (t *dockerTopo) clusterDial(ctx context.Context, addr string) (net.Conn, error) {
	ip, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	c := t.cluster()
	if c != nil {
		for i, s := range c.Nodes {
			if s.Host() == ip {
				return t.relayDial(ctx, clusterHolder(i), net.JoinHostPort("127.0.0.1", port))
			}
		}
	}
	return nil, fmt.Errorf("dial %s: no cluster node has that address", addr)
}

// clusterAddrs are the nodes as the gateways reach them (nil: the single Valkey).
func (t *dockerTopo) clusterAddrs() []string {
	if c := t.cluster(); c != nil && c.Primaries > 0 {
		return c.Addrs()
	}
	return nil
}

// stopCluster stops every node's Valkey container (their holders keep the addresses).
func (t *dockerTopo) stopCluster(ctx context.Context) error {
	errs := make([]error, topology.ClusterPrimaries)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			name := topology.ClusterNodeName(i)
			c := t.ctr(name)
			if c == nil {
				errs[i] = fmt.Errorf("%s is not running: bring the topology up first", name)
				return
			}
			stop := dockerStopTimeout
			if err := c.Stop(ctx, &stop); err != nil {
				errs[i] = fmt.Errorf("stopping %s: %w", name, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// startCluster starts every node's Valkey container again and waits until the cluster is whole.
func (t *dockerTopo) startCluster(ctx context.Context) error {
	errs := make([]error, topology.ClusterPrimaries)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() {
			name := topology.ClusterNodeName(i)
			c := t.ctr(name)
			if c == nil {
				errs[i] = fmt.Errorf("%s was never started: bring the topology up first", name)
				return
			}
			if st, err := c.State(ctx); err == nil && st.Running {
				return
			}
			logs, _ := t.containerLog(ctx, c.GetContainerID())
			n := strings.Count(string(logs), valkeyReadyLogLine)
			if err := c.Start(ctx); err != nil {
				errs[i] = fmt.Errorf("starting %s: %w", name, err)
				return
			}
			errs[i] = t.waitLogLine(ctx, name, valkeyReadyLogLine, n+1)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return t.cluster().WaitOK(ctx, topology.ClusterReadyTimeout)
}

// ClusterEndpoints implements topology.ClusterStore: node i is probed at its address holder
// (node 0's also answers to "valkey"), each on the Valkey port.
func (t *dockerTopo) ClusterEndpoints() []topology.Endpoint {
	var out []topology.Endpoint
	for i := range t.clusterAddrs() {
		out = append(out, topology.Endpoint{Host: clusterHolder(i), Port: dockerPorts.Valkey})
	}
	return out
}

// ClusterView implements topology.ClusterStore.
func (t *dockerTopo) ClusterView(ctx context.Context, prefix string) (topology.ClusterView, error) {
	c := t.cluster()
	if c == nil || c.Primaries == 0 {
		return topology.ClusterView{}, errors.New("the run's store is no Valkey Cluster: run with --store cluster")
	}
	return topology.ReadClusterView(ctx, c, prefix)
}

// clusterFacts describe the cluster for the manifest (nil: the single Valkey).
func (t *dockerTopo) clusterFacts() map[string]any {
	if c := t.cluster(); c != nil && c.Primaries > 0 {
		f := topology.ClusterFacts(c)
		f["containers"] = "a holder of each node's address on the backend network (quotaqual image, sleep; node 0's answers to valkey) and the node's Valkey container in its network namespace"
		return f
	}
	return nil
}
