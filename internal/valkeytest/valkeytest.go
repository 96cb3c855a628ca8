// Package valkeytest starts a real valkey-server for a test: a random port, the test's own temp
// directory, AOF on, stopped when the test ends. There is no mock: a missing valkey-server fails
// the test with the install command, because a skip would hide a broken CI machine.
package valkeytest

import (
	"context"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/valkeyproc"
)

// Start launches a server for t and registers its shutdown.
func Start(t testing.TB, opts ...func(*valkeyproc.Options)) *valkeyproc.Server {
	t.Helper()
	o := valkeyproc.Options{Dir: t.TempDir()}
	for _, f := range opts {
		f(&o)
	}
	s, err := valkeyproc.Start(context.Background(), o)
	if err != nil {
		t.Fatalf("start valkey-server: %v", err)
	}
	t.Cleanup(func() { _ = s.Kill() })
	return s
}

// WithPassword requires AUTH.
func WithPassword(pw string) func(*valkeyproc.Options) {
	return func(o *valkeyproc.Options) { o.Password = pw }
}

// StartReplicated launches a primary, a replica and three Sentinels (quorum 2, down after 1 s)
// on loopback for t, waits until the Sentinels know each other and the replica, and registers
// their shutdown. opts may adjust the options before the start.
func StartReplicated(t testing.TB, opts ...func(*valkeyproc.ReplicatedOptions)) *valkeyproc.Replicated {
	t.Helper()
	o := valkeyproc.ReplicatedOptions{
		Primary: valkeyproc.Options{Dir: t.TempDir()},
		Replica: valkeyproc.Options{Dir: t.TempDir()},
	}
	for range 3 {
		o.Sentinels = append(o.Sentinels, valkeyproc.Options{Dir: t.TempDir()})
	}
	for _, f := range opts {
		f(&o)
	}
	r, err := valkeyproc.StartReplicated(context.Background(), o)
	if err != nil {
		t.Fatalf("start replicated valkey: %v", err)
	}
	t.Cleanup(func() {
		// A paused node would ignore SIGKILL only until resumed; resume first.
		for _, n := range r.Nodes() {
			_ = n.Resume()
		}
		r.Kill()
	})
	if err := r.WaitSentinelsReady(context.Background(), 15*time.Second); err != nil {
		t.Fatal(err)
	}
	return r
}

// StartCluster launches a Valkey Cluster of primaries (each with replicasPerPrimary replicas)
// on loopback for t, each node on a random port in its own temp directory, waits for
// cluster_state:ok on every node and registers their shutdown. opts may adjust the options
// before the start (a password, announce addresses, ...).
func StartCluster(t testing.TB, primaries, replicasPerPrimary int, opts ...func(*valkeyproc.ClusterOptions)) *valkeyproc.Cluster {
	t.Helper()
	o := valkeyproc.ClusterOptions{Primaries: primaries, ReplicasPerPrimary: replicasPerPrimary}
	for range primaries * (1 + replicasPerPrimary) {
		o.Nodes = append(o.Nodes, valkeyproc.Options{Dir: t.TempDir()})
	}
	for _, f := range opts {
		f(&o)
	}
	c, err := valkeyproc.StartCluster(context.Background(), o)
	if err != nil {
		t.Fatalf("start valkey cluster: %v", err)
	}
	t.Cleanup(func() {
		for _, n := range c.Nodes {
			_ = n.Resume()
		}
		c.Kill()
	})
	return c
}

// WithClusterPassword requires AUTH on every cluster node.
func WithClusterPassword(pw string) func(*valkeyproc.ClusterOptions) {
	return func(o *valkeyproc.ClusterOptions) { o.Password = pw }
}
