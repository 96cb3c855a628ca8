package dockerengine

// The docker engine's replicated store group (see store.go): valkey-1..3 and sentinel-1..3,
// each a container of the Valkey image on the backend network, beside the single Valkey.
//
// Docker's own isolation is network membership, which cannot cut the old primary off from
// gateway B, the replicas and the Sentinels while gateway A, on the same network, still
// reaches it. So each store container gets a netfilter sidecar: a container of the
// quotaqual-netfilter image (the run's quotaqual image plus the host's nft and its libraries)
// that joins the store container's network namespace (NetworkMode container:<id>) with
// CAP_NET_ADMIN and nothing else — the Valkey image stays untouched and unprivileged. At start
// the sidecar loads CompilePartitionNFT's ruleset into the shared namespace; Partition(store
// host, peer) adds the peer's backend address to the partition set there (nft by docker exec),
// which drops both directions, live connections included; Heal deletes it. The sidecar is also
// the harness's way in: INFO and SENTINEL questions are relayed from it (`quotaqual relay` to
// 127.0.0.1), whatever the harness access mode and whatever partition is in place.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/internal/valkeyproc"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/images"
)

// LabelNetfilterBase names, on a netfilter sidecar image, the quotaqual image it was built on:
// whoever removes that image removes the images labelled with it first.
const LabelNetfilterBase = "org.quotaqual.netfilter-base"

const (
	netfilterImageRepo   = "quotaqual-netfilter"
	netfilterSuffix      = "-netfilter"
	netfilterRules       = "/etc/quotaqual/partition.nft"
	nftInContainer       = "/usr/sbin/nft"
	dockerStoreDir       = "/data"
	dockerStoreConf      = dockerStoreDir + "/valkey.conf"
	dockerSentinelConf   = dockerStoreDir + "/sentinel.conf"
	sentinelReadyLogLine = "Sentinel ID is" // a Sentinel logs no "Ready to accept connections"
	// A replica's first sync done ("PRIMARY <-> REPLICA sync: ...", "MASTER" before Valkey 8).
	replicaSyncedLogLine = "REPLICA sync: Finished with success"
	dockerStoreDown      = time.Second     // Sentinel's down-after-milliseconds
	dockerStoreFailover  = 3 * time.Second // Sentinel's failover-timeout
)

func init() {
	for _, h := range topology.StoreHosts {
		dockerMembership[h] = []string{dnetBackend}
	}
}

// dockerStore is the group's state on the docker engine.
type dockerStore struct {
	started bool
	done    chan struct{} // closed when the start has ended; err says how
	err     error
	cancel  context.CancelFunc
	mu      sync.Mutex
	img     string // the netfilter sidecars' image
	r       *valkeyproc.Replicated
	addrs   map[string]string    // store host → its address on the backend network
	cuts    map[[2]string]string // (store host, peer) → the peer address in the store host's set
}

// sidecarOf is the key (and name suffix) of a store host's netfilter sidecar.
func sidecarOf(host string) string { return host + netfilterSuffix }

func (t *dockerTopo) StoreGroupReason() string {
	if t.spec.Deployment.Backend == deployment.BackendMemory {
		return "the gateways run the memory backend: they use no store"
	}
	if t.spec.Store == topology.StoreCluster {
		return topology.ClusterNoStoreGroup
	}
	return ""
}

// ensureNetfilterImage builds quotaqual-netfilter:<digest> — the run's quotaqual image plus
// the host's nft and the libraries ldd lists, run as root (CAP_NET_ADMIN is granted to the
// container, not to a user) — when the engine does not have it yet.
func (t *dockerTopo) ensureNetfilterImage(ctx context.Context) (string, error) {
	nft, err := exec.LookPath("nft")
	if err != nil {
		return "", fmt.Errorf("the docker store group's partitions need nft on this host to build the %s image (Debian: apt-get install nftables): %w", netfilterImageRepo, err)
	}
	files, err := images.WithSharedLibraries(nft)
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, "docker", "image", "inspect", "--format", "{{.Id}}", t.qqImg).Output()
	if err != nil {
		return "", fmt.Errorf("inspecting image %s: %w", t.qqImg, err)
	}
	h := sha256.New()
	h.Write(bytes.TrimSpace(out))
	for _, f := range files {
		d, err := images.FileSHA256(f)
		if err != nil {
			return "", err
		}
		h.Write([]byte(f + d))
	}
	tag := netfilterImageRepo + ":" + hex.EncodeToString(h.Sum(nil))[:12]
	if images.Exists(ctx, tag) {
		return tag, nil
	}
	rootfs := map[string]string{nftInContainer: nft}
	for _, f := range files[1:] {
		rootfs[f] = f
	}
	df := fmt.Sprintf("FROM %s\nCOPY rootfs/ /\nUSER 0:0\nLABEL %s=\"true\" %s=%q\n", t.qqImg, images.LabelManaged, LabelNetfilterBase, t.qqImg)
	if err := images.BuildScratchImage(ctx, tag, df, rootfs, false); err != nil {
		return "", err
	}
	return tag, nil
}

// startStore starts the group: valkey-1 primary, valkey-2 and valkey-3 its replicas (in sync
// before the Sentinels start, so that each Sentinel learns of them from its first INFO), then
// three Sentinels with quorum 2. Each container's netfilter sidecar starts as soon as the
// container is ready, beside the next step: the chain of the group's start stays three
// container starts long.
func (t *dockerTopo) startStore(ctx context.Context) error {
	img, err := t.ensureNetfilterImage(ctx)
	if err != nil {
		return err
	}
	t.store.mu.Lock()
	t.store.img = img
	t.store.addrs = map[string]string{}
	t.store.cuts = map[[2]string]string{}
	t.store.mu.Unlock()
	var sidecars sync.WaitGroup
	sidecarErrs := make([]error, len(topology.StoreHosts))
	defer sidecars.Wait() // also on an early return: Down must find every container started
	// inParallel starts hosts' containers, waits until each logged ready, and starts their
	// sidecars in the background.
	inParallel := func(hosts []string, confPath string, conf func(string) string, ready string) error {
		errs := make([]error, len(hosts))
		var wg sync.WaitGroup
		for i, h := range hosts {
			wg.Go(func() {
				if errs[i] = t.startStoreContainer(ctx, h, confPath, conf(h), ready); errs[i] == nil {
					sidecars.Go(func() { sidecarErrs[slices.Index(topology.StoreHosts, h)] = t.startSidecar(ctx, h) })
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	}
	pw := t.spec.Deployment.ValkeyPassword
	if err := inParallel([]string{topology.HostStore1}, dockerStoreConf, func(string) string { return t.storeNodeConf("") }, valkeyReadyLogLine); err != nil {
		return err
	}
	primary := t.storeAddr(topology.HostStore1)
	// A replica logs its ready line before it has synced; it logs the end of its first sync.
	if err := inParallel(topology.StoreNodes[1:], dockerStoreConf, func(string) string { return t.storeNodeConf(primary) }, replicaSyncedLogLine); err != nil {
		return err
	}
	sconf := t.sentinelConf(valkeyproc.SentinelConfig(valkeyproc.ReplicatedOptions{MasterName: topology.StoreMasterName, Quorum: 2,
		DownAfter: dockerStoreDown, FailoverTimeout: dockerStoreFailover}, primary, dockerPorts.Valkey, pw))
	if err := inParallel(topology.StoreSentinels, dockerSentinelConf, func(string) string { return sconf }, sentinelReadyLogLine); err != nil {
		return err
	}
	sidecars.Wait()
	if err := errors.Join(sidecarErrs...); err != nil {
		return err
	}
	r := &valkeyproc.Replicated{MasterName: topology.StoreMasterName, Dial: t.storeDial}
	for _, h := range topology.StoreNodes {
		n := valkeyproc.Remote(t.storeAddr(h), dockerPorts.Valkey, pw)
		if h == topology.HostStore1 {
			r.Primary = n
		} else {
			r.Replicas = append(r.Replicas, n)
		}
	}
	r.Replica = r.Replicas[0]
	for _, h := range topology.StoreSentinels {
		r.Sentinels = append(r.Sentinels, valkeyproc.Remote(t.storeAddr(h), topology.SentinelPort, ""))
	}
	t.store.mu.Lock()
	t.store.r = r
	t.store.mu.Unlock()
	return nil
}

// storeNodeConf is a data node's configuration; replicaOf is the primary's address for a
// replica. Every node may replicate another after a failover, hence masterauth everywhere.
func (t *dockerTopo) storeNodeConf(replicaOf string) string {
	pw := t.spec.Deployment.ValkeyPassword
	lines := []string{
		"port " + strconv.Itoa(dockerPorts.Valkey), "bind * -::*", "protected-mode no", "dir " + dockerStoreDir,
		`save ""`, "appendonly yes", "loglevel notice",
		"requirepass " + strconv.Quote(pw), "masterauth " + strconv.Quote(pw),
		// A full sync otherwise waits 5 s for more replicas to share one transfer.
		"repl-diskless-sync-delay 0",
	}
	if replicaOf != "" {
		lines = append(lines, "replicaof "+replicaOf+" "+strconv.Itoa(dockerPorts.Valkey))
	}
	return strings.Join(lines, "\n") + "\n"
}

// sentinelConf is a Sentinel's configuration around its monitor lines: it rewrites the file
// with what it learns, so the file lives in its writable data directory.
func (t *dockerTopo) sentinelConf(monitor string) string {
	return strings.Join([]string{"port " + strconv.Itoa(topology.SentinelPort), "bind * -::*", "protected-mode no",
		"dir " + dockerStoreDir, "loglevel notice"}, "\n") + "\n" + monitor
}

// startStoreContainer starts one store container with conf at confPath and waits until its
// log holds the ready line.
func (t *dockerTopo) startStoreContainer(ctx context.Context, host, confPath, conf, ready string) error {
	req := t.request(host, t.valkeyImg, nil)
	req.Cmd = []string{"valkey-server", confPath}
	if confPath == dockerSentinelConf {
		req.Cmd = append(req.Cmd, "--sentinel")
	}
	// Writable by the image's user: a Sentinel rewrites its file, a node on CONFIG REWRITE.
	req.Files = []testcontainers.ContainerFile{{Reader: strings.NewReader(conf), ContainerFilePath: confPath, FileMode: 0o666}}
	if err := t.run(ctx, host, req); err != nil {
		return err
	}
	if err := t.waitLogLine(ctx, host, ready, 1); err != nil {
		return err
	}
	addr, err := t.backendAddr(ctx, host)
	if err != nil {
		return err
	}
	t.store.mu.Lock()
	t.store.addrs[host] = addr
	t.store.mu.Unlock()
	return nil
}

// startSidecar starts host's netfilter sidecar in host's network namespace and loads the
// partition ruleset there.
func (t *dockerTopo) startSidecar(ctx context.Context, host string) error {
	rules, err := topology.CompilePartitionNFT(t.spec.DenyMode)
	if err != nil {
		return err
	}
	t.store.mu.Lock()
	img := t.store.img
	t.store.mu.Unlock()
	id := t.ctr(host).GetContainerID()
	side := sidecarOf(host)
	if err := t.run(ctx, side, testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Name:   dockerName(t.spec.RunID, side),
			Image:  img,
			Labels: t.labels(side),
			Cmd:    []string{"sleep"},
			Files:  []testcontainers.ContainerFile{{Reader: strings.NewReader(rules), ContainerFilePath: netfilterRules, FileMode: 0o444}},
			HostConfigModifier: func(hc *container.HostConfig) {
				hc.NetworkMode = container.NetworkMode("container:" + id)
				hc.CapDrop = []string{"ALL"}
				hc.CapAdd = []string{"NET_ADMIN"}
			},
		},
		Started: true,
		Logger:  tclog.NewNoopLogger(),
	}); err != nil {
		return err
	}
	if err := t.nft(ctx, host, "-f", netfilterRules); err != nil {
		return fmt.Errorf("loading the partition ruleset into %s's namespace: %w", host, err)
	}
	return nil
}

// nft runs nft with args in host's netfilter sidecar, i.e. in host's network namespace.
func (t *dockerTopo) nft(ctx context.Context, host string, args ...string) error {
	c := t.ctr(sidecarOf(host))
	if c == nil {
		return fmt.Errorf("%s has no netfilter sidecar: the store group is not running", host)
	}
	code, out, err := c.Exec(ctx, append([]string{nftInContainer}, args...), tcexec.Multiplexed())
	if err != nil {
		return fmt.Errorf("exec nft in %s: %w", sidecarOf(host), err)
	}
	if code != 0 {
		b, _ := io.ReadAll(out)
		return fmt.Errorf("nft %s in %s exited %d: %s", strings.Join(args, " "), sidecarOf(host), code, strings.TrimSpace(string(b)))
	}
	return nil
}

// backendAddr is host's current address on the backend network (a restarted gateway may get
// another one).
func (t *dockerTopo) backendAddr(ctx context.Context, host string) (string, error) {
	return t.addrOn(ctx, host, dnetBackend)
}

func (t *dockerTopo) storeAddr(host string) string {
	t.store.mu.Lock()
	defer t.store.mu.Unlock()
	return t.store.addrs[host]
}

// storeDial connects to a store host's address from inside its own namespace: a relay from its
// sidecar to the loopback, which no partition touches.
func (t *dockerTopo) storeDial(ctx context.Context, addr string) (net.Conn, error) {
	ip, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	t.store.mu.Lock()
	host := ""
	for h, a := range t.store.addrs {
		if a == ip {
			host = h
		}
	}
	t.store.mu.Unlock()
	if host == "" {
		return nil, fmt.Errorf("dial %s: no store host has that address", addr)
	}
	return t.relayDial(ctx, sidecarOf(host), net.JoinHostPort("127.0.0.1", port))
}

// startStoreInBackground starts the group (when the run uses a store) without waiting: the
// scenario that uses it comes late in a run, and Up stays as short as without the group.
func (t *dockerTopo) startStoreInBackground(ctx context.Context) {
	if t.StoreGroupReason() != "" {
		return
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t.store.mu.Lock()
	t.store.started, t.store.done, t.store.cancel = true, make(chan struct{}), cancel
	t.store.mu.Unlock()
	go func() {
		err := t.startStore(ctx)
		t.store.mu.Lock()
		t.store.err = err
		t.store.mu.Unlock()
		close(t.store.done)
	}()
}

// stopStoreStart cancels a start still running and waits for it to end, so that Down finds
// every container it created.
func (t *dockerTopo) stopStoreStart() {
	t.store.mu.Lock()
	started, done, cancel := t.store.started, t.store.done, t.store.cancel
	t.store.mu.Unlock()
	if started {
		cancel()
		<-done
	}
}

// replicated waits for the group's start and returns the group, or why it is not running.
func (t *dockerTopo) replicated(ctx context.Context) (*valkeyproc.Replicated, error) {
	t.store.mu.Lock()
	started, done := t.store.started, t.store.done
	t.store.mu.Unlock()
	if !started {
		return nil, errors.New("the replicated store group is not running: bring the topology up first")
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for the replicated store group to start: %w", ctx.Err())
	}
	t.store.mu.Lock()
	defer t.store.mu.Unlock()
	if t.store.err != nil {
		return nil, fmt.Errorf("the replicated store group did not start: %w", t.store.err)
	}
	return t.store.r, nil
}

func (t *dockerTopo) WaitStoreReady(ctx context.Context) error {
	r, err := t.replicated(ctx)
	if err != nil {
		return err
	}
	return r.WaitSentinelsReady(ctx, 15*time.Second)
}

func (t *dockerTopo) StorePrimary(ctx context.Context) (string, error) {
	r, err := t.replicated(ctx)
	if err != nil {
		return "", err
	}
	return topology.StorePrimary(ctx, r)
}

func (t *dockerTopo) StoreNode(ctx context.Context, host string) (topology.StoreNodeState, error) {
	r, err := t.replicated(ctx)
	if err != nil {
		return topology.StoreNodeState{Host: host}, err
	}
	return topology.ReadStoreNodeState(ctx, r, host)
}

// StoreEvents reads the Sentinels' events from their container logs.
func (t *dockerTopo) StoreEvents() ([]topology.StoreEvent, error) {
	if err := t.snapshotLogs(context.Background()); err != nil {
		return nil, err
	}
	return topology.ReadStoreEvents(func(h string) string { return filepath.Join(t.logDir(), h+".log") })
}

// UseReplicatedStore restarts a gateway container on the group (through its Sentinels, by
// their names on the backend network) or back on the single Valkey.
func (t *dockerTopo) UseReplicatedStore(ctx context.Context, gateway string, on bool) error {
	if !slices.Contains(t.Gateways(), gateway) {
		return topology.NoGatewayError(gateway, t.Gateways())
	}
	cfg, err := t.storeConfig(gateway, on)
	if err != nil {
		return err
	}
	return t.replaceGateway(ctx, gateway, dockerStopTimeout, cfg)
}

// storeConfig renders gateway's config on the group (on) or on the single Valkey, and records
// it as the config the gateway runs (config/<gateway>-store.yaml on the group), so that a
// later policy rollout keeps that store.
func (t *dockerTopo) storeConfig(gateway string, on bool) ([]byte, error) {
	t.mu.Lock()
	a := t.gatewayAddrs(gateway, t.provAddrs)
	t.mu.Unlock()
	stem := gateway
	if on {
		stem = gateway + "-store"
		a.Store = &deployment.StoreAddrs{MasterName: topology.StoreMasterName, Replication: t.spec.StoreReplication,
			Sentinels: topology.StoreSentinelAddrs(func(h string) string { return h })}
	}
	cfg, err := topology.RenderGatewayConfig(t.spec, gateway, a, t.spec.Deployment.Profile)
	if err != nil {
		return nil, err
	}
	if on { // kept as evidence beside the original, as the other engines do
		_ = os.WriteFile(filepath.Join(t.spec.WorkDir, "config", stem+".yaml"), cfg, 0o600)
	}
	t.stems.Rendered(gateway, stem, a)
	t.stems.Runs(gateway, stem)
	return cfg, nil
}

// setStorePartition cuts a store host off from peer (or heals it) in the store host's own
// namespace.
func (t *dockerTopo) setStorePartition(ctx context.Context, host, peer string, on bool) error {
	// One namespace per pair, whichever side names it first: the store host, or of two store
	// hosts the one that sorts first.
	node, other := host, peer
	if !topology.IsStoreHost(node) || (topology.IsStoreHost(other) && other < node) {
		node, other = peer, host
	}
	if _, ok := dockerMembership[other]; !ok || other == node {
		return fmt.Errorf("partition %s from %s: unknown peer %q: use one of %s", host, peer, other,
			strings.Join(append(topology.ComponentHosts(t.Gateways()), topology.StoreHosts...), ", "))
	}
	if _, err := t.replicated(ctx); err != nil {
		return fmt.Errorf("partition %s from %s: %w", node, other, err)
	}
	key := [2]string{node, other}
	t.store.mu.Lock()
	defer t.store.mu.Unlock()
	addr, cut := t.store.cuts[key]
	if cut == on {
		return nil
	}
	if on {
		var err error
		if addr, err = t.backendAddr(ctx, other); err != nil {
			return fmt.Errorf("partition %s from %s: %w", node, other, err)
		}
	}
	if err := t.nft(ctx, node, topology.NFTPartitionCommand(on, addr)); err != nil {
		return fmt.Errorf("partition %s from %s: %w", node, other, err)
	}
	if on {
		t.store.cuts[key] = addr
	} else {
		delete(t.store.cuts, key)
	}
	return nil
}

func (t *dockerTopo) storeFacts() map[string]any {
	t.store.mu.Lock()
	defer t.store.mu.Unlock()
	f := topology.StoreGroupFacts(t.store.addrs, t.spec.StoreReplication)
	f["partitions"] = "nftables in each store container's namespace, loaded by its netfilter sidecar (" + t.store.img + ", CAP_NET_ADMIN only)"
	return f
}

var _ topology.StoreGroup = (*dockerTopo)(nil)
