package topology

import (
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/undertest"
)

func clusterSpec(t *testing.T) Spec {
	t.Helper()
	p, err := deployment.ProfileByName("quick")
	if err != nil {
		t.Fatal(err)
	}
	d, err := deployment.NewDeployment("q-store-test", p, deployment.Named("shared-budget"))
	if err != nil {
		t.Fatal(err)
	}
	return Spec{RunID: "q-store-test", WorkDir: t.TempDir(), Binary: "/bin/true", Deployment: d, Store: StoreCluster}
}

// A Spec's store is single by default; an unknown shape, a gateway profile that cannot take a
// cluster, and the memory backend on a cluster are refused with the fix.
func TestSpecValidatesTheStore(t *testing.T) {
	s := clusterSpec(t)
	s.Store = ""
	if err := s.validate(); err != nil || s.Store != StoreSingle {
		t.Fatalf("default store: %q, %v; want %q", s.Store, err, StoreSingle)
	}
	s = clusterSpec(t)
	if err := s.validate(); err != nil {
		t.Fatalf("a cluster for quotaqual's own gateway: %v", err)
	}
	alt, err := undertest.Shipped("altgateway")
	if err != nil {
		t.Fatal(err)
	}
	memory := clusterSpec(t)
	memory.Deployment.Backend = deployment.BackendMemory
	for name, c := range map[string]struct {
		spec Spec
		want string
	}{
		"unknown": {func() Spec { s := clusterSpec(t); s.Store = "ring"; return s }(), `"ring" is unknown`},
		"profile": {func() Spec { s := clusterSpec(t); s.Gateway = alt; return s }(), "capabilities.store_cluster"},
		"memory":  {memory, "memory backend"},
	} {
		if err := c.spec.validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", name, err, c.want)
		}
	}
}

// CheckStore refuses a cluster on an engine without one, giving its reason and the engines
// that have one; it lets the single store through everywhere.
func TestCheckStoreNamesTheReasonAndTheEngines(t *testing.T) {
	none := func(Spec) (Topology, error) { return nil, ErrUnsupported }
	Register("test-nocluster", Engine{New: none, NoCluster: "it has no room"})
	Register("test-cluster", Engine{New: none, Cluster: true})
	t.Cleanup(func() {
		enginesMu.Lock()
		delete(engines, "test-nocluster")
		delete(engines, "test-cluster")
		enginesMu.Unlock()
	})
	err := CheckStore("test-nocluster", StoreCluster)
	if err == nil || !strings.Contains(err.Error(), "it has no room") || !strings.Contains(err.Error(), "--topology test-cluster") {
		t.Errorf("CheckStore: %v; want the reason and --topology test-cluster", err)
	}
	if err := CheckStore("test-nocluster", StoreSingle); err != nil {
		t.Errorf("single store refused: %v", err)
	}
	if err := CheckStore("test-cluster", StoreCluster); err != nil {
		t.Errorf("cluster refused on an engine with one: %v", err)
	}
}

// Owner reads the nodes' slot ranges, single slots included.
func TestClusterViewOwner(t *testing.T) {
	v := ClusterView{Nodes: []ClusterNodeView{{Name: "a", Slots: []string{"0-99", "200"}}, {Name: "b", Slots: []string{"100-199"}}}}
	for slot, want := range map[int]string{0: "a", 99: "a", 100: "b", 199: "b", 200: "a", 201: ""} {
		if got := v.Owner(slot); got != want {
			t.Errorf("Owner(%d) = %q, want %q", slot, got, want)
		}
	}
}
