package qualify

import (
	"fmt"
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/ledger"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
)

// storeKeys are the store keys a ledger writes for one quota key (the layout's shape:
// reservations, deadlines, a bucket hash, tombstones), all carrying its hash tag.
func storeKeys(ns, rule, subject string) []string {
	p := ns + ":{" + ledger.HashTag(rule, ledger.SubjectKey(subject)) + "}"
	return []string{p + ":a", p + ":d", p + ":b1000", p + ":x"}
}

// threeShards is a view of a three-primary cluster (valkeyproc's slot ranges) with each
// subject's keys put on the node where where(subject) says.
func threeShards(t *testing.T, d *deployment.Deployment, subjects []string, where func(slot int) int) topology.ClusterView {
	t.Helper()
	v := topology.ClusterView{Nodes: []topology.ClusterNodeView{
		{Name: "valkey-cluster-0", Addr: "10.0.0.1:6379", Slots: []string{"0-5460"}},
		{Name: "valkey-cluster-1", Addr: "10.0.0.1:6380", Slots: []string{"5461-10921"}},
		{Name: "valkey-cluster-2", Addr: "10.0.0.1:6381", Slots: []string{"10922-16383"}},
	}}
	for _, s := range subjects {
		keys := storeKeys(d.Namespace, undertest.RuleName, s)
		n := where(ledger.HashSlot(keys[0]))
		v.Nodes[n].Keys = append(v.Nodes[n].Keys, keys...)
	}
	return v
}

func subjectsOf(d *deployment.Deployment) []string {
	var out []string
	for _, c := range d.Credentials {
		out = append(out, c.Username)
	}
	return out
}

func testDeployment(t *testing.T) *deployment.Deployment {
	t.Helper()
	p, err := deployment.ProfileByName("quick")
	if err != nil {
		t.Fatal(err)
	}
	d, err := deployment.NewDeployment("q-cluster-unit", p, deployment.Named("shared-budget", "concurrency", "valid-auth"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// owner is the node whose range (valkeyproc.SlotRanges(3)) holds slot.
func owner(slot int) int {
	switch {
	case slot <= 5460:
		return 0
	case slot <= 10921:
		return 1
	}
	return 2
}

func TestPlacementPassesWhenKeysSpreadOverTheirOwners(t *testing.T) {
	d := testDeployment(t)
	subjects := subjectsOf(d)
	p := placeKeys(threeShards(t, d, subjects, owner), quotaTags(d))
	if !p.OK() {
		t.Fatalf("placement failed on keys where their slots put them: %+v", p.Checks)
	}
	if len(p.Keys) != len(subjects) || p.Unattributed != 0 {
		t.Fatalf("%d quota keys (%d unattributed), want %d, one per subject", len(p.Keys), p.Unattributed, len(subjects))
	}
	for _, k := range p.Keys {
		if k.Rule != undertest.RuleName || k.Keys != 4 || k.Node != k.Owner || k.Addr == "" {
			t.Errorf("placement %+v: want rule %s, 4 store keys on their owner", k, undertest.RuleName)
		}
	}
}

// The defect the check catches: every subject's state on one shard (a cluster client that
// sends everything to one node, or keys that share one hash tag) passes no scenario's test of
// the quota, but is no spread over the cluster.
func TestPlacementFailsWhenAllKeysAreOnOneShard(t *testing.T) {
	d := testDeployment(t)
	subjects := subjectsOf(d)
	p := placeKeys(threeShards(t, d, subjects, func(int) int { return 1 }), quotaTags(d))
	if p.OK() {
		t.Fatalf("placement passed with every key on valkey-cluster-1: %+v", p.Checks)
	}
	want := fmt.Sprintf("valkey-cluster-1: %d", len(subjects))
	if c := p.Checks[0]; c.OK || !strings.Contains(c.Observed.(string), want) {
		t.Errorf("span check %+v: want failed, observing %q", c, want)
	}
}

// A key found on a node that does not own its slot (the view disagrees with the hash) fails
// the second check even when the keys span shards.
func TestPlacementFailsOnAKeyOffItsOwner(t *testing.T) {
	d := testDeployment(t)
	subjects := subjectsOf(d)
	moved := ledger.HashSlot(storeKeys(d.Namespace, undertest.RuleName, subjects[0])[0])
	p := placeKeys(threeShards(t, d, subjects, func(slot int) int {
		if slot == moved {
			return (owner(slot) + 1) % 3
		}
		return owner(slot)
	}), quotaTags(d))
	if p.Checks[0].OK != true || p.Checks[1].OK {
		t.Fatalf("checks %+v: want the span to hold and the owner check to fail", p.Checks)
	}
	if p.OK() {
		t.Fatal("placement passed with a key off its owner")
	}
}

// Keys no subject's tag explains are counted, not dropped.
func TestPlacementCountsUnattributedKeys(t *testing.T) {
	d := testDeployment(t)
	v := threeShards(t, d, subjectsOf(d), owner)
	v.Nodes[2].Keys = append(v.Nodes[2].Keys, d.Namespace+":{not-a-subject}:a")
	if p := placeKeys(v, quotaTags(d)); p.Unattributed != 1 {
		t.Fatalf("unattributed %d, want 1", p.Unattributed)
	}
}

// With fewer quota keys than MinKeysForSpan the span check is not made (a short --scenario run
// may put its few keys on one shard by chance), and the placement says why; the owner check
// still decides.
func TestPlacementWithFewKeysDoesNotCheckTheSpan(t *testing.T) {
	d := testDeployment(t)
	few := subjectsOf(d)[:MinKeysForSpan-1]
	p := placeKeys(threeShards(t, d, few, func(int) int { return 0 }), quotaTags(d))
	if p.SpanNotMade == "" || len(p.Checks) != 1 || !strings.Contains(p.Checks[0].Name, "slot range") {
		t.Fatalf("placement of %d keys: checks %+v, span not made %q; want only the owner check and the reason", len(few), p.Checks, p.SpanNotMade)
	}
	if p.OK() {
		t.Fatal("a key off its owner passed") // keys all put on node 0 whatever their slot
	}
	p = placeKeys(threeShards(t, d, few, owner), quotaTags(d))
	if !p.OK() || p.SpanNotMade == "" {
		t.Fatalf("few keys on their owners: %+v (%q); want passed, span not made", p.Checks, p.SpanNotMade)
	}
}
