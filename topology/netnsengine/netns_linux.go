//go:build linux

package netnsengine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netns"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/linkproxy"
)

// The private network of a netns run. Every run lives in its own user and network namespace
// (see reexec.go), so these names and addresses never collide between parallel runs: there is
// no shared subnet to hash into. Within one run several topologies may be up at once (a
// scenario's own topology beside the run's, qualify's own topologies): each takes a slot, and
// slot k has its own bridge qqbr<k>, veths qv<k>-… (slot 0 keeps qv-…) and subnet 198.18.k.0/24
// (inside 198.18.0.0/15, the benchmarking range, RFC 2544), so the harness's namespace routes
// each subnet to its own bridge.
const (
	prefixLen = 24
	// maxSlots bounds the topologies one process may have up at once.
	maxSlots = 64
)

// netnsAddrs are the fixed addresses of each host (the observer is the bridge itself). Gateway
// i (gateway-a is 0) is 198.18.0.(100+i), for every gateway a run may have (init below).
var netnsAddrs = map[string]string{
	topology.HostObserver:        "198.18.0.1",
	topology.HostClient:          "198.18.0.10",
	topology.HostProviderWest:    "198.18.0.21",
	topology.HostProviderCentral: "198.18.0.22",
	topology.HostProviderEast:    "198.18.0.23",
	topology.HostValkey:          "198.18.0.31",
	topology.HostStore1:          "198.18.0.41",
	topology.HostStore2:          "198.18.0.42",
	topology.HostStore3:          "198.18.0.43",
	topology.HostSentinel1:       "198.18.0.51",
	topology.HostSentinel2:       "198.18.0.52",
	topology.HostSentinel3:       "198.18.0.53",
}

// vethCodes name each host's bridge-side veth (interface names have at most 15 bytes).
var vethCodes = map[string]string{
	topology.HostClient:       "cl",
	topology.HostProviderWest: "pw", topology.HostProviderCentral: "pc", topology.HostProviderEast: "pe",
	topology.HostValkey: "vk",
	topology.HostStore1: "v1", topology.HostStore2: "v2", topology.HostStore3: "v3",
	topology.HostSentinel1: "s1", topology.HostSentinel2: "s2", topology.HostSentinel3: "s3",
}

// Each gateway's address and veth code ("ga" … "gp").
func init() {
	for i, g := range topology.GatewayNames(topology.MaxGateways) {
		netnsAddrs[g] = fmt.Sprintf("198.18.0.%d", 100+i)
		vethCodes[g] = "g" + g[len(g)-1:]
	}
}

// serviceAddr and serviceVeth place the i-th service replica of a gateway profile (its
// services, see topology/services.go): 198.18.0.(60+i), veth "x0" … (at most 20).
func serviceAddr(i int) string { return fmt.Sprintf("198.18.0.%d", 60+i) }
func serviceVeth(i int) string { return fmt.Sprintf("x%d", i) }

// maxServiceHosts is how many service replicas a netns run places (198.18.0.60-79).
const maxServiceHosts = 20

// netnsHosts are the hosts a netns run with these gateways builds: the components and the
// replicated store group.
func netnsHosts(gateways []string) []string {
	return append(topology.ComponentHosts(gateways), topology.StoreHosts...)
}

// netnsPorts are the same on every host: each host has its own address.
var netnsPorts = topology.Ports{GatewayData: 8080, GatewayAdmin: 9090, ProviderData: 8000, ProviderAdmin: 9000, Valkey: 6379}

type netnsTopo struct {
	topology.Base
	prefix string // "qq-<runid-short>-"
	policy topology.Policy
	home   netns.NsHandle // the harness's own ("fabric"/observer) namespace
	client *http.Client

	claimed bool // holds slot in usedSlots
	slot    int  // this topology's slot while claimed: its bridge, veth names and subnet

	nmu        sync.Mutex
	handles    map[string]netns.NsHandle // open host namespaces
	partitions map[[2]string]bool
	proxies    linkproxy.Links // store-link proxies (proxy_linux.go)

	store storeGroup // the replicated store group (netns_store.go)

	// addrs and veths are netnsAddrs and vethCodes plus the gateway profile's service hosts.
	addrs, veths map[string]string
	services     []string // the service hosts, in profile order
}

func newNetns(spec topology.Spec) (topology.Topology, error) {
	if !topology.Inside() {
		return nil, errors.New("the netns topology must run inside its own namespaces: call topology.ReexecIntoNamespace at the start of the command (or use --topology process)")
	}
	if err := topology.PrepareInside(); err != nil {
		return nil, err
	}
	for _, bin := range []string{"ip", "nft", "nsenter"} {
		if _, err := exec.LookPath(bin); err != nil {
			return nil, fmt.Errorf("the netns topology needs %s on PATH (.ci/install-deps installs it)", bin)
		}
	}
	home, err := homeNamespace()
	if err != nil {
		return nil, fmt.Errorf("opening the harness's own network namespace: %w", err)
	}
	t := &netnsTopo{
		Base:       topology.NewBase(spec, topology.EngineNetns),
		prefix:     "qq-" + shortRunID(spec.RunID) + "-",
		policy:     topology.WithStorePolicy(topology.DefaultPolicy(netnsPorts, spec.GatewayHosts()), netnsPorts.Valkey, spec.GatewayHosts()),
		home:       home,
		handles:    map[string]netns.NsHandle{},
		partitions: map[[2]string]bool{},
		addrs:      maps.Clone(netnsAddrs),
		veths:      maps.Clone(vethCodes),
	}
	gw := topology.GatewayProfile(spec)
	t.services = gw.ServiceHosts()
	if len(t.services) > maxServiceHosts {
		return nil, fmt.Errorf("gateway profile %s has %d service replicas: the netns topology places at most %d", gw.Name, len(t.services), maxServiceHosts)
	}
	for i, h := range t.services {
		t.addrs[h], t.veths[h] = serviceAddr(i), serviceVeth(i)
	}
	t.policy = topology.WithServicePolicy(t.policy, gw, spec.GatewayHosts(), netnsPorts.Valkey)
	if spec.Store == topology.StoreCluster {
		t.policy = withClusterPolicy(t.policy, spec.GatewayHosts())
	}
	if spec.AdjustPolicy != nil {
		t.policy = spec.AdjustPolicy(t.policy)
	}
	t.PortNumbers = netnsPorts
	t.ObserverClient = &http.Client{Transport: topology.NewTransport(nil)}
	t.client = &http.Client{Transport: topology.NewTransport(func(ctx context.Context, network, addr string) (net.Conn, error) {
		return t.dialFrom(ctx, topology.HostClient, network, addr, 2*time.Second)
	})}
	t.InValkeyNet = func(f func() error) error { return t.onThreadIn(topology.HostValkey, f) }
	return t, nil
}

// homeNamespace opens the harness's own network namespace: the calling thread's, on a thread
// held for the call. Not /proc/self/ns/net: that is the main thread's, which may be inside a
// host's namespace for a moment when another topology of the process is up and running
// onThreadIn on it — and a wrong home would send every thread that switches back into that
// host's namespace. A thread no onThreadIn holds is always in the home namespace.
func homeNamespace() (netns.NsHandle, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return netns.Get()
}

// shortRunID keeps namespace names readable: the run id's last 12 characters.
func shortRunID(id string) string {
	if len(id) > 12 {
		id = strings.TrimLeft(id[len(id)-12:], "-")
	}
	return id
}

func (t *netnsTopo) Engine() string            { return topology.EngineNetns }
func (t *netnsTopo) Client() *http.Client      { return t.client }
func (t *netnsTopo) nsName(host string) string { return t.prefix + host }
func (t *netnsTopo) nsPath(host string) string { return "/run/netns/" + t.nsName(host) }

// hosts are the run's hosts: netnsHosts, less the store group's when the run leaves it out,
// plus the gateway profile's service hosts.
func (t *netnsTopo) hosts() []string {
	hs := netnsHosts(t.Gateways())
	if t.Spec.WithoutStoreGroup {
		hs = topology.ComponentHosts(t.Gateways())
	}
	return append(hs, t.services...)
}
func (t *netnsTopo) hostAddr(host string) string {
	return t.addrs[host]
}

// addrOf is host's address when this run has that host (the observer included).
func (t *netnsTopo) addrOf(host string) (string, bool) {
	if host != topology.HostObserver && !slices.Contains(t.hosts(), host) {
		return "", false
	}
	a, ok := t.addrs[host]
	return a, ok
}
func (t *netnsTopo) url(host string, port int) string {
	return "http://" + net.JoinHostPort(t.hostAddr(host), strconv.Itoa(port))
}

// wrap is the argv prefix that runs a command in host's network namespace.
func (t *netnsTopo) wrap(host string) []string {
	return []string{"nsenter", "--net=" + t.nsPath(host), "--"}
}

// usedSlots are the slots of the netns topologies up in this process: the bridge and veth
// names live in the process's own network namespace, so each topology needs its own.
var (
	slotsMu   sync.Mutex
	usedSlots = map[int]bool{}
)

// claimSlot takes the lowest free slot and moves the topology's addresses into its subnet.
func (t *netnsTopo) claimSlot() error {
	slotsMu.Lock()
	defer slotsMu.Unlock()
	for k := 0; k < maxSlots; k++ {
		if usedSlots[k] {
			continue
		}
		usedSlots[k] = true
		t.Mu.Lock()
		t.claimed, t.slot = true, k
		t.Mu.Unlock()
		for h, a := range t.addrs {
			t.addrs[h] = inSlot(a, k)
		}
		return nil
	}
	return fmt.Errorf("%d netns topologies are up in this process: take one down first", maxSlots)
}

// inSlot moves an address of 198.18.0.0/24 into slot k's subnet 198.18.k.0/24.
func inSlot(addr string, k int) string {
	return fmt.Sprintf("198.18.%d.%s", k, addr[strings.LastIndexByte(addr, '.')+1:])
}

// bridgeName, bridgeSubnet and vethName are the slot's: qqbr0, 198.18.0.0/24 and qv-<code> for
// slot 0 (as before there were slots), qqbr<k>, 198.18.k.0/24 and qv<k>-<code> for the others.
func (t *netnsTopo) bridgeName() string   { return fmt.Sprintf("qqbr%d", t.slot) }
func (t *netnsTopo) bridgeSubnet() string { return fmt.Sprintf("198.18.%d.0/%d", t.slot, prefixLen) }
func (t *netnsTopo) vethName(host string) string {
	if t.slot == 0 {
		return "qv-" + t.veths[host]
	}
	return fmt.Sprintf("qv%d-%s", t.slot, t.veths[host])
}

func (t *netnsTopo) Up(ctx context.Context) (err error) {
	start := time.Now()
	if err := t.claimSlot(); err != nil {
		return err
	}
	if err := t.MakeWorkDirs(); err != nil {
		t.release()
		return err
	}
	defer func() {
		if err != nil {
			_, _ = t.Down(context.Background())
		}
	}()
	if err := t.buildNetwork(ctx); err != nil {
		return err
	}
	t.Spec.Progress("network up: %d namespaces on %s (%s), deny mode %s, in %s", len(t.hosts()), t.bridgeName(), t.bridgeSubnet(), t.Spec.DenyMode, topology.ElapsedSince(start))

	if err := t.launchValkey(ctx); err != nil {
		return err
	}

	if err := t.startStore(ctx); err != nil {
		return fmt.Errorf("starting the replicated store group: %w", err)
	}

	// The gateway profile's own services (a rate-limit engine) come up after the store they
	// may use and before the gateways that ask them.
	if err := t.LaunchServices(ctx, deployment.Addresses{ValkeyAddr: t.ValkeyAt, Providers: t.providerAddrs(),
		DataListen: ":" + strconv.Itoa(netnsPorts.GatewayData), AdminListen: ":" + strconv.Itoa(netnsPorts.GatewayAdmin)},
		func(host string) topology.ServiceHost {
			return topology.ServiceHost{IP: t.hostAddr(host), Wrap: t.wrap(host)}
		}); err != nil {
		return err
	}

	var provs []*topology.Component
	var provAddrs []deployment.ProviderAddr
	for _, host := range topology.Providers {
		site := topology.SiteOf(host)
		argv := append(t.wrap(host), t.Spec.Binary)
		argv = append(argv, t.Spec.Deployment.ProviderArgs(site,
			":"+strconv.Itoa(netnsPorts.ProviderData), ":"+strconv.Itoa(netnsPorts.ProviderAdmin))...)
		provs = append(provs, topology.NewComponent(host, argv, topology.ComponentEnv(t.Spec.RunID),
			t.LogPath(host), t.url(host, netnsPorts.ProviderAdmin)+"/healthz"))
		ep := topology.ProviderEndpoint{Name: host, Site: site,
			DataURL: t.url(host, netnsPorts.ProviderData), AdminURL: t.url(host, netnsPorts.ProviderAdmin)}
		t.Mu.Lock()
		t.ProviderEndpoints[host] = ep
		t.Mu.Unlock()
		provAddrs = append(provAddrs, deployment.ProviderAddr{Site: site, URL: ep.DataURL})
	}
	var gws []*topology.Component
	for _, host := range t.Gateways() {
		addrs := deployment.Addresses{
			DataListen:  ":" + strconv.Itoa(netnsPorts.GatewayData),
			AdminListen: ":" + strconv.Itoa(netnsPorts.GatewayAdmin),
			ValkeyAddr:  t.ValkeyAt,
			Cluster:     t.ClusterAddrs(),
			Providers:   provAddrs,
		}
		l, err := t.LaunchGateway(host, host, addrs, t.Spec.Deployment.Profile, t.wrap(host))
		if err != nil {
			return err
		}
		if err := t.storeGatewayConfig(host, addrs); err != nil {
			return err
		}
		gws = append(gws, topology.NewComponent(host, l.Argv, l.Env, t.LogPath(host),
			t.GatewayReadyURL(t.url(host, netnsPorts.GatewayData), t.url(host, netnsPorts.GatewayAdmin))))
		t.Mu.Lock()
		t.GatewayEndpoints[host] = topology.GatewayEndpoint{Name: host,
			DataURL: t.url(host, netnsPorts.GatewayData), AdminURL: t.url(host, netnsPorts.GatewayAdmin)}
		t.Mu.Unlock()
	}
	// Providers and gateways start together: a gateway needs Valkey to be ready, not the
	// providers (it reaches them per request).
	if err := t.StartAndWait(ctx, append(provs, gws...)); err != nil {
		return err
	}
	t.Mu.Lock()
	t.IsUp = true
	t.Mu.Unlock()
	t.Spec.Progress("netns topology up in %s", topology.ElapsedSince(start))
	return nil
}

// buildNetwork creates the bridge in the harness's namespace, one namespace per host with a
// veth into the bridge, and loads each host's nftables ruleset (before any component starts).
func (t *netnsTopo) buildNetwork(ctx context.Context) error {
	var b strings.Builder
	br := t.bridgeName()
	fmt.Fprintf(&b, "link set lo up\nlink add %s type bridge\naddr add %s/%d dev %s\nlink set %s up\n",
		br, t.hostAddr(topology.HostObserver), prefixLen, br, br)
	for _, h := range t.hosts() {
		fmt.Fprintf(&b, "netns add %s\n", t.nsName(h))
		fmt.Fprintf(&b, "link add %s type veth peer name eth0 netns %s\n", t.vethName(h), t.nsName(h))
		fmt.Fprintf(&b, "link set %s master %s up\n", t.vethName(h), br)
	}
	if err := run(ctx, b.String(), "ip", "-batch", "-"); err != nil {
		return fmt.Errorf("building the bridge and namespaces: %w", err)
	}
	errs := make([]error, len(t.hosts()))
	var wg sync.WaitGroup
	for i, h := range t.hosts() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := fmt.Sprintf("link set lo up\naddr add %s/%d dev eth0\nlink set eth0 up\n", t.hostAddr(h), prefixLen)
			if err := run(ctx, cfg, "ip", "-n", t.nsName(h), "-batch", "-"); err != nil {
				errs[i] = fmt.Errorf("addressing %s: %w", h, err)
				return
			}
			rules, err := topology.CompileNFT(t.policy, h, t.addrs, t.Spec.DenyMode)
			if err != nil {
				errs[i] = err
				return
			}
			if err := run(ctx, rules, append(t.wrap(h), "nft", "-f", "-")...); err != nil {
				errs[i] = fmt.Errorf("loading the nftables ruleset of %s: %w", h, err)
				return
			}
			hd, err := netns.GetFromPath(t.nsPath(h))
			if err != nil {
				errs[i] = fmt.Errorf("opening the namespace of %s: %w", h, err)
				return
			}
			t.nmu.Lock()
			t.handles[h] = hd
			t.nmu.Unlock()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// run executes argv with stdin, returning its output in the error when it fails.
func run(ctx context.Context, stdin string, argv ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

func (t *netnsTopo) handle(host string) (netns.NsHandle, error) {
	t.nmu.Lock()
	defer t.nmu.Unlock()
	h, ok := t.handles[host]
	if !ok {
		return 0, fmt.Errorf("no namespace for host %q (is the topology up?)", host)
	}
	return h, nil
}

// onThreadIn runs f on a fresh OS thread switched into host's network namespace, so sockets
// f creates (and processes it starts) belong there. The thread is switched back afterwards; if
// that fails it is left locked and dies with the goroutine, as Go does with tainted threads.
func (t *netnsTopo) onThreadIn(host string, f func() error) error {
	ns, err := t.handle(host)
	if err != nil {
		return err
	}
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(ns); err != nil {
			ch <- fmt.Errorf("entering the namespace of %s: %w", host, err)
			return
		}
		ferr := f()
		if err := netns.Set(t.home); err != nil {
			ch <- errors.Join(ferr, fmt.Errorf("leaving the namespace of %s: %w", host, err))
			return
		}
		runtime.UnlockOSThread()
		ch <- ferr
	}()
	return <-ch
}

// dialFrom opens a TCP connection that originates from host (the observer dials from the
// harness's own namespace).
func (t *netnsTopo) dialFrom(ctx context.Context, host, network, addr string, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if host == topology.HostObserver {
		return d.DialContext(ctx, network, addr)
	}
	var conn net.Conn
	err := t.onThreadIn(host, func() error {
		var err error
		conn, err = d.DialContext(ctx, network, addr)
		return err
	})
	return conn, err
}

func (t *netnsTopo) Probe(ctx context.Context, from, to string, port int) topology.ProbeResult {
	res := topology.ProbeResult{From: from, To: to, Port: port, Supported: true}
	ip, ok := t.addrOf(to)
	if _, fok := t.addrOf(from); !ok || !fok || to == topology.HostObserver {
		res.Error = fmt.Sprintf("unknown host (from %q, to %q)", from, to)
		return res
	}
	start := time.Now()
	conn, err := t.dialFrom(ctx, from, "tcp", net.JoinHostPort(ip, strconv.Itoa(port)), topology.ProbeTimeout)
	res.Elapsed = time.Since(start)
	if err != nil {
		res.Error = topology.ConnectError(err)
		return res
	}
	conn.Close()
	res.Reached = true
	return res
}

// Partition adds each side's address to the other side's partition set: both directions,
// and since the set is matched before the established accept, live connections die too.
func (t *netnsTopo) Partition(ctx context.Context, host, peer string) error {
	return t.setPartition(ctx, host, peer, true)
}

func (t *netnsTopo) Heal(ctx context.Context, host, peer string) error {
	return t.setPartition(ctx, host, peer, false)
}

func (t *netnsTopo) setPartition(ctx context.Context, host, peer string, on bool) error {
	if err := topology.CheckPair(host, peer, t.hosts()); err != nil {
		return err
	}
	key := topology.PairKey(host, peer)
	t.nmu.Lock()
	defer t.nmu.Unlock()
	if t.partitions[key] == on {
		return nil
	}
	if err := run(ctx, topology.NFTPartitionCommand(on, t.hostAddr(peer)), append(t.wrap(host), "nft", "-f", "-")...); err != nil {
		return fmt.Errorf("partition %s from %s: %w", host, peer, err)
	}
	if err := run(ctx, topology.NFTPartitionCommand(on, t.hostAddr(host)), append(t.wrap(peer), "nft", "-f", "-")...); err != nil {
		// Undo the first half so the two sides agree.
		_ = run(ctx, topology.NFTPartitionCommand(!on, t.hostAddr(peer)), append(t.wrap(host), "nft", "-f", "-")...)
		return fmt.Errorf("partition %s from %s: %w", peer, host, err)
	}
	if on {
		t.partitions[key] = true
	} else {
		delete(t.partitions, key)
	}
	return nil
}

func (t *netnsTopo) Down(ctx context.Context) (topology.Teardown, error) {
	return t.DownOnce.Do(func(td *topology.Teardown) { t.teardown(ctx, td) })
}

// teardown stops every process, then deletes the run's namespaces, veths and bridge.
func (t *netnsTopo) teardown(ctx context.Context, td *topology.Teardown) {
	// Before the drains: a parked client connection would hold a gateway's drain (StopAll).
	t.client.CloseIdleConnections()
	t.StopAll(ctx, td)
	t.stopStore(td)
	t.proxies.CloseAll()

	// Sockets and handles keep a namespace alive: let go of them first.
	t.client.CloseIdleConnections()
	t.ObserverClient.CloseIdleConnections()
	t.nmu.Lock()
	for h, hd := range t.handles {
		hd.Close()
		delete(t.handles, h)
	}
	t.nmu.Unlock()
	// Delete whatever namespaces of this run exist (also after a half-built Up).
	entries, _ := os.ReadDir("/run/netns")
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), t.prefix) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	if len(names) > 0 {
		// Delete the bridge-side veths first: that removes both ends at once, while a
		// deleted namespace (and the veth end in it) is cleaned up by the kernel
		// asynchronously, which would make the names collide with the next Up.
		var b strings.Builder
		for _, h := range t.hosts() {
			if _, err := net.InterfaceByName(t.vethName(h)); err == nil {
				fmt.Fprintf(&b, "link del %s\n", t.vethName(h))
			}
		}
		for _, n := range names {
			fmt.Fprintf(&b, "netns del %s\n", n)
		}
		if err := run(ctx, b.String(), "ip", "-force", "-batch", "-"); err != nil {
			td.Errors = append(td.Errors, err.Error())
		}
		for _, n := range names {
			if _, err := os.Stat(filepath.Join("/run/netns", n)); err == nil {
				td.Errors = append(td.Errors, "netns "+n+" still present")
			} else {
				td.Removed = append(td.Removed, "netns "+n)
			}
		}
	}
	if t.claimed { // without a slot, Up built nothing; the bridge of slot 0 may be another's
		if _, err := net.InterfaceByName(t.bridgeName()); err == nil {
			if err := run(ctx, "", "ip", "link", "del", t.bridgeName()); err != nil {
				td.Errors = append(td.Errors, err.Error())
			} else {
				td.Removed = append(td.Removed, "bridge "+t.bridgeName())
			}
		}
	}
	t.Mu.Lock()
	t.IsUp = false
	t.Mu.Unlock()
	t.release()
}

// release gives up this topology's slot if it holds one.
func (t *netnsTopo) release() {
	t.Mu.Lock()
	defer t.Mu.Unlock()
	if t.claimed {
		t.claimed = false
		slotsMu.Lock()
		delete(usedSlots, t.slot)
		slotsMu.Unlock()
	}
}

func (t *netnsTopo) Capabilities() topology.Capabilities {
	return topology.Capabilities{NetworkPolicy: true, Partition: true}
}

// Policy returns the network policy this topology enforces.
func (t *netnsTopo) Policy() topology.Policy { return t.policy }

func (t *netnsTopo) Facts() map[string]any {
	f := t.BaseFacts()
	nsn := map[string]string{}
	for _, h := range t.hosts() {
		nsn[h] = t.nsName(h)
	}
	addrs := map[string]string{}
	for _, h := range append(t.hosts(), topology.HostObserver) {
		addrs[h] = t.addrs[h]
	}
	f["deny_mode"] = t.Spec.DenyMode
	f["addresses"] = addrs
	f["bridge"] = t.bridgeName()
	f["bridge_subnet"] = t.bridgeSubnet()
	f["namespaces"] = nsn
	f["network_policy"] = topology.PolicyFacts(t.policy, "")
	f["isolation"] = "one unprivileged user+net+mount+pid namespace per run; one network namespace per host; nftables ingress policy per host"
	f["store_group"] = t.storeFacts()
	if sv := t.ServiceFacts(); sv != nil {
		f["services"] = sv
	}
	return f
}

// providerAddrs are the providers' data URLs as the gateways reach them.
func (t *netnsTopo) providerAddrs() []deployment.ProviderAddr {
	var out []deployment.ProviderAddr
	for _, host := range topology.Providers {
		out = append(out, deployment.ProviderAddr{Site: topology.SiteOf(host), URL: t.url(host, netnsPorts.ProviderData)})
	}
	return out
}
