// Package dockerengine is the docker topology engine: every component in a container on
// run-scoped Docker networks (its design: the comment that opens docker.go). It registers
// itself as topology.EngineDocker; import topology/engines rather than this package to build
// every engine in.
package dockerengine

// The docker engine: every component in its own container (testcontainers-go) on private,
// run-scoped Docker networks. Network policy is network membership:
//
//	qq-<run>-edge      internal  client, gateway-a, gateway-b
//	qq-<run>-backend   internal  valkey, gateway-a, gateway-b
//	qq-<run>-provider  internal  gateway-a, gateway-b, provider-west, -central, -east
//	qq-<run>-admin     bridge with inter-container traffic off (enable_icc=false): gateways and
//	                   providers; carries only the ports published for the harness
//
// Admin listeners bind the container's address on the admin network only (the config names
// the alias <host>-admin, resolved inside the container), so the client reaches a gateway's
// data port on the edge network but not its admin port, and no container reaches another's
// admin port (icc off): admin ports accept only the observer, as in DefaultPolicy. Data ports
// listen on all of a container's addresses, so membership is coarser than the policy in two
// places (no scenario probes them; docker_test.go pins them): every host sharing a network
// with a gateway (valkey, the providers, the other gateway) reaches its data port, and the
// providers, sharing the provider network, reach each other's data port.
//
// The harness (observer) runs outside the containers and reaches them in one of two ways:
//   - published (default): the gateways' data and admin ports and the providers' admin ports
//     are published on 127.0.0.1 with random host ports (re-read after a restart); Observer()
//     and Client() are plain HTTP clients to them, so the client vantage of HTTP is the host
//     via the published ports (the dedicated client container is the vantage of Probe).
//   - exec: when the harness cannot reach the daemon's published ports (it runs inside the
//     netns engine's namespaces, as the topology and scenario tests do, or in a container of
//     its own), every connection is a `quotaqual relay` started by docker exec: Client()
//     connects from inside the client container over the edge network (the true client
//     vantage) and Observer() from inside the target container. Chosen automatically (exec
//     when Inside()), or set QUOTAQUAL_DOCKER_ACCESS=published|exec.
//
// Probe(from, to, port) runs `quotaqual probe` inside the from container (scratch images have
// no shell). The target is the to host's name when they share a network, otherwise its address
// on its home network (Docker drops or cannot route it: a timeout or an unreachable network).
// Valkey's image has no quotaqual binary: probes from valkey are unsupported (none is needed).
//
// Levers: RestartGateway stops and starts the container; StopValkey/StartValkey stop and start
// Valkey's container (AOF on a run-scoped volume, so state survives); Partition(gateway,
// valkey) disconnects the gateway from the backend network and Heal reconnects it with the
// same alias. The replicated store group's containers are cut off from any host by nftables
// in their own namespaces instead (docker_store.go). Loss and the store-link proxy act in the
// containers' own namespaces, entered from the host (links_linux.go). Every container, network and volume carries org.quotaqual.run-id=<run> and
// org.quotaqual.managed=true; Down (and Cleanup, for `quotaqual down --run-id`) removes
// them by those labels, so nothing depends on testcontainers' reaper (disabled here:
// TESTCONTAINERS_RYUK_DISABLED=true unless set otherwise).

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	tclog "github.com/testcontainers/testcontainers-go/log"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/images"
	"github.com/quotaqual/quotaqual/topology/linkproxy"
)

// EnvAccess overrides how the harness reaches the containers: "published" or "exec".
const EnvAccess = "QUOTAQUAL_DOCKER_ACCESS"

const (
	accessPublished = "published"
	accessExec      = "exec"
)

// Docker network roles.
const (
	dnetEdge     = "edge"
	dnetBackend  = "backend"
	dnetProvider = "provider"
	dnetAdmin    = "admin"
)

var dockerNetRoles = []string{dnetEdge, dnetBackend, dnetProvider, dnetAdmin}

// dockerMembership lists each host's networks, home network first (the address other hosts
// are probed at when they share no network). Every gateway a run may have is on all four
// (init below).
var dockerMembership = map[string][]string{
	topology.HostClient:          {dnetEdge},
	topology.HostProviderWest:    {dnetProvider, dnetAdmin},
	topology.HostProviderCentral: {dnetProvider, dnetAdmin},
	topology.HostProviderEast:    {dnetProvider, dnetAdmin},
	topology.HostValkey:          {dnetBackend},
}

func init() {
	for _, g := range topology.GatewayNames(topology.MaxGateways) {
		dockerMembership[g] = []string{dnetEdge, dnetBackend, dnetProvider, dnetAdmin}
	}
}

// dockerPorts are the in-container ports, the same for every host (each has its own address).
var dockerPorts = topology.Ports{GatewayData: 8080, GatewayAdmin: 9090, ProviderData: 8000, ProviderAdmin: 9000, Valkey: 6379}

// Deadlines of the docker engine.
const (
	dockerReadyTimeout  = 60 * time.Second // a container's component must be ready within this
	dockerStopTimeout   = 5 * time.Second  // graceful stop before SIGKILL
	dockerValkeyConf    = "/etc/valkey/valkey.conf"
	valkeyReadyLogLine  = "Ready to accept connections"
	dockerRelayDeadline = 10 * time.Second // exec relay set-up
	// dockerRelayConnect bounds the relay's own dial inside the container, name lookup through
	// Docker's embedded DNS included, which a loaded daemon answers slowly (2 s was seen to run out).
	dockerRelayConnect = 5 * time.Second
)

type dockerTopo struct {
	spec   topology.Spec
	access string
	policy topology.Policy

	mu         sync.Mutex
	cli        *testcontainers.DockerClient
	valkeyImg  string
	qqImg      string
	nets       map[string]string // role → network name
	netIDs     map[string]string // role → network id
	volume     string
	ctrs       map[string]*testcontainers.DockerContainer
	gateways   map[string]topology.GatewayEndpoint
	providers  map[string]topology.ProviderEndpoint
	partitions map[string]bool           // gateway → disconnected from backend
	provAddrs  []deployment.ProviderAddr // the providers as the gateways reach them
	pubHost    string                    // host of published ports
	valkeyVer  string                    // from Valkey's start-up log
	down       topology.DownGuard
	store      dockerStore           // the replicated store group (docker_store.go)
	vc         dockerCluster         // the store as a Valkey Cluster (docker_cluster.go)
	links      linkproxy.Links       // store-link proxies (links_linux.go)
	stems      topology.GatewayStems // the configs each gateway was rendered for and runs

	client   *http.Client
	observer *http.Client
}

var dockerInitOnce sync.Once

// dockerInit prepares testcontainers once per process: no reaper (its image cannot be pulled
// without a registry, and Down removes everything by label anyway) unless the user set
// TESTCONTAINERS_RYUK_DISABLED, and its banner and progress lines off unless
// QUOTAQUAL_DOCKER_DEBUG is set.
func dockerInit() {
	dockerInitOnce.Do(func() {
		if os.Getenv("TESTCONTAINERS_RYUK_DISABLED") == "" {
			os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
		}
		if os.Getenv("QUOTAQUAL_DOCKER_DEBUG") == "" {
			tclog.SetDefault(tclog.NewNoopLogger())
		}
	})
}

// Available reports whether a Docker engine answers within two seconds.
func Available() bool {
	_, err := Ping(context.Background())
	return err == nil
}

// Ping returns the engine's version, or why no engine answers.
func Ping(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	cli, err := dockerClient(ctx)
	if err != nil {
		return "", err
	}
	defer cli.Close()
	v, err := cli.ServerVersion(ctx, client.ServerVersionOptions{})
	if err != nil {
		return "", fmt.Errorf("the Docker engine did not answer: %w", err)
	}
	return v.Version, nil
}

// The engine registers itself: importing this package (topology/engines does) builds it in.
func init() {
	topology.Register(topology.EngineDocker, topology.Engine{
		New:     func(s topology.Spec) (topology.Topology, error) { return newDocker(s) },
		Answers: Ping,
		Cleanup: Cleanup,
		Cluster: true,
	})
}

func newDocker(spec topology.Spec) (*dockerTopo, error) {
	dockerInit()
	access := os.Getenv(EnvAccess)
	switch access {
	case "":
		access = accessPublished
		if topology.Inside() {
			access = accessExec
		}
	case accessPublished, accessExec:
	default:
		return nil, fmt.Errorf("%s=%q is unknown: use %q or %q", EnvAccess, access, accessPublished, accessExec)
	}
	t := &dockerTopo{
		spec:       spec,
		access:     access,
		policy:     topology.DefaultPolicy(dockerPorts, spec.GatewayHosts()),
		nets:       map[string]string{},
		netIDs:     map[string]string{},
		volume:     valkeyVolume(spec),
		ctrs:       map[string]*testcontainers.DockerContainer{},
		gateways:   map[string]topology.GatewayEndpoint{},
		providers:  map[string]topology.ProviderEndpoint{},
		partitions: map[string]bool{},
		pubHost:    "127.0.0.1",
	}
	for _, r := range dockerNetRoles {
		t.nets[r] = dockerName(spec.RunID, r)
	}
	if access == accessPublished {
		t.observer = &http.Client{Transport: topology.NewTransport(nil)}
		t.client = &http.Client{Transport: topology.NewTransport(nil)}
	} else {
		t.observer = &http.Client{Transport: topology.NewTransport(t.observerDial)}
		t.client = &http.Client{Transport: topology.NewTransport(func(ctx context.Context, _, addr string) (net.Conn, error) {
			return t.relayDial(ctx, topology.HostClient, addr)
		})}
	}
	return t, nil
}

func dockerName(runID, what string) string { return "qq-" + runID + "-" + what }

func (t *dockerTopo) labels(host string) map[string]string {
	l := map[string]string{images.LabelManaged: "true", images.LabelRunID: t.spec.RunID}
	if host != "" {
		l[images.LabelHost] = host
	}
	return l
}

func (t *dockerTopo) Engine() string         { return topology.EngineDocker }
func (t *dockerTopo) Client() *http.Client   { return t.client }
func (t *dockerTopo) Observer() *http.Client { return t.observer }
func (t *dockerTopo) Ports() topology.Ports  { return dockerPorts }
func (t *dockerTopo) ValkeyAddr() string {
	return net.JoinHostPort(topology.HostValkey, strconv.Itoa(dockerPorts.Valkey))
}

// Policy returns the network policy the membership implements.
func (t *dockerTopo) Policy() topology.Policy { return t.policy }

func (t *dockerTopo) Gateways() []string { return t.spec.GatewayHosts() }

func (t *dockerTopo) Gateway(name string) topology.GatewayEndpoint {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.gateways[name]
}

func (t *dockerTopo) Provider(name string) topology.ProviderEndpoint {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.providers[name]
}

func (t *dockerTopo) Capabilities() topology.Capabilities {
	return topology.Capabilities{NetworkPolicy: true, Partition: true,
		PartitionReason: "docker partitions disconnect a gateway from the backend network (gateway↔valkey), or drop a peer's traffic with nftables in a store group container's namespace (store host↔any host on the backend network)"}
}

func (t *dockerTopo) logDir() string { return filepath.Join(t.spec.WorkDir, "logs") }

func (t *dockerTopo) ctr(host string) *testcontainers.DockerContainer {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.ctrs[host]
}

// dockerClient connects to the engine testcontainers finds (DOCKER_HOST, the socket, ...).
func dockerClient(ctx context.Context) (*testcontainers.DockerClient, error) {
	dockerInit()
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return nil, fmt.Errorf("no Docker engine answers (%w): start Docker or use another topology", err)
	}
	return cli, nil
}

func (t *dockerTopo) Up(ctx context.Context) (err error) {
	start := time.Now()
	for _, d := range []string{t.logDir(), filepath.Join(t.spec.WorkDir, "config")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("topology: work directory: %w", err)
		}
	}
	cli, err := dockerClient(ctx)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.cli = cli
	t.mu.Unlock()
	defer func() {
		if err != nil {
			_, _ = t.Down(context.WithoutCancel(ctx))
		}
	}()
	if err := t.images(ctx); err != nil {
		return err
	}
	if img := topology.GatewayImage(t.spec); img != "" {
		t.spec.Progress("images: %s, %s, gateway %s", t.qqImg, t.valkeyImg, img)
	} else {
		t.spec.Progress("images: %s, %s", t.qqImg, t.valkeyImg)
	}
	if err := t.createNetworks(ctx); err != nil {
		return err
	}
	if t.volume != "" {
		if _, err := cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: t.volume, Labels: t.labels(topology.HostValkey)}); err != nil {
			return fmt.Errorf("creating volume %s: %w", t.volume, err)
		}
	}
	t.spec.Progress("docker networks %s, %s, %s, %s and volume %s (harness access: %s)",
		t.nets[dnetEdge], t.nets[dnetBackend], t.nets[dnetProvider], t.nets[dnetAdmin], cmp.Or(t.volume, "none"), t.access)

	// The replicated store group starts in the background: only valkey-failover uses it, and
	// its methods wait for the start (Down too, before it removes anything).
	t.startStoreInBackground(ctx)
	// Valkey first: the gateways need it to be ready.
	if err := t.startValkeyStore(ctx); err != nil {
		return err
	}
	// Providers, the client and the gateways in parallel.
	var provAddrs []deployment.ProviderAddr
	for _, h := range topology.Providers {
		provAddrs = append(provAddrs, deployment.ProviderAddr{Site: topology.SiteOf(h),
			URL: "http://" + net.JoinHostPort(h, strconv.Itoa(dockerPorts.ProviderData))})
	}
	hosts := append(append([]string{topology.HostClient}, topology.Providers...), t.Gateways()...)
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, h := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch {
			case h == topology.HostClient:
				errs[i] = t.startQuotaqual(ctx, h, []string{"sleep"}, nil, nil, nil)
			case topology.IsGateway(h):
				errs[i] = t.startGateway(ctx, h, provAddrs)
			default:
				args := t.spec.Deployment.ProviderArgs(topology.SiteOf(h), ":"+strconv.Itoa(dockerPorts.ProviderData),
					net.JoinHostPort(h+"-admin", strconv.Itoa(dockerPorts.ProviderAdmin)))
				errs[i] = t.startQuotaqual(ctx, h, args, nil, nil, []int{dockerPorts.ProviderAdmin})
			}
			if errs[i] == nil && h != topology.HostClient {
				errs[i] = t.waitReady(ctx, h)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	t.spec.Progress("docker topology up in %s", topology.ElapsedSince(start))
	return nil
}

// images checks the gateway's own image is present (when its profile names one), then resolves
// (and builds when missing) the two images. It runs before any network or container exists.
func (t *dockerTopo) images(ctx context.Context) (err error) {
	if err := topology.CheckGatewayImage(ctx, t.spec); err != nil {
		return err
	}
	t.valkeyImg, t.qqImg, err = images.Resolve(ctx, t.spec.ValkeyImage, t.spec.QuotaqualImage, t.spec.Binary)
	return err
}

func (t *dockerTopo) createNetworks(ctx context.Context) error {
	for _, role := range dockerNetRoles {
		opts := client.NetworkCreateOptions{Driver: "bridge", Labels: t.labels(""), Internal: role != dnetAdmin}
		if role == dnetAdmin {
			// Only the harness reaches the admin network (through published ports).
			opts.Options = map[string]string{"com.docker.network.bridge.enable_icc": "false"}
		}
		res, err := t.cli.NetworkCreate(ctx, t.nets[role], opts)
		if err != nil {
			return fmt.Errorf("creating docker network %s: %w (Docker may have run out of address pools: remove unused networks)", t.nets[role], err)
		}
		t.mu.Lock()
		t.netIDs[role] = res.ID
		t.mu.Unlock()
	}
	return nil
}

// request is the container request common to every host: run-scoped name and labels, the
// host's networks with its aliases, published ports bound to the loopback.
func (t *dockerTopo) request(host, image string, publish []int) testcontainers.GenericContainerRequest {
	var networks []string
	aliases := map[string][]string{}
	roles := slices.Clone(dockerMembership[host])
	// Create on the admin network when there is one (the only non-internal one), so it is the
	// one that carries the published ports and the default route.
	if slices.Contains(roles, dnetAdmin) {
		roles = append([]string{dnetAdmin}, slices.DeleteFunc(roles, func(r string) bool { return r == dnetAdmin })...)
	}
	for _, r := range roles {
		n := t.nets[r]
		networks = append(networks, n)
		if r == dnetAdmin {
			aliases[n] = []string{host + "-admin"}
		} else {
			aliases[n] = []string{host}
		}
	}
	var exposed []string
	for _, p := range publish {
		exposed = append(exposed, strconv.Itoa(p)+"/tcp")
	}
	return testcontainers.GenericContainerRequest{
		ContainerRequest: testcontainers.ContainerRequest{
			Name:           dockerName(t.spec.RunID, host),
			Image:          image,
			Labels:         t.labels(host),
			Networks:       networks,
			NetworkAliases: aliases,
			ExposedPorts:   exposed,
			HostConfigModifier: func(hc *container.HostConfig) {
				hc.PortBindings = network.PortMap{}
				for _, p := range publish {
					port, _ := network.PortFrom(uint16(p), network.TCP)
					hc.PortBindings[port] = []network.PortBinding{{HostIP: netip.MustParseAddr("127.0.0.1")}}
				}
			},
		},
		Started: true,
		Logger:  tclog.NewNoopLogger(),
	}
}

// startQuotaqual starts a container of the quotaqual image running args.
func (t *dockerTopo) startQuotaqual(ctx context.Context, host string, args []string, env map[string]string, files []testcontainers.ContainerFile, publish []int) error {
	req := t.request(host, t.qqImg, publish)
	req.Cmd = args
	req.Env = env
	req.Files = files
	return t.run(ctx, host, req)
}

func (t *dockerTopo) run(ctx context.Context, host string, req testcontainers.GenericContainerRequest) error {
	c, err := testcontainers.GenericContainer(ctx, req)
	if dc, ok := c.(*testcontainers.DockerContainer); ok && dc != nil {
		t.mu.Lock()
		t.ctrs[host] = dc
		t.mu.Unlock()
	}
	if err != nil {
		return fmt.Errorf("starting the %s container: %w", host, err)
	}
	return nil
}

// gatewayAddrs are where gateway host listens and what it reaches.
func (t *dockerTopo) gatewayAddrs(host string, provs []deployment.ProviderAddr) deployment.Addresses {
	return deployment.Addresses{
		DataListen:  ":" + strconv.Itoa(dockerPorts.GatewayData),
		AdminListen: net.JoinHostPort(host+"-admin", strconv.Itoa(dockerPorts.GatewayAdmin)),
		ValkeyAddr:  t.ValkeyAddr(),
		Cluster:     t.clusterAddrs(),
		Providers:   provs,
	}
}

// startGateway starts gateway host's container as its profile says (topology.
// ContainerGatewayFor): its image (the run's quotaqual image unless the profile names one),
// its command, its rendered config at the profile's path, and its environment. Secrets reach
// the container only as environment variables, never on its command line.
func (t *dockerTopo) startGateway(ctx context.Context, host string, provs []deployment.ProviderAddr) error {
	t.mu.Lock()
	t.provAddrs = provs
	t.mu.Unlock()
	addrs := t.gatewayAddrs(host, provs)
	cg, err := topology.ContainerGatewayFor(t.spec, host, addrs, t.spec.Deployment.Profile)
	if err != nil {
		return err
	}
	t.stems.Rendered(host, host, addrs)
	// The config holds no secret; keep a copy next to the logs as the other engines do.
	_ = os.WriteFile(filepath.Join(t.spec.WorkDir, "config", host+path.Ext(cg.ConfigPath)), cg.Config, 0o600)
	// The secrets (the store's password alone too, should UseReplicatedStore put the gateway
	// on the group: a container's environment is fixed when it is created), then the
	// profile's own variables, which may copy them.
	kvs, err := cg.Profile.Env(cg.Facts, topology.GatewaySecretEnv(t.spec, t.ValkeyAddr()))
	if err != nil {
		return err
	}
	env := map[string]string{topology.EnvRunID: t.spec.RunID}
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	image := t.qqImg
	if cg.Image != "" {
		image = cg.Image
	}
	req := t.request(host, image, []int{dockerPorts.GatewayData, dockerPorts.GatewayAdmin})
	req.Entrypoint = cg.Entrypoint
	req.Cmd = cg.Cmd
	req.Env = env
	req.Files = []testcontainers.ContainerFile{{Reader: bytes.NewReader(cg.Config), ContainerFilePath: cg.ConfigPath, FileMode: 0o444}}
	return t.run(ctx, host, req)
}

// gatewayConfPath is where a gateway container's config is, as its profile names the file.
func (t *dockerTopo) gatewayConfPath() string {
	return path.Join(topology.ContainerConfigDir, topology.GatewayProfile(t.spec).Config.File)
}

func (t *dockerTopo) startValkeyContainer(ctx context.Context) error {
	// The password goes in the config file (copied into the container), never on a command line.
	conf := strings.Join([]string{
		"port " + strconv.Itoa(dockerPorts.Valkey),
		"bind * -::*",
		"protected-mode no",
		"dir /data",
		"save \"\"",
		"appendonly yes",
		"appendfsync always",
		"loglevel notice",
		"requirepass " + t.spec.Deployment.ValkeyPassword,
		"",
	}, "\n")
	req := t.request(topology.HostValkey, t.valkeyImg, nil)
	req.Cmd = []string{"valkey-server", dockerValkeyConf}
	req.Files = []testcontainers.ContainerFile{{Reader: strings.NewReader(conf), ContainerFilePath: dockerValkeyConf, FileMode: 0o444}}
	req.Mounts = testcontainers.ContainerMounts{{
		Source: testcontainers.GenericVolumeMountSource{Name: t.volume},
		Target: "/data",
	}}
	if err := t.run(ctx, topology.HostValkey, req); err != nil {
		return err
	}
	if err := t.waitValkey(ctx, 1); err != nil {
		return err
	}
	t.recordValkeyVersion(topology.HostValkey)
	return nil
}

// valkeyVolume is the run's volume for the single Valkey's AOF; none on a cluster store,
// whose nodes keep their data in their own containers (StopValkey stops, never removes them).
func valkeyVolume(spec topology.Spec) string {
	if spec.Store == topology.StoreCluster {
		return ""
	}
	return dockerName(spec.RunID, "valkey-data")
}

// waitValkey waits until Valkey's log says "Ready to accept connections" for the n-th time
// (once per start), or its container stops.
func (t *dockerTopo) waitValkey(ctx context.Context, n int) error {
	return t.waitLogLine(ctx, topology.HostValkey, valkeyReadyLogLine, n)
}

// waitLogLine waits until host's log holds line for the n-th time, or its container stops.
func (t *dockerTopo) waitLogLine(ctx context.Context, host, line string, n int) error {
	c := t.ctr(host)
	ctx, cancel := context.WithTimeout(ctx, dockerReadyTimeout)
	defer cancel()
	for {
		logs, err := t.containerLog(ctx, c.GetContainerID())
		if err == nil && bytes.Count(logs, []byte(line)) >= n {
			return nil
		}
		if st, serr := c.State(ctx); serr == nil && !st.Running {
			return fmt.Errorf("%s container exited (code %d): %s", host, st.ExitCode, topology.LastLines(logs, 5))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready within %s: %s", host, dockerReadyTimeout, topology.LastLines(logs, 5))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// containerLog returns a container's whole log (stdout and stderr interleaved by stream).
func (t *dockerTopo) containerLog(ctx context.Context, id string) ([]byte, error) {
	rc, err := t.cli.ContainerLogs(ctx, id, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var out bytes.Buffer
	w := &lockedWriter{w: &out}
	if _, err := stdcopy.StdCopy(w, w, rc); err != nil {
		return out.Bytes(), err
	}
	return out.Bytes(), nil
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// refreshEndpoints (re)reads a host's endpoints: published host ports change when a container
// restarts.
func (t *dockerTopo) refreshEndpoints(ctx context.Context, host string) error {
	c := t.ctr(host)
	url := func(port int) (string, error) {
		if t.access == accessExec {
			if topology.IsGateway(host) && port == dockerPorts.GatewayData {
				return "http://" + net.JoinHostPort(host, strconv.Itoa(port)), nil
			}
			return "http://" + net.JoinHostPort(host+"-admin", strconv.Itoa(port)), nil
		}
		p, err := c.MappedPort(ctx, strconv.Itoa(port)+"/tcp")
		if err != nil {
			return "", fmt.Errorf("published port %d of %s: %w", port, host, err)
		}
		return "http://" + net.JoinHostPort(t.pubHost, p.Port()), nil
	}
	if topology.IsGateway(host) {
		data, err := url(dockerPorts.GatewayData)
		if err != nil {
			return err
		}
		admin, err := url(dockerPorts.GatewayAdmin)
		if err != nil {
			return err
		}
		t.mu.Lock()
		t.gateways[host] = topology.GatewayEndpoint{Name: host, DataURL: data, AdminURL: admin}
		t.mu.Unlock()
		return nil
	}
	admin, err := url(dockerPorts.ProviderAdmin)
	if err != nil {
		return err
	}
	t.mu.Lock()
	t.providers[host] = topology.ProviderEndpoint{Name: host, Site: topology.SiteOf(host), AdminURL: admin,
		DataURL: "http://" + net.JoinHostPort(host, strconv.Itoa(dockerPorts.ProviderData))}
	t.mu.Unlock()
	return nil
}

// waitReady reads the host's endpoints and polls its readiness (gateways where their profile
// says, providers /healthz on the admin port) through the observer until it answers 200.
func (t *dockerTopo) waitReady(ctx context.Context, host string) error {
	if err := t.refreshEndpoints(ctx, host); err != nil {
		return err
	}
	readyURL := t.Provider(host).AdminURL + "/healthz"
	if topology.IsGateway(host) {
		gw := t.Gateway(host)
		readyURL = topology.GatewayProfile(t.spec).ReadyURL(gw.DataURL, gw.AdminURL)
	}
	c := t.ctr(host)
	err := topology.ReadyPoll{
		Client: t.observer, URL: readyURL, Within: dockerReadyTimeout, Every: 100 * time.Millisecond, Try: 2 * time.Second,
		Gone: func(ctx context.Context) error {
			if st, serr := c.State(ctx); serr == nil && !st.Running {
				logs, _ := t.containerLog(ctx, c.GetContainerID())
				return fmt.Errorf("%s container exited (code %d): %s", host, st.ExitCode, topology.LastLines(logs, 5))
			}
			return nil
		},
	}.Wait(ctx)
	var nr *topology.NotReadyError
	if errors.As(err, &nr) {
		logs, _ := t.containerLog(context.WithoutCancel(ctx), c.GetContainerID())
		return fmt.Errorf("%s %w: %s", host, err, topology.LastLines(logs, 5))
	}
	return err
}

func (t *dockerTopo) RestartGateway(ctx context.Context, name string) error {
	return t.replaceGateway(ctx, name, dockerStopTimeout, nil)
}

// CrashGateway implements Topology: the container is stopped with no grace period, so the
// SIGKILL follows the SIGTERM at once and nothing in flight settles.
func (t *dockerTopo) CrashGateway(ctx context.Context, name string) error {
	return t.replaceGateway(ctx, name, 0, nil)
}

// replaceGateway stops a gateway container within stop, copies cfg in as its config when
// given, and starts it again, ready.
func (t *dockerTopo) replaceGateway(ctx context.Context, name string, stop time.Duration, cfg []byte) error {
	if !slices.Contains(t.Gateways(), name) {
		return topology.NoGatewayError(name, t.Gateways())
	}
	c := t.ctr(name)
	if c == nil {
		return errors.New("the docker topology is not up: bring it up first")
	}
	if err := c.Stop(ctx, &stop); err != nil {
		return fmt.Errorf("restarting %s: stop: %w", name, err)
	}
	if cfg != nil {
		if err := c.CopyToContainer(ctx, cfg, t.gatewayConfPath(), 0o444); err != nil {
			return fmt.Errorf("restarting %s: copying its new config: %w", name, err)
		}
	}
	if err := c.Start(ctx); err != nil {
		return fmt.Errorf("restarting %s: start: %w", name, err)
	}
	t.client.CloseIdleConnections()
	t.observer.CloseIdleConnections()
	if err := t.waitReady(ctx, name); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	return nil
}

// RestartGatewayWithPolicy restarts a gateway container on the rule policy of p (nil: the
// run's own profile): the new config is copied into the stopped container before it starts.
// The gateway stays on the store it is on (rolloutConfig).
func (t *dockerTopo) RestartGatewayWithPolicy(ctx context.Context, name string, p *deployment.Profile) error {
	if !slices.Contains(t.Gateways(), name) {
		return topology.NoGatewayError(name, t.Gateways())
	}
	cfg, err := t.rolloutConfig(name, p)
	if err != nil {
		return err
	}
	return t.replaceGateway(ctx, name, dockerStopTimeout, cfg)
}

// rolloutConfig renders gateway name's config on the policy of p (nil: the run's own) for the
// addresses of the config it runs without a policy (topology.GatewayStems): a gateway that
// UseReplicatedStore put on the store group is rolled out on the group, and back to it. The
// container's environment already holds the store's password for that (startGateway).
func (t *dockerTopo) rolloutConfig(name string, p *deployment.Profile) ([]byte, error) {
	base, addrs, ok := t.stems.RolloutBase(name)
	if !ok {
		t.mu.Lock()
		addrs = t.gatewayAddrs(name, t.provAddrs)
		t.mu.Unlock()
	}
	cfg, err := topology.RenderGatewayConfig(t.spec, name, addrs, t.spec.PolicyProfile(p))
	if err != nil {
		return nil, err
	}
	stem := base
	if p != nil { // kept as evidence beside the original, as the other engines do
		stem = base + "-policy"
		_ = os.WriteFile(filepath.Join(t.spec.WorkDir, "config", stem+path.Ext(t.gatewayConfPath())), cfg, 0o600)
	}
	t.stems.Runs(name, stem)
	return cfg, nil
}

func (t *dockerTopo) StopValkey(ctx context.Context) error {
	if t.cluster() != nil {
		return t.stopCluster(ctx)
	}
	c := t.ctr(topology.HostValkey)
	if c == nil {
		return errors.New("valkey is not running: bring the topology up first")
	}
	stop := dockerStopTimeout
	if err := c.Stop(ctx, &stop); err != nil {
		return fmt.Errorf("stopping valkey: %w", err)
	}
	return nil
}

func (t *dockerTopo) StartValkey(ctx context.Context) error {
	if t.cluster() != nil {
		return t.startCluster(ctx)
	}
	c := t.ctr(topology.HostValkey)
	if c == nil {
		return errors.New("valkey was never started: bring the topology up first")
	}
	if st, err := c.State(ctx); err == nil && st.Running {
		return nil
	}
	logs, _ := t.containerLog(ctx, c.GetContainerID())
	n := bytes.Count(logs, []byte(valkeyReadyLogLine))
	if err := c.Start(ctx); err != nil {
		return fmt.Errorf("starting valkey: %w", err)
	}
	return t.waitValkey(ctx, n+1)
}

// partitionPair checks that {host, peer} is a gateway and valkey and returns the gateway.
func (t *dockerTopo) partitionPair(host, peer string) (string, error) {
	switch {
	case slices.Contains(t.Gateways(), host) && peer == topology.HostValkey:
		return host, nil
	case host == topology.HostValkey && slices.Contains(t.Gateways(), peer):
		return peer, nil
	}
	if err := topology.CheckPair(host, peer, topology.ComponentHosts(t.Gateways())); err != nil {
		return "", err
	}
	return "", fmt.Errorf("partition %s from %s: %w: docker partitions disconnect a gateway from the backend network, so only a gateway and valkey can be partitioned", host, peer, topology.ErrUnsupported)
}

func (t *dockerTopo) Partition(ctx context.Context, host, peer string) error {
	if topology.IsStoreHost(host) || topology.IsStoreHost(peer) {
		return t.setStorePartition(ctx, host, peer, true)
	}
	gw, err := t.partitionPair(host, peer)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.partitions[gw] {
		return nil
	}
	c := t.ctrs[gw]
	if c == nil || t.cli == nil {
		return errors.New("the docker topology is not up: bring it up first")
	}
	if _, err := t.cli.NetworkDisconnect(ctx, t.netIDs[dnetBackend], client.NetworkDisconnectOptions{Container: c.GetContainerID(), Force: true}); err != nil {
		return fmt.Errorf("partition %s from valkey: disconnecting it from %s: %w", gw, t.nets[dnetBackend], err)
	}
	t.partitions[gw] = true
	return nil
}

func (t *dockerTopo) Heal(ctx context.Context, host, peer string) error {
	if topology.IsStoreHost(host) || topology.IsStoreHost(peer) {
		return t.setStorePartition(ctx, host, peer, false)
	}
	gw, err := t.partitionPair(host, peer)
	if err != nil {
		return err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.partitions[gw] {
		return nil
	}
	c := t.ctrs[gw]
	if _, err := t.cli.NetworkConnect(ctx, t.netIDs[dnetBackend], client.NetworkConnectOptions{
		Container: c.GetContainerID(), EndpointConfig: &network.EndpointSettings{Aliases: []string{gw}},
	}); err != nil {
		return fmt.Errorf("heal %s and valkey: reconnecting it to %s: %w", gw, t.nets[dnetBackend], err)
	}
	delete(t.partitions, gw)
	return nil
}

// probeTarget is the address a probe from → to dials inside the from container.
func (t *dockerTopo) probeTarget(ctx context.Context, from, to string, port int) (string, error) {
	p := strconv.Itoa(port)
	if from == to {
		return net.JoinHostPort(to, p), nil // the host's own name on its home network
	}
	t.mu.Lock()
	partitioned := map[string]bool{}
	for g := range t.partitions {
		partitioned[g] = true
	}
	t.mu.Unlock()
	on := func(h, role string) bool {
		if role == dnetBackend && partitioned[h] {
			return false
		}
		return slices.Contains(dockerMembership[h], role)
	}
	for _, role := range dockerMembership[to] {
		if role != dnetAdmin && on(from, role) && on(to, role) {
			return net.JoinHostPort(to, p), nil
		}
	}
	// No shared network: the target's address on its home network.
	addr, err := t.addrOn(ctx, to, dockerMembership[to][0])
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(addr, p), nil
}

// addrOn is host's current address on the run's network of role (a restarted container may
// get another one).
func (t *dockerTopo) addrOn(ctx context.Context, host, role string) (string, error) {
	c := t.ctr(host)
	if c == nil {
		return "", fmt.Errorf("no container for %s", host)
	}
	ins, err := c.Inspect(ctx)
	if err != nil {
		return "", err
	}
	if ep := ins.NetworkSettings.Networks[t.nets[role]]; ep != nil && ep.IPAddress.IsValid() {
		return ep.IPAddress.String(), nil
	}
	return "", fmt.Errorf("%s has no address on %s", host, t.nets[role])
}

// publishedPorts are the in-container ports of each role the harness (observer) can reach.
func publishedPorts(host string) []int {
	switch {
	case topology.IsGateway(host):
		return []int{dockerPorts.GatewayData, dockerPorts.GatewayAdmin}
	case slices.Contains(topology.Providers, host):
		return []int{dockerPorts.ProviderAdmin}
	}
	return nil
}

// probeFromObserver tries a TCP connection from the harness to to:port: through the published
// port (or, with exec access, the relay into the container). Ports that are not published
// are out of the observer's reach, as the policy wants.
func (t *dockerTopo) probeFromObserver(ctx context.Context, to string, port int) topology.ProbeResult {
	res := topology.ProbeResult{From: topology.HostObserver, To: to, Port: port, Supported: true}
	if !slices.Contains(publishedPorts(to), port) {
		res.Error = "not published to the harness"
		return res
	}
	c := t.ctr(to)
	if c == nil {
		res.Error = "the docker topology is not up"
		return res
	}
	pctx, cancel := context.WithTimeout(ctx, topology.ProbeTimeout)
	defer cancel()
	start := time.Now()
	var conn net.Conn
	var err error
	if t.access == accessExec {
		alias := to + "-admin"
		if topology.IsGateway(to) && port == dockerPorts.GatewayData {
			alias = to
		}
		// The probe's 1 s is for the connect, not for starting the relay: a docker exec on a
		// loaded daemon takes longer than that (a CI run saw i/o timeouts). The relay dials the
		// container's own port from inside it, bounded by dockerRelayDeadline.
		conn, err = t.relayDial(ctx, to, net.JoinHostPort(alias, strconv.Itoa(port)))
	} else {
		var p network.Port
		p, err = c.MappedPort(pctx, strconv.Itoa(port)+"/tcp")
		if err == nil {
			d := net.Dialer{}
			conn, err = d.DialContext(pctx, "tcp", net.JoinHostPort(t.pubHost, p.Port()))
		}
	}
	res.Elapsed = time.Since(start)
	if err != nil {
		res.Error = topology.ConnectError(err)
		return res
	}
	conn.Close()
	res.Reached = true
	return res
}

func (t *dockerTopo) Probe(ctx context.Context, from, to string, port int) topology.ProbeResult {
	res := topology.ProbeResult{From: from, To: to, Port: port, Supported: true}
	_, fok := dockerMembership[from]
	_, tok := dockerMembership[to]
	if from == topology.HostObserver && tok {
		return t.probeFromObserver(ctx, to, port)
	}
	if !fok || !tok {
		res.Error = fmt.Sprintf("unknown host (from %q, to %q)", from, to)
		return res
	}
	if from == topology.HostValkey {
		res.Supported = false
		res.Error = "the valkey image has no quotaqual binary to probe from"
		return res
	}
	c := t.ctr(from)
	if topology.IsStoreHost(from) { // the Valkey image has no quotaqual: probe from the netfilter sidecar
		c = t.ctr(sidecarOf(from))
	}
	if c == nil {
		res.Error = "the docker topology is not up"
		return res
	}
	addr, err := t.probeTarget(ctx, from, to, port)
	if err != nil {
		res.Error = err.Error()
		return res
	}
	start := time.Now()
	_, out, err := c.Exec(ctx, []string{images.QuotaqualInContainer, "probe", "--to", addr, "--timeout", topology.ProbeTimeout.String()}, tcexec.Multiplexed())
	res.Elapsed = time.Since(start)
	if err != nil {
		res.Error = "exec in " + from + ": " + err.Error()
		return res
	}
	b, _ := io.ReadAll(out)
	topology.ReadProbeOutput(b, &res)
	return res
}

// observerDial (exec access) connects from inside the container the address names: the
// observer reaches each component's own ports, as through a published port.
func (t *dockerTopo) observerDial(ctx context.Context, _, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	h := strings.TrimSuffix(host, "-admin")
	if _, ok := dockerMembership[h]; !ok || h == topology.HostValkey || topology.IsStoreHost(h) {
		return nil, fmt.Errorf("observer: no component answers at %s", addr)
	}
	return t.relayDial(ctx, h, addr)
}

// relayDial opens a connection to addr from inside host's container: docker exec of
// `quotaqual relay --to addr`, its stdin/stdout being the connection.
func (t *dockerTopo) relayDial(ctx context.Context, host, addr string) (net.Conn, error) {
	c := t.ctr(host)
	if c == nil || t.cli == nil {
		return nil, fmt.Errorf("dial %s from %s: the docker topology is not up", addr, host)
	}
	ctx, cancel := context.WithTimeout(ctx, dockerRelayDeadline)
	defer cancel()
	ex, err := t.cli.ExecCreate(ctx, c.GetContainerID(), client.ExecCreateOptions{
		Cmd:         []string{images.QuotaqualInContainer, "relay", "--to", addr, "--timeout", dockerRelayConnect.String()},
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
	})
	if err != nil {
		return nil, fmt.Errorf("dial %s from %s: exec: %w", addr, host, err)
	}
	att, err := t.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("dial %s from %s: exec attach: %w", addr, host, err)
	}
	pr, pw := io.Pipe()
	status := newFirstLine()
	go func() {
		_, err := stdcopy.StdCopy(pw, status, att.Reader)
		if err == nil {
			err = io.EOF
		}
		pw.CloseWithError(err)
		status.finish()
	}()
	select {
	case line := <-status.ch:
		if line != "connected" {
			att.Close()
			return nil, &net.OpError{Op: "dial", Net: "tcp", Err: errors.New(strings.TrimPrefix(line, "error: ") + " (from " + host + ")")}
		}
	case <-ctx.Done():
		att.Close()
		return nil, fmt.Errorf("dial %s from %s: %w", addr, host, ctx.Err())
	}
	return &relayConn{Conn: att.Conn, r: pr}, nil
}

// firstLine captures the first line written to it (the relay's status on stderr).
type firstLine struct {
	mu   sync.Mutex
	buf  []byte
	sent bool
	ch   chan string
}

func newFirstLine() *firstLine { return &firstLine{ch: make(chan string, 1)} }

func (f *firstLine) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sent {
		return len(p), nil
	}
	f.buf = append(f.buf, p...)
	if i := bytes.IndexByte(f.buf, '\n'); i >= 0 {
		f.sent = true
		f.ch <- strings.TrimSpace(string(f.buf[:i]))
	}
	return len(p), nil
}

func (f *firstLine) finish() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.sent {
		f.sent = true
		msg := strings.TrimSpace(string(f.buf))
		if msg == "" {
			msg = "error: relay ended before connecting"
		}
		f.ch <- msg
	}
}

// relayConn is the exec's hijacked connection: writes go to the relay's stdin, reads come
// from its demultiplexed stdout.
type relayConn struct {
	net.Conn
	r *io.PipeReader
}

func (c *relayConn) Read(p []byte) (int, error) { return c.r.Read(p) }
func (c *relayConn) Close() error {
	c.r.Close()
	return c.Conn.Close()
}

func (t *dockerTopo) CollectLogs(dir string) error {
	if err := t.snapshotLogs(context.Background()); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var errs []error
	hosts := append(topology.ComponentHosts(t.Gateways()), topology.StoreHosts...)
	for i := range topology.ClusterPrimaries {
		hosts = append(hosts, topology.ClusterNodeName(i))
	}
	for _, h := range hosts {
		b, err := os.ReadFile(filepath.Join(t.logDir(), h+".log"))
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, h+".log"), b, 0o600); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// snapshotLogs writes each existing container's log to WorkDir/logs/<host>.log, so the logs
// outlive the containers.
func (t *dockerTopo) snapshotLogs(ctx context.Context) error {
	t.mu.Lock()
	ctrs := make(map[string]*testcontainers.DockerContainer, len(t.ctrs))
	for h, c := range t.ctrs {
		ctrs[h] = c
	}
	cli := t.cli
	t.mu.Unlock()
	if cli == nil {
		return nil
	}
	var errs []error
	for h, c := range ctrs {
		b, err := t.containerLog(ctx, c.GetContainerID())
		if err != nil && len(b) == 0 {
			continue // already gone: keep the last snapshot
		}
		if err := os.WriteFile(filepath.Join(t.logDir(), h+".log"), b, 0o600); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (t *dockerTopo) Down(ctx context.Context) (topology.Teardown, error) {
	return t.down.Do(func(td *topology.Teardown) {
		t.mu.Lock()
		cli := t.cli
		t.mu.Unlock()
		t.stopStoreStart()
		t.links.CloseAll()
		t.client.CloseIdleConnections()
		t.observer.CloseIdleConnections()
		if cli == nil {
			return
		}
		if err := t.snapshotLogs(ctx); err != nil {
			td.Errors = append(td.Errors, "saving container logs: "+err.Error())
		}
		ctd := dockerCleanup(ctx, cli, t.spec.RunID)
		td.Removed = append(td.Removed, ctd.Removed...)
		td.Errors = append(td.Errors, ctd.Errors...)
	})
}

// Cleanup removes every container, network and volume labelled with runID (what a
// docker run created, and nothing else), for `quotaqual down --run-id`. Without a Docker
// engine there is nothing to remove: it returns an empty teardown.
func Cleanup(ctx context.Context, runID string) (topology.Teardown, error) {
	start := time.Now()
	if err := topology.ValidateRunID(runID); err != nil {
		return topology.Teardown{}, err
	}
	cli, err := dockerClient(ctx)
	if err != nil {
		return topology.Teardown{Elapsed: topology.ElapsedSince(start)}, nil
	}
	defer cli.Close()
	td := dockerCleanup(ctx, cli, runID)
	td.Elapsed = topology.ElapsedSince(start)
	if len(td.Errors) > 0 {
		return td, errors.New("docker cleanup: " + strings.Join(td.Errors, "; "))
	}
	return td, nil
}

func (t *dockerTopo) Facts() map[string]any {
	cluster := t.clusterFacts()
	var storeFacts any = "not running: " + t.StoreGroupReason()
	if t.StoreGroupReason() == "" {
		storeFacts = t.storeFacts()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	gws, prs := topology.EndpointFacts(slices.Collect(maps.Values(t.gateways)), slices.Collect(maps.Values(t.providers)))
	containers := map[string]string{}
	for _, h := range topology.ComponentHosts(t.Gateways()) {
		containers[h] = dockerName(t.spec.RunID, h)
	}
	membership := map[string][]string{}
	for h, roles := range dockerMembership {
		if topology.IsGateway(h) && !slices.Contains(t.Gateways(), h) {
			continue // a gateway this run does not have
		}
		for _, r := range roles {
			membership[h] = append(membership[h], t.nets[r])
		}
	}
	return map[string]any{
		"engine":          topology.EngineDocker,
		"run_id":          t.spec.RunID,
		"valkey_addr":     net.JoinHostPort(topology.HostValkey, strconv.Itoa(dockerPorts.Valkey)),
		"valkey_image":    t.valkeyImg,
		"valkey_version":  t.valkeyVer,
		"quotaqual_image": t.qqImg,
		"gateway_image":   cmp.Or(topology.GatewayImage(t.spec), t.qqImg),
		"gateways":        gws,
		"providers":       prs,
		"containers":      containers,
		"networks":        membership,
		"volume":          cmp.Or(t.volume, "none: the cluster's nodes keep their data in their containers"),
		"harness_access":  t.access,
		"network_policy":  topology.PolicyFacts(t.policy, ""),
		"ports":           topology.PortFacts(dockerPorts),
		"isolation":       "docker network membership: internal edge, backend and provider networks; admin ports bound to an admin network with inter-container traffic off, reached only through published ports (or docker exec)",
		"deny_mode":       "docker (no route between networks: dropped or unreachable)",
		"store_group":     storeFacts,
		"store":           t.spec.Store,
		"store_cluster":   cluster,
	}
}

// recordValkeyVersion reads the version from the start-up log of host's Valkey container
// (the single Valkey, or a cluster node: "valkey" is then node 0's holder, which logs none)
// for the manifest; "unknown" when the log does not say.
func (t *dockerTopo) recordValkeyVersion(host string) {
	v := "unknown"
	if c := t.ctr(host); c != nil && t.cli != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if b, err := t.containerLog(ctx, c.GetContainerID()); err == nil || len(b) > 0 {
			v = valkeyVersionIn(b)
		}
	}
	t.mu.Lock()
	t.valkeyVer = v
	t.mu.Unlock()
}

// valkeyVersionIn finds the version in a Valkey start-up log ("Valkey version=8.0.1, bits=64").
func valkeyVersionIn(log []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(log))
	for sc.Scan() {
		if _, v, ok := strings.Cut(sc.Text(), "version="); ok {
			if f := strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }); len(f) > 0 {
				return f[0]
			}
		}
	}
	return "unknown"
}
