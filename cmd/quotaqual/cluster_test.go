package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/wire"
)

// The full quick qualification on a Valkey Cluster (--store cluster) on netns: every scenario
// passes but valkey-failover and replica-loss, which are about the Sentinel store group and say
// so — so the run is partial, and under the default --require all it exits 4 naming the skips; the
// gateways ran on the cluster (their config names its nodes); and the bundle records each
// subject key's slot and node, spanning at least two shards.
func TestRunOnAClusterStorePassesAndSpreadsTheKeys(t *testing.T) {
	t.Parallel() // a whole run: side by side (docker_runs_test.go)
	if engine, why := topology.Detect(); engine != topology.EngineNetns {
		t.Fatalf("the default topology should be netns on this Linux machine, auto chose %s: %s", engine, why)
	}
	evDir := t.TempDir()
	stdout, stderr, code := quotaqual(t, 4*time.Minute, "run", "--store", "cluster", "--json", "--evidence-dir", evDir)
	var out runJSON
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("run --json printed no JSON (%v)\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	if code != wire.ExitPartial || !strings.Contains(out.Error, "--require all") || !strings.Contains(out.Error, "valkey-failover (") {
		t.Errorf("exit code %d (%s), want %d naming the skipped valkey-failover\nstderr:\n%s", code, out.Error, wire.ExitPartial, stderr)
	}
	if want := len(quickDefault()); len(out.Results) != want {
		t.Fatalf("%d results, want all %d scenarios", len(out.Results), want)
	}
	// The store's own levers (CLIENT PAUSE, maxmemory) act on one server: on a cluster they
	// would reach one node of it, not the store, so those scenarios skip and say so.
	storeLevers := map[string]bool{"store-stall": true, "store-memory-pressure": true}
	storeGroup := map[string]bool{"valkey-failover": true, "replica-loss": true}
	if q := out.Qual; q.Level != evidence.LevelPartial || len(q.RequiredSkipped()) != len(storeGroup)+len(storeLevers) {
		t.Errorf("qualification %+v, want partial with valkey-failover, replica-loss and the store levers' scenarios the required skips", q)
	}
	for _, r := range out.Results {
		switch {
		case storeGroup[r.Name]:
			if r.Status != evidence.Skipped || !strings.Contains(r.Reason, "Sentinels") || !strings.Contains(r.Reason, "--store cluster") {
				t.Errorf("%s: %s (%s), want skipped naming the Sentinel store group and --store cluster", r.Name, r.Status, r.Reason)
			}
		case storeLevers[r.Name]:
			if r.Status != evidence.Skipped || !strings.Contains(r.Reason, "Valkey Cluster") || !strings.Contains(r.Reason, "--store single") {
				t.Errorf("%s: %s (%s), want skipped naming the cluster and --store single", r.Name, r.Status, r.Reason)
			}
		case r.Status != evidence.Passed:
			t.Errorf("%s: %s (%s)", r.Name, r.Status, r.Reason)
		}
	}
	cfg, err := os.ReadFile(filepath.Join(out.BundleDir, "config", "gateway-a.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(cfg), "cluster:") || !strings.Contains(string(cfg), ":6381") || strings.Contains(string(cfg), "url: ${") {
		t.Errorf("gateway-a's config does not put it on the cluster's three nodes:\n%s", cfg)
	}
	var m struct {
		Facts map[string]json.RawMessage `json:"topology_facts"`
	}
	b, err := os.ReadFile(filepath.Join(out.BundleDir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	var p struct {
		Keys []struct {
			Subject, Node, Owner string
			Slot                 int
		} `json:"keys"`
		PerNode map[string]int       `json:"quota_keys_per_node"`
		Checks  []evidence.Assertion `json:"checks"`
	}
	if err := json.Unmarshal(m.Facts["store_cluster_placement"], &p); err != nil {
		t.Fatalf("manifest's store_cluster_placement: %v (%s)", err, m.Facts["store_cluster_placement"])
	}
	if len(p.PerNode) < 2 || len(p.Checks) != 2 || !p.Checks[0].OK || !p.Checks[1].OK {
		t.Errorf("placement: %d nodes hold keys (%v), checks %+v; want at least two, both checks passed", len(p.PerNode), p.PerNode, p.Checks)
	}
	for _, k := range p.Keys {
		if k.Subject == "" || k.Node == "" || k.Node != k.Owner {
			t.Errorf("placement of %+v: want a subject on its slot's owner", k)
		}
	}
	for _, f := range []string{"store-cluster.json", "logs/valkey-cluster-0.log", "logs/valkey-cluster-2.log"} {
		if _, err := os.Stat(filepath.Join(out.BundleDir, f)); err != nil {
			t.Errorf("bundle lacks %s: %v", f, err)
		}
	}
	if _, verr, vcode := quotaqual(t, time.Minute, "evidence", "verify", out.BundleDir); vcode != 0 {
		t.Errorf("evidence verify: exit %d: %s", vcode, verr)
	}
}

// --store is checked before anything starts: an unknown shape, an engine that runs no
// cluster, and a gateway profile that cannot use one are each refused (exit 2) naming the
// flag and the fix.
func TestStoreFlagIsValidated(t *testing.T) {
	cases := []struct {
		args []string
		want []string // fragments of the error
	}{
		{[]string{"run", "--store", "ring"}, []string{"--store", `"ring"`, "single", "cluster"}},
		{[]string{"run", "--store", "cluster", "--topology", "kind"}, []string{"--store cluster", "kind", "one Valkey", "--topology docker"}},
		{[]string{"run", "--store", "cluster", "--gateway", "altgateway"}, []string{"altgateway", "capabilities.store_cluster", "--store single"}},
		{[]string{"up", "--store", "ring", "--topology", "process"}, []string{"--store", `"ring"`}},
		{[]string{"up", "--store", "cluster", "--topology", "kind"}, []string{"--topology"}},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			_, stderr, code := quotaqual(t, 30*time.Second, c.args...)
			if code != wire.ExitUsage {
				t.Errorf("exit %d, want %d; stderr: %s", code, wire.ExitUsage, stderr)
			}
			for _, w := range c.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q does not name %q", stderr, w)
				}
			}
		})
	}
}

// The docker engine on a Valkey Cluster, kept short: the outage lever (every node's container
// stopped and started), the partition (a gateway off the backend network, so off every node),
// the shared budget and the burst pass, every quota key lies on its
// slot's owner (and the keys span two shards when there are enough of them to tell), and
// teardown leaves no container, the nodes' holders included.
//
// gateway-restart is not in the list: on docker it fails on this machine with the single store
// as with the cluster (the restarted container answers 4.4-6.8 s after the old gateway stopped,
// past the 4 s window the scenario must check within) — a docker restart's time, not the
// cluster's.
func runDockerOnAClusterStore(t *testing.T) {
	needDocker(t)
	removeOwnImageAfterwards(t)
	evDir := t.TempDir()
	stdout, stderr, code := quotaqual(t, 6*time.Minute, "run", "--topology", "docker", "--store", "cluster", "--json", "--evidence-dir", evDir,
		"--scenario", "shared-budget", "--scenario", "concurrency", "--scenario", "valkey-outage", "--scenario", "valkey-partition")
	var out runJSON
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("run --json printed no JSON (%v)\nstderr:\n%s", err, stderr)
	}
	if code != 0 {
		t.Errorf("exit code %d (%s), want 0\nstderr:\n%s", code, out.Error, stderr)
	}
	if len(out.Results) != 4 {
		t.Fatalf("%d results, want 4", len(out.Results))
	}
	for _, r := range out.Results {
		if r.Status != evidence.Passed {
			t.Errorf("%s: %s (%s)", r.Name, r.Status, r.Reason)
		}
	}
	b, err := os.ReadFile(filepath.Join(out.BundleDir, "store-cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		PerNode     map[string]int       `json:"quota_keys_per_node"`
		Checks      []evidence.Assertion `json:"checks"`
		SpanNotMade string               `json:"span_not_made"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	if len(p.Checks) == 0 || (len(p.Checks) == 1) != (p.SpanNotMade != "") {
		t.Fatalf("placement checks %+v (span not made: %q): want the owner check, and the span check unless it says why not", p.Checks, p.SpanNotMade)
	}
	for _, c := range p.Checks {
		if !c.OK {
			t.Errorf("placement check failed: %+v (keys per node %v)", c, p.PerNode)
		}
	}
	if dout, _, _ := quotaqual(t, time.Minute, "down", "--run-id", out.RunID); strings.Contains(dout, "stopped") {
		t.Errorf("the docker cluster run left resources behind:\n%s", dout)
	}
}
