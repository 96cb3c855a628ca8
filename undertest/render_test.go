package undertest_test

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/scenarios"
	"github.com/quotaqual/quotaqual/undertest"
)

func testDeployment(t *testing.T, backend string) *deployment.Deployment {
	t.Helper()
	p, err := deployment.ProfileByName("quick")
	if err != nil {
		t.Fatal(err)
	}
	list, err := scenarios.Select([]string{"shared-budget", "usage-accounting", "hard-gate", "layered-budgets", "model-budgets", "long-generation", "valkey-failover"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := scenarios.NewDeployment("q-seam-test", p, list)
	if err != nil {
		t.Fatal(err)
	}
	d.Backend = backend
	return d
}

func testAddrs() deployment.Addresses {
	return deployment.Addresses{DataListen: ":8080", AdminListen: "127.0.0.1:9090", ValkeyAddr: "10.0.0.5:6379",
		Providers: []deployment.ProviderAddr{{Site: "west", URL: "http://10.0.0.2:8000"}, {Site: "east", URL: "http://10.0.0.3:8000"}}}
}

var update = flag.Bool("update", false, "rewrite the golden configs in testdata")

// TestDefaultRendersTodaysConfig pins the default profile to the config the qualification
// rendered before the seam existed (testdata/, written by deployment's renderer, which the
// default profile replaced byte for byte; since, the scenarios' own rules come in the
// catalogue's order, as the scenarios declare them): the same bytes for the shared store, the
// replicated store group in both modes, the memory backend and a policy change.
func TestDefaultRendersTodaysConfig(t *testing.T) {
	def := undertest.Default()
	group := testAddrs()
	group.Store = &deployment.StoreAddrs{MasterName: "qq", Sentinels: []string{"10.0.0.7:26379", "10.0.0.8:26379"}}
	async := testAddrs()
	async.Store = &deployment.StoreAddrs{MasterName: "qq", Sentinels: []string{"10.0.0.7:26379"}, Replication: deployment.ReplicationAsync}
	ref, _ := deployment.ProfileByName("reference")
	cases := []struct {
		name    string
		backend string
		a       deployment.Addresses
		p       *deployment.Profile
	}{
		{"valkey", deployment.BackendValkey, testAddrs(), nil},
		{"store group acknowledged", deployment.BackendValkey, group, nil},
		{"store group async", deployment.BackendValkey, async, nil},
		{"memory", deployment.BackendMemory, testAddrs(), nil},
		{"policy change", deployment.BackendValkey, testAddrs(), &ref},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := testDeployment(t, c.backend)
			p := d.Profile
			if c.p != nil {
				p = *c.p
			}
			f, err := undertest.FactsFor(d, "gateway-a", c.a, p)
			if err != nil {
				t.Fatal(err)
			}
			got, err := def.Render(f)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "quotaqual-"+strings.ReplaceAll(c.name, " ", "-")+".yaml")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if g, err := os.ReadFile(golden); err != nil || !bytes.Equal(got, g) {
				t.Errorf("default profile renders\n%s\nnot %s (%v): run go test -update when the change is meant", got, golden, err)
			}
		})
	}
}
