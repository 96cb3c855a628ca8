// Package kinde2e_test runs the kind topology live: a run-scoped kind cluster (or an existing
// cluster named by QUOTAQUAL_KIND_KUBECONFIG), every lever, the nine scenarios, and teardown.
//
// It lives in its own package because package topology's TestMain re-executes its tests
// inside the netns engine's private namespaces, where neither the Docker engine (which kind
// drives) nor the cluster's API server can be reached. It needs a kind node image present
// locally: kind v0.33.0's default, or the one `make kind-node-image` builds from Debian packages
// and the Go module proxy (the project's machines have no registry), or the one
// QUOTAQUAL_KIND_NODE_IMAGE names; without one it skips with that reason.
package kinde2e_test

import (
	"context"
	"github.com/quotaqual/quotaqual/internal/testlock"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/testbin"
	"github.com/quotaqual/quotaqual/scenarios"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/dockerengine"
	"github.com/quotaqual/quotaqual/topology/images"
	"github.com/quotaqual/quotaqual/topology/internal/e2e"
	"github.com/quotaqual/quotaqual/topology/internal/enginetest"
	"github.com/quotaqual/quotaqual/topology/kindengine"
)

var binary string

// TestMain builds a static quotaqual binary for the image.
func TestMain(m *testing.M) { os.Exit(testbin.Main(m, "kind", &binary)) }

// nodeImage returns the kind node image to use, or skips with the reason it cannot run.
func nodeImage(t *testing.T) string {
	t.Helper()
	if topology.Inside() {
		t.Skip("inside the netns engine's namespaces neither Docker nor a kind API server can be reached")
	}
	if !dockerengine.Available() {
		t.Skip("no Docker engine answers: kind cannot create a cluster here")
	}
	img := os.Getenv(kindengine.EnvNodeImage)
	if img == "" {
		img = kindengine.DefaultNodeImage
		if !e2e.ImageExists(img) {
			img = kindengine.LocalNodeImage
		}
	}
	if !e2e.ImageExists(img) {
		t.Skipf("no kind node image present locally (%s): a kind cluster cannot start on this machine; build one (make kind-node-image: %s) or load one (docker load) and set %s to it",
			img, kindengine.LocalNodeImage, kindengine.EnvNodeImage)
	}
	testlock.Docker(t) // kind's nodes are Docker containers: one docker topology at a time
	return img
}

func newTopo(t *testing.T, kind topology.KindOptions) (topology.Topology, *deployment.Deployment, deployment.Profile) {
	t.Helper()
	id := topology.NewRunID()
	p, err := deployment.ProfileByName("quick")
	if err != nil {
		t.Fatal(err)
	}
	quick, _ := scenarios.ForProfile("quick", nil)
	d, err := scenarios.NewDeployment(id, p, quick)
	if err != nil {
		t.Fatal(err)
	}
	topo, err := topology.New(topology.EngineKind, topology.Spec{
		RunID: id, WorkDir: t.TempDir(), Binary: binary, Deployment: d, Stdout: e2e.LogWriter{T: t}, Kind: kind,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if _, err := topo.Down(ctx); err != nil {
			t.Errorf("Down: %v", err)
		}
	})
	return topo, d, p
}

func chat(t *testing.T, topo topology.Topology, gateway string, d *deployment.Deployment, subject string) (int, string) {
	t.Helper()
	return e2e.Chat(t, topo, gateway, d, subject, 15*time.Second, t.Logf)
}

// eventually polls f every 250 ms until want(status) or the deadline.
func eventually(t *testing.T, what string, within time.Duration, f func() int, want func(int) bool) {
	t.Helper()
	e2e.Eventually(t, what, within, 250*time.Millisecond, f, want)
}

// exercise brings the topology up and pulls every lever.
func exercise(t *testing.T, topo topology.Topology, d *deployment.Deployment, p deployment.Profile) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	if err := topo.Up(ctx); err != nil {
		t.Fatalf("Up: %v", err)
	}
	t.Logf("up in %s; facts: %v", time.Since(start).Round(time.Second), topo.Facts())
	// Enforcement depends on the cluster's CNI and kernel: where the negative control is not
	// denied, the engine reports it (and the scenarios that need it skip); the probes must then
	// reach everywhere, which still proves the probes in pods work.
	// Partitions are cut through the kind nodes (nft in the pod's network namespace), so they
	// do not depend on it.
	caps := topo.Capabilities()
	enforced := caps.NetworkPolicy
	if !enforced {
		t.Logf("NetworkPolicy is not enforced in this cluster, so the policy checks are skipped: %s", caps.NetworkPolicyReason)
	}

	// Data path through Client(): both gateways admit, with provider attribution.
	for _, g := range topo.Gateways() {
		if code, site := chat(t, topo, g, d, deployment.Subjects[0]); code != http.StatusOK || site == "" {
			t.Errorf("chat via %s: %d, site %q", g, code, site)
		}
	}

	// Reachability: every probe agrees with the policy (the live NetworkPolicy proof).
	pol := topology.DefaultPolicy(topo.Ports(), topology.GatewayNames(2))
	ports := map[string][]int{topology.HostValkey: {topo.Ports().Valkey}}
	for _, g := range topo.Gateways() {
		ports[g] = []int{topo.Ports().GatewayData, topo.Ports().GatewayAdmin}
	}
	for _, pr := range topology.Providers {
		ports[pr] = []int{topo.Ports().ProviderData, topo.Ports().ProviderAdmin}
	}
	for _, from := range append([]string{topology.HostObserver}, topology.ComponentHosts(topo.Gateways())...) {
		if from == topology.HostValkey {
			continue
		}
		for _, to := range topology.ComponentHosts(topo.Gateways()) {
			for _, port := range ports[to] {
				r := topo.Probe(ctx, from, to, port)
				if want := pol.Allows(from, to, port) || !enforced; !r.Supported || r.Reached != want {
					t.Errorf("probe %s → %s:%d: reached=%v (%s), policy allows=%v, enforced=%v", from, to, port, r.Reached, r.Error, pol.Allows(from, to, port), enforced)
				}
			}
		}
	}

	// Partition gateway-a from valkey: gateway-a is cut off, gateway-b is not; heal restores.
	if !caps.Partition {
		t.Errorf("no partition lever on a kind cluster of this docker host: %s", caps.PartitionReason)
	} else {
		if err := topo.Partition(ctx, topology.HostGatewayA, topology.HostValkey); err != nil {
			t.Fatalf("Partition: %v", err)
		}
		if r := topo.Probe(ctx, topology.HostGatewayA, topology.HostValkey, topo.Ports().Valkey); r.Reached {
			t.Error("gateway-a reaches valkey while partitioned")
		}
		if r := topo.Probe(ctx, topology.HostGatewayB, topology.HostValkey, topo.Ports().Valkey); !r.Reached {
			t.Errorf("gateway-b lost valkey in gateway-a's partition: %s", r.Error)
		}
		if err := topo.Heal(ctx, topology.HostGatewayA, topology.HostValkey); err != nil {
			t.Fatalf("Heal: %v", err)
		}
		if r := topo.Probe(ctx, topology.HostGatewayA, topology.HostValkey, topo.Ports().Valkey); !r.Reached {
			t.Errorf("gateway-a does not reach valkey after the heal: %s", r.Error)
		}
	}

	// Rollout restart of gateway-a: ready again and admitting.
	if err := topo.RestartGateway(ctx, topology.HostGatewayA); err != nil {
		t.Fatalf("RestartGateway: %v", err)
	}
	eventually(t, "gateway-a after restart", time.Minute, func() int {
		c, _ := chat(t, topo, topology.HostGatewayA, d, deployment.Subjects[1])
		return c
	}, func(c int) bool { return c == http.StatusOK })

	// Valkey scaled to 0: fail closed with 503; scaled back: admission recovers.
	if err := topo.StopValkey(ctx); err != nil {
		t.Fatalf("StopValkey: %v", err)
	}
	for _, g := range topo.Gateways() {
		if code, _ := chat(t, topo, g, d, deployment.Subjects[2]); code != http.StatusServiceUnavailable {
			t.Errorf("%s with valkey stopped: %d, want 503", g, code)
		}
	}
	if err := topo.StartValkey(ctx); err != nil {
		t.Fatalf("StartValkey: %v", err)
	}
	eventually(t, "admission after valkey is back", p.RecoveryMax+time.Minute, func() int {
		c, _ := chat(t, topo, topology.HostGatewayB, d, deployment.Subjects[2])
		return c
	}, func(c int) bool { return c == http.StatusOK || c == http.StatusTooManyRequests })

	// The nine scenarios, as `quotaqual run --topology kind` runs them.
	env := &scenarios.Env{Topo: topo, Deployment: d, Profile: p,
		Record: func(evidence.RequestRecord) {}, Progress: func(s string) { t.Log(s) }}
	// Without a lever exactly the scenarios that need it skip; every other one passes. Network
	// policy needs enforcement; partitions are cut through the nodes on a kind cluster of this
	// docker host, enforcement or not.
	lacksLever := map[string]bool{}
	for _, sc := range scenarios.All() {
		lacksLever[sc.Name] = (slices.Contains(sc.Needs, scenarios.NeedNetworkPolicy) && !caps.NetworkPolicy) ||
			(slices.Contains(sc.Needs, scenarios.NeedPartition) && !caps.Partition)
	}
	// The lever the kind engine does not have yet: a replicated store group; valkey-failover
	// and replica-loss skip with the reason. gateway-crash runs (a SIGKILL through containerd), rolling-upgrade
	// too (the gateway's ConfigMap rewritten, then a rollout).
	missingOnKind := map[string]bool{"valkey-failover": true, "replica-loss": true}
	quick, _ := scenarios.ForProfile("quick", nil)
	results := scenarios.Run(ctx, env, quick)
	skips := 0
	for _, r := range results {
		t.Logf("scenario %s: %s %s", r.Name, r.Status, r.Reason)
		want := evidence.Passed
		if lacksLever[r.Name] || missingOnKind[r.Name] {
			want, skips = evidence.Skipped, skips+1
		}
		if r.Status != want {
			t.Errorf("scenario %s: %s, want %s", r.Name, r.Status, want)
		}
	}
	// With those skips a kind run qualifies only in part (and `quotaqual run --topology kind`
	// exits 4 under the default --require all), each skip named with its reason.
	wantLevel := evidence.LevelQualified
	if skips > 0 {
		wantLevel = evidence.LevelPartial
	}
	if q := evidence.Assess(results, "all", func(string) bool { return true }); q.Level != wantLevel || len(q.RequiredSkipped()) != skips {
		t.Errorf("qualification %s, want %s with the %d skips required", q, wantLevel, skips)
	}

	// Logs of every component, including the gateway pod the restart replaced.
	dir := t.TempDir()
	if err := topo.CollectLogs(dir); err != nil {
		t.Errorf("CollectLogs: %v", err)
	}
	for _, h := range topology.ComponentHosts(topo.Gateways()) {
		if h == topology.HostClient {
			continue // the idle client pod logs nothing
		}
		b, err := os.ReadFile(filepath.Join(dir, h+".log"))
		if err != nil || len(b) == 0 {
			t.Errorf("no log for %s: %v", h, err)
		}
		if h == topology.HostGatewayA && strings.Count(string(b), "=== pod ") < 2 {
			t.Errorf("gateway-a's log lacks the pod the restart replaced")
		}
		if h == topology.HostGatewayA && !strings.Contains(string(b), "(previous container)") {
			t.Errorf("gateway-a's log lacks the container gateway-crash killed")
		}
	}

	td, err := topo.Down(context.Background())
	if err != nil {
		t.Fatalf("Down: %v", err)
	}
	t.Logf("teardown in %s: %v", td.Elapsed, td.Removed)
	if len(td.Removed) == 0 {
		t.Error("Down removed nothing")
	}
	// Logs stay collectable after Down (qualify collects them after teardown).
	if err := topo.CollectLogs(t.TempDir()); err != nil {
		t.Errorf("CollectLogs after Down: %v", err)
	}
}

// TestKindTopology creates a run-scoped kind cluster, pulls every lever, runs the nine
// scenarios and deletes the cluster.
func TestKindTopology(t *testing.T) {
	img := nodeImage(t)
	topo, d, p := newTopo(t, topology.KindOptions{NodeImage: img})
	exercise(t, topo, d, p)
	out, _ := exec.Command("docker", "ps", "-a", "--filter", "label=io.x-k8s.kind.cluster", "--format", "{{.Names}}").Output()
	if id := topo.Facts()["run_id"].(string); strings.Contains(string(out), "qq-"+id) {
		t.Errorf("kind node containers of run %s left after Down: %s", id, out)
	}
}

// TestKindTopologyExistingCluster runs against the cluster QUOTAQUAL_KIND_KUBECONFIG (and
// QUOTAQUAL_KIND_CONTEXT) names, in a run-scoped namespace only.
func TestKindTopologyExistingCluster(t *testing.T) {
	kc := os.Getenv("QUOTAQUAL_KIND_KUBECONFIG")
	if kc == "" {
		t.Skip("QUOTAQUAL_KIND_KUBECONFIG is not set: no existing cluster to run against")
	}
	if topology.Inside() {
		t.Skip("inside the netns engine's namespaces the cluster cannot be reached")
	}
	topo, d, p := newTopo(t, topology.KindOptions{Kubeconfig: kc, Context: os.Getenv("QUOTAQUAL_KIND_CONTEXT")})
	exercise(t, topo, d, p)
}

// TestKindUpWithoutNodeImageFailsClearly is the live path where this machine can take it:
// with Docker but no kind node image, Up builds the images, then stops before creating
// anything, naming the missing image and the fix, and Down has nothing to remove.
func TestKindUpWithoutNodeImageFailsClearly(t *testing.T) {
	if topology.Inside() || !dockerengine.Available() {
		t.Skip("needs a Docker engine outside the netns engine's namespaces")
	}
	const missing = "kindest/node:v0.0.0-quotaqual-absent"
	if e2e.ImageExists(missing) {
		t.Skip("an image named " + missing + " exists locally, so a missing node image cannot be shown")
	}
	hadValkey := e2e.ImageExists(images.DefaultValkeyImage)
	topo, _, _ := newTopo(t, topology.KindOptions{NodeImage: missing})
	t.Cleanup(func() {
		if f, ok := topo.Facts()["quotaqual_image"].(string); ok && f != "" {
			_ = exec.Command("docker", "image", "rm", f).Run()
		}
		if !hadValkey {
			_ = exec.Command("docker", "image", "rm", images.DefaultValkeyImage).Run()
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err := topo.Up(ctx)
	if err == nil || !strings.Contains(err.Error(), missing) || !strings.Contains(err.Error(), kindengine.EnvNodeImage) {
		t.Fatalf("Up without a node image: %v", err)
	}
	td, err := topo.Down(ctx)
	if err != nil || len(td.Removed) != 0 {
		t.Errorf("Down after the failed Up: %+v, %v", td, err)
	}
}

// KindCleanup asks the Docker engine (through kind's provider) for the run's cluster and
// removes nothing that is not its own.
func TestKindCleanupOfAnUnknownRunRemovesNothing(t *testing.T) {
	if topology.Inside() || !dockerengine.Available() {
		t.Skip("needs a Docker engine outside the netns engine's namespaces")
	}
	td, err := kindengine.Cleanup(context.Background(), topology.NewRunID())
	if err != nil || len(td.Removed) != 0 {
		t.Errorf("KindCleanup of an unknown run: %+v, %v", td, err)
	}
}

// TestKindConformance runs the engine conformance suite (enginetest.Run) on kind over what it
// claims beyond TestKindTopology's two gateways: the single store (kind runs no cluster and no
// store group yet) with three gateways. One combination, as every kind Up creates a cluster;
// without a node image it skips with nodeImage's reason, like every kind test here.
func TestKindConformance(t *testing.T) {
	img := nodeImage(t)
	newSpec := func(t *testing.T) topology.Spec {
		spec := enginetest.SpecFor(t, binary, "")
		spec.Kind = topology.KindOptions{NodeImage: img}
		return spec
	}
	enginetest.Run(t, topology.EngineKind, newSpec, enginetest.Claims(t, topology.EngineKind, newSpec, []int{3}))
}
