package dockerengine

// Unit tests of the docker engine that need no Docker engine. The end-to-end tests against a
// real engine are in ./dockere2e: this package's TestMain runs every test inside the netns
// engine's namespaces, where the Docker socket and published ports cannot be reached.

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/quotaqual/quotaqual/internal/testbin"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/images"
)

func TestDockerValkeyDockerfileMatchesTheRepositoryCopy(t *testing.T) {
	b, err := os.ReadFile("../../docker/valkey/Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != images.ValkeyDockerfile {
		t.Errorf("docker/valkey/Dockerfile and topology.ValkeyDockerfile differ: keep them identical\nfile:\n%s\nconst:\n%s", b, images.ValkeyDockerfile)
	}
}

func TestDockerPartitionPairs(t *testing.T) {
	tests := []struct {
		name, host, peer, want string
		unsupported            bool
	}{
		{name: "gateway from valkey", host: topology.HostGatewayA, peer: topology.HostValkey, want: topology.HostGatewayA},
		{name: "valkey from gateway", host: topology.HostValkey, peer: topology.HostGatewayB, want: topology.HostGatewayB},
		{name: "gateway from provider is unsupported", host: topology.HostGatewayA, peer: topology.HostProviderWest, unsupported: true},
		{name: "client from gateway is unsupported", host: topology.HostClient, peer: topology.HostGatewayA, unsupported: true},
		{name: "third gateway from valkey", host: "gateway-c", peer: topology.HostValkey, want: "gateway-c"},
		{name: "unknown host", host: "nope", peer: topology.HostValkey},
		{name: "a gateway the run does not have", host: "gateway-d", peer: topology.HostValkey},
	}
	three := &dockerTopo{spec: topology.Spec{Gateways: 3}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := three.partitionPair(tc.host, tc.peer)
			switch {
			case tc.want != "":
				if err != nil || got != tc.want {
					t.Errorf("got %q, %v; want %q", got, err, tc.want)
				}
			case tc.unsupported:
				if !errors.Is(err, topology.ErrUnsupported) {
					t.Errorf("want ErrUnsupported, got %v", err)
				}
			default:
				if err == nil || errors.Is(err, topology.ErrUnsupported) {
					t.Errorf("want an unknown-host error, got %v", err)
				}
			}
		})
	}
}

// dockerListens says whether to listens on port, and on its admin-network address only.
func dockerListens(to string, port int) (listens, adminOnly bool) {
	switch {
	case topology.IsGateway(to):
		return port == dockerPorts.GatewayData || port == dockerPorts.GatewayAdmin, port == dockerPorts.GatewayAdmin
	case slices.Contains(topology.Providers, to):
		return port == dockerPorts.ProviderData || port == dockerPorts.ProviderAdmin, port == dockerPorts.ProviderAdmin
	case to == topology.HostValkey:
		return port == dockerPorts.Valkey, false
	}
	return false, false
}

// membershipAllows is what the docker networks let through to a listening port: a host
// reaches itself; another host when they share a network other than admin (inter-container
// traffic is off there), unless the port is an admin port (bound to the admin network only).
func membershipAllows(from, to string, port int) bool {
	listens, adminOnly := dockerListens(to, port)
	if !listens {
		return false // refused whatever the policy: nothing to compare
	}
	if from == to {
		return true
	}
	if adminOnly {
		return false
	}
	for _, r := range dockerMembership[to] {
		if r != dnetAdmin && slices.Contains(dockerMembership[from], r) {
			return true
		}
	}
	return false
}

func TestDockerMembershipImplementsThePolicy(t *testing.T) {
	pol := topology.DefaultPolicy(dockerPorts, topology.GatewayNames(2))
	ports := []int{dockerPorts.GatewayData, dockerPorts.GatewayAdmin, dockerPorts.ProviderData, dockerPorts.ProviderAdmin, dockerPorts.Valkey}
	// Where membership is coarser than the policy (no scenario probes these): data ports
	// listen on every address of a container, so every host that shares a network with a
	// gateway (valkey, the providers, the other gateway) reaches its data port; and the providers share the
	// provider network, so they reach each other's data port.
	coarser := func(from, to string, port int) bool {
		return (topology.IsGateway(to) && port == dockerPorts.GatewayData) ||
			(slices.Contains(topology.Providers, to) && port == dockerPorts.ProviderData && slices.Contains(topology.Providers, from))
	}
	for _, from := range topology.ComponentHosts(topology.GatewayNames(2)) {
		for _, to := range topology.ComponentHosts(topology.GatewayNames(2)) {
			for _, port := range ports {
				if listens, _ := dockerListens(to, port); !listens {
					continue
				}
				got, want := membershipAllows(from, to, port), pol.Allows(from, to, port)
				if got == want {
					continue
				}
				if got && coarser(from, to, port) {
					continue
				}
				t.Errorf("%s → %s:%d: membership allows %v, policy %v", from, to, port, got, want)
			}
		}
	}
}

func TestDockerAccessSetting(t *testing.T) {
	t.Setenv(EnvAccess, "tunnel")
	if _, err := newDocker(topology.Spec{RunID: "q1"}); err == nil {
		t.Error("unknown access accepted")
	}
	t.Setenv(EnvAccess, accessExec)
	d, err := newDocker(topology.Spec{RunID: "q1"})
	if err != nil || d.access != accessExec {
		t.Fatalf("access %v, %v", d, err)
	}
	if d.Engine() != topology.EngineDocker || d.ValkeyAddr() != "valkey:6379" || d.Ports() != dockerPorts {
		t.Errorf("engine %s valkey %s ports %+v", d.Engine(), d.ValkeyAddr(), d.Ports())
	}
	if c := d.Capabilities(); !c.NetworkPolicy || !c.Partition {
		t.Errorf("capabilities %+v", c)
	}
	if r := d.Probe(context.Background(), topology.HostValkey, topology.HostGatewayA, 8080); r.Supported {
		t.Errorf("probe from valkey supported: %+v", r)
	}
	// Down before Up is safe and removes nothing.
	if td, err := d.Down(context.Background()); err != nil || len(td.Removed) != 0 {
		t.Errorf("Down before Up: %+v, %v", td, err)
	}
}

func TestDockerCleanupRejectsBadRunIDs(t *testing.T) {
	if _, err := Cleanup(context.Background(), "Bad ID"); err == nil {
		t.Error("bad run id accepted")
	}
}

func TestDockerSharedLibraries(t *testing.T) {
	t.Run("a dynamic binary brings its libraries and interpreter", func(t *testing.T) {
		bin, err := exec.LookPath("valkey-server")
		if err != nil {
			t.Skip("valkey-server is not on PATH, so there is no dynamic binary to inspect: install it with .ci/install-deps")
		}
		files, err := images.WithSharedLibraries(bin)
		if err != nil {
			t.Fatal(err)
		}
		if files[0] != bin || len(files) < 3 || !slices.ContainsFunc(files, func(f string) bool {
			return slices.Contains([]string{"/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"}, f)
		}) {
			t.Errorf("files %v", files)
		}
	})
	t.Run("a static binary is alone", func(t *testing.T) {
		bin := filepath.Join(t.TempDir(), "quotaqual")
		if err := testbin.Build(bin); err != nil {
			t.Fatal(err)
		}
		files, err := images.WithSharedLibraries(bin)
		if err != nil {
			t.Fatal(err)
		}
		if files[0] != bin {
			t.Errorf("files %v", files)
		}
	})
	t.Run("not an ELF binary", func(t *testing.T) {
		if _, err := images.WithSharedLibraries("docker_test.go"); err == nil {
			t.Error("accepted a text file")
		}
	})
}

// TestValkeyVersionAndVolumeFollowTheStore pins what the manifest says of the store: the version
// from a Valkey start-up log (a cluster run reads node 0's, not its holder's, which has none),
// and a volume only for the single Valkey, whose AOF it keeps (a cluster run created one that
// nothing mounted).
func TestValkeyVersionAndVolumeFollowTheStore(t *testing.T) {
	log := "1:C 01 Dec 2026 00:01:02.345 * oO0OoO0OoO0Oo Valkey is starting oO0OoO0OoO0Oo\n" +
		"1:C 01 Dec 2026 00:01:02.345 * Valkey version=8.1.1, bits=64, commit=00000000, modified=0, pid=1, just started\n"
	if v := valkeyVersionIn([]byte(log)); v != "8.1.1" {
		t.Errorf("version from a Valkey log: %q, want 8.1.1", v)
	}
	if v := valkeyVersionIn([]byte("relay listening\n")); v != "unknown" {
		t.Errorf("version from a log without one (a cluster node's holder): %q, want unknown", v)
	}
	if v := valkeyVolume(topology.Spec{RunID: "r1", Store: topology.StoreSingle}); v != "qq-r1-valkey-data" {
		t.Errorf("single store's volume %q, want qq-r1-valkey-data", v)
	}
	if v := valkeyVolume(topology.Spec{RunID: "r1", Store: topology.StoreCluster}); v != "" {
		t.Errorf("cluster store's volume %q, want none", v)
	}
}
