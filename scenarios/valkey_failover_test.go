package scenarios

import (
	"testing"

	"github.com/quotaqual/quotaqual/topology"
)

// TestReplicatedTo pins how valkey-failover decides that the holds before the split reached
// every replica: each replica at or past the primary's offset read once the holds showed,
// the primary still the primary. The first case is a round a loaded docker run saw during the
// holds (the offsets read one after the other, the primary first): replicated, although no
// two offsets are equal.
func TestReplicatedTo(t *testing.T) {
	node := func(host, role string, off int64) topology.StoreNodeState {
		return topology.StoreNodeState{Host: host, Role: role, Offset: off, Link: "up"}
	}
	for _, c := range []struct {
		name   string
		nodes  []topology.StoreNodeState
		target int64
		want   bool
	}{
		{"replicas past the target, read after the primary", []topology.StoreNodeState{
			node("valkey-1", "master", 3791), node("valkey-2", "slave", 4064), node("valkey-3", "slave", 4064)}, 3520, true},
		{"every node at the target", []topology.StoreNodeState{
			node("valkey-1", "master", 3520), node("valkey-2", "slave", 3520), node("valkey-3", "slave", 3520)}, 3520, true},
		{"one replica behind the target", []topology.StoreNodeState{
			node("valkey-1", "master", 3656), node("valkey-2", "slave", 3656), node("valkey-3", "slave", 3519)}, 3520, false},
		{"a replica not read", []topology.StoreNodeState{
			node("valkey-1", "master", 3520), node("valkey-2", "slave", 3520), {Host: "valkey-3", Error: "dial: exec: timeout"}}, 3520, false},
		{"the primary no longer the primary", []topology.StoreNodeState{
			node("valkey-1", "slave", 3520), node("valkey-2", "master", 3600), node("valkey-3", "slave", 3600)}, 3520, false},
		{"nothing read", nil, 0, false},
	} {
		if got := replicatedTo(c.nodes, "valkey-1", c.target); got != c.want {
			t.Errorf("%s: replicatedTo(%v, valkey-1, %d) = %v, want %v", c.name, c.nodes, c.target, got, c.want)
		}
	}
}
