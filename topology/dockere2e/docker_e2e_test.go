// Package dockere2e_test runs the docker topology end to end against a real Docker engine.
//
// It lives in its own package because package topology's TestMain re-executes its tests
// inside the netns engine's private namespaces, where neither the daemon's socket (/run is a
// private tmpfs there) nor its published ports can be reached. Here the tests run on the
// host, as `quotaqual run --topology docker` does.
package dockere2e_test

import (
	"context"
	"github.com/quotaqual/quotaqual/internal/testlock"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/internal/testbin"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/dockerengine"
	"github.com/quotaqual/quotaqual/topology/images"
	"github.com/quotaqual/quotaqual/topology/internal/e2e"
	"github.com/quotaqual/quotaqual/topology/internal/enginetest"
)

var binary string

// TestMain builds a static quotaqual binary for the image.
func TestMain(m *testing.M) { os.Exit(testbin.Main(m, "docker", &binary)) }

func requireDocker(t *testing.T) {
	t.Helper()
	if topology.Inside() {
		t.Skip("inside the netns engine's namespaces the Docker engine cannot be reached")
	}
	if !dockerengine.Available() {
		t.Skip("no Docker engine answers (DOCKER_HOST or /var/run/docker.sock): the docker topology cannot be tested here")
	}
	testlock.Docker(t)
}

// ensureImages builds both images when missing and removes, at the end of the test, the ones this
// test built.
func ensureImages(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	// The Valkey image is kept: it is the same for every run, and another test package may be
	// about to start a container from it (removing it there would fail that test — no
	// registry to pull it back from).
	if err := images.EnsureValkeyImage(ctx); err != nil {
		t.Fatal(err)
	}
	tag, err := images.EnsureQuotaqualImage(ctx, binary)
	if err != nil {
		t.Fatal(err)
	}
	// Content-addressed: a fresh binary is a fresh image; do not leave it behind, nor the
	// netfilter sidecar images built on it (removed first: cleanups run last-in first-out).
	t.Cleanup(func() { removeImage(t, tag) })
	t.Cleanup(func() {
		out, _ := exec.Command("docker", "image", "ls", "-q", "--filter", "label="+dockerengine.LabelNetfilterBase+"="+tag).Output()
		for _, id := range strings.Fields(string(out)) {
			removeImage(t, id)
		}
	})
	t.Logf("images %s and %s ready in %s", images.DefaultValkeyImage, tag, time.Since(start).Round(time.Millisecond))
	return tag
}

// removeImage removes ref unless a container still uses it (another run's).
func removeImage(t *testing.T, ref string) {
	if os.Getenv("QQ_DOCKER_KEEP") != "" {
		return
	}
	if out, err := exec.Command("docker", "image", "rm", ref).CombinedOutput(); err != nil && !strings.Contains(string(out), "No such image") {
		t.Logf("leaving image %s: %s", ref, strings.TrimSpace(string(out)))
	}
}

func newTopo(t *testing.T, qqImage string) (topology.Topology, *deployment.Deployment, string) {
	t.Helper()
	return newTopoWith(t, qqImage, 0)
}

// newTopoWith is newTopo with that many gateways (0: the default two).
func newTopoWith(t *testing.T, qqImage string, gateways int) (topology.Topology, *deployment.Deployment, string) {
	t.Helper()
	spec := enginetest.SpecFor(t, binary, "")
	spec.QuotaqualImage, spec.Gateways = qqImage, gateways
	id, d := spec.RunID, spec.Deployment
	topo, err := topology.New(topology.EngineDocker, spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.Getenv("QQ_DOCKER_KEEP") != "" {
			t.Logf("QQ_DOCKER_KEEP: leaving run %s up (remove with quotaqual down --run-id %s)", id, id)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		// Down's own errors are logged; what it leaves behind fails the test below.
		down, err := topo.Down(ctx)
		t.Logf("down in %s: %d removed, errors %v (%v)", down.Elapsed, len(down.Removed), down.Errors, err)
		if td, err := dockerengine.Cleanup(ctx, id); err != nil || len(td.Removed) > 0 {
			t.Errorf("leftovers of run %s after Down: removed %v, error %v", id, td.Removed, err)
		}
	})
	return topo, d, id
}

// chat sends one walkthrough request of subject through a gateway with Client(); a transport
// error fails the test.
func chat(t *testing.T, topo topology.Topology, gateway string, d *deployment.Deployment, subject string) (int, string) {
	t.Helper()
	return e2e.Chat(t, topo, gateway, d, subject, 10*time.Second, t.Errorf)
}

// eventually polls f every 100 ms until want(status) or the deadline.
func eventually(t *testing.T, what string, within time.Duration, f func() int, want func(int) bool) {
	t.Helper()
	e2e.Eventually(t, what, within, 100*time.Millisecond, f, want)
}

func decided(code int) bool { return code == http.StatusOK || code == http.StatusTooManyRequests }

type probe struct {
	from, to string
	port     int
}

// policyProbes are the network-policy scenario's probes (positive and negative controls from
// the same vantage points as on netns).
func policyProbes(p topology.Ports, gateways []string) []probe {
	var ps []probe
	for _, gw := range gateways {
		ps = append(ps, probe{gw, topology.HostValkey, p.Valkey})
		for _, pr := range topology.Providers {
			ps = append(ps, probe{gw, pr, p.ProviderData})
		}
		ps = append(ps, probe{topology.HostClient, gw, p.GatewayData})
	}
	for _, pr := range topology.Providers {
		ps = append(ps, probe{pr, pr, p.ProviderData}, probe{topology.HostClient, pr, p.ProviderData}, probe{pr, topology.HostValkey, p.Valkey})
	}
	return append(ps,
		probe{topology.HostClient, topology.HostValkey, p.Valkey},
		probe{topology.HostClient, topology.HostGatewayA, p.GatewayAdmin},
		probe{topology.HostClient, topology.HostProviderWest, p.ProviderAdmin},
		probe{topology.HostProviderWest, topology.HostGatewayA, p.GatewayAdmin},
		probe{topology.HostGatewayA, topology.HostProviderWest, p.ProviderAdmin},
		probe{topology.HostObserver, topology.HostGatewayA, p.GatewayAdmin},
		probe{topology.HostObserver, topology.HostProviderWest, p.ProviderAdmin},
		probe{topology.HostObserver, topology.HostValkey, p.Valkey},
		probe{topology.HostObserver, topology.HostProviderWest, p.ProviderData},
	)
}

func TestDockerTopology(t *testing.T) {
	requireDocker(t)
	img := ensureImages(t)
	topo, d, id := newTopo(t, img)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	start := time.Now()
	if err := topo.Up(ctx); err != nil {
		t.Fatalf("Up: %v", err)
	}
	t.Logf("up in %s; facts: %v", time.Since(start).Round(time.Millisecond), topo.Facts()["harness_access"])
	if topo.Engine() != topology.EngineDocker || !topo.Capabilities().NetworkPolicy || !topo.Capabilities().Partition {
		t.Fatalf("engine %s capabilities %+v", topo.Engine(), topo.Capabilities())
	}

	t.Run("a chat request through each gateway is admitted with a provider site", func(t *testing.T) {
		for _, gw := range topo.Gateways() {
			code, site := chat(t, topo, gw, d, deployment.Subjects[0])
			if code != http.StatusOK || !slices.Contains(deployment.Sites, site) {
				t.Errorf("via %s: status %d, site %q", gw, code, site)
			}
		}
	})

	t.Run("the observer reaches every admin port", func(t *testing.T) {
		for _, gw := range topo.Gateways() {
			if code := get(t, topo, topo.Gateway(gw).AdminURL+"/readyz"); code != http.StatusOK {
				t.Errorf("%s /readyz: %d", gw, code)
			}
		}
		for _, pr := range topology.Providers {
			if code := get(t, topo, topo.Provider(pr).AdminURL+"/healthz"); code != http.StatusOK {
				t.Errorf("%s /healthz: %d", pr, code)
			}
		}
	})

	t.Run("probes match the network policy", func(t *testing.T) {
		pol := topo.(interface{ Policy() topology.Policy }).Policy()
		for _, p := range policyProbes(topo.Ports(), topo.Gateways()) {
			r := topo.Probe(ctx, p.from, p.to, p.port)
			want := pol.Allows(p.from, p.to, p.port)
			if !r.Supported || r.Reached != want {
				t.Errorf("%s → %s:%d: reached %v (%s, supported %v), policy allows %v", p.from, p.to, p.port, r.Reached, r.Error, r.Supported, want)
			} else {
				t.Logf("%s → %s:%d: reached %v %s in %s", p.from, p.to, p.port, r.Reached, r.Error, r.Elapsed.Round(time.Microsecond))
			}
		}
		if r := topo.Probe(ctx, topology.HostValkey, topology.HostGatewayA, topo.Ports().GatewayData); r.Supported {
			t.Errorf("a probe from valkey claims support: %+v", r)
		}
	})

	t.Run("partition gateway-a from valkey: 503 on a, b unaffected; heal restores", func(t *testing.T) {
		if err := topo.Partition(ctx, topology.HostGatewayA, topology.HostValkey); err != nil {
			t.Fatal(err)
		}
		eventually(t, "gateway-a while partitioned", 10*time.Second,
			func() int { c, _ := chat(t, topo, topology.HostGatewayA, d, deployment.Subjects[1]); return c },
			func(c int) bool { return c == http.StatusServiceUnavailable })
		if code, _ := chat(t, topo, topology.HostGatewayB, d, deployment.Subjects[1]); !decided(code) {
			t.Errorf("gateway-b during the partition: %d", code)
		}
		if r := topo.Probe(ctx, topology.HostGatewayA, topology.HostValkey, topo.Ports().Valkey); r.Reached {
			t.Errorf("gateway-a still reaches valkey while partitioned")
		}
		if err := topo.Partition(ctx, topology.HostValkey, topology.HostGatewayA); err != nil {
			t.Errorf("partition twice: %v", err)
		}
		if err := topo.Partition(ctx, topology.HostGatewayA, topology.HostProviderWest); err == nil {
			t.Errorf("partition gateway-a from a provider: want unsupported")
		}
		if err := topo.Heal(ctx, topology.HostGatewayA, topology.HostValkey); err != nil {
			t.Fatal(err)
		}
		eventually(t, "gateway-a after heal", 15*time.Second,
			func() int { c, _ := chat(t, topo, topology.HostGatewayA, d, deployment.Subjects[2]); return c }, decided)
		if r := topo.Probe(ctx, topology.HostGatewayA, topology.HostValkey, topo.Ports().Valkey); !r.Reached {
			t.Errorf("gateway-a does not reach valkey after heal: %s", r.Error)
		}
	})

	t.Run("restart gateway-a: ready again and deciding", func(t *testing.T) {
		before := topo.Gateway(topology.HostGatewayA)
		rs := time.Now()
		if err := topo.RestartGateway(ctx, topology.HostGatewayA); err != nil {
			t.Fatal(err)
		}
		t.Logf("restart took %s; data %s → %s", time.Since(rs).Round(time.Millisecond), before.DataURL, topo.Gateway(topology.HostGatewayA).DataURL)
		if code, _ := chat(t, topo, topology.HostGatewayA, d, deployment.Subjects[0]); !decided(code) {
			t.Errorf("after restart: %d", code)
		}
	})

	t.Run("crash gateway-a: ready again and deciding", func(t *testing.T) {
		if err := topo.CrashGateway(ctx, topology.HostGatewayA); err != nil {
			t.Fatal(err)
		}
		if code, _ := chat(t, topo, topology.HostGatewayA, d, deployment.Subjects[0]); !decided(code) {
			t.Errorf("after crash: %d", code)
		}
	})

	t.Run("stop valkey: 503 on both gateways; start: decisions again", func(t *testing.T) {
		if err := topo.StopValkey(ctx); err != nil {
			t.Fatal(err)
		}
		for _, gw := range topo.Gateways() {
			eventually(t, gw+" with valkey stopped", 5*time.Second,
				func() int { c, _ := chat(t, topo, gw, d, deployment.Subjects[1]); return c },
				func(c int) bool { return c == http.StatusServiceUnavailable })
		}
		ss := time.Now()
		if err := topo.StartValkey(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("valkey back in %s", time.Since(ss).Round(time.Millisecond))
		for _, gw := range topo.Gateways() {
			eventually(t, gw+" after valkey restart", 15*time.Second,
				func() int { c, _ := chat(t, topo, gw, d, deployment.Subjects[2]); return c }, decided)
		}
	})

	t.Run("store group: the split brain promotes a replica; heal makes the old primary a replica", func(t *testing.T) {
		testStoreGroup(ctx, t, topo)
	})

	t.Run("logs of every component are collected", func(t *testing.T) {
		dir := t.TempDir()
		if err := topo.CollectLogs(dir); err != nil {
			t.Fatal(err)
		}
		for _, h := range topology.ComponentHosts(topo.Gateways()) {
			b, err := os.ReadFile(filepath.Join(dir, h+".log"))
			if h == topology.HostClient {
				continue // the idle client writes nothing
			}
			if err != nil || len(b) == 0 {
				t.Errorf("log of %s: %d bytes, %v", h, len(b), err)
			}
			for _, s := range d.Secrets() {
				if strings.Contains(string(b), s) {
					t.Errorf("log of %s contains a secret of the run", h)
				}
			}
		}
	})

	if os.Getenv("QQ_DOCKER_KEEP") != "" {
		return
	}
	ds := time.Now()
	td, err := topo.Down(context.Background())
	if err != nil {
		t.Errorf("Down: %v", err)
	}
	t.Logf("down in %s: %s", time.Since(ds).Round(time.Millisecond), strings.Join(td.Removed, ", "))
	if want := 7 + 2*len(topology.StoreHosts) + 4 + 1; len(td.Removed) != want {
		t.Errorf("Down removed %d things, want %d: 7 containers, the store group's 6 and their 6 netfilter sidecars, 4 networks, 1 volume: %v", len(td.Removed), want, td.Removed)
	}
	for _, kind := range []string{"ps -a", "network ls", "volume ls"} {
		args := append(strings.Fields(kind), "-q", "--filter", "label="+images.LabelRunID+"="+id)
		out, err := exec.Command("docker", args...).Output()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("docker %s after Down: %q %v", kind, out, err)
		}
	}
	if _, err := topo.Down(context.Background()); err != nil {
		t.Errorf("second Down: %v", err)
	}
}

// TestDockerTopologyExecAccess brings the topology up with the harness reaching the
// containers through docker exec relays (as when it cannot reach published ports).
func TestDockerTopologyExecAccess(t *testing.T) {
	requireDocker(t)
	img := ensureImages(t)
	t.Setenv(dockerengine.EnvAccess, "exec")
	topo, d, _ := newTopo(t, img)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	if err := topo.Up(ctx); err != nil {
		t.Fatalf("Up: %v", err)
	}
	t.Logf("up in %s (access %v)", time.Since(start).Round(time.Millisecond), topo.Facts()["harness_access"])
	for _, gw := range topo.Gateways() {
		code, site := chat(t, topo, gw, d, deployment.Subjects[0])
		if code != http.StatusOK || site == "" {
			t.Errorf("via %s from the client container: %d %q", gw, code, site)
		}
	}
	if code := get(t, topo, topo.Gateway(topology.HostGatewayB).AdminURL+"/metrics"); code != http.StatusOK {
		t.Errorf("gateway-b /metrics through the observer: %d", code)
	}
	for _, p := range []probe{{topology.HostObserver, topology.HostGatewayA, topo.Ports().GatewayAdmin}, {topology.HostObserver, topology.HostProviderEast, topo.Ports().ProviderData}} {
		if r := topo.Probe(ctx, p.from, p.to, p.port); r.Reached != (p.port == topo.Ports().GatewayAdmin) {
			t.Errorf("%s → %s:%d: reached %v (%s)", p.from, p.to, p.port, r.Reached, r.Error)
		}
	}
	if err := topo.RestartGateway(ctx, topology.HostGatewayB); err != nil {
		t.Fatal(err)
	}
	if code, _ := chat(t, topo, topology.HostGatewayB, d, deployment.Subjects[1]); !decided(code) {
		t.Errorf("after restart: %d", code)
	}
}

// testStoreGroup pulls the store group's levers as valkey-failover does: the Sentinels name
// valkey-1; a partition of valkey-1 from sentinel-1 cuts both directions while gateway-a still
// reaches it; the split brain (valkey-1 cut off from the replicas, the Sentinels and
// gateway-b) makes the Sentinels promote a replica — which they can only do when the
// partition also cuts the connections they already hold; healing makes valkey-1 a replica of
// the new primary, and the Sentinels log the promotion.
func testStoreGroup(ctx context.Context, t *testing.T, topo topology.Topology) {
	sg, ok := topo.(topology.StoreGroup)
	if !ok || sg.StoreGroupReason() != "" {
		t.Fatalf("the docker topology runs no store group: %v", ok)
	}
	if err := sg.WaitStoreReady(ctx); err != nil {
		t.Fatal(err)
	}
	if p, err := sg.StorePrimary(ctx); err != nil || p != topology.HostStore1 {
		t.Fatalf("primary %q (%v), want %s", p, err, topology.HostStore1)
	}
	for _, h := range topology.StoreNodes {
		st, err := sg.StoreNode(ctx, h)
		want := map[bool]string{true: "master", false: "slave"}[h == topology.HostStore1]
		if err != nil || st.Role != want {
			t.Errorf("%s: %+v (%v), want role %s", h, st, err, want)
		}
	}
	port := topo.Ports().Valkey
	reach := func(from, to string, p int) bool { return topo.Probe(ctx, from, to, p).Reached }
	if !reach(topology.HostSentinel1, topology.HostStore1, port) || !reach(topology.HostStore1, topology.HostSentinel1, topology.SentinelPort) {
		t.Fatalf("sentinel-1 and valkey-1 do not reach each other before any partition")
	}
	if err := topo.Partition(ctx, topology.HostSentinel1, topology.HostStore1); err != nil {
		t.Fatal(err)
	}
	if reach(topology.HostSentinel1, topology.HostStore1, port) || reach(topology.HostStore1, topology.HostSentinel1, topology.SentinelPort) {
		t.Errorf("the partition of valkey-1 from sentinel-1 does not cut both directions")
	}
	if !reach(topology.HostGatewayA, topology.HostStore1, port) || !reach(topology.HostSentinel2, topology.HostStore1, port) {
		t.Errorf("the partition of valkey-1 from sentinel-1 cuts others off too")
	}
	if err := topo.Heal(ctx, topology.HostStore1, topology.HostSentinel1); err != nil {
		t.Fatal(err)
	}
	if !reach(topology.HostSentinel1, topology.HostStore1, port) {
		t.Errorf("sentinel-1 does not reach valkey-1 after heal")
	}

	cut := append(append([]string{topology.HostStore2, topology.HostStore3}, topology.StoreSentinels...), topology.HostGatewayB)
	split := time.Now()
	for _, h := range cut {
		if err := topo.Partition(ctx, topology.HostStore1, h); err != nil {
			t.Fatal(err)
		}
	}
	if !reach(topology.HostGatewayA, topology.HostStore1, port) || reach(topology.HostGatewayB, topology.HostStore1, port) {
		t.Errorf("split brain: gateway-a must still reach valkey-1, gateway-b must not")
	}
	var primary string
	e2e.Eventually(t, "a replica promoted", 20*time.Second, 100*time.Millisecond,
		func() int { primary, _ = sg.StorePrimary(ctx); return 0 },
		func(int) bool { return primary == topology.HostStore2 || primary == topology.HostStore3 })
	t.Logf("promoted %s in %s", primary, time.Since(split).Round(time.Millisecond))
	for _, h := range cut {
		if err := topo.Heal(ctx, topology.HostStore1, h); err != nil {
			t.Fatal(err)
		}
	}
	var st topology.StoreNodeState
	// Sentinel converts a returning old primary only after it has answered for 8 s and on a 10 s
	// INFO period, and a Sentinel whose timer fired over 2 s late (a loaded CI machine) sits 30 s
	// in TILT first: the bound leaves room for both.
	e2e.Eventually(t, "valkey-1 a replica after heal", 75*time.Second, 200*time.Millisecond,
		func() int { st, _ = sg.StoreNode(ctx, topology.HostStore1); return 0 },
		func(int) bool { return st.Role == "slave" })
	ev, err := sg.StoreEvents()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ev {
		names = append(names, e.Event)
	}
	for _, want := range []string{"+sdown", "+odown", "+switch-master"} {
		if !slices.Contains(names, want) {
			t.Errorf("the Sentinels logged no %s: %v", want, names)
		}
	}
}

func get(t *testing.T, topo topology.Topology, url string) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := topo.Observer().Do(req)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

// The nine scenarios on docker run through the real binary in cmd/quotaqual
// (TestDockerRuns/RunDockerTopologyPassesAllScenarios in cmd/quotaqual), as a user runs them.

// TestDockerTopologyWithThreeGateways brings up three gateway containers: gateway-c serves
// from the shared store, is policed as gateway-a is (the client reaches its data port, not its
// admin port; it reaches valkey), and can be cut off from valkey alone while gateway-b decides.
func TestDockerTopologyWithThreeGateways(t *testing.T) {
	requireDocker(t)
	img := ensureImages(t)
	topo, d, _ := newTopoWith(t, img, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	if err := topo.Up(ctx); err != nil {
		t.Fatalf("Up: %v", err)
	}
	t.Logf("three gateways up in %s", time.Since(start).Round(time.Millisecond))
	if got, want := topo.Gateways(), topology.GatewayNames(3); !slices.Equal(got, want) {
		t.Fatalf("Gateways() = %v, want %v", got, want)
	}
	for i, gw := range topo.Gateways() {
		if code, _ := chat(t, topo, gw, d, deployment.Subjects[i]); code != http.StatusOK {
			t.Errorf("via %s: status %d, want 200", gw, code)
		}
	}
	P := topo.Ports()
	for _, p := range []struct {
		from, to string
		port     int
		want     bool
	}{
		{topology.HostClient, "gateway-c", P.GatewayData, true},
		{topology.HostClient, "gateway-c", P.GatewayAdmin, false},
		{"gateway-c", topology.HostValkey, P.Valkey, true},
		{"gateway-c", topology.HostProviderEast, P.ProviderData, true},
		// Network membership is coarser than the policy here (the package doc of dockerengine,
		// pinned by its docker_test.go): a provider shares the provider network with every
		// gateway and reaches its data port, gateway-c's as gateway-a's.
		{topology.HostProviderEast, "gateway-c", P.GatewayData, true},
	} {
		if r := topo.Probe(ctx, p.from, p.to, p.port); !r.Supported || r.Reached != p.want {
			t.Errorf("%s → %s:%d: reached %v (%s, supported %v), want %v", p.from, p.to, p.port, r.Reached, r.Error, r.Supported, p.want)
		}
	}
	if err := topo.Partition(ctx, "gateway-c", topology.HostValkey); err != nil {
		t.Fatal(err)
	}
	eventually(t, "gateway-c while partitioned", 10*time.Second,
		func() int { c, _ := chat(t, topo, "gateway-c", d, deployment.Subjects[1]); return c },
		func(c int) bool { return c == http.StatusServiceUnavailable })
	if code, _ := chat(t, topo, topology.HostGatewayB, d, deployment.Subjects[1]); !decided(code) {
		t.Errorf("gateway-b while gateway-c is partitioned: %d", code)
	}
	if err := topo.Heal(ctx, "gateway-c", topology.HostValkey); err != nil {
		t.Fatal(err)
	}
	eventually(t, "gateway-c after heal", 15*time.Second,
		func() int { c, _ := chat(t, topo, "gateway-c", d, deployment.Subjects[2]); return c }, decided)
	if err := topo.Partition(ctx, "gateway-d", topology.HostValkey); err == nil {
		t.Error("partitioning gateway-d, which this run lacks, succeeded")
	}
}

// TestDockerConformance runs the engine conformance suite (enginetest.Run) on docker over two
// combinations, each with three gateways: the replicated store group (it runs beside the single
// Valkey, so the single store's endpoint is probed and chatted through too) and the Valkey
// Cluster. Not the whole product: a docker Up costs tens of seconds on a loaded machine, and
// the rest is covered here already — two gateways on the single store (TestDockerTopology),
// three on it (TestDockerTopologyWithThreeGateways). Three gateways rather than two is where a
// hand-wired list of two would show; the cluster had no docker test before.
func TestDockerConformance(t *testing.T) {
	requireDocker(t)
	qqImage := ensureImages(t)
	newSpec := func(t *testing.T) topology.Spec {
		spec := enginetest.SpecFor(t, binary, "")
		spec.QuotaqualImage = qqImage
		return spec
	}
	claims := enginetest.Claims(t, topology.EngineDocker, newSpec, []int{3})
	var combos []enginetest.Combination
	for _, c := range claims {
		if c.Store != enginetest.StoreSingle {
			combos = append(combos, c)
		}
	}
	if len(combos) != 2 {
		t.Fatalf("docker claims %v: want the replicated store group and the cluster besides the single store", claims)
	}
	enginetest.Run(t, topology.EngineDocker, newSpec, combos)
}
