// Package kindengine is the kind topology engine: the qualification on Kubernetes (its
// design: the comment that opens kind.go). It registers itself as topology.EngineKind; import
// topology/engines rather than this package to build every engine in. Its manifests come from
// package topology/k8s.
package kindengine

// The kind engine: the qualification on Kubernetes. Either a run-scoped kind cluster
// (sigs.k8s.io/kind, node image configurable) or, with KindOptions.Kubeconfig/Context, any
// existing cluster — always inside the run-scoped namespace quotaqual-<run>, touching nothing
// outside it. The manifests come from package k8s (typed API values, tested offline); this
// file applies them with client-go and implements the levers:
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
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	kinddefaults "sigs.k8s.io/kind/pkg/apis/config/defaults"
	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodes"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
	kindexec "sigs.k8s.io/kind/pkg/exec"
	kindlog "sigs.k8s.io/kind/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/dockerengine"
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

// images resolves (and builds when missing) the two images, as the docker engine does.
func (t *kindTopo) images(ctx context.Context) (err error) {
	t.valkeyImg, t.qqImg, err = images.Resolve(ctx, t.spec.ValkeyImage, t.spec.QuotaqualImage, t.spec.Binary)
	return err
}

// kindClusterConfig is the cluster's kind config: one control-plane node, kind's default CNI
// (kindnet, which enforces NetworkPolicy since kind v0.24).
func kindClusterConfig(name string) ([]byte, error) {
	cfg := kindv1alpha4.Cluster{
		TypeMeta: kindv1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"},
		Name:     name,
		Nodes:    []kindv1alpha4.Node{{Role: kindv1alpha4.ControlPlaneRole}},
	}
	return yaml.Marshal(cfg)
}

func (t *kindTopo) createCluster(ctx context.Context) error {
	raw, err := kindClusterConfig(t.opts.ClusterName)
	if err != nil {
		return err
	}
	t.provider = cluster.NewProvider(cluster.ProviderWithDocker(), cluster.ProviderWithLogger(kindlog.NoopLogger{}))
	t.kubecfg = filepath.Join(t.spec.WorkDir, "kubeconfig") // never the user's ~/.kube/config
	t.mu.Lock()
	t.clusterNm, t.owns = t.opts.ClusterName, true
	t.mu.Unlock()
	if err := t.ensurePrivilegedNodes(ctx); err != nil {
		return err
	}
	t.spec.Progress("kind: creating cluster %s (node image %s)", t.clusterNm, t.nodeImage)
	create := time.Now()
	err = t.provider.Create(t.clusterNm,
		cluster.CreateWithRawConfig(raw),
		cluster.CreateWithNodeImage(t.nodeImage),
		cluster.CreateWithWaitForReady(kindCreateWait),
		cluster.CreateWithKubeconfigPath(t.kubecfg),
		cluster.CreateWithDisplayUsage(false),
		cluster.CreateWithDisplaySalutation(false),
	)
	if err != nil {
		return fmt.Errorf("creating kind cluster %s: %w", t.clusterNm, err)
	}
	t.spec.Progress("kind: cluster %s created in %s", t.clusterNm, topology.ElapsedSince(create))
	if err := t.loadImages(ctx); err != nil {
		return err
	}
	kc, err := t.provider.KubeConfig(t.clusterNm, false)
	if err != nil {
		return fmt.Errorf("kubeconfig of kind cluster %s: %w", t.clusterNm, err)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig([]byte(kc))
	if err != nil {
		return fmt.Errorf("kubeconfig of kind cluster %s: %w", t.clusterNm, err)
	}
	return t.connect(ctx, rc)
}

func (t *kindTopo) connectExisting(ctx context.Context) error {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if t.opts.Kubeconfig != "" {
		rules.ExplicitPath = t.opts.Kubeconfig
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: t.opts.Context})
	raw, err := cc.RawConfig()
	if err != nil {
		return fmt.Errorf("reading the kubeconfig: %w", err)
	}
	ctxName := t.opts.Context
	if ctxName == "" {
		ctxName = raw.CurrentContext
	}
	rc, err := cc.ClientConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig context %q: %w", ctxName, err)
	}
	// A kind cluster's context is kind-<name>: load the images into its nodes.
	if name, ok := strings.CutPrefix(ctxName, "kind-"); ok {
		p := cluster.NewProvider(cluster.ProviderWithDocker(), cluster.ProviderWithLogger(kindlog.NoopLogger{}))
		if names, err := p.List(); err == nil && slices.Contains(names, name) {
			t.provider = p
			t.mu.Lock()
			t.clusterNm = name
			t.mu.Unlock()
			if err := t.loadImages(ctx); err != nil {
				return err
			}
		}
	}
	if t.clusterNm == "" {
		t.clusterNm = "context " + ctxName
	}
	return t.connect(ctx, rc)
}

func (t *kindTopo) connect(ctx context.Context, rc *rest.Config) error {
	rc.QPS, rc.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("Kubernetes client: %w", err)
	}
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return fmt.Errorf("the Kubernetes API server did not answer: %w", err)
	}
	t.mu.Lock()
	t.rest, t.cs, t.serverVer = rc, cs, v.GitVersion
	t.mu.Unlock()
	return nil
}

// loadImages loads the images (and the gateway's own, when its profile names one) into every node of the kind cluster (docker save, then
// nodeutils.LoadImageArchive per node: kind v0.33 has no LoadImage API).
func (t *kindTopo) loadImages(ctx context.Context) error {
	start := time.Now()
	nodes, err := t.provider.ListInternalNodes(t.clusterNm)
	if err != nil {
		return fmt.Errorf("listing the nodes of kind cluster %s: %w", t.clusterNm, err)
	}
	f, err := os.CreateTemp("", "quotaqual-images-*.tar")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	f.Close()
	imgs := []string{t.qqImg, t.valkeyImg}
	if gi := topology.GatewayImage(t.spec); gi != "" {
		imgs = append(imgs, gi) // the gateway's own image (CheckGatewayImage found it locally)
	}
	out, err := exec.CommandContext(ctx, "docker", append([]string{"save", "-o", f.Name()}, imgs...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("docker save %s: %w: %s", strings.Join(imgs, " "), err, strings.TrimSpace(string(out)))
	}
	for _, n := range nodes {
		r, err := os.Open(f.Name())
		if err != nil {
			return err
		}
		err = nodeutils.LoadImageArchive(n, r)
		r.Close()
		if err != nil {
			return fmt.Errorf("loading the images into kind node %s: %w", n.String(), err)
		}
	}
	t.spec.Progress("kind: loaded %s into %d node(s) in %s", strings.Join(imgs, ", "), len(nodes), topology.ElapsedSince(start))
	return nil
}

// render builds the input with the run's real secrets and keeps the gateway configs next to
// the logs, as the other engines do.
func (t *kindTopo) render() error {
	pull := corev1.PullIfNotPresent
	if t.provider != nil {
		pull = corev1.PullNever // loaded into the nodes: never try a registry
	}
	in, err := Input(t.spec.Deployment, ManifestOptions{
		RunID: t.spec.RunID, Namespace: t.ns, QuotaqualImage: t.qqImg, ValkeyImage: t.valkeyImg,
		PullPolicy: pull, StorageClass: t.opts.StorageClass, EmptyDir: t.opts.EmptyDir,
		Gateway: t.spec.Gateway, GatewayImage: t.spec.GatewayImage,
		Gateways: t.spec.Gateways,
	})
	if err != nil {
		return err
	}
	for _, g := range in.Gateways {
		_ = os.WriteFile(filepath.Join(t.spec.WorkDir, "config", g.Host+filepath.Ext(g.ConfigFile)), g.Config, 0o600)
	}
	t.mu.Lock()
	t.in = in
	t.mu.Unlock()
	return nil
}

// apply creates every object in order. The namespace must not exist yet: it is this run's.
func (t *kindTopo) apply(ctx context.Context) error {
	objs, err := k8s.Render(t.in)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := t.create(ctx, o); err != nil {
			return err
		}
		if _, ok := o.(*corev1.Namespace); ok {
			t.mu.Lock()
			t.nsCreated = true
			t.mu.Unlock()
		}
	}
	return nil
}

func (t *kindTopo) create(ctx context.Context, o runtime.Object) error {
	var err error
	var what string
	switch x := o.(type) {
	case *corev1.Namespace:
		what = "namespace " + x.Name
		_, err = t.cs.CoreV1().Namespaces().Create(ctx, x, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("namespace %s already exists: another run with id %s, or its leftovers (delete that namespace, or pick another run id)", x.Name, t.spec.RunID)
		}
	case *corev1.Secret:
		what = "secret " + x.Name
		_, err = t.cs.CoreV1().Secrets(t.ns).Create(ctx, x, metav1.CreateOptions{})
	case *corev1.ConfigMap:
		what = "configmap " + x.Name
		_, err = t.cs.CoreV1().ConfigMaps(t.ns).Create(ctx, x, metav1.CreateOptions{})
	case *corev1.PersistentVolumeClaim:
		what = "persistentvolumeclaim " + x.Name
		_, err = t.cs.CoreV1().PersistentVolumeClaims(t.ns).Create(ctx, x, metav1.CreateOptions{})
	case *corev1.Service:
		what = "service " + x.Name
		_, err = t.cs.CoreV1().Services(t.ns).Create(ctx, x, metav1.CreateOptions{})
	case *networkingv1.NetworkPolicy:
		what = "networkpolicy " + x.Name
		_, err = t.cs.NetworkingV1().NetworkPolicies(t.ns).Create(ctx, x, metav1.CreateOptions{})
	case *appsv1.Deployment:
		what = "deployment " + x.Name
		_, err = t.cs.AppsV1().Deployments(t.ns).Create(ctx, x, metav1.CreateOptions{})
	default:
		return fmt.Errorf("applying %T: not an object the kind engine renders", o)
	}
	if err != nil {
		return fmt.Errorf("creating %s in %s: %w", what, t.ns, err)
	}
	return nil
}

// waitRollouts waits until every Deployment in the namespace is rolled out.
func (t *kindTopo) waitRollouts(ctx context.Context, within time.Duration) error {
	names := append(append(append([]string{topology.HostValkey}, topology.Providers...), t.Gateways()...), topology.HostClient, topology.HostObserver)
	errs := make([]error, len(names))
	var wg sync.WaitGroup
	for i, n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = t.waitRollout(ctx, n, within)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// waitRollout waits until deployment name has its desired replicas updated, available and
// ready, no old replica left, and (for 1 replica) exactly one ready pod not being deleted.
func (t *kindTopo) waitRollout(ctx context.Context, name string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last string
	for {
		d, err := t.cs.AppsV1().Deployments(t.ns).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			want := int32(1)
			if d.Spec.Replicas != nil {
				want = *d.Spec.Replicas
			}
			s := d.Status
			last = fmt.Sprintf("%d/%d updated, %d available, %d ready, %d total", s.UpdatedReplicas, want, s.AvailableReplicas, s.ReadyReplicas, s.Replicas)
			if s.ObservedGeneration >= d.Generation && s.UpdatedReplicas == want && s.Replicas == want &&
				s.AvailableReplicas == want && s.ReadyReplicas == want {
				pods, err := t.pods(ctx, name)
				if err == nil && countReady(pods) == int(want) && countLive(pods) == int(want) {
					return nil
				}
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("deployment %s not rolled out within %s (%s)%s", name, within, last, t.podTrouble(context.WithoutCancel(ctx), name))
		case <-time.After(kindPoll):
		}
	}
}

// podTrouble says why host's pods are not ready: waiting reasons, unschedulable conditions.
func (t *kindTopo) podTrouble(ctx context.Context, host string) string {
	pods, err := t.pods(ctx, host)
	if err != nil || len(pods) == 0 {
		return ": no pod exists"
	}
	var out []string
	for _, p := range pods {
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				out = append(out, fmt.Sprintf("%s %s: %s", p.Name, c.Type, c.Message))
			}
		}
		for _, cs := range p.Status.ContainerStatuses {
			if w := cs.State.Waiting; w != nil {
				out = append(out, fmt.Sprintf("%s waiting: %s %s", p.Name, w.Reason, w.Message))
			}
			if tm := cs.LastTerminationState.Terminated; tm != nil {
				out = append(out, fmt.Sprintf("%s last exit %d: %s", p.Name, tm.ExitCode, tm.Reason))
			}
		}
	}
	if len(out) == 0 {
		return ""
	}
	return ": " + strings.Join(out, "; ")
}

func (t *kindTopo) pods(ctx context.Context, host string) ([]corev1.Pod, error) {
	l, err := t.cs.CoreV1().Pods(t.ns).List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelHost + "=" + host})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

func podReady(p *corev1.Pod) bool {
	if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func countReady(pods []corev1.Pod) int {
	n := 0
	for i := range pods {
		if podReady(&pods[i]) {
			n++
		}
	}
	return n
}

func countLive(pods []corev1.Pod) int {
	n := 0
	for i := range pods {
		if pods[i].DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// readyPod returns the newest ready pod of host (client and observer: of that role).
func (t *kindTopo) readyPod(ctx context.Context, host string) (*corev1.Pod, error) {
	if t.cs == nil {
		return nil, errors.New("the kind topology is not up: bring it up first")
	}
	pods, err := t.pods(ctx, host)
	if err != nil {
		return nil, fmt.Errorf("listing the pods of %s: %w", host, err)
	}
	var best *corev1.Pod
	for i := range pods {
		p := &pods[i]
		if podReady(p) && (best == nil || p.CreationTimestamp.After(best.CreationTimestamp.Time)) {
			best = p
		}
	}
	if best == nil {
		return nil, fmt.Errorf("no ready pod of %s in %s", host, t.ns)
	}
	return best, nil
}

// dialService opens a connection to <host>.<ns>.svc.<domain>:port through a port-forward to
// a ready pod of host.
func (t *kindTopo) dialService(ctx context.Context, addr string) (net.Conn, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return nil, err
	}
	host, ok := strings.CutSuffix(h, "."+t.ns+".svc."+kindClusterDomain)
	if !ok || strings.Contains(host, ".") {
		return nil, fmt.Errorf("dial %s: not a Service of namespace %s", addr, t.ns)
	}
	pod, err := t.readyPod(ctx, host)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: err}
	}
	return t.portForward(ctx, pod.Name, port)
}

// pfConnection returns the (cached) port-forward connection to pod.
func (t *kindTopo) pfConnection(ctx context.Context, pod string) (httpstream.Connection, error) {
	t.mu.Lock()
	if c := t.pf[pod]; c != nil {
		select {
		case <-c.CloseChan():
			delete(t.pf, pod)
		default:
			t.mu.Unlock()
			return c, nil
		}
	}
	t.mu.Unlock()
	u := t.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(t.ns).Name(pod).SubResource("portforward").URL()
	tr, upgrader, err := spdy.RoundTripperFor(t.rest)
	if err != nil {
		return nil, err
	}
	var dialer httpstream.Dialer = spdy.NewDialer(upgrader, &http.Client{Transport: tr}, http.MethodPost, u)
	if ws, err := portforward.NewSPDYOverWebsocketDialer(u, t.rest); err == nil {
		// As kubectl does: websockets first, SPDY when the server does not upgrade.
		dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
	type result struct {
		c   httpstream.Connection
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("port-forward to pod %s: %w", pod, r.err)
		}
		t.mu.Lock()
		if old := t.pf[pod]; old != nil {
			t.mu.Unlock()
			r.c.Close()
			return old, nil
		}
		t.pf[pod] = r.c
		t.mu.Unlock()
		return r.c, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, fmt.Errorf("port-forward to pod %s: %w", pod, ctx.Err())
	}
}

// portForward opens one forwarded TCP connection to pod:port (an error and a data stream, as
// kubectl port-forward does per accepted connection).
func (t *kindTopo) portForward(ctx context.Context, pod string, port int) (net.Conn, error) {
	c, err := t.portForwardOnce(ctx, pod, port)
	if err != nil && ctx.Err() == nil {
		// A cached connection may have gone stale (the kubelet's stream timed out): the
		// failed one was dropped, so this dials afresh.
		c, err = t.portForwardOnce(ctx, pod, port)
	}
	return c, err
}

func (t *kindTopo) portForwardOnce(ctx context.Context, pod string, port int) (net.Conn, error) {
	conn, err := t.pfConnection(ctx, pod)
	if err != nil {
		return nil, err
	}
	id := strconv.FormatInt(t.reqID.Add(1), 10)
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(port))
	h.Set(corev1.PortForwardRequestIDHeader, id)
	errStream, err := conn.CreateStream(h)
	if err != nil {
		t.dropPF(pod, conn)
		return nil, fmt.Errorf("port-forward to %s:%d: error stream: %w", pod, port, err)
	}
	errStream.Close() // nothing is sent on it
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(h)
	if err != nil {
		conn.RemoveStreams(errStream)
		t.dropPF(pod, conn)
		return nil, fmt.Errorf("port-forward to %s:%d: data stream: %w", pod, port, err)
	}
	c := &pfConn{stream: data, errStream: errStream, conn: conn, addr: pfAddr(pod + ":" + strconv.Itoa(port)), errc: make(chan struct{})}
	go func() {
		msg, _ := io.ReadAll(errStream)
		if len(msg) > 0 {
			c.mu.Lock()
			c.remoteErr = errors.New(strings.TrimSpace(string(msg)))
			c.mu.Unlock()
			data.Reset()
		}
		close(c.errc)
	}()
	return c, nil
}

func (t *kindTopo) dropPF(pod string, c httpstream.Connection) {
	t.mu.Lock()
	if t.pf[pod] == c {
		delete(t.pf, pod)
	}
	t.mu.Unlock()
	c.Close()
}

type pfAddr string

func (a pfAddr) Network() string { return "portforward" }
func (a pfAddr) String() string  { return string(a) }

// pfConn is one forwarded connection as a net.Conn. Deadlines are not supported (the HTTP
// transport uses timers, not deadlines); closing resets the stream.
type pfConn struct {
	stream    httpstream.Stream
	errStream httpstream.Stream
	conn      httpstream.Connection
	addr      pfAddr
	errc      chan struct{}

	mu        sync.Mutex
	remoteErr error
	closeOnce sync.Once
}

func (c *pfConn) Read(p []byte) (int, error) {
	n, err := c.stream.Read(p)
	if err != nil {
		c.mu.Lock()
		re := c.remoteErr
		c.mu.Unlock()
		if re != nil {
			return n, fmt.Errorf("port-forward: %w", re)
		}
	}
	return n, err
}

func (c *pfConn) Write(p []byte) (int, error) { return c.stream.Write(p) }

func (c *pfConn) Close() error {
	c.closeOnce.Do(func() {
		_ = c.stream.Reset()
		c.conn.RemoveStreams(c.stream, c.errStream)
	})
	return nil
}

func (c *pfConn) LocalAddr() net.Addr              { return pfAddr("harness") }
func (c *pfConn) RemoteAddr() net.Addr             { return c.addr }
func (c *pfConn) SetDeadline(time.Time) error      { return nil }
func (c *pfConn) SetReadDeadline(time.Time) error  { return nil }
func (c *pfConn) SetWriteDeadline(time.Time) error { return nil }

// waitHTTP polls url through the observer until it answers 200.
func (t *kindTopo) waitHTTP(ctx context.Context, url string, within time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	var last string
	for {
		ok, status := topology.GetOK(ctx, t.observer, url, 5*time.Second)
		if ok {
			return nil
		}
		last = status
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not answer 200 within %s (last: %s)", url, within, last)
		case <-time.After(kindPoll):
		}
	}
}

// exec runs argv in pod's first container and returns its stdout; a non-zero exit is an
// error that still carries the output.
func (t *kindTopo) exec(ctx context.Context, pod string, argv []string) ([]byte, error) {
	req := t.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(t.ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	sp, err := remotecommand.NewSPDYExecutor(t.rest, http.MethodPost, req.URL())
	if err != nil {
		return nil, err
	}
	var ex remotecommand.Executor = sp
	if ws, err := remotecommand.NewWebSocketExecutor(t.rest, http.MethodGet, req.URL().String()); err == nil {
		if fb, err := remotecommand.NewFallbackExecutor(ws, sp, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		}); err == nil {
			ex = fb
		}
	}
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	if err != nil && stdout.Len() == 0 {
		return nil, fmt.Errorf("exec in pod %s: %w: %s", pod, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// probeAddr is where a probe from → to:port dials: to's Service name when the Service has
// that port, to's pod address otherwise, 127.0.0.1 for a host probing itself.
func (t *kindTopo) probeAddr(ctx context.Context, from, to string, port int) (string, error) {
	p := strconv.Itoa(port)
	if from == to {
		return net.JoinHostPort("127.0.0.1", p), nil
	}
	switch {
	case to == topology.HostValkey && port == kindPorts.Valkey,
		topology.IsGateway(to) && (port == kindPorts.GatewayData || port == kindPorts.GatewayAdmin),
		topology.SiteOf(to) != "" && (port == kindPorts.ProviderData || port == kindPorts.ProviderAdmin):
		return net.JoinHostPort(t.svcHost(to), p), nil
	}
	pod, err := t.readyPod(ctx, to)
	if err != nil {
		return "", err
	}
	return net.JoinHostPort(pod.Status.PodIP, p), nil
}

func (t *kindTopo) Probe(ctx context.Context, from, to string, port int) topology.ProbeResult {
	res := topology.ProbeResult{From: from, To: to, Port: port, Supported: true}
	known := func(h string) bool { return slices.Contains(t.hosts(), h) }
	if !(known(from) || from == topology.HostObserver) || !known(to) {
		res.Error = fmt.Sprintf("unknown host (from %q, to %q)", from, to)
		return res
	}
	if from == topology.HostValkey {
		res.Supported = false
		res.Error = "the valkey image has no quotaqual binary to probe from"
		return res
	}
	start := time.Now()
	defer func() {
		if res.Elapsed == 0 {
			res.Elapsed = time.Since(start)
		}
	}()
	// Until the probe program reports, nothing was observed: a failure of the harness (no
	// ready pod, the API, the exec, a cancelled context) is not a denied connection.
	didNotRun := func(err error) topology.ProbeResult {
		res.Supported, res.Error = false, "the probe did not run: "+err.Error()
		return res
	}
	pod, err := t.readyPod(ctx, from)
	if err != nil {
		return didNotRun(err)
	}
	addr, err := t.probeAddr(ctx, from, to, port)
	if err != nil {
		return didNotRun(err)
	}
	ectx, cancel := context.WithTimeout(ctx, kindExecTimeout)
	defer cancel()
	out, err := t.exec(ectx, pod.Name, []string{k8s.QuotaqualInContainer, "probe", "--to", addr, "--timeout", topology.ProbeTimeout.String()})
	if err != nil {
		return didNotRun(err)
	}
	topology.ReadProbeOutput(out, &res)
	return res
}

// proveEnforcement waits until a negative control (client → valkey) is denied while a
// positive control (gateway-a → valkey) reaches, and records the proof.
func (t *kindTopo) proveEnforcement(ctx context.Context) {
	// The deadline bounds the waiting, not the probes: a probe cut short by it would report
	// the deadline instead of what the network did.
	start := time.Now()
	deadline := time.NewTimer(kindPolicyLiveWait)
	defer deadline.Stop()
	var neg, pos topology.ProbeResult
	for {
		pos = t.Probe(ctx, topology.HostGatewayA, topology.HostValkey, kindPorts.Valkey)
		neg = t.Probe(ctx, topology.HostClient, topology.HostValkey, kindPorts.Valkey)
		if pos.Supported && pos.Reached && neg.Supported && !neg.Reached && neg.Error != "" {
			t.mu.Lock()
			t.enforced = true
			t.proof = []string{
				fmt.Sprintf("positive control gateway-a → valkey:%d reached in %s", kindPorts.Valkey, pos.Elapsed.Round(time.Microsecond)),
				fmt.Sprintf("negative control client → valkey:%d denied (%s) %s after the rollout", kindPorts.Valkey, neg.Error, time.Since(start).Round(time.Millisecond)),
			}
			t.mu.Unlock()
			return
		}
		select {
		case <-ctx.Done():
		case <-deadline.C:
		case <-time.After(time.Second):
			continue
		}
		t.mu.Lock()
		t.enforced = false
		t.enforceWhy = fmt.Sprintf("NetworkPolicy is not enforced in this cluster: within %s the negative control client → valkey was %s and the positive control gateway-a → valkey was %s (does the CNI implement NetworkPolicy?)",
			topology.ElapsedSince(start).Round(time.Second), probeState(neg), probeState(pos))
		t.proof = []string{t.enforceWhy}
		t.mu.Unlock()
		return
	}
}

func probeState(p topology.ProbeResult) string {
	switch {
	case !p.Supported && p.Error != "":
		return "not observed (" + p.Error + ")"
	case !p.Supported:
		return "not supported"
	case p.Reached:
		return "reached"
	}
	return "not reached (" + p.Error + ")"
}

// gatewayReadyURL is gateway name's readiness URL, as its profile says.
func (t *kindTopo) gatewayReadyURL(name string) string {
	gw := t.Gateway(name)
	return topology.GatewayProfile(t.spec).ReadyURL(gw.DataURL, gw.AdminURL)
}

// RestartGateway is a rollout restart: a new pod with the same config, ready, the old one gone
// from the endpoints.
func (t *kindTopo) RestartGateway(ctx context.Context, name string) error {
	if !slices.Contains(t.Gateways(), name) {
		return topology.NoGatewayError(name, t.Gateways())
	}
	if t.cs == nil {
		return errors.New("the kind topology is not up: bring it up first")
	}
	return t.rollout(ctx, name, nil)
}

// rollout restarts gateway name's pods with the pod template's annotations set to annotations
// plus a new restartedAt (one revision), and waits until the new pod is ready and the old one
// is no longer serving.
func (t *kindTopo) rollout(ctx context.Context, name string, annotations map[string]string) error {
	t.saveLogs(ctx, name)
	ann := map[string]string{k8s.AnnotationRestartedAt: time.Now().UTC().Format(time.RFC3339Nano)}
	maps.Copy(ann, annotations)
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"template": map[string]any{"metadata": map[string]any{"annotations": ann}}}})
	if err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	if _, err := t.cs.AppsV1().Deployments(t.ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	if err := t.waitRollout(ctx, name, kindLeverTimeout); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	t.client.CloseIdleConnections()
	t.observer.CloseIdleConnections()
	if err := t.waitHTTP(ctx, t.gatewayReadyURL(name), kindLeverTimeout); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	return nil
}

// RestartGatewayWithPolicy restarts a gateway on the rule policy of p (nil: the run's own
// profile), one step of a rolling change of the quota policy: the gateway's ConfigMap gets the
// config rendered for p, then a rollout restart (RestartGateway) starts a pod that mounts it.
// The config's digest is an annotation of the pod template, so the Deployment's revision names
// the config it runs. The rendered config is kept beside the original as evidence.
func (t *kindTopo) RestartGatewayWithPolicy(ctx context.Context, name string, p *deployment.Profile) error {
	if !slices.Contains(t.Gateways(), name) {
		return topology.NoGatewayError(name, t.Gateways())
	}
	if t.cs == nil {
		return errors.New("the kind topology is not up: bring it up first")
	}
	prof := t.spec.PolicyProfile(p)
	t.mu.Lock()
	in := t.in
	t.mu.Unlock()
	kg, err := gatewayManifest(t.spec, name, gatewayAddresses(in), prof)
	if err != nil {
		return fmt.Errorf("rendering %s's config for policy %s: %w", name, prof.Name, err)
	}
	if p != nil {
		_ = os.WriteFile(filepath.Join(t.spec.WorkDir, "config", name+"-policy"+filepath.Ext(kg.ConfigFile)), kg.Config, 0o600)
	}
	cm, err := t.cs.CoreV1().ConfigMaps(t.ns).Get(ctx, name+"-config", metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("restarting %s on another policy: reading its ConfigMap: %w", name, err)
	}
	cm.Data = map[string]string{kg.ConfigFile: string(kg.Config)}
	if _, err := t.cs.CoreV1().ConfigMaps(t.ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("restarting %s on another policy: updating its ConfigMap: %w", name, err)
	}
	sum := sha256.Sum256(kg.Config)
	return t.rollout(ctx, name, map[string]string{annotationConfigDigest: hex.EncodeToString(sum[:8])})
}

// annotationConfigDigest, on a gateway's pod template, is the digest of the config its pods
// mount (set by RestartGatewayWithPolicy).
const annotationConfigDigest = "quotaqual.dev/config-digest"

// CrashGateway SIGKILLs the gateway's container through its kind node's containerd (`ctr -n
// k8s.io task kill -s SIGKILL`), and the kubelet starts it again in the same pod (restartPolicy
// Always), as after a real crash. Deleting the pod would not do: the kubelet sends SIGTERM
// first and waits at least its minimum grace, and the gateway's SIGTERM handler drains its
// in-flight requests — a shutdown, not a crash. The pod (its network namespace, where the
// port-forwards enter) stays, so no log is saved here: the pod's log keeps its previous
// container's. The kill is checked: the old container must have exited 137 (SIGKILL).
func (t *kindTopo) CrashGateway(ctx context.Context, name string) error {
	if !slices.Contains(t.Gateways(), name) {
		return topology.NoGatewayError(name, t.Gateways())
	}
	if t.cs == nil {
		return errors.New("the kind topology is not up: bring it up first")
	}
	if t.provider == nil {
		return fmt.Errorf("crashing %s: %w: the crash lever kills the container through its kind node's containerd (docker exec), and %s is not a kind cluster on this docker host: run on a kind cluster (the engine's own, or a kind-<name> context)",
			name, topology.ErrUnsupported, t.clusterNm)
	}
	start := time.Now()
	pod, err := t.readyPod(ctx, name)
	if err != nil {
		return fmt.Errorf("crashing %s: %w", name, err)
	}
	before, err := gatewayContainer(pod)
	if err != nil {
		return fmt.Errorf("crashing %s: %w", name, err)
	}
	id, ok := strings.CutPrefix(before.ContainerID, "containerd://")
	if !ok || id == "" {
		return fmt.Errorf("crashing %s: pod %s runs container %q, not a containerd one: the crash lever needs kind's containerd runtime", name, pod.Name, before.ContainerID)
	}
	node, err := t.kindNode(pod.Spec.NodeName)
	if err != nil {
		return fmt.Errorf("crashing %s: %w", name, err)
	}
	kctx, cancel := context.WithTimeout(ctx, kindExecTimeout)
	out, err := kindexec.CombinedOutputLines(node.CommandContext(kctx, "ctr", "-n", "k8s.io", "task", "kill", "-s", "SIGKILL", id))
	cancel()
	if err != nil {
		return fmt.Errorf("crashing %s: `ctr -n k8s.io task kill -s SIGKILL %s` in kind node %s: %w: %s (the node image must ship ctr, as kind's and hack/kind-node-image's do)",
			name, id, node.String(), err, strings.Join(out, "; "))
	}
	after, err := t.waitContainerRestarted(ctx, name, pod.Name, before, kindLeverTimeout)
	if err != nil {
		return fmt.Errorf("crashing %s: %w", name, err)
	}
	if term := after.LastTerminationState.Terminated; term == nil || term.ExitCode != 137 {
		return fmt.Errorf("crashing %s: container %s of pod %s ended %s, not by SIGKILL (exit 137): the kill did not crash it", name, id, pod.Name, describeTermination(term))
	}
	t.client.CloseIdleConnections()
	t.observer.CloseIdleConnections()
	if err := t.waitHTTP(ctx, t.gatewayReadyURL(name), kindLeverTimeout); err != nil {
		return fmt.Errorf("crashing %s: after the restart: %w", name, err)
	}
	crash := fmt.Sprintf("%s: pod %s container %.12s SIGKILLed in node %s: exit %d (%s), restart count %d → %d, serving again %s after the kill began",
		name, pod.Name, id, node.String(), after.LastTerminationState.Terminated.ExitCode, after.LastTerminationState.Terminated.Reason,
		before.RestartCount, after.RestartCount, topology.ElapsedSince(start))
	// Into the gateway's log (ahead of its pods' own), as the evidence of how it ended: the
	// topology facts are taken before the scenarios run.
	t.mu.Lock()
	if t.logs[name] == nil {
		t.logs[name] = &bytes.Buffer{}
	}
	fmt.Fprintf(t.logs[name], "=== crash lever: %s ===\n", crash)
	t.mu.Unlock()
	t.spec.Progress("kind: %s", crash)
	return nil
}

// gatewayContainer is the status of pod's (first and only) container.
func gatewayContainer(pod *corev1.Pod) (corev1.ContainerStatus, error) {
	if len(pod.Spec.Containers) == 0 {
		return corev1.ContainerStatus{}, fmt.Errorf("pod %s has no container", pod.Name)
	}
	want := pod.Spec.Containers[0].Name
	for _, cs := range pod.Status.ContainerStatuses {
		if cs.Name == want {
			return cs, nil
		}
	}
	return corev1.ContainerStatus{}, fmt.Errorf("pod %s reports no status for its container %s yet", pod.Name, want)
}

// kindNode is the node of the run's kind cluster named name (a kind node's Kubernetes name is
// its docker container's).
func (t *kindTopo) kindNode(name string) (nodes.Node, error) {
	all, err := t.provider.ListNodes(t.clusterNm)
	if err != nil {
		return nil, fmt.Errorf("listing the nodes of kind cluster %s: %w", t.clusterNm, err)
	}
	var names []string
	for _, n := range all {
		if n.String() == name {
			return n, nil
		}
		names = append(names, n.String())
	}
	return nil, fmt.Errorf("node %s is not a node of kind cluster %s (its nodes: %s)", name, t.clusterNm, strings.Join(names, ", "))
}

// waitContainerRestarted waits until pod podName's container has restarted (a new container
// ID, a higher restart count) and the pod is ready again, and returns the container's status.
func (t *kindTopo) waitContainerRestarted(ctx context.Context, host, podName string, before corev1.ContainerStatus, within time.Duration) (corev1.ContainerStatus, error) {
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	last := "not read yet"
	for {
		p, err := t.cs.CoreV1().Pods(t.ns).Get(ctx, podName, metav1.GetOptions{})
		if err == nil {
			cs, cerr := gatewayContainer(p)
			switch {
			case cerr != nil:
				last = cerr.Error()
			case cs.RestartCount > before.RestartCount && cs.ContainerID != before.ContainerID && podReady(p):
				return cs, nil
			default:
				last = fmt.Sprintf("restart count %d (was %d), ready %v", cs.RestartCount, before.RestartCount, podReady(p))
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return corev1.ContainerStatus{}, fmt.Errorf("pod %s's container was not restarted and ready within %s after the SIGKILL (%s)%s", podName, within, last, t.podTrouble(context.WithoutCancel(ctx), host))
		case <-time.After(kindPoll):
		}
	}
}

func describeTermination(term *corev1.ContainerStateTerminated) string {
	if term == nil {
		return "with no termination recorded"
	}
	return fmt.Sprintf("with exit %d (%s, signal %d)", term.ExitCode, term.Reason, term.Signal)
}

func (t *kindTopo) scaleValkey(ctx context.Context, n int) error {
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, n)
	_, err := t.cs.AppsV1().Deployments(t.ns).Patch(ctx, topology.HostValkey, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

// StopValkey scales Valkey to 0 and waits until its pod is gone.
func (t *kindTopo) StopValkey(ctx context.Context) error {
	if t.cs == nil {
		return errors.New("valkey is not running: bring the topology up first")
	}
	t.saveLogs(ctx, topology.HostValkey)
	if err := t.scaleValkey(ctx, 0); err != nil {
		return fmt.Errorf("stopping valkey (scale to 0): %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, kindLeverTimeout)
	defer cancel()
	for {
		pods, err := t.pods(ctx, topology.HostValkey)
		if err == nil && len(pods) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("stopping valkey: its pod was not gone within %s", kindLeverTimeout)
		case <-time.After(kindPoll):
		}
	}
}

// StartValkey scales Valkey to 1 and waits until it is ready (its AOF on the PVC reloaded).
func (t *kindTopo) StartValkey(ctx context.Context) error {
	if t.cs == nil {
		return errors.New("valkey was never started: bring the topology up first")
	}
	if err := t.scaleValkey(ctx, 1); err != nil {
		return fmt.Errorf("starting valkey (scale to 1): %w", err)
	}
	if err := t.waitRollout(ctx, topology.HostValkey, kindLeverTimeout); err != nil {
		return fmt.Errorf("starting valkey: %w", err)
	}
	return nil
}

// partitionedPolicy is p without the allowances between the pairs in cuts (both directions).
func partitionedPolicy(p topology.Policy, cuts map[[2]string]bool) topology.Policy {
	var out topology.Policy
	for _, r := range p.Rules {
		r.From = slices.DeleteFunc(slices.Clone(r.From), func(f string) bool {
			return cuts[pairKey(f, r.Host)]
		})
		if len(r.From) > 0 {
			out.Rules = append(out.Rules, r)
		}
	}
	return out
}

func pairKey(a, b string) [2]string {
	if a > b {
		a, b = b, a
	}
	return [2]string{a, b}
}

func (t *kindTopo) Partition(ctx context.Context, host, peer string) error {
	return t.setPartition(ctx, host, peer, true)
}

func (t *kindTopo) Heal(ctx context.Context, host, peer string) error {
	return t.setPartition(ctx, host, peer, false)
}

func (t *kindTopo) setPartition(ctx context.Context, host, peer string, on bool) error {
	for _, h := range []string{host, peer} {
		if !slices.Contains(t.hosts(), h) {
			return fmt.Errorf("unknown host %q: use one of %s", h, strings.Join(t.hosts(), ", "))
		}
	}
	if host == peer {
		return fmt.Errorf("partition %s from itself: name two different hosts", host)
	}
	if t.cs == nil {
		return errors.New("the kind topology is not up: bring it up first")
	}
	if t.nodeCuts() {
		// Cut (and heal) on the side the partition named first, recorded for the heal.
		t.mu.Lock()
		side, ok := t.nodeCutSide[pairKey(host, peer)]
		if on || !ok {
			side = [2]string{host, peer}
		}
		if on {
			t.nodeCutSide[pairKey(host, peer)] = side
		} else {
			delete(t.nodeCutSide, pairKey(host, peer))
		}
		t.mu.Unlock()
		if err := t.nodeCut(ctx, side[0], side[1], on); err != nil {
			return fmt.Errorf("partition %s/%s: %w", host, peer, err)
		}
	} else {
		t.mu.Lock()
		if on {
			t.cuts[pairKey(host, peer)] = true
		} else {
			delete(t.cuts, pairKey(host, peer))
		}
		pol := partitionedPolicy(t.base, t.cuts)
		in := t.in
		t.mu.Unlock()
		in.Rules = nil
		for _, r := range pol.Rules {
			in.Rules = append(in.Rules, k8s.Rule{Name: r.Name, Host: r.Host, Port: r.Port, From: r.From})
		}
		if err := t.syncPolicies(ctx, in.NetworkPolicies()); err != nil {
			return fmt.Errorf("partition %s/%s: %w", host, peer, err)
		}
	}
	// Trust it only once a probe shows it: from each side that can probe, to each port the
	// base policy allowed it on.
	want := !on
	ctx, cancel := context.WithTimeout(ctx, kindPolicyLiveWait)
	defer cancel()
	for _, pr := range [][2]string{{host, peer}, {peer, host}} {
		from, to := pr[0], pr[1]
		if from == topology.HostValkey {
			continue
		}
		for _, r := range t.base.RulesFor(to) {
			if !slices.Contains(r.From, from) {
				continue
			}
			for {
				res := t.Probe(ctx, from, to, r.Port)
				if res.Supported && res.Reached == want && (want || res.Error != "") {
					break
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("partition %s/%s: the probe %s → %s:%d still %s after %s: the NetworkPolicy change is not live",
						host, peer, from, to, r.Port, probeState(res), kindPolicyLiveWait)
				case <-time.After(500 * time.Millisecond):
				}
			}
		}
	}
	return nil
}

// syncPolicies makes the namespace's allow policies exactly want (default-deny stays).
func (t *kindTopo) syncPolicies(ctx context.Context, want []*networkingv1.NetworkPolicy) error {
	api := t.cs.NetworkingV1().NetworkPolicies(t.ns)
	have, err := api.List(ctx, metav1.ListOptions{LabelSelector: k8s.LabelRunID + "=" + t.spec.RunID})
	if err != nil {
		return err
	}
	wanted := map[string]*networkingv1.NetworkPolicy{}
	for _, np := range want {
		wanted[np.Name] = np
	}
	for i := range have.Items {
		cur := &have.Items[i]
		np, ok := wanted[cur.Name]
		if !ok {
			if err := api.Delete(ctx, cur.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			continue
		}
		np.ResourceVersion = cur.ResourceVersion
		if _, err := api.Update(ctx, np, metav1.UpdateOptions{}); err != nil {
			return err
		}
		delete(wanted, cur.Name)
	}
	for _, np := range wanted {
		if _, err := api.Create(ctx, np, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// podLog returns a pod's log (and its previous container's, when it restarted).
func (t *kindTopo) podLog(ctx context.Context, p *corev1.Pod) []byte {
	var out bytes.Buffer
	restarted := false
	for _, cs := range p.Status.ContainerStatuses {
		restarted = restarted || cs.RestartCount > 0
	}
	get := func(previous bool) {
		b, err := t.cs.CoreV1().Pods(t.ns).GetLogs(p.Name, &corev1.PodLogOptions{Previous: previous}).DoRaw(ctx)
		if err == nil {
			fmt.Fprintf(&out, "=== pod %s%s ===\n", p.Name, map[bool]string{true: " (previous container)"}[previous])
			out.Write(b)
		}
	}
	if restarted {
		get(true)
	}
	get(false)
	return out.Bytes()
}

// saveLogs keeps the logs of host's current pods, which a restart or scale-down removes.
func (t *kindTopo) saveLogs(ctx context.Context, host string) {
	pods, err := t.pods(ctx, host)
	if err != nil {
		return
	}
	for i := range pods {
		b := t.podLog(ctx, &pods[i])
		t.mu.Lock()
		if !t.saved[pods[i].Name] {
			t.saved[pods[i].Name] = true
			if t.logs[host] == nil {
				t.logs[host] = &bytes.Buffer{}
			}
			t.logs[host].Write(b)
		}
		t.mu.Unlock()
	}
}

// logsNow returns host's saved logs followed by its live pods' logs.
func (t *kindTopo) logsNow(ctx context.Context, host string) []byte {
	var out bytes.Buffer
	t.mu.Lock()
	if b := t.logs[host]; b != nil {
		out.Write(b.Bytes())
	}
	t.mu.Unlock()
	if t.cs == nil || t.logsAreFinal() {
		return out.Bytes()
	}
	pods, err := t.pods(ctx, host)
	if err != nil {
		return out.Bytes()
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].CreationTimestamp.Before(&pods[j].CreationTimestamp) })
	for i := range pods {
		t.mu.Lock()
		seen := t.saved[pods[i].Name]
		t.mu.Unlock()
		if !seen {
			out.Write(t.podLog(ctx, &pods[i]))
		}
	}
	return out.Bytes()
}

func (t *kindTopo) logsAreFinal() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.logsFinal
}

// CollectLogs writes <host>.log for every component host (pod logs; those of pods a lever
// removed were saved before they went, and Down saves the rest before deleting anything).
func (t *kindTopo) CollectLogs(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	for _, h := range t.hosts() {
		b := t.logsNow(ctx, h)
		if len(b) == 0 {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, h+".log"), b, 0o600); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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
	gws := map[string]any{}
	for _, g := range t.Gateways() {
		e := t.Gateway(g)
		gws[g] = map[string]string{"data_url": e.DataURL, "admin_url": e.AdminURL}
	}
	prs := map[string]any{}
	for _, p := range topology.Providers {
		e := t.Provider(p)
		prs[p] = map[string]string{"site": e.Site, "data_url": e.DataURL, "admin_url": e.AdminURL}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var rules []string
	for _, r := range partitionedPolicy(t.base, t.cuts).Rules {
		rules = append(rules, fmt.Sprintf("allow-%s: %s:%d from %s", r.Name, r.Host, r.Port, strings.Join(r.From, ",")))
	}
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
		"ports": map[string]int{
			"gateway_data": kindPorts.GatewayData, "gateway_admin": kindPorts.GatewayAdmin,
			"provider_data": kindPorts.ProviderData, "provider_admin": kindPorts.ProviderAdmin,
			"valkey": kindPorts.Valkey,
		},
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
	if _, err := dockerengine.Ping(ctx); err != nil {
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
