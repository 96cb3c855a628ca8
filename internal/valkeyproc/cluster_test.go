package valkeyproc_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/valkeyproc"
	"github.com/quotaqual/quotaqual/internal/valkeytest"
)

func TestSlotRangesCoverEverySlotOnce(t *testing.T) {
	for _, n := range []int{1, 3, 5, 7} {
		next := 0
		for _, r := range valkeyproc.SlotRanges(n) {
			if r[0] != next || r[1] < r[0] {
				t.Fatalf("%d primaries: range %v after slot %d", n, r, next-1)
			}
			next = r[1] + 1
		}
		if next != valkeyproc.ClusterSlots {
			t.Fatalf("%d primaries: ranges end at %d", n, next)
		}
	}
}

// Three primaries with a password: each owns its third of the slots, every node knows the
// others, a key is served by the node owning its slot and redirected (MOVED) by the others.
func TestStartClusterOfThreePrimaries(t *testing.T) {
	t.Parallel()
	const pw = "cluster-canary-pw"
	c := valkeytest.StartCluster(t, 3, 0, valkeytest.WithClusterPassword(pw))
	ctx := t.Context()
	nodes, err := c.ClusterNodes(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	ranges := valkeyproc.SlotRanges(3)
	owner := map[string]string{} // slot range -> addr
	for _, n := range nodes {
		if !n.Primary() || len(n.Slots) != 1 {
			t.Fatalf("node %+v: want a primary with one slot range", n)
		}
		owner[n.Slots[0]] = n.Addr
	}
	for i, r := range ranges {
		want := strconv.Itoa(r[0]) + "-" + strconv.Itoa(r[1])
		if owner[want] != c.NodeAddr(i) {
			t.Fatalf("slots %s owned by %q; want primary %d at %s (%v)", want, owner[want], i, c.NodeAddr(i), owner)
		}
	}
	// "{a}" hashes to slot 15495: the third primary's.
	if _, err := valkeyproc.Do(ctx, c.NodeAddr(2), pw, "SET", "{a}x", "1"); err != nil {
		t.Fatalf("SET on the owner: %v", err)
	}
	_, err = valkeyproc.Do(ctx, c.NodeAddr(0), pw, "GET", "{a}x")
	if err == nil || !strings.HasPrefix(err.Error(), "MOVED 15495 "+c.NodeAddr(2)) {
		t.Fatalf("GET on a non-owner: %v; want MOVED 15495 %s", err, c.NodeAddr(2))
	}
	if _, err := valkeyproc.Do(ctx, c.NodeAddr(1), "wrong", "PING"); err == nil {
		t.Fatal("a node accepted a wrong password")
	}
}

// With a replica per primary, each replica follows its primary; a killed primary's replica is
// promoted and the cluster is whole again without it.
func TestClusterReplicaIsPromotedWhenItsPrimaryDies(t *testing.T) {
	t.Parallel()
	c := valkeytest.StartCluster(t, 3, 1)
	ctx := t.Context()
	nodes, err := c.ClusterNodes(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 3; i < 6; i++ {
		n := findNode(t, nodes, c.NodeID(i))
		if n.Primary() || n.MasterID != c.NodeID(i-3) {
			t.Fatalf("node %d: flags %s master %s; want a replica of primary %d (%s)", i, n.Flags, n.MasterID, i-3, c.NodeID(i-3))
		}
	}
	if err := c.Nodes[1].Kill(); err != nil {
		t.Fatal(err)
	}
	// NodeTimeout 2s, then an election: generous on a loaded machine.
	if err := c.WaitOK(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 60*time.Second, "node 4 promoted", func() error {
		nodes, err := c.ClusterNodes(ctx, 0)
		if err != nil {
			return err
		}
		if n := findNode(t, nodes, c.NodeID(4)); !n.Primary() || len(n.Slots) != 1 {
			return errors.New("node 4: " + n.Flags)
		}
		return nil
	})
}

func findNode(t *testing.T, nodes []valkeyproc.ClusterNode, id string) valkeyproc.ClusterNode {
	t.Helper()
	for _, n := range nodes {
		if n.ID == id {
			return n
		}
	}
	t.Fatalf("node %s not in %+v", id, nodes)
	return valkeyproc.ClusterNode{}
}

func waitUntil(t *testing.T, within time.Duration, what string, f func() error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	defer cancel()
	for {
		err := f()
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: not within %v: %v", what, within, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestStartClusterRefusesAMismatchedNodeList(t *testing.T) {
	_, err := valkeyproc.StartCluster(t.Context(), valkeyproc.ClusterOptions{Primaries: 3, Nodes: []valkeyproc.Options{{Dir: t.TempDir()}}})
	if err == nil || !strings.Contains(err.Error(), "needs 3 nodes") {
		t.Fatalf("got %v", err)
	}
}

// BenchmarkStartCluster measures the start of a three-primary cluster to cluster_state:ok
// against the start of one server, the baseline, in the same run.
func BenchmarkStartCluster(b *testing.B) {
	b.Run("single", func(b *testing.B) {
		for b.Loop() {
			s, err := valkeyproc.Start(b.Context(), valkeyproc.Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			_ = s.Kill()
		}
	})
	b.Run("cluster3", func(b *testing.B) {
		for b.Loop() {
			o := valkeyproc.ClusterOptions{}
			for range 3 {
				o.Nodes = append(o.Nodes, valkeyproc.Options{Dir: b.TempDir()})
			}
			c, err := valkeyproc.StartCluster(b.Context(), o)
			if err != nil {
				b.Fatal(err)
			}
			c.Kill()
		}
	})
}

// FormCluster makes a cluster of nodes started elsewhere (as an engine starts containers):
// known only by address, every question through the engine's dialer.
func TestFormClusterOfRemoteNodesThroughADialer(t *testing.T) {
	t.Parallel()
	const pw = "form-canary-pw"
	o := valkeyproc.ClusterOptions{Primaries: 3, Password: pw}
	var remote []*valkeyproc.Server
	for i := range 3 {
		s := valkeytest.Start(t, valkeytest.WithPassword(pw), func(no *valkeyproc.Options) {
			no.ExtraArgs = append(no.ExtraArgs, o.NodeArgs(i)...)
		})
		remote = append(remote, valkeyproc.Remote(s.Host(), s.Port(), pw))
	}
	var dials atomic.Int64
	o.Dial = func(ctx context.Context, addr string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	c, err := valkeyproc.FormCluster(t.Context(), remote, o)
	if err != nil {
		t.Fatal(err)
	}
	if dials.Load() == 0 {
		t.Fatal("FormCluster did not use the dialer")
	}
	if _, err := valkeyproc.Do(t.Context(), c.NodeAddr(2), pw, "SET", "{a}x", "1"); err != nil {
		t.Fatalf("SET on the owner of slot 15495: %v", err)
	}
}
