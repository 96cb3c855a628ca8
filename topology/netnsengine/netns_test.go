//go:build linux

package netnsengine

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/internal/enginetest"
	_ "github.com/quotaqual/quotaqual/topology/processengine" // what auto picks without namespaces
)

// TestMain runs the tests inside the run's own namespaces (enginetest.Main), where the netns
// engine can build its hosts.
func TestMain(m *testing.M) { os.Exit(enginetest.Main(m)) }

func requireNetns(t *testing.T) {
	t.Helper()
	if reason := os.Getenv("QQ_TEST_NO_NETNS"); reason != "" {
		t.Skip("netns unavailable here: " + reason)
	}
	if !topology.Inside() {
		t.Fatal("test binary is not inside its namespace")
	}
}

// listening lists the ports each host serves on the netns engine.
func listening(host string, p topology.Ports) []int {
	switch {
	case topology.IsGateway(host):
		return []int{p.GatewayData, p.GatewayAdmin}
	case topology.SiteOf(host) != "":
		return []int{p.ProviderData, p.ProviderAdmin}
	case host == topology.HostValkey:
		return []int{p.Valkey}
	}
	return nil
}

func TestNetnsEngine(t *testing.T) {
	requireNetns(t)
	spec := enginetest.NewSpec(t, topology.DenyReject)
	ctx := context.Background()
	topo, upTime := enginetest.UpTopology(t, topology.EngineNetns, spec)
	P := topo.Ports()

	t.Run("ready", func(t *testing.T) {
		for _, g := range topo.Gateways() {
			if code, err := enginetest.GetStatus(topo, topo.Gateway(g).AdminURL+"/readyz"); err != nil || code != http.StatusOK {
				t.Errorf("%s readyz from the observer: %d %v", g, code, err)
			}
			if code, _ := enginetest.Chat(t, topo, g, spec.Deployment); code != http.StatusOK {
				t.Errorf("chat via %s from the client: %d", g, code)
			}
		}
	})

	// Every (from, to, port) among the hosts and the observer: reached exactly when the policy
	// allows it and something listens there.
	t.Run("probes match the policy", func(t *testing.T) {
		pol := topology.DefaultPolicy(P, topology.GatewayNames(2))
		ports := []int{P.GatewayData, P.GatewayAdmin, P.ProviderData, P.ProviderAdmin, P.Valkey}
		froms := append([]string{topology.HostObserver}, topology.ComponentHosts(topo.Gateways())...)
		var n, reached int
		for _, from := range froms {
			for _, to := range topology.ComponentHosts(topo.Gateways()) {
				for _, port := range ports {
					want := pol.Allows(from, to, port) && contains(listening(to, P), port)
					r := topo.Probe(ctx, from, to, port)
					n++
					if r.Reached {
						reached++
					}
					if !r.Supported || r.Reached != want {
						t.Errorf("probe %s -> %s:%d: reached=%v (%s, %s), policy says %v", from, to, port, r.Reached, r.Error, r.Elapsed, want)
					}
					if !r.Reached && r.Elapsed > 500*time.Millisecond {
						t.Errorf("probe %s -> %s:%d took %s in reject mode", from, to, port, r.Elapsed)
					}
				}
			}
		}
		t.Logf("%d probes, %d reached", n, reached)
	})

	t.Run("partition and heal", func(t *testing.T) {
		if r := topo.Probe(ctx, topology.HostGatewayA, topology.HostValkey, P.Valkey); !r.Reached {
			t.Fatalf("positive control failed: %+v", r)
		}
		if err := topo.Partition(ctx, topology.HostGatewayA, topology.HostValkey); err != nil {
			t.Fatal(err)
		}
		if r := topo.Probe(ctx, topology.HostGatewayA, topology.HostValkey, P.Valkey); r.Reached {
			t.Errorf("gateway-a reaches valkey through a partition: %+v", r)
		}
		if r := topo.Probe(ctx, topology.HostGatewayB, topology.HostValkey, P.Valkey); !r.Reached {
			t.Errorf("partition of gateway-a cut gateway-b off too: %+v", r)
		}
		// The gateway's live Valkey connections die with the partition: it fails closed.
		if code, _ := enginetest.Chat(t, topo, topology.HostGatewayA, spec.Deployment); code != http.StatusServiceUnavailable {
			t.Errorf("chat via partitioned gateway-a: %d, want 503", code)
		}
		if err := topo.Heal(ctx, topology.HostGatewayA, topology.HostValkey); err != nil {
			t.Fatal(err)
		}
		if r := topo.Probe(ctx, topology.HostGatewayA, topology.HostValkey, P.Valkey); !r.Reached {
			t.Errorf("heal did not restore gateway-a -> valkey: %+v", r)
		}
		enginetest.WaitStoreBack(t, topo, topology.HostGatewayA, spec.Deployment, 10*time.Second)
	})

	t.Run("restart gateway", func(t *testing.T) {
		if err := topo.RestartGateway(ctx, topology.HostGatewayA); err != nil {
			t.Fatal(err)
		}
		enginetest.WaitStoreBack(t, topo, topology.HostGatewayA, spec.Deployment, 5*time.Second)
	})

	t.Run("crash gateway: killed without a drain, ready again", func(t *testing.T) {
		if err := topo.CrashGateway(ctx, topology.HostGatewayA); err != nil {
			t.Fatal(err)
		}
		enginetest.WaitStoreBack(t, topo, topology.HostGatewayA, spec.Deployment, 5*time.Second)
		dir := t.TempDir()
		if err := topo.CollectLogs(dir); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(dir, topology.HostGatewayA+".log"))
		if err != nil {
			t.Fatal(err)
		}
		// The log spans every process of gateway-a: the restart above drained once; a crash
		// (SIGKILL) must not have drained at all.
		if n := strings.Count(string(b), "gateway draining"); n != 1 {
			t.Errorf("gateway-a drained %d times after a restart and a crash, want 1 (the restart's)", n)
		}
	})

	t.Run("stop and start valkey", func(t *testing.T) {
		if err := topo.StopValkey(ctx); err != nil {
			t.Fatal(err)
		}
		if code, _ := enginetest.Chat(t, topo, topology.HostGatewayB, spec.Deployment); code != http.StatusServiceUnavailable {
			t.Errorf("chat with valkey stopped: %d, want 503", code)
		}
		if err := topo.StartValkey(ctx); err != nil {
			t.Fatal(err)
		}
		enginetest.WaitStoreBack(t, topo, topology.HostGatewayB, spec.Deployment, 10*time.Second)
	})

	t.Run("facts and logs", func(t *testing.T) {
		f := topo.Facts()
		if f["engine"] != topology.EngineNetns || f["run_id"] != spec.RunID || f["deny_mode"] != topology.DenyReject || f["bridge_subnet"] != "198.18.0.0/24" {
			t.Errorf("facts: %s", enginetest.MustJSON(f))
		}
		dir := t.TempDir()
		if err := topo.CollectLogs(dir); err != nil {
			t.Fatal(err)
		}
		for _, h := range append(append([]string{topology.HostValkey}, topo.Gateways()...), topology.Providers...) {
			if _, err := os.Stat(filepath.Join(dir, h+".log")); err != nil {
				t.Errorf("log of %s not collected: %v", h, err)
			}
		}
	})

	start := time.Now()
	td, err := topo.Down(ctx)
	downTime := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("netns engine: up %s, down %s; removed %v", upTime.Round(time.Millisecond), downTime.Round(time.Millisecond), td.Removed)
	// Six components plus the replicated store group (three data nodes, three Sentinels).
	if n, want := len(enginetest.PIDsFromTeardown(td)), 6+len(topology.StoreHosts); n != want {
		t.Errorf("teardown stopped %d processes, want %d: %v", n, want, td.Removed)
	}
	var nsRemoved int
	for _, r := range td.Removed {
		if strings.HasPrefix(r, "netns ") {
			nsRemoved++
		}
	}
	if nsRemoved != len(netnsHosts(topo.Gateways())) {
		t.Errorf("teardown removed %d namespaces, want %d: %v", nsRemoved, len(netnsHosts(topo.Gateways())), td.Removed)
	}
	if live := enginetest.LivePIDs(spec.RunID); len(live) > 0 {
		t.Errorf("processes of run %s alive after Down: %v", spec.RunID, live)
	}
	if entries, _ := os.ReadDir("/run/netns"); len(entries) > 0 {
		t.Errorf("namespaces left in /run/netns: %v", entries)
	}
}

func TestNetnsDropMode(t *testing.T) {
	requireNetns(t)
	spec := enginetest.NewSpec(t, topology.DenyDrop)
	ctx := context.Background()
	topo, err := topology.New(topology.EngineNetns, spec)
	if err != nil {
		t.Fatal(err)
	}
	if err := topo.Up(ctx); err != nil {
		topo.Down(ctx)
		t.Fatal(err)
	}
	defer topo.Down(ctx)
	P := topo.Ports()
	if r := topo.Probe(ctx, topology.HostGatewayA, topology.HostValkey, P.Valkey); !r.Reached {
		t.Errorf("positive control: %+v", r)
	}
	r := topo.Probe(ctx, topology.HostClient, topology.HostValkey, P.Valkey)
	if r.Reached || r.Error != "i/o timeout" || r.Elapsed < 900*time.Millisecond {
		t.Errorf("drop mode: client -> valkey %+v, want an i/o timeout after ~1s", r)
	}
}

func TestDetect(t *testing.T) {
	engine, reason := topology.Detect()
	if reason == "" {
		t.Error("Detect gave no reason")
	}
	if os.Getenv("QQ_TEST_NO_NETNS") == "" && engine != topology.EngineNetns {
		t.Errorf("Detect inside the namespace = %s (%s), want netns", engine, reason)
	}
	// auto resolves to what Detect says.
	topo, err := topology.New(topology.EngineAuto, enginetest.NewSpec(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	if topo.Engine() != engine {
		t.Errorf("auto picked %s, Detect says %s", topo.Engine(), engine)
	}
	if _, err := topology.New("docker-compose", enginetest.NewSpec(t, "")); err == nil {
		t.Error("unknown engine accepted")
	}
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

// TestNetnsEngineWithFourGateways brings up four gateways, each in its own namespace behind
// its own nftables ruleset: gateway-c and gateway-d serve, reach exactly what the policy
// allows, can be cut off from valkey alone and restarted, and Down removes all of them.
func TestNetnsEngineWithFourGateways(t *testing.T) {
	requireNetns(t)
	spec := enginetest.NewSpec(t, topology.DenyReject)
	spec.Gateways = 4
	ctx := context.Background()
	topo, upTime := enginetest.UpTopology(t, topology.EngineNetns, spec)
	P := topo.Ports()
	gateways := topology.GatewayNames(4)
	if got := topo.Gateways(); !slices.Equal(got, gateways) {
		t.Fatalf("Gateways() = %v, want %v", got, gateways)
	}
	for _, g := range gateways {
		if code, err := enginetest.GetStatus(topo, topo.Gateway(g).AdminURL+"/readyz"); err != nil || code != http.StatusOK {
			t.Errorf("%s readyz from the observer: %d %v", g, code, err)
		}
		// One subject's budget holds three of these requests: past it a 429, still a
		// decision from the shared store.
		if code, _ := enginetest.Chat(t, topo, g, spec.Deployment); code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Errorf("chat via %s from the client: %d, want 200 or 429", g, code)
		}
	}
	// Every probe to or from the two gateways a two-gateway run does not have.
	pol := topology.DefaultPolicy(P, gateways)
	ports := []int{P.GatewayData, P.GatewayAdmin, P.ProviderData, P.ProviderAdmin, P.Valkey}
	hosts := topology.ComponentHosts(gateways)
	n := 0
	for _, from := range append([]string{topology.HostObserver}, hosts...) {
		for _, to := range hosts {
			if from != "gateway-c" && from != "gateway-d" && to != "gateway-c" && to != "gateway-d" {
				continue
			}
			for _, port := range ports {
				want := pol.Allows(from, to, port) && contains(listening(to, P), port)
				if r := topo.Probe(ctx, from, to, port); !r.Supported || r.Reached != want {
					t.Errorf("probe %s -> %s:%d: reached=%v (%s), policy says %v", from, to, port, r.Reached, r.Error, want)
				}
				n++
			}
		}
	}
	t.Logf("%d probes of gateway-c and gateway-d match the policy", n)
	if r := topo.Probe(ctx, "gateway-e", topology.HostValkey, P.Valkey); r.Reached || r.Error == "" {
		t.Errorf("a probe from gateway-e, which this run lacks: %+v, want an unknown-host error", r)
	}

	// Cut gateway-d off from valkey: it fails closed, gateway-c still reaches the store.
	if err := topo.Partition(ctx, "gateway-d", topology.HostValkey); err != nil {
		t.Fatal(err)
	}
	if r := topo.Probe(ctx, "gateway-d", topology.HostValkey, P.Valkey); r.Reached {
		t.Error("gateway-d reaches valkey through the partition")
	}
	if r := topo.Probe(ctx, "gateway-c", topology.HostValkey, P.Valkey); !r.Reached {
		t.Errorf("gateway-c lost valkey when only gateway-d was cut: %s", r.Error)
	}
	if code, _ := enginetest.Chat(t, topo, "gateway-d", spec.Deployment); code != http.StatusServiceUnavailable {
		t.Errorf("chat via the cut-off gateway-d: %d, want 503", code)
	}
	if err := topo.Heal(ctx, "gateway-d", topology.HostValkey); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitStoreBack(t, topo, "gateway-d", spec.Deployment, 10*time.Second)
	if err := topo.RestartGateway(ctx, "gateway-c"); err != nil {
		t.Fatal(err)
	}
	enginetest.WaitStoreBack(t, topo, "gateway-c", spec.Deployment, 5*time.Second)
	if err := topo.RestartGateway(ctx, "gateway-e"); err == nil || !strings.Contains(err.Error(), "gateway-d") {
		t.Errorf("restarting gateway-e, which this run lacks: %v, want an error listing the run's gateways", err)
	}

	td, err := topo.Down(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("netns engine with four gateways: up %s; removed %v", upTime.Round(time.Millisecond), td.Removed)
	// Eight components (four gateways, three providers, valkey) plus the store group.
	if n, want := len(enginetest.PIDsFromTeardown(td)), 8+len(topology.StoreHosts); n != want {
		t.Errorf("teardown stopped %d processes, want %d: %v", n, want, td.Removed)
	}
	nsRemoved := 0
	for _, r := range td.Removed {
		if strings.HasPrefix(r, "netns ") {
			nsRemoved++
		}
	}
	// client, four gateways, three providers, valkey, and the six store hosts.
	if want := 9 + len(topology.StoreHosts); nsRemoved != want {
		t.Errorf("teardown removed %d namespaces, want %d", nsRemoved, want)
	}
	if live := enginetest.LivePIDs(spec.RunID); len(live) > 0 {
		t.Errorf("processes of run %s alive after Down: %v", spec.RunID, live)
	}
}

// TestNetnsEngineWithoutStoreGroup: a run none of whose scenarios uses the replicated store
// group (Spec.WithoutStoreGroup) starts neither its processes nor their namespaces, says why,
// and still serves and tears down the rest.
func TestNetnsEngineWithoutStoreGroup(t *testing.T) {
	requireNetns(t)
	spec := enginetest.NewSpec(t, topology.DenyReject)
	spec.WithoutStoreGroup = true
	ctx := context.Background()
	topo, _ := enginetest.UpTopology(t, topology.EngineNetns, spec)
	g, ok := topo.(topology.StoreGroup)
	if !ok {
		t.Fatal("the netns engine does not implement topology.StoreGroup")
	}
	if reason := g.StoreGroupReason(); reason != topology.NoStoreGroupSelected {
		t.Errorf("StoreGroupReason = %q, want %q", reason, topology.NoStoreGroupSelected)
	}
	if err := g.WaitStoreReady(ctx); err == nil {
		t.Error("WaitStoreReady succeeded without a store group")
	}
	for _, h := range topology.StoreHosts {
		if _, err := os.Stat(filepath.Join("/run/netns", topo.(*netnsTopo).nsName(h))); err == nil {
			t.Errorf("namespace of %s exists without a store group", h)
		}
	}
	if sg, _ := topo.Facts()["store_group"].(map[string]any); sg["started"] != false {
		t.Errorf("facts store_group = %v, want started false with the reason", sg)
	}
	for _, gw := range topo.Gateways() {
		if code, _ := enginetest.Chat(t, topo, gw, spec.Deployment); code != http.StatusOK {
			t.Errorf("chat via %s: %d", gw, code)
		}
	}
	td, err := topo.Down(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(enginetest.PIDsFromTeardown(td)); n != 6 {
		t.Errorf("teardown stopped %d processes, want the 6 components: %v", n, td.Removed)
	}
	var nsRemoved int
	for _, r := range td.Removed {
		if strings.HasPrefix(r, "netns ") {
			nsRemoved++
		}
	}
	if want := len(topology.ComponentHosts(topo.Gateways())); nsRemoved != want {
		t.Errorf("teardown removed %d namespaces, want %d: %v", nsRemoved, want, td.Removed)
	}
}

// TestNetnsLeversAvailable: on netns every existing lever is available, the store group's
// with the reason when the run has none (see topology/engines' TestLeversAvailablePerEngine).
func TestNetnsLeversAvailable(t *testing.T) {
	requireNetns(t)
	for _, tc := range []struct {
		name   string
		adjust func(*topology.Spec)
		no     map[string]string
	}{
		{name: "default", adjust: func(*topology.Spec) {}},
		{name: "without store group", adjust: func(s *topology.Spec) { s.WithoutStoreGroup = true },
			no: map[string]string{"use-store-group": topology.NoStoreGroupSelected}},
		{name: "cluster", adjust: func(s *topology.Spec) { s.Store = topology.StoreCluster },
			no: map[string]string{"use-store-group": topology.ClusterNoStoreGroup}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spec := enginetest.NewSpec(t, topology.DenyReject)
			tc.adjust(&spec)
			topo, err := topology.New(topology.EngineNetns, spec)
			if err != nil {
				t.Fatal(err)
			}
			enginetest.CheckAvailable(t, topo, tc.no)
		})
	}
}

// TestNetnsPartitionLever: the partition lever, as a value, cuts a gateway off from valkey and
// its Undo heals the pair (twice is harmless).
func TestNetnsPartitionLever(t *testing.T) {
	requireNetns(t)
	spec := enginetest.NewSpec(t, topology.DenyReject)
	spec.WithoutStoreGroup = true
	ctx := context.Background()
	topo, _ := enginetest.UpTopology(t, topology.EngineNetns, spec)
	port := topo.Ports().Valkey
	undo, err := topology.Partition.Inject(ctx, topo, topology.Target{Host: topology.HostGatewayB, Peer: topology.HostValkey})
	if err != nil {
		t.Fatal(err)
	}
	if r := topo.Probe(ctx, topology.HostGatewayB, topology.HostValkey, port); r.Reached {
		t.Error("gateway-b reaches valkey through the injected partition")
	}
	if r := topo.Probe(ctx, topology.HostGatewayA, topology.HostValkey, port); !r.Reached {
		t.Errorf("the partition of gateway-b cut gateway-a off too: %s", r.Error)
	}
	for range 2 {
		if err := undo(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r := topo.Probe(ctx, topology.HostGatewayB, topology.HostValkey, port); !r.Reached {
		t.Errorf("undo did not heal gateway-b -> valkey: %s", r.Error)
	}
}

// TestNetnsEngineConformance runs the engine conformance suite over every combination the
// netns engine claims: single, replicated and cluster store, each with two and four gateways.
// It is where --gateways 4 --store cluster, which each passed alone while together gateway-c
// and gateway-d were refused by every cluster node but the first, is kept working.
func TestNetnsEngineConformance(t *testing.T) {
	requireNetns(t)
	newSpec := func(t *testing.T) topology.Spec { return enginetest.NewSpec(t, topology.DenyReject) }
	enginetest.Run(t, topology.EngineNetns, newSpec, enginetest.Claims(t, topology.EngineNetns, newSpec, nil))
}

// TestNetnsTwoTopologiesInOneProcess: a second netns topology comes up beside the first in the
// same process (qualify gives a lever scenario a topology of its own) on its own bridge and
// subnet, both serve, and taking the second down removes only its own namespaces and bridge.
func TestNetnsTwoTopologiesInOneProcess(t *testing.T) {
	requireNetns(t)
	ctx := context.Background()
	specA, specB := enginetest.NewSpec(t, topology.DenyReject), enginetest.NewSpec(t, topology.DenyReject)
	specA.WithoutStoreGroup, specB.WithoutStoreGroup = true, true
	a, _ := enginetest.UpTopology(t, topology.EngineNetns, specA)
	b, _ := enginetest.UpTopology(t, topology.EngineNetns, specB)
	fa, fb := a.Facts(), b.Facts()
	if fa["bridge"] == fb["bridge"] || fa["bridge_subnet"] == fb["bridge_subnet"] {
		t.Fatalf("two topologies share a bridge or subnet: %v %v / %v %v", fa["bridge"], fa["bridge_subnet"], fb["bridge"], fb["bridge_subnet"])
	}
	for _, topo := range []topology.Topology{a, b} {
		if code, _ := enginetest.Chat(t, topo, topology.HostGatewayA, topo.(*netnsTopo).Spec.Deployment); code != http.StatusOK {
			t.Errorf("chat via %s of %s: %d", topology.HostGatewayA, topo.Facts()["bridge"], code)
		}
	}
	td, err := b.Down(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(td.Removed, "bridge "+fb["bridge"].(string)) {
		t.Errorf("the second topology's teardown did not remove its bridge: %v", td.Removed)
	}
	if _, err := net.InterfaceByName(fb["bridge"].(string)); err == nil {
		t.Errorf("bridge %v still present after its topology went down", fb["bridge"])
	}
	if _, err := net.InterfaceByName(fa["bridge"].(string)); err != nil {
		t.Errorf("the first topology's bridge %v went with the second: %v", fa["bridge"], err)
	}
	if code, _ := enginetest.Chat(t, a, topology.HostGatewayA, specA.Deployment); code != http.StatusOK {
		t.Errorf("chat via the first topology after the second went down: %d", code)
	}
}
