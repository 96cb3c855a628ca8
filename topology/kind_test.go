package topology

// Offline tests of the kind engine (no cluster). The live test is in topology/kinde2e: this
// package's tests run inside the netns engine's namespaces, where neither the Docker engine nor
// a kind API server can be reached.

import (
	"context"
	"strings"
	"testing"

	kindv1alpha4 "sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"github.com/quotaqual/quotaqual/fixtures"
)

func kindSpec(t *testing.T) Spec {
	t.Helper()
	p, _ := fixtures.ProfileByName("quick")
	d, err := fixtures.NewDeployment("kindunit", p, []string{"valid-auth"})
	if err != nil {
		t.Fatal(err)
	}
	return Spec{RunID: "kindunit", WorkDir: t.TempDir(), Binary: "/bin/true", Deployment: d}
}

func TestKindEngineBeforeUp(t *testing.T) {
	topo, err := New(EngineKind, kindSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	if topo.Engine() != EngineKind {
		t.Fatalf("engine %q", topo.Engine())
	}
	if got, want := topo.Gateway(HostGatewayA).DataURL, "http://gateway-a.quotaqual-kindunit.svc.cluster.local:8080"; got != want {
		t.Errorf("gateway-a data URL %q, want %q", got, want)
	}
	if got := topo.Provider(HostProviderEast); got.Site != "east" || !strings.HasSuffix(got.AdminURL, ".svc.cluster.local:9000") {
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
	if err := topo.RestartGateway(ctx, HostGatewayA); err == nil {
		t.Error("RestartGateway before Up succeeded")
	}
	if err := topo.StopValkey(ctx); err == nil {
		t.Error("StopValkey before Up succeeded")
	}
	if err := topo.Partition(ctx, HostGatewayA, "nowhere"); err == nil || !strings.Contains(err.Error(), "unknown host") {
		t.Errorf("Partition with an unknown host: %v", err)
	}
	if r := topo.Probe(ctx, HostValkey, HostGatewayA, 8080); r.Supported {
		t.Error("probes from valkey must be unsupported (its image has no quotaqual binary)")
	}
	if r := topo.Probe(ctx, HostClient, HostValkey, 6379); r.Reached || r.Error == "" {
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
	if f := topo.Facts(); f["namespace"] != "quotaqual-kindunit" || f["engine"] != EngineKind {
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
	t.Setenv(EnvKindNodeImage, "kindest/node:v9.9.9")
	k, _ := newKind(s)
	if k.nodeImage != "kindest/node:v9.9.9" || k.opts.ClusterName != "qq-kindunit" {
		t.Errorf("node image %q, cluster %q", k.nodeImage, k.opts.ClusterName)
	}
	s.Kind.NodeImage = "mine:1"
	k, _ = newKind(s)
	if k.nodeImage != "mine:1" {
		t.Errorf("node image %q, want the option's", k.nodeImage)
	}
	t.Setenv(EnvKindNodeImage, "")
	k, _ = newKind(kindSpec(t))
	if k.nodeImage != DefaultKindNodeImage {
		t.Errorf("node image %q, want kind's default", k.nodeImage)
	}
}
