package kindengine

// Offline tests of the kind engine (no cluster). The live test is in topology/kinde2e: this
// package's tests run inside the netns engine's namespaces, where neither the Docker engine nor
// a kind API server can be reached.

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/images"
	"github.com/quotaqual/quotaqual/topology/k8s"
	"github.com/quotaqual/quotaqual/undertest"
)

func kindSpec(t *testing.T) topology.Spec {
	t.Helper()
	p, _ := deployment.ProfileByName("quick")
	d, err := deployment.NewDeployment("kindunit", p, deployment.Named("valid-auth"))
	if err != nil {
		t.Fatal(err)
	}
	return topology.Spec{RunID: "kindunit", WorkDir: t.TempDir(), Binary: "/bin/true", Deployment: d}
}

func TestKindEngineBeforeUp(t *testing.T) {
	topo, err := topology.New(topology.EngineKind, kindSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	if topo.Engine() != topology.EngineKind {
		t.Fatalf("engine %q", topo.Engine())
	}
	if got, want := topo.Gateway(topology.HostGatewayA).DataURL, "http://gateway-a.quotaqual-kindunit.svc.cluster.local:8080"; got != want {
		t.Errorf("gateway-a data URL %q, want %q", got, want)
	}
	if got := topo.Provider(topology.HostProviderEast); got.Site != "east" || !strings.HasSuffix(got.AdminURL, ".svc.cluster.local:9000") {
		t.Errorf("provider-east endpoint %+v", got)
	}
	if got := topo.ValkeyAddr(); got != "valkey.quotaqual-kindunit.svc.cluster.local:6379" {
		t.Errorf("valkey addr %q", got)
	}
	if c := topo.Capabilities(); !c.NetworkPolicy || !c.Partition {
		t.Errorf("capabilities before Up: %+v", c)
	}
	// Levers before Up fail with a reason instead of panicking.
	ctx := context.Background()
	if err := topo.RestartGateway(ctx, topology.HostGatewayA); err == nil {
		t.Error("RestartGateway before Up succeeded")
	}
	if err := topo.StopValkey(ctx); err == nil {
		t.Error("StopValkey before Up succeeded")
	}
	// kind has the crash lever (a SIGKILL through the node's containerd): before Up it fails
	// for want of a cluster, not as unsupported.
	if err := topo.CrashGateway(ctx, topology.HostGatewayA); err == nil || errors.Is(err, topology.ErrUnsupported) || !strings.Contains(err.Error(), "not up") {
		t.Errorf("CrashGateway before Up: %v, want the topology-not-up error", err)
	}
	if err := topo.CrashGateway(ctx, "gateway-zz"); err == nil || errors.Is(err, topology.ErrUnsupported) {
		t.Errorf("CrashGateway of an unknown gateway: %v, want an error naming the gateways", err)
	}
	if err := topo.Partition(ctx, topology.HostGatewayA, "nowhere"); err == nil || !strings.Contains(err.Error(), "unknown host") {
		t.Errorf("Partition with an unknown host: %v", err)
	}
	if r := topo.Probe(ctx, topology.HostValkey, topology.HostGatewayA, 8080); r.Supported {
		t.Error("probes from valkey must be unsupported (its image has no quotaqual binary)")
	}
	if r := topo.Probe(ctx, topology.HostClient, topology.HostValkey, 6379); r.Reached || r.Error == "" {
		t.Errorf("probe before Up: %+v", r)
	}
	if _, err := topo.Observer().Get("http://example.org:80/"); err == nil || !strings.Contains(err.Error(), "not a Service of namespace") {
		t.Errorf("the observer must dial only the run's Services: %v", err)
	}
	if td, err := topo.Down(ctx); err != nil || len(td.Removed) != 0 {
		t.Errorf("Down before Up: %+v, %v", td, err)
	}
	if err := topo.CollectLogs(t.TempDir()); err != nil {
		t.Errorf("CollectLogs after Down: %v", err)
	}
	if f := topo.Facts(); f["namespace"] != "quotaqual-kindunit" || f["engine"] != topology.EngineKind {
		t.Errorf("facts %v", f)
	}
}

func TestKindClusterConfigIsStrictV1Alpha4(t *testing.T) {
	raw, err := kindClusterConfig("qq-r1")
	if err != nil {
		t.Fatal(err)
	}
	var c kindv1alpha4.Cluster
	if err := yaml.UnmarshalStrict(raw, &c); err != nil {
		t.Fatalf("%v\n%s", err, raw)
	}
	if c.Kind != "Cluster" || c.APIVersion != "kind.x-k8s.io/v1alpha4" || c.Name != "qq-r1" ||
		len(c.Nodes) != 1 || c.Nodes[0].Role != kindv1alpha4.ControlPlaneRole {
		t.Errorf("kind config:\n%s", raw)
	}
	if c.Networking.DisableDefaultCNI {
		t.Error("the default CNI (kindnet, which enforces NetworkPolicy) must stay on")
	}
}

func TestKindNodeImageOption(t *testing.T) {
	s := kindSpec(t)
	t.Setenv(EnvNodeImage, "kindest/node:v9.9.9")
	k, _ := newKind(s)
	if k.nodeImage != "kindest/node:v9.9.9" || k.opts.ClusterName != "qq-kindunit" {
		t.Errorf("node image %q, cluster %q", k.nodeImage, k.opts.ClusterName)
	}
	s.Kind.NodeImage = "mine:1"
	k, _ = newKind(s)
	if k.nodeImage != "mine:1" {
		t.Errorf("node image %q, want the option's", k.nodeImage)
	}
	t.Setenv(EnvNodeImage, "")
	k, _ = newKind(kindSpec(t))
	if k.nodeImage != DefaultNodeImage {
		t.Errorf("node image %q, want kind's default", k.nodeImage)
	}
}

// The API side of the engine against client-go's fake clientset (no cluster: no pods run, so
// rollouts, exec and port-forwards are not exercised here): apply creates every rendered object
// in the run's namespace, a partition rewrites exactly the affected NetworkPolicy, healing
// restores it, a rollout counts as done only with a ready pod, and Down deletes only the
// namespace of an existing cluster.
func TestKindAPISideWithFakeClientset(t *testing.T) {
	ctx := context.Background()
	k, _ := newKind(kindSpec(t))
	cs := fake.NewClientset()
	k.cs, k.qqImg, k.valkeyImg = cs, "quotaqual:test", images.DefaultValkeyImage
	k.clusterNm = "context fake"
	if err := k.render(); err != nil {
		t.Fatal(err)
	}
	if err := k.apply(ctx); err != nil {
		t.Fatal(err)
	}
	if err := k.apply(ctx); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("a second apply must refuse the existing namespace: %v", err)
	}
	deps, _ := cs.AppsV1().Deployments(k.ns).List(ctx, metav1.ListOptions{})
	nps, _ := cs.NetworkingV1().NetworkPolicies(k.ns).List(ctx, metav1.ListOptions{})
	if len(deps.Items) != 8 || len(nps.Items) != 1+len(k.base.Rules) {
		t.Fatalf("%d deployments, %d network policies", len(deps.Items), len(nps.Items))
	}

	from := func() []string {
		np, err := cs.NetworkingV1().NetworkPolicies(k.ns).Get(ctx, "allow-valkey-from-gateways", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var hosts []string
		for _, p := range np.Spec.Ingress[0].From {
			hosts = append(hosts, p.PodSelector.MatchLabels[k8s.LabelHost])
		}
		return hosts
	}
	cut := map[[2]string]bool{topology.PairKey(topology.HostValkey, topology.HostGatewayA): true}
	in := k.in
	in.Rules = nil
	for _, r := range partitionedPolicy(k.base, cut).Rules {
		in.Rules = append(in.Rules, k8s.Rule{Name: r.Name, Host: r.Host, Port: r.Port, From: r.From})
	}
	if err := k.syncPolicies(ctx, in.NetworkPolicies()); err != nil {
		t.Fatal(err)
	}
	if got := from(); !slices.Equal(got, []string{topology.HostGatewayB}) {
		t.Errorf("partitioned: valkey accepts %v, want only gateway-b", got)
	}
	if err := k.syncPolicies(ctx, k.in.NetworkPolicies()); err != nil {
		t.Fatal(err)
	}
	if got := from(); !slices.Equal(got, []string{topology.HostGatewayA, topology.HostGatewayB}) {
		t.Errorf("healed: valkey accepts %v", got)
	}
	// Cutting gateway-a from the client and the observer leaves its data rule without a
	// source: that policy goes (an allow rule with an empty from would allow everyone).
	cut = map[[2]string]bool{topology.PairKey(topology.HostClient, topology.HostGatewayA): true, topology.PairKey(topology.HostObserver, topology.HostGatewayA): true}
	in.Rules = nil
	for _, r := range partitionedPolicy(k.base, cut).Rules {
		in.Rules = append(in.Rules, k8s.Rule{Name: r.Name, Host: r.Host, Port: r.Port, From: r.From})
	}
	if err := k.syncPolicies(ctx, in.NetworkPolicies()); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.NetworkingV1().NetworkPolicies(k.ns).Get(ctx, "allow-gateway-a-data-from-client", metav1.GetOptions{}); err == nil {
		t.Error("a rule left with no source must be deleted, not kept empty (an empty from allows everyone)")
	}
	if _, err := cs.NetworkingV1().NetworkPolicies(k.ns).Get(ctx, k8s.PolicyDefaultDeny, metav1.GetOptions{}); err != nil {
		t.Errorf("default deny must stay: %v", err)
	}

	// A rollout is done only when the status says so and a ready pod exists.
	dep, _ := cs.AppsV1().Deployments(k.ns).Get(ctx, topology.HostValkey, metav1.GetOptions{})
	dep.Status = appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	if _, err := cs.AppsV1().Deployments(k.ns).UpdateStatus(ctx, dep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.waitRollout(ctx, topology.HostValkey, 300*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no pod exists") {
		t.Errorf("rollout without a pod: %v", err)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "valkey-1", Namespace: k.ns, Labels: map[string]string{k8s.LabelHost: topology.HostValkey}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}}
	if _, err := cs.CoreV1().Pods(k.ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := k.waitRollout(ctx, topology.HostValkey, 2*time.Second); err != nil {
		t.Errorf("rollout with a ready pod: %v", err)
	}
	if p, err := k.readyPod(ctx, topology.HostValkey); err != nil || p.Name != "valkey-1" {
		t.Errorf("ready pod: %v, %v", p, err)
	}

	k.nsCreated = true
	td, err := k.Down(ctx)
	if err != nil || !slices.Equal(td.Removed, []string{"namespace quotaqual-kindunit on context fake"}) {
		t.Errorf("Down on an existing cluster: %+v, %v", td, err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, k.ns, metav1.GetOptions{}); err == nil {
		t.Error("the run's namespace is still there")
	}
}

// The image `make kind-node-image` tags must be the one the engine looks for.
func TestLocalKindNodeImageIsWhatTheBuildTags(t *testing.T) {
	b, err := os.ReadFile("../../hack/kind-node-image/versions.env")
	if err != nil {
		t.Fatal(err)
	}
	want := "NODE_IMAGE=${NODE_IMAGE:-" + LocalNodeImage + "}"
	if !strings.Contains(string(b), want) {
		t.Errorf("hack/kind-node-image/versions.env does not tag %s (want a line %q)", LocalNodeImage, want)
	}
}

// A probe the harness could not run (here: no ready pod to exec in; live it was the proof's
// own deadline cutting the pod listing short) observed nothing: it must not read as a denied
// connection, or the enforcement proof, a partition's trust check and the network-policy
// scenario would count a denial nobody saw.
func TestKindProbeThatDidNotRunIsNotADenial(t *testing.T) {
	ctx := context.Background()
	k, _ := newKind(kindSpec(t))
	k.cs = fake.NewClientset()
	res := k.Probe(ctx, topology.HostClient, topology.HostValkey, kindPorts.Valkey)
	if res.Supported && !res.Reached {
		t.Errorf("a probe with no pod to run in reads as denied: %+v", res)
	}
	if !strings.Contains(res.Error, "no ready pod of client") {
		t.Errorf("the probe's error does not say why it did not run: %q", res.Error)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if res := k.Probe(cctx, topology.HostGatewayA, topology.HostValkey, kindPorts.Valkey); res.Supported && !res.Reached {
		t.Errorf("a probe cut short by its context reads as denied: %+v", res)
	}
}

// A gateway profile whose image is not in the local Docker engine stops Up before any cluster,
// image build or namespace: the error names the image and how to provide it, and Down has
// nothing to remove. (No node image is needed: the check comes first.)
func TestKindUpWithoutTheGatewayImageStopsFirst(t *testing.T) {
	spec := kindSpec(t)
	gw, err := undertest.Shipped("praxis")
	if err != nil {
		t.Fatal(err)
	}
	spec.Gateway = gw
	if images.Exists(context.Background(), gw.Launch.Image) {
		t.Skipf("%s is present locally: the profile would run", gw.Launch.Image)
	}
	topo, err := topology.New(topology.EngineKind, spec)
	if err != nil {
		t.Fatalf("New refuses a foreign profile: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = topo.Up(ctx)
	if err == nil || !strings.Contains(err.Error(), gw.Launch.Image) || !strings.Contains(err.Error(), "docker load") || !strings.Contains(err.Error(), "--gateway-image") {
		t.Fatalf("Up without the gateway image: %v", err)
	}
	if td, err := topo.Down(ctx); err != nil || len(td.Removed) != 0 {
		t.Errorf("Down after the failed Up: %+v, %v", td, err)
	}
}
