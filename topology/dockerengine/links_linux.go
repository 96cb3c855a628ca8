//go:build linux

package dockerengine

// The link levers on docker: loss (topology.Lossy) and a proxy on a gateway's store link
// (topology.LinkProxier), both made from the harness, on the host, in the containers' own
// network namespaces — reached as /proc/<container pid>/ns/net, so nothing is added to the
// scratch images and nothing touches Docker's own rules in the host's namespace:
//   - SetLoss(host, peer, N) loads, with the host's nft (nsenter --net=… nft -f -), a table of
//     its own per peer into host's namespace that drops N % of the packets from every address
//     of peer (topology.LossNFT, as on netns). In a Valkey Cluster run "valkey" is every node:
//     the rule goes into each node's namespace, or drops what comes from any node.
//   - ProxyLink(gateway, valkey) runs a Toxiproxy proxy in the harness with both its ends in
//     the gateway's namespace (linkproxy.Route: a listener on 127.0.0.1 there, a marked dial
//     of Valkey's backend address from there, an nftables redirect of the gateway's new
//     connections to valkey:6379 and a reset of its live direct ones), exactly as on netns.
//
// Both need the harness on the daemon's host as root, in its initial namespaces: LossReason
// and LinkProxyReason say so when it is not.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netns"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/linkproxy"
)

// nsReason is empty when the harness can enter the containers' network namespaces, or says
// why not.
func (t *dockerTopo) nsReason() string {
	const what = "the docker engine's loss and link proxy enter the containers' network namespaces from the harness (/proc/<container pid>/ns/net)"
	switch {
	case topology.Inside():
		return what + ", and this harness runs in namespaces of its own (it sees none of the daemon's processes): run it on the Docker host"
	case os.Geteuid() != 0:
		return what + ": run the harness as root on the Docker host"
	}
	if h := os.Getenv("DOCKER_HOST"); h != "" && !strings.HasPrefix(h, "unix://") {
		return what + ", and DOCKER_HOST=" + h + " is not this host's daemon: run the harness on the Docker host"
	}
	for _, bin := range []string{"nft", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			return what + " with nft and nsenter, and this host has no " + bin + " (Debian: apt-get install nftables util-linux)"
		}
	}
	return ""
}

// LossReason is empty when SetLoss works in this run, or says why not.
func (t *dockerTopo) LossReason() string { return t.nsReason() }

// LinkProxyReason is empty when ProxyLink can put a proxy on a gateway's store link, or says
// why not.
func (t *dockerTopo) LinkProxyReason() string {
	if why := t.nsReason(); why != "" {
		return why
	}
	if t.spec.Store == topology.StoreCluster {
		return "the run's store is a Valkey Cluster: a proxy on one address would carry one node's traffic, not the store's (run with --store single)"
	}
	return ""
}

// members are the containers that stand for host on the network: in a Valkey Cluster run,
// "valkey" is every node (each node's address holder owns its namespace).
func (t *dockerTopo) members(host string) []string {
	if host == topology.HostValkey && t.spec.Store == topology.StoreCluster {
		var hs []string
		for i := range topology.ClusterPrimaries {
			hs = append(hs, clusterHolder(i))
		}
		return hs
	}
	return []string{host}
}

// nsPath is the path of host's current network namespace (a restarted container has a new one).
func (t *dockerTopo) nsPath(ctx context.Context, host string) (string, error) {
	c := t.ctr(host)
	if c == nil {
		return "", fmt.Errorf("no container for %s (is the topology up?)", host)
	}
	ins, err := c.Inspect(ctx)
	if err != nil {
		return "", fmt.Errorf("inspecting %s: %w", host, err)
	}
	if ins.State == nil || ins.State.Pid == 0 {
		return "", fmt.Errorf("%s's container is not running", host)
	}
	path := fmt.Sprintf("/proc/%d/ns/net", ins.State.Pid)
	// A daemon in another pid namespace (a VM, a remote host behind a socket) reports pids
	// that are not its containers here: never load rules into the harness's own namespace.
	same, err := sameFile(path, "/proc/self/ns/net")
	if err != nil {
		return "", fmt.Errorf("%s's container (pid %d): %w: run the harness on the Docker host", host, ins.State.Pid, err)
	}
	if same {
		return "", fmt.Errorf("%s's container (pid %d) is in the harness's own network namespace here: the daemon's pids are not this host's (run the harness on the Docker host)", host, ins.State.Pid)
	}
	return path, nil
}

// sameFile reports whether two paths name the same file (a namespace's inode).
func sameFile(a, b string) (bool, error) {
	fa, err := os.Stat(a)
	if err != nil {
		return false, err
	}
	fb, err := os.Stat(b)
	if err != nil {
		return false, err
	}
	return os.SameFile(fa, fb), nil
}

// addrs are every address of host's containers on the run's networks.
func (t *dockerTopo) addrs(ctx context.Context, host string) ([]string, error) {
	var out []string
	for _, m := range t.members(host) {
		c := t.ctr(m)
		if c == nil {
			return nil, fmt.Errorf("no container for %s (is the topology up?)", m)
		}
		ins, err := c.Inspect(ctx)
		if err != nil {
			return nil, fmt.Errorf("inspecting %s: %w", m, err)
		}
		for _, ep := range ins.NetworkSettings.Networks {
			if ep != nil && ep.IPAddress.IsValid() && !slices.Contains(out, ep.IPAddress.String()) {
				out = append(out, ep.IPAddress.String())
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// nftIn loads an nft script into host's current network namespace, with the host's nft.
func (t *dockerTopo) nftIn(ctx context.Context, host, script string) error {
	path, err := t.nsPath(ctx, host)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", "--net="+path, "--", "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft in %s's namespace: %w: %s", host, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// onThreadIn runs f on a fresh OS thread switched into the namespace ns, so sockets f creates
// belong there. The thread is switched back afterwards; if that fails it is left locked and
// dies with the goroutine, as Go does with tainted threads.
func onThreadIn(ns netns.NsHandle, f func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		home, err := netns.Get()
		if err != nil {
			ch <- fmt.Errorf("reading the harness's own namespace: %w", err)
			return
		}
		defer home.Close()
		if err := netns.Set(ns); err != nil {
			ch <- fmt.Errorf("entering the namespace: %w", err)
			return
		}
		ferr := f()
		if err := netns.Set(home); err != nil {
			ch <- errors.Join(ferr, fmt.Errorf("leaving the namespace: %w", err))
			return
		}
		runtime.UnlockOSThread()
		ch <- ferr
	}()
	return <-ch
}

// openNS opens host's current network namespace; close the handle after use.
func (t *dockerTopo) openNS(ctx context.Context, host string) (netns.NsHandle, error) {
	path, err := t.nsPath(ctx, host)
	if err != nil {
		return 0, err
	}
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return 0, fmt.Errorf("opening %s's network namespace %s: %w", host, path, err)
	}
	return ns, nil
}

// lossHosts are the hosts the loss lever may name in this run.
func (t *dockerTopo) lossHosts() []string {
	hs := topology.ComponentHosts(t.Gateways())
	for _, h := range topology.StoreHosts {
		if t.ctr(h) != nil {
			hs = append(hs, h)
		}
	}
	return hs
}

// SetLoss implements topology.Lossy: in each namespace of host, a table of its own per peer
// (named after it) drops percent of the packets from peer's addresses; percent 0 deletes it.
func (t *dockerTopo) SetLoss(ctx context.Context, host, peer string, percent int) error {
	if err := topology.CheckPair(host, peer, t.lossHosts()); err != nil {
		return err
	}
	if percent < 0 || percent > 100 {
		return fmt.Errorf("loss on %s from %s: %d%% is out of range: use 0 to 100", host, peer, percent)
	}
	if why := t.LossReason(); why != "" {
		return fmt.Errorf("loss on %s from %s: %s: %w", host, peer, why, topology.ErrUnsupported)
	}
	var from []string
	if percent > 0 {
		var err error
		if from, err = t.addrs(ctx, peer); err != nil {
			return fmt.Errorf("loss %d%% on %s from %s: %w", percent, host, peer, err)
		}
	}
	script := topology.LossNFT("qqloss_"+strings.ReplaceAll(peer, "-", "_"), from, percent)
	var errs []error
	for _, m := range t.members(host) {
		if err := t.nftIn(ctx, m, script); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("loss %d%% on %s from %s: %w", percent, host, peer, err)
	}
	return nil
}

// ProxyLink implements topology.LinkProxier (see the top of this file). Undo removes the
// redirect and closes the proxy (linkproxy.Route: in an order that ends the gateway's proxied
// connections for the gateway too) and it reconnects directly.
func (t *dockerTopo) ProxyLink(ctx context.Context, host, peer string, toxics []topology.LinkToxic) (topology.Undo, error) {
	if err := topology.CheckPair(host, peer, topology.ComponentHosts(t.Gateways())); err != nil {
		return nil, err
	}
	if !topology.IsGateway(host) || peer != topology.HostValkey {
		return nil, fmt.Errorf("proxy on %s→%s: only a gateway's link to %s (its store port) can be proxied", host, peer, topology.HostValkey)
	}
	if why := t.LinkProxyReason(); why != "" {
		return nil, fmt.Errorf("proxy on %s→%s: %s: %w", host, peer, why, topology.ErrUnsupported)
	}
	peerAddr, err := t.addrOn(ctx, peer, dnetBackend)
	if err != nil {
		return nil, fmt.Errorf("proxy on %s→%s: %w", host, peer, err)
	}
	ns, err := t.openNS(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("proxy on %s→%s: %w", host, peer, err)
	}
	in := linkproxy.Namespace{
		In:  func(f func() error) error { return onThreadIn(ns, f) },
		NFT: func(ctx context.Context, script string) error { return t.nftIn(ctx, host, script) },
	}
	undo, err := t.links.Route(ctx, host, peer, in, peerAddr, dockerPorts.Valkey, toxics)
	if err != nil {
		ns.Close()
		return nil, err
	}
	return func(ctx context.Context) error {
		err := undo(ctx)
		if err == nil {
			ns.Close()
		}
		return err
	}, nil
}

// dialIn opens a TCP connection to addr from inside host's network namespace.
func (t *dockerTopo) dialIn(ctx context.Context, host, addr string) (net.Conn, error) {
	ns, err := t.openNS(ctx, host)
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	var conn net.Conn
	err = onThreadIn(ns, func() error {
		var d net.Dialer
		var err error
		conn, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return conn, err
}

// DialStore opens a TCP connection from inside host's network namespace to the run's Valkey
// (its address on the backend network), as host's own store client connects: through any
// route a lever put on host's link. topo must be a docker topology that is up.
func DialStore(ctx context.Context, topo topology.Topology, host string) (net.Conn, error) {
	t, ok := topo.(*dockerTopo)
	if !ok {
		return nil, fmt.Errorf("DialStore: a %s topology is not a docker one", topo.Engine())
	}
	addr, err := t.addrOn(ctx, topology.HostValkey, dnetBackend)
	if err != nil {
		return nil, err
	}
	return t.dialIn(ctx, host, net.JoinHostPort(addr, strconv.Itoa(dockerPorts.Valkey)))
}

// NFTTables lists the nftables tables in host's network namespace (for tests: what a lever
// left behind).
func NFTTables(ctx context.Context, topo topology.Topology, host string) (string, error) {
	t, ok := topo.(*dockerTopo)
	if !ok {
		return "", fmt.Errorf("NFTTables: a %s topology is not a docker one", topo.Engine())
	}
	path, err := t.nsPath(ctx, host)
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, "nsenter", "--net="+path, "--", "nft", "list", "tables").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("nft list tables in %s's namespace: %w: %s", host, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}
