package ledger_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/valkeyproc"
	"github.com/quotaqual/quotaqual/internal/valkeytest"
	"github.com/quotaqual/quotaqual/ledger"
	"github.com/quotaqual/quotaqual/ledger/ledgertest"
)

// The tests of the Valkey backend on a real Valkey Cluster of three primaries (with a
// password), each test on its own cluster.

const clusterPassword = "cluster-canary-Pw3"

func threePrimaries(t *testing.T) *valkeyproc.Cluster {
	t.Helper()
	return valkeytest.StartCluster(t, 3, 0, valkeytest.WithClusterPassword(clusterPassword))
}

func newClusterLedger(t *testing.T, c *valkeyproc.Cluster, limits ledger.Limits) (*ledger.Valkey, string) {
	t.Helper()
	ns := fmt.Sprintf("qq%d", nsSeq.Add(1))
	v, err := ledger.NewValkey(ledger.ValkeyOptions{
		Cluster:   &ledger.ClusterOptions{Addresses: c.Addrs(), Password: c.Password()},
		Namespace: ns, Timeout: time.Second, Limits: limits,
	})
	if err != nil {
		t.Fatalf("NewValkey: %v", err)
	}
	t.Cleanup(func() { _ = v.Close() })
	return v, ns
}

// The whole contract holds on a three-primary cluster.
func TestConformanceValkeyCluster(t *testing.T) {
	c := threePrimaries(t)
	ledgertest.Run(t, func(t *testing.T) ledger.Ledger {
		v, _ := newClusterLedger(t, c, ledgertest.Limits(t))
		return v
	})
}

// Two gateways' ledgers on the cluster, one key: the history is linearizable and never holds
// more than the capacity (the same check as on one Valkey).
func TestLinearizableTwoValkeyInstancesOneCluster(t *testing.T) {
	c := threePrimaries(t)
	var ls []ledger.Ledger
	for range 2 {
		v, err := ledger.NewValkey(ledger.ValkeyOptions{
			Cluster:   &ledger.ClusterOptions{Addresses: c.Addrs(), Password: c.Password()},
			Namespace: "lin-cluster", Timeout: 5 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = v.Close() })
		ls = append(ls, v)
	}
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	requireLinearizable(t, runTraffic(t, ls, "tenant-a", seed))
}

// HashSlot agrees with the store's CLUSTER KEYSLOT, hash tags included.
func TestHashSlotMatchesClusterKeyslot(t *testing.T) {
	t.Parallel()
	c := threePrimaries(t)
	keys := []string{"", "a", "{a}x", "x{a}", "{}a", "{a", "a}b{c}", "{{a}}", "quotaqual:{0123abcd}:s60", "héllo"}
	for i := range 30 {
		keys = append(keys, fmt.Sprintf("subject-%d", i))
	}
	for _, k := range keys {
		rep, err := valkeyproc.Do(t.Context(), c.NodeAddr(0), clusterPassword, "CLUSTER", "KEYSLOT", k)
		if err != nil {
			t.Fatal(err)
		}
		if got := int64(ledger.HashSlot(k)); got != rep.(int64) {
			t.Errorf("HashSlot(%q) = %d; CLUSTER KEYSLOT says %d", k, got, rep)
		}
	}
}

// Twenty subjects' quota state spreads over the shards: Locate names each subject's slot and
// owning primary, every key of a subject is in that slot, and the named primary holds the
// subject's keys itself (a non-owner would answer MOVED). At least two shards hold subjects.
func TestSubjectsLandOnSeveralShards(t *testing.T) {
	t.Parallel()
	c := threePrimaries(t)
	v, _ := newClusterLedger(t, c, ledger.Limits{})
	q := &ledger.Quota{Rule: "spread", Lease: 30 * time.Second, Budgets: []ledger.Budget{
		{Window: 10 * time.Second, Capacity: 100}, {Window: 2 * time.Hour, Capacity: 500},
	}}
	ctx := t.Context()
	perNode := map[string]int{}
	for i := range 20 {
		subject := fmt.Sprintf("application-%d", i)
		d, err := v.Reserve(ctx, q, subject, 10)
		if err != nil || !d.Admitted {
			t.Fatalf("reserve %s: %+v %v", subject, d, err)
		}
		loc, err := v.Locate(ctx, q, subject)
		if err != nil {
			t.Fatal(err)
		}
		if loc.NodeID == "" || len(loc.Keys) != 4 { // :r, two widths, :x
			t.Fatalf("%s: location %+v", subject, loc)
		}
		for _, k := range loc.Keys {
			if ledger.HashSlot(k) != loc.Slot {
				t.Fatalf("%s: key %s is not in slot %d", subject, k, loc.Slot)
			}
			// The harness's evidence maps keys to subjects by this tag (qualify).
			if tag := "{" + ledger.HashTag(q.Rule, subject) + "}"; !strings.Contains(k, tag) {
				t.Fatalf("%s: key %s does not carry HashTag's %s", subject, k, tag)
			}
		}
		// the reserve wrote the reservation hash (the bucket hashes wait for usage)
		n, err := valkeyproc.Do(ctx, loc.Node, clusterPassword, "EXISTS", loc.Keys[0])
		if err != nil || n != int64(1) {
			t.Fatalf("%s: EXISTS on %s (slot %d): %v %v; want the reservation hash there", subject, loc.Node, loc.Slot, n, err)
		}
		perNode[loc.Node]++
		t.Logf("%s: slot %d on %s (%s)", subject, loc.Slot, loc.Node, loc.NodeID)
	}
	if len(perNode) < 2 {
		t.Fatalf("20 subjects on %d shard(s): %v; want at least two", len(perNode), perNode)
	}
}

// A cluster node reached through backend.cluster must be in a cluster: a single Valkey named
// as a cluster seed fails every call closed, saying so.
func TestClusterOptionRefusesASingleNode(t *testing.T) {
	t.Parallel()
	srv := valkeytest.Start(t)
	v, err := ledger.NewValkey(ledger.ValkeyOptions{Cluster: &ledger.ClusterOptions{Addresses: []string{srv.Addr()}}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	q := &ledger.Quota{Rule: "single", Lease: 30 * time.Second, Budgets: []ledger.Budget{{Window: 10 * time.Second, Capacity: 100}}}
	d, err := v.Reserve(t.Context(), q, "subject", 1)
	if !errors.Is(err, ledger.ErrStore) || !strings.Contains(err.Error(), "not a Valkey Cluster") || d.Admitted {
		t.Fatalf("reserve on a single node named as a cluster: %+v, %v", d, err)
	}
	if _, err := ledger.NewValkey(ledger.ValkeyOptions{Cluster: &ledger.ClusterOptions{}}); err == nil {
		t.Fatal("a cluster without seed addresses was accepted")
	}
	if _, err := ledger.NewValkey(ledger.ValkeyOptions{Cluster: &ledger.ClusterOptions{Addresses: []string{srv.Addr()}},
		Sentinel: &ledger.SentinelOptions{MasterName: "m", Addresses: []string{srv.Addr()}}}); err == nil {
		t.Fatal("cluster and Sentinel together were accepted")
	}
}

// The cluster password never appears in an error, and a wrong one fails closed.
func TestClusterPasswordNeverInErrors(t *testing.T) {
	t.Parallel()
	c := threePrimaries(t)
	const wrong = "wrong-cluster-canary-Pw4"
	v, err := ledger.NewValkey(ledger.ValkeyOptions{Cluster: &ledger.ClusterOptions{Addresses: c.Addrs(), Password: wrong}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	q := &ledger.Quota{Rule: "pw", Lease: 30 * time.Second, Budgets: []ledger.Budget{{Window: 10 * time.Second, Capacity: 100}}}
	d, err := v.Reserve(t.Context(), q, "subject", 1)
	if err == nil || d.Admitted {
		t.Fatalf("reserve with a wrong password: %+v, %v", d, err)
	}
	if strings.Contains(err.Error(), wrong) || strings.Contains(err.Error(), clusterPassword) {
		t.Fatalf("the error shows a password: %v", err)
	}
}

// Acknowledged mode on a cluster with a replica per primary: WAIT runs on the primary of the
// subject's shard, on the script's own connection. Every subject is admitted with its shard's
// replica in sync; with that replica frozen, the subject's reserve fails closed while a subject
// of another shard is still admitted.
func TestClusterAcknowledgedWaitsForTheShardsReplica(t *testing.T) {
	t.Parallel()
	c := valkeytest.StartCluster(t, 3, 1)
	// A shard's first acknowledged write after the start took up to 200 ms here (the replica's
	// first acknowledgement); a second leaves room for a loaded machine.
	v, err := ledger.NewValkey(ledger.ValkeyOptions{
		Cluster:   &ledger.ClusterOptions{Addresses: c.Addrs()},
		Namespace: "ack", Timeout: 3 * time.Second, MinReplicas: 1, AckTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	q := &ledger.Quota{Rule: "ack-cluster", Lease: time.Minute, Budgets: []ledger.Budget{{Window: time.Minute, Capacity: 1000}}}
	ctx := t.Context()
	shardOf := map[string]int{} // subject -> primary index
	for i := range 12 {
		subject := fmt.Sprintf("application-%d", i)
		if d, err := v.Reserve(ctx, q, subject, 1); err != nil || !d.Admitted {
			t.Fatalf("reserve %s with every replica in sync: %+v, %v", subject, d, err)
		}
		loc, err := v.Locate(ctx, q, subject)
		if err != nil {
			t.Fatal(err)
		}
		for p := range c.Primaries {
			if c.NodeID(p) == loc.NodeID {
				shardOf[subject] = p
			}
		}
	}
	frozen, other := "", ""
	for s, p := range shardOf {
		switch {
		case p == 0 && frozen == "":
			frozen = s
		case p != 0 && other == "":
			other = s
		}
	}
	if frozen == "" || other == "" {
		t.Fatalf("twelve subjects did not cover primary 0 and another: %v", shardOf)
	}
	replica := c.Nodes[c.Primaries] // primary 0's replica
	if err := replica.Pause(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = replica.Resume() }()
	d, err := v.Reserve(ctx, q, frozen, 1)
	if !errors.Is(err, ledger.ErrNotAcknowledged) || d.Admitted {
		t.Errorf("reserve %s with its shard's replica frozen: %+v, %v; want ErrNotAcknowledged", frozen, d, err)
	}
	if d, err := v.Reserve(ctx, q, other, 1); err != nil || !d.Admitted {
		t.Errorf("reserve %s on another shard: %+v, %v; want admitted", other, d, err)
	}
}

// A policy's backend.cluster opens a cluster ledger: the seeds and the password from the
// environment reach the cluster client.
func TestOpenAClusterFromThePolicy(t *testing.T) {
	t.Parallel()
	c := threePrimaries(t)
	seeds := "['" + strings.Join(c.Addrs()[:2], "', '") + "']" // two seeds: the client learns the third
	doc := `backend: {kind: valkey, namespace: open-cluster, cluster: {addresses: ` + seeds + `, password_env: QQ_TEST_CLUSTER_PW}}
rules:
  - name: everyone
    budgets: [{window: 10s, capacity: 100}]
    reservation_timeout: 30s
    reserved_tokens: 10
`
	env := func(name string) (string, bool) {
		if name == "QQ_TEST_CLUSTER_PW" {
			return clusterPassword, true
		}
		return "", false
	}
	p, err := ledger.LoadPolicy([]byte(doc), env)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ledger.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	q := p.Rules[0].Quota
	seen := map[string]bool{}
	for i := range 12 {
		subject := fmt.Sprintf("subject-%d", i)
		if d, err := l.Reserve(t.Context(), q, subject, 10); err != nil || !d.Admitted {
			t.Fatalf("reserve %s: %+v %v", subject, d, err)
		}
		loc, err := l.(*ledger.Valkey).Locate(t.Context(), q, subject)
		if err != nil {
			t.Fatal(err)
		}
		seen[loc.Node] = true
	}
	if !seen[c.NodeAddr(2)] {
		t.Fatalf("no subject of twelve on the node not given as a seed (%s): %v", c.NodeAddr(2), seen)
	}
}

// One cluster node whose maxmemory-policy evicts refuses the whole cluster at connect, whatever
// node a keyless CONFIG GET would have reached; allow_eviction accepts it.
func TestClusterWithOneEvictingNodeIsRefused(t *testing.T) {
	t.Parallel()
	c := threePrimaries(t)
	if _, err := valkeyproc.Do(t.Context(), c.NodeAddr(2), clusterPassword, "CONFIG", "SET", "maxmemory-policy", "volatile-lru"); err != nil {
		t.Fatal(err)
	}
	q := &ledger.Quota{Rule: "evict", Lease: 30 * time.Second, Budgets: []ledger.Budget{{Window: 10 * time.Second, Capacity: 100}}}
	for _, allow := range []bool{false, true} {
		v, err := ledger.NewValkey(ledger.ValkeyOptions{Cluster: &ledger.ClusterOptions{Addresses: c.Addrs()[:1], Password: clusterPassword},
			Namespace: "ev", Timeout: time.Second, AllowEviction: allow})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 6 { // subjects on several shards: each call connects and checks anew until one succeeds
			d, err := v.Reserve(t.Context(), q, fmt.Sprintf("k%d", i), 10)
			switch {
			case !allow && (err == nil || !strings.Contains(err.Error(), "volatile-lru")):
				t.Fatalf("reserve k%d on a cluster with an evicting node: %+v, %v; want a refusal naming the policy", i, d, err)
			case allow && (err != nil || !d.Admitted):
				t.Fatalf("reserve k%d with allow_eviction: %+v, %v", i, d, err)
			}
		}
		_ = v.Close()
	}
}

// A shard's primary dies: its subject's calls fail closed (never an admission) until the
// cluster promotes the replica, then the ledger follows the new slot owner without a restart;
// the old primary, restarted from its directory, rejoins as a replica.
func TestClusterLedgerFollowsAPromotion(t *testing.T) {
	t.Parallel()
	c := valkeytest.StartCluster(t, 3, 1)
	v, _ := newClusterLedger(t, c, ledger.Limits{})
	q := &ledger.Quota{Rule: "promotion", Lease: time.Minute, Budgets: []ledger.Budget{{Window: time.Minute, Capacity: 1000}}}
	ctx := t.Context()
	subject := ""
	for i := 0; subject == ""; i++ {
		s := fmt.Sprintf("application-%d", i)
		loc, err := v.Locate(ctx, q, s)
		if err != nil {
			t.Fatal(err)
		}
		if loc.NodeID == c.NodeID(0) {
			subject = s
		}
	}
	if d, err := v.Reserve(ctx, q, subject, 1); err != nil || !d.Admitted {
		t.Fatalf("reserve before the failure: %+v, %v", d, err)
	}
	if err := c.Nodes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	failed := 0
	until(t, 60*time.Second, "an admission after the promotion", func() (bool, error) {
		d, err := v.Reserve(ctx, q, subject, 1)
		if err != nil {
			failed++
			return false, err
		}
		return d.Admitted, nil
	})
	// Each node learns of the promotion by gossip: the one Locate asks may lag a moment.
	until(t, 30*time.Second, "Locate naming the promoted replica", func() (bool, error) {
		loc, err := v.Locate(ctx, q, subject)
		if err == nil && loc.NodeID != c.NodeID(3) {
			err = fmt.Errorf("on %s (%s); want primary 0's replica %s", loc.Node, loc.NodeID, c.NodeID(3))
		}
		return err == nil, err
	})
	t.Logf("%d calls failed closed before the promotion", failed)
	if err := c.Nodes[0].Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitOK(ctx, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	until(t, 60*time.Second, "the old primary rejoining as a replica", func() (bool, error) {
		role, _, err := valkeyproc.Role(ctx, c.Nodes[0])
		return role == "slave", err
	})
}
