package undertest_test

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/ledger"
	"github.com/quotaqual/quotaqual/undertest"
)

// The default profile puts a gateway on a Valkey Cluster when the run gives one: the config
// names every node under quota.backend.cluster, the password by its variable, and no url —
// and the ledger's own config reader accepts it.
func TestDefaultRendersTheCluster(t *testing.T) {
	a := testAddrs()
	a.Cluster = []string{"10.0.0.31:6379", "10.0.0.31:6380", "10.0.0.31:6381"}
	p, _ := deployment.ProfileByName("quick")
	y, err := undertest.Default().RenderFor(testDeployment(t, deployment.BackendValkey), "gateway-a", a, p)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Quota struct {
			Backend ledger.BackendConfig `yaml:"backend"`
		} `yaml:"quota"`
	}
	if err := yaml.Unmarshal(y, &cfg); err != nil {
		t.Fatalf("rendered config does not parse: %v\n%s", err, y)
	}
	b := cfg.Quota.Backend
	if b.Cluster == nil || strings.Join(b.Cluster.Addresses, ",") != strings.Join(a.Cluster, ",") || b.Cluster.PasswordEnv != deployment.ValkeyPasswordEnv || b.URL != "" || b.Sentinel != nil {
		t.Fatalf("backend %+v (cluster %+v): want the three nodes and %s, no url, no sentinel\n%s", b, b.Cluster, deployment.ValkeyPasswordEnv, y)
	}
}

// Bad cluster addresses, and a gateway asked to use both the store group and the cluster,
// are refused naming the field.
func TestFactsRefuseABadCluster(t *testing.T) {
	p, _ := deployment.ProfileByName("quick")
	d := testDeployment(t, deployment.BackendValkey)
	bad := testAddrs()
	bad.Cluster = []string{"10.0.0.31"}
	if _, err := undertest.FactsFor(d, "gateway-a", bad, p); err == nil || !strings.Contains(err.Error(), "cluster node address") {
		t.Errorf("a node without a port: %v, want an error naming the cluster node address", err)
	}
	both := testAddrs()
	both.Cluster = []string{"10.0.0.31:6379"}
	both.Store = &deployment.StoreAddrs{MasterName: "qq", Sentinels: []string{"10.0.0.7:26379"}}
	if _, err := undertest.FactsFor(d, "gateway-a", both, p); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("group and cluster: %v, want refused", err)
	}
	if _, err := undertest.FactsFor(testDeployment(t, deployment.BackendMemory), "gateway-a", both, p); err == nil {
		t.Error("the memory backend on a cluster was accepted")
	}
}
