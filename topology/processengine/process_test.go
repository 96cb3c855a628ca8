package processengine

import (
	"context"
	"errors"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/internal/enginetest"
)

// TestMain runs the tests inside the namespaces the netns engine would use (enginetest.Main).
func TestMain(m *testing.M) { os.Exit(enginetest.Main(m)) }

func TestProcessEngine(t *testing.T) {
	spec := enginetest.NewSpec(t, "")
	ctx := context.Background()
	topo, upTime := enginetest.UpTopology(t, topology.EngineProcess, spec)

	for _, g := range topo.Gateways() {
		if code, err := enginetest.GetStatus(topo, topo.Gateway(g).AdminURL+"/readyz"); err != nil || code != http.StatusOK {
			t.Errorf("%s readyz: %d %v", g, code, err)
		}
		if code, _ := enginetest.Chat(t, topo, g, spec.Deployment); code != http.StatusOK {
			t.Errorf("chat via %s: %d", g, code)
		}
	}
	for _, p := range topology.Providers {
		if code, err := enginetest.GetStatus(topo, topo.Provider(p).AdminURL+"/healthz"); err != nil || code != http.StatusOK {
			t.Errorf("%s healthz: %d %v", p, code, err)
		}
	}
	if err := topo.Partition(ctx, topology.HostGatewayA, topology.HostValkey); !errors.Is(err, topology.ErrUnsupported) {
		t.Errorf("Partition on process: %v, want ErrUnsupported", err)
	}
	if r := topo.Probe(ctx, topology.HostClient, topology.HostValkey, topo.Ports().Valkey); r.Supported || r.Error == "" {
		t.Errorf("Probe on process: %+v, want unsupported with a reason", r)
	}
	if c := topo.Capabilities(); c.NetworkPolicy || c.Partition || c.NetworkPolicyReason == "" {
		t.Errorf("capabilities %+v", c)
	}

	if err := topo.RestartGateway(ctx, topology.HostGatewayA); err != nil {
		t.Fatal(err)
	}
	if code, _ := enginetest.Chat(t, topo, topology.HostGatewayA, spec.Deployment); code != http.StatusOK {
		t.Errorf("chat after restart: %d", code)
	}
	if err := topo.StopValkey(ctx); err != nil {
		t.Fatal(err)
	}
	if code, _ := enginetest.Chat(t, topo, topology.HostGatewayB, spec.Deployment); code != http.StatusServiceUnavailable {
		t.Errorf("chat with valkey stopped: %d, want 503", code)
	}
	if err := topo.StartValkey(ctx); err != nil {
		t.Fatal(err)
	}
	// The gateway's store client reconnects on its own schedule: admission must recover
	// within a deadline.
	enginetest.WaitStoreBack(t, topo, topology.HostGatewayB, spec.Deployment, 10*time.Second)

	start := time.Now()
	td, err := topo.Down(ctx)
	downTime := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("process engine: up %s, down %s; removed %v", upTime.Round(time.Millisecond), downTime.Round(time.Millisecond), td.Removed)
	if n := len(enginetest.PIDsFromTeardown(td)); n != 6 {
		t.Errorf("teardown removed %d processes, want 6: %v", n, td.Removed)
	}
	if live := enginetest.LivePIDs(spec.RunID); len(live) > 0 {
		t.Errorf("processes of run %s still alive after Down: %v", spec.RunID, live)
	}
	if td2, err := topo.Down(ctx); err != nil || len(td2.Errors) > 0 {
		t.Errorf("second Down: %v %v", td2, err)
	}
}

// TestProcessEngineWithFourGateways: four gateway processes on their own loopback ports, each
// admitting from the one Valkey, gateway-d restartable, a lever on gateway-e refused, and Down
// stopping all eight processes.
func TestProcessEngineWithFourGateways(t *testing.T) {
	spec := enginetest.NewSpec(t, "")
	spec.Gateways = 4
	ctx := context.Background()
	topo, _ := enginetest.UpTopology(t, topology.EngineProcess, spec)
	urls := map[string]bool{}
	for _, g := range topology.GatewayNames(4) {
		ep := topo.Gateway(g)
		urls[ep.DataURL] = true
		// One subject's budget holds three of these requests: past it a 429, still a
		// decision from the shared store.
		if code, _ := enginetest.Chat(t, topo, g, spec.Deployment); code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Errorf("chat via %s: %d, want 200 or 429", g, code)
		}
	}
	if len(urls) != 4 {
		t.Errorf("four gateways on %d distinct data URLs", len(urls))
	}
	if err := topo.RestartGateway(ctx, "gateway-d"); err != nil {
		t.Fatal(err)
	}
	if code, _ := enginetest.Chat(t, topo, "gateway-d", spec.Deployment); code != http.StatusOK && code != http.StatusTooManyRequests {
		t.Errorf("chat via gateway-d after its restart: %d, want a decision from the store (200 or 429)", code)
	}
	if err := topo.CrashGateway(ctx, "gateway-e"); err == nil {
		t.Error("crashing gateway-e, which this run lacks, succeeded")
	}
	td, err := topo.Down(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(enginetest.PIDsFromTeardown(td)); n != 8 {
		t.Errorf("teardown removed %d processes, want 8 (four gateways, three providers, valkey): %v", n, td.Removed)
	}
	if live := enginetest.LivePIDs(spec.RunID); len(live) > 0 {
		t.Errorf("processes of run %s still alive after Down: %v", spec.RunID, live)
	}
}

// TestProcessEngineConformance runs the engine conformance suite over every combination the
// process engine claims (single and cluster store, two and four gateways). It cannot probe
// between hosts (one loopback): each gateway's chat is its reachability check.
func TestProcessEngineConformance(t *testing.T) {
	newSpec := func(t *testing.T) topology.Spec { return enginetest.NewSpec(t, "") }
	enginetest.Run(t, topology.EngineProcess, newSpec, enginetest.Claims(t, topology.EngineProcess, newSpec, nil))
}
