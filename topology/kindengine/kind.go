// Package kindengine is the kind topology engine: the qualification on Kubernetes (its
// design: the comment that opens kind.go). It registers itself as topology.EngineKind; import
// topology/engines rather than this package to build every engine in. Its manifests come from
// package topology/k8s.
package kindengine

// The kind engine: the qualification on Kubernetes. Either a run-scoped kind cluster
// (sigs.k8s.io/kind, node image configurable) or, with KindOptions.Kubeconfig/Context, any
// existing cluster — always inside the run-scoped namespace quotaqual-<run>, touching nothing
// outside it. The manifests come from package k8s (typed API values, tested offline); this
// package applies them with client-go (kind_apply.go) and implements the levers, a file per
// concern: kind_cluster.go, kind_portforward.go, kind_probe.go, kind_rollout.go, kind_crash.go,
// kind_partition.go (with kind_nodecut.go), kind_logs.go:
//
//   - Client() and Observer() are HTTP clients whose connections are port-forwards (the
//     pods/portforward subresource, one SPDY stream pair per connection) to a ready pod of the
//     Service the URL names, e.g. http://gateway-a.quotaqual-<run>.svc.cluster.local:8080.
//     A port-forward enters the pod's network namespace through the kubelet, so it is the
//     harness's (observer's) vantage and is not subject to NetworkPolicy, like the docker
//     engine's published ports. The policy allows the observer the gateways' data ports too.
//   - Probe(from, to, port) execs `quotaqual probe --to <to's Service>:port` in a ready pod of
//     from: the role=client pod for the client, the role=observer pod for the observer, the
//     component's own pod otherwise — these are the vantages the NetworkPolicies name. A host
//     probing itself dials 127.0.0.1 (loopback is not policed). Valkey's image has no
//     quotaqual binary: probes from valkey are unsupported.
//   - RestartGateway is a rollout restart (the pod template's restartedAt annotation) and waits
//     until the new pod is ready and the old one is no longer serving. RestartGatewayWithPolicy
//     (rolling-upgrade's lever) first writes the config rendered for another rule policy into
//     the gateway's ConfigMap, and the same rollout starts a pod that mounts it.
//   - CrashGateway SIGKILLs the gateway's container through its kind node's containerd (ctr
//     task kill; deleting the pod would send SIGTERM, and the gateway drains on SIGTERM), waits
//     until the kubelet has restarted it in the same pod and it is ready, and checks that the
//     old container exited 137. Only on a kind cluster on this docker host: elsewhere the
//     nodes are out of reach and the lever is unsupported.
//   - StopValkey scales Valkey to 0 and waits until its pod is gone; StartValkey scales it to 1
//     and waits until it is ready. The append-only file lives on a PVC (the cluster's default
//     storage class: kind's local-path "standard"), so state survives; an emptyDir would not.
//   - Partition(a, b), on a kind cluster of this docker host, drops every packet between a's
//     pods and b (its pods' addresses, its Service IP) with an nftables table in a's pods'
//     network namespaces, set from their kind node (kind_nodecut.go): live connections are
//     cut too, and NetworkPolicy enforcement is not needed. Elsewhere (an existing cluster, whose
//     nodes the engine cannot enter) it re-renders the NetworkPolicies from the policy without
//     the a↔b allowances (a NetworkPolicy can only allow, so a partition removes an allow) and
//     applies them; NetworkPolicy governs new connections, so whether established ones are cut
//     is up to the CNI. Either way a partition is trusted only after a probe from the
//     partitioned side is denied, and Heal waits for the probe to reach again.
//   - After the rollout, Up proves NetworkPolicy enforcement is live before anything relies
//     on it: a negative control (client → valkey) must be denied while a positive control
//     (gateway-a → valkey) reaches. kind enforces NetworkPolicy since v0.24, with reports of
//     enforcement lagging for new pods; where it never becomes live (a CNI without
//     NetworkPolicy), Capabilities says so and the scenarios that need it skip.
//   - CollectLogs writes each host's pod logs (including pods a restart or scale-down
//     removed: their logs are saved before they go); Down deletes the kind cluster this run
//     created, or only the namespace on an existing cluster, unless KindOptions.Keep.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kinddefaults "sigs.k8s.io/kind/pkg/apis/config/defaults"
	"sigs.k8s.io/kind/pkg/cluster"
	kindlog "sigs.k8s.io/kind/pkg/log"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/images"
	"github.com/quotaqual/quotaqual/topology/k8s"
)

// kindClusterDomain is the cluster DNS domain the Service names use (k8s.Input's default).
const kindClusterDomain = "cluster.local"

// EnvNodeImage names a kind node image to use instead of kind's default.
const EnvNodeImage = "QUOTAQUAL_KIND_NODE_IMAGE"

// DefaultNodeImage is the node image of sigs.k8s.io/kind v0.33.0.
const DefaultNodeImage = kinddefaults.Image

// LocalNodeImage is the node image `make kind-node-image` builds locally (from Debian
// packages and the Go module proxy; hack/kind-node-image). With no node image named, it is used
// when kind's default is not present.
const LocalNodeImage = "quotaqual/kind-node:v1.37.0"

// Deadlines of the kind engine.
const (
	kindCreateWait      = 4 * time.Minute  // nodes ready after `kind create cluster`
	kindRolloutTimeout  = 4 * time.Minute  // every Deployment available after apply
	kindLeverTimeout    = 2 * time.Minute  // restart, scale down, scale up
	kindPolicyLiveWait  = 60 * time.Second // a deny must be seen denying within this
	kindNamespaceDelete = 2 * time.Minute
	kindPoll            = 250 * time.Millisecond
	kindExecTimeout     = 20 * time.Second
)

type kindTopo struct {
	spec topology.Spec
	opts topology.KindOptions
	base topology.Policy // the qualification's policy; partitions are cut out of it

	mu          sync.Mutex
	in          k8s.Input // rendered input (real secrets)
	ns          string
	qqImg       string
	valkeyImg   string
	nodeImage   string
	defaulted   bool // no node image was named: the local build may stand in for kind's
	provider    *cluster.Provider
	clusterNm   string // kind cluster created (owned) or loaded into
	owns        bool   // this run created the cluster
	nsCreated   bool   // this run created the namespace
	kubecfg     string // kubeconfig path of a created cluster
	rest        *rest.Config
	cs          kubernetes.Interface
	serverVer   string
	cuts        map[[2]string]bool
	nodeCutSide map[[2]string][2]string // partitions cut through the nodes: pair → {cut side, peer}
	enforced    bool
	enforceWhy  string
	proof       []string
	logs        map[string]*bytes.Buffer // host → logs of pods already gone
	saved       map[string]bool          // pod name → its log is in logs
	pf          map[string]httpstream.Connection
	logsFinal   bool // Down saved every pod's log: logsNow asks the cluster no more
	down        topology.DownGuard

	reqID    atomic.Int64
	client   *http.Client
	observer *http.Client
}

// The engine registers itself: importing this package (topology/engines does) builds it in.
func init() {
	topology.Register(topology.EngineKind, topology.Engine{
		New:     func(s topology.Spec) (topology.Topology, error) { return newKind(s) },
		Cleanup: Cleanup,
		// One Valkey Deployment and Service in the manifests; a cluster there would need a
		// StatefulSet whose pods announce their own addresses, not built yet.
		NoCluster: "its manifests deploy one Valkey (a cluster on Kubernetes is not built yet)",
	})
}

func newKind(spec topology.Spec) (*kindTopo, error) {
	o := spec.Kind
	if o.NodeImage == "" {
		o.NodeImage = os.Getenv(EnvNodeImage)
	}
	imageDefaulted := o.NodeImage == ""
	if imageDefaulted {
		o.NodeImage = DefaultNodeImage
	}
	if o.ClusterName == "" {
		o.ClusterName = "qq-" + spec.RunID
	}
	t := &kindTopo{
		spec:        spec,
		opts:        o,
		base:        topology.DefaultPolicy(kindPorts, spec.GatewayHosts()),
		ns:          "quotaqual-" + spec.RunID,
		nodeImage:   o.NodeImage,
		defaulted:   imageDefaulted,
		cuts:        map[[2]string]bool{},
		nodeCutSide: map[[2]string][2]string{},
		logs:        map[string]*bytes.Buffer{},
		saved:       map[string]bool{},
		pf:          map[string]httpstream.Connection{},
	}
	if spec.AdjustPolicy != nil {
		t.base = spec.AdjustPolicy(t.base)
	}
	dial := func(ctx context.Context, _, addr string) (net.Conn, error) { return t.dialService(ctx, addr) }
	t.client = &http.Client{Transport: topology.NewTransport(dial)}
	t.observer = &http.Client{Transport: topology.NewTransport(dial)}
	return t, nil
}

func (t *kindTopo) Engine() string         { return topology.EngineKind }
func (t *kindTopo) Client() *http.Client   { return t.client }
func (t *kindTopo) Observer() *http.Client { return t.observer }
func (t *kindTopo) Ports() topology.Ports  { return kindPorts }

// Policy returns the network policy the NetworkPolicies are rendered from.
func (t *kindTopo) Policy() topology.Policy { return t.base }

func (t *kindTopo) svcHost(host string) string {
	return host + "." + t.ns + ".svc." + kindClusterDomain
}

func (t *kindTopo) url(host string, port int) string {
	return "http://" + net.JoinHostPort(t.svcHost(host), strconv.Itoa(port))
}

func (t *kindTopo) ValkeyAddr() string {
	return net.JoinHostPort(t.svcHost(topology.HostValkey), strconv.Itoa(kindPorts.Valkey))
}

func (t *kindTopo) Gateways() []string { return t.spec.GatewayHosts() }

// hosts are the run's component hosts (its gateways among them).
func (t *kindTopo) hosts() []string { return topology.ComponentHosts(t.Gateways()) }

func (t *kindTopo) Gateway(name string) topology.GatewayEndpoint {
	if !slices.Contains(t.Gateways(), name) {
		return topology.GatewayEndpoint{}
	}
	return topology.GatewayEndpoint{Name: name, DataURL: t.url(name, kindPorts.GatewayData), AdminURL: t.url(name, kindPorts.GatewayAdmin)}
}

func (t *kindTopo) Provider(name string) topology.ProviderEndpoint {
	if topology.SiteOf(name) == "" {
		return topology.ProviderEndpoint{}
	}
	return topology.ProviderEndpoint{Name: name, Site: topology.SiteOf(name),
		DataURL: t.url(name, kindPorts.ProviderData), AdminURL: t.url(name, kindPorts.ProviderAdmin)}
}

const kindPartitionReason = "kind partitions remove the a↔b allowances from the NetworkPolicies and are trusted only after a probe is denied; NetworkPolicy governs new connections, so established ones may survive depending on the CNI"

func (t *kindTopo) Capabilities() topology.Capabilities {
	t.mu.Lock()
	defer t.mu.Unlock()
	c := topology.Capabilities{NetworkPolicy: true, Partition: true, PartitionReason: kindPartitionReason,
		NetworkPolicyReason: "Kubernetes NetworkPolicy, proven live at start-up by a denied negative control next to a reached positive control"}
	if t.cs != nil && !t.enforced {
		c.NetworkPolicy, c.Partition = false, false
		c.NetworkPolicyReason = t.enforceWhy
		c.PartitionReason = t.enforceWhy
	}
	if t.nodeCuts() {
		c.Partition, c.PartitionReason = true, kindNodeCutReason
	}
	return c
}

func (t *kindTopo) logDir() string { return filepath.Join(t.spec.WorkDir, "logs") }

// Up creates (or connects to) the cluster, loads the images, applies the manifests, waits for
// every rollout and proves NetworkPolicy enforcement.
func (t *kindTopo) Up(ctx context.Context) (err error) {
	start := time.Now()
	for _, d := range []string{t.logDir(), filepath.Join(t.spec.WorkDir, "config")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("topology: work directory: %w", err)
		}
	}
	defer func() {
		if err != nil {
			_, _ = t.Down(context.WithoutCancel(ctx))
		}
	}()
	existing := t.opts.Kubeconfig != "" || t.opts.Context != ""
	if !existing && !images.Exists(ctx, t.nodeImage) && t.defaulted && images.Exists(ctx, LocalNodeImage) {
		t.nodeImage = LocalNodeImage
	}
	// Before building anything: no registry is reachable on the project's machines.
	if err := topology.CheckGatewayImage(ctx, t.spec); err != nil {
		return err
	}
	if !existing && !images.Exists(ctx, t.nodeImage) {
		return fmt.Errorf("kind node image %s is not present locally and cannot be pulled here: build one with `make kind-node-image` (%s) or load one (docker load), and name it with %s (or KindOptions.NodeImage)", t.nodeImage, LocalNodeImage, EnvNodeImage)
	}
	if err := t.images(ctx); err != nil {
		return err
	}
	if existing {
		if err := t.connectExisting(ctx); err != nil {
			return err
		}
	} else if err := t.createCluster(ctx); err != nil {
		return err
	}
	if err := t.render(); err != nil {
		return err
	}
	if err := t.apply(ctx); err != nil {
		return err
	}
	t.spec.Progress("kind: manifests applied in namespace %s; waiting for the rollouts", t.ns)
	rollout := time.Now()
	if err := t.waitRollouts(ctx, kindRolloutTimeout); err != nil {
		return err
	}
	for _, g := range t.Gateways() {
		if err := t.waitHTTP(ctx, t.gatewayReadyURL(g), kindLeverTimeout); err != nil {
			return fmt.Errorf("%s through a port-forward: %w", g, err)
		}
	}
	t.spec.Progress("kind: rollouts done and gateways ready through port-forwards in %s", topology.ElapsedSince(rollout))
	proof := time.Now()
	t.proveEnforcement(ctx)
	t.spec.Progress("kind: NetworkPolicy enforcement check took %s (enforced: %v)", topology.ElapsedSince(proof), t.enforced)
	t.spec.Progress("kind topology up in %s (cluster %s, namespace %s, NetworkPolicy enforced: %v)",
		topology.ElapsedSince(start), t.clusterNm, t.ns, t.enforced)
	return nil
}

// Down saves every pod's log before it deletes anything, and only then marks the logs final
// (logsNow stops asking the cluster), so the saved copies are complete.
func (t *kindTopo) Down(ctx context.Context) (topology.Teardown, error) {
	return t.down.Do(func(td *topology.Teardown) {
		if t.cs != nil {
			lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			for _, h := range t.hosts() {
				t.saveLogs(lctx, h)
			}
			cancel()
		}
		t.mu.Lock()
		t.logsFinal = true
		pfs := t.pf
		t.pf = map[string]httpstream.Connection{}
		owns, nsCreated, name := t.owns, t.nsCreated, t.clusterNm
		t.mu.Unlock()
		t.client.CloseIdleConnections()
		t.observer.CloseIdleConnections()
		for _, c := range pfs {
			c.Close()
		}
		switch {
		case t.opts.Keep && (owns || nsCreated):
			td.Removed = append(td.Removed, "nothing: kept "+map[bool]string{true: "kind cluster " + name, false: "namespace " + t.ns}[owns]+" (--keep)")
		case owns:
			if err := t.provider.Delete(name, t.kubecfg); err != nil {
				td.Errors = append(td.Errors, fmt.Sprintf("deleting kind cluster %s: %v (remove it with `kind delete cluster --name %s`)", name, err, name))
			} else {
				td.Removed = append(td.Removed, "kind cluster "+name)
			}
		case nsCreated:
			if err := t.deleteNamespace(ctx); err != nil {
				td.Errors = append(td.Errors, err.Error())
			} else {
				td.Removed = append(td.Removed, "namespace "+t.ns+" on "+name)
			}
		}
	})
}

func (t *kindTopo) deleteNamespace(ctx context.Context) error {
	fg := metav1.DeletePropagationForeground
	err := t.cs.CoreV1().Namespaces().Delete(ctx, t.ns, metav1.DeleteOptions{PropagationPolicy: &fg})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("deleting namespace %s: %w", t.ns, err)
	}
	ctx, cancel := context.WithTimeout(ctx, kindNamespaceDelete)
	defer cancel()
	for {
		_, err := t.cs.CoreV1().Namespaces().Get(ctx, t.ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s still terminating after %s", t.ns, kindNamespaceDelete)
		case <-time.After(time.Second):
		}
	}
}

func (t *kindTopo) Facts() map[string]any {
	var gateways []topology.GatewayEndpoint
	for _, g := range t.Gateways() {
		gateways = append(gateways, t.Gateway(g))
	}
	var providers []topology.ProviderEndpoint
	for _, p := range topology.Providers {
		providers = append(providers, t.Provider(p))
	}
	gws, prs := topology.EndpointFacts(gateways, providers)
	t.mu.Lock()
	defer t.mu.Unlock()
	rules := topology.PolicyFacts(partitionedPolicy(t.base, t.cuts), "allow-")
	clusterKind := "existing cluster (" + t.clusterNm + ")"
	if t.owns {
		clusterKind = "kind cluster " + t.clusterNm + " created for this run"
	}
	storage := "pvc " + k8s.PVCValkey + " (storage class: " + map[bool]string{true: t.opts.StorageClass, false: "cluster default"}[t.opts.StorageClass != ""] + ")"
	if t.opts.EmptyDir {
		storage = "emptyDir (state does not survive StopValkey)"
	}
	return map[string]any{
		"engine":                  topology.EngineKind,
		"run_id":                  t.spec.RunID,
		"cluster":                 clusterKind,
		"namespace":               t.ns,
		"node_image":              map[bool]string{true: t.nodeImage, false: ""}[t.owns],
		"kubernetes_version":      t.serverVer,
		"quotaqual_image":         t.qqImg,
		"gateway_image":           cmp.Or(topology.GatewayImage(t.spec), t.qqImg),
		"valkey_image":            t.valkeyImg,
		"valkey_addr":             net.JoinHostPort(t.svcHost(topology.HostValkey), strconv.Itoa(kindPorts.Valkey)),
		"valkey_storage":          storage,
		"gateways":                gws,
		"providers":               prs,
		"network_policy":          append([]string{k8s.PolicyDefaultDeny}, rules...),
		"network_policy_enforced": t.enforced,
		"network_policy_proof":    t.proof,
		"crash_lever":             "SIGKILL of the gateway's container through its node's containerd (ctr task kill); the kubelet restarts it in the same pod",
		"harness_access":          "port-forward (pods/portforward) for Client() and Observer(); probes by exec in labelled pods",
		"deny_mode":               "the CNI's (kindnet drops: a denied connect times out)",
		"ports":                   topology.PortFacts(kindPorts),
	}
}

// Cleanup deletes the kind cluster a crashed run created (qq-<run id>), for `quotaqual
// down --run-id`. Without Docker, or without such a cluster, there is nothing to remove. (A
// run against an existing cluster leaves at most its namespace quotaqual-<run id> there.)
func Cleanup(ctx context.Context, runID string) (topology.Teardown, error) {
	start := time.Now()
	if err := topology.ValidateRunID(runID); err != nil {
		return topology.Teardown{}, err
	}
	var td topology.Teardown
	// Kind's nodes are Docker containers: the docker engine says whether Docker answers (a
	// registry look-up, so this package need not import that engine).
	if _, err := topology.EngineAnswers(ctx, topology.EngineDocker); err != nil {
		td.Elapsed = topology.ElapsedSince(start)
		return td, nil
	}
	p := cluster.NewProvider(cluster.ProviderWithDocker(), cluster.ProviderWithLogger(kindlog.NoopLogger{}))
	names, err := p.List()
	if err != nil {
		return td, fmt.Errorf("listing kind clusters: %w", err)
	}
	name := "qq-" + runID
	if slices.Contains(names, name) {
		// An explicit, missing kubeconfig path: never edit the user's ~/.kube/config.
		if err := p.Delete(name, filepath.Join(os.TempDir(), "quotaqual-"+runID+"-kubeconfig")); err != nil {
			td.Errors = append(td.Errors, fmt.Sprintf("deleting kind cluster %s: %v", name, err))
		} else {
			td.Removed = append(td.Removed, "kind cluster "+name)
		}
	}
	td.Elapsed = topology.ElapsedSince(start)
	if len(td.Errors) > 0 {
		return td, errors.New("kind cleanup: " + strings.Join(td.Errors, "; "))
	}
	return td, nil
}
