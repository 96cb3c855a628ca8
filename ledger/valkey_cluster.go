package ledger

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Valkey Cluster (backend.cluster).
//
// Every key of one quota key carries the same hash tag (prefix), so each script's keys — the
// reservations, the deadlines, the bucket hashes of every width and the tombstone list, which
// are also all the keys two policies sharing a rule touch — hash to one slot, and each script
// runs whole on the primary that owns it. valkey-go's cluster client learns the slot map from
// any seed node, routes every call to its slot's primary, follows MOVED/ASK after a resharding
// or a failover, and re-reads the map every clusterRefresh.
//
// Replication acknowledgement works per shard: runAcked sends the script and WAIT in one
// DoMulti; the cluster client groups a keyless WAIT with the keyed script onto the connection
// of that slot's primary, so WAIT counts the replicas of the shard that made the write.

// ClusterOptions name the seed nodes of a Valkey Cluster.
type ClusterOptions struct {
	Addresses []string // host:port of some or all nodes; the client learns the rest
	Password  string   // every node's AUTH; empty: none
}

// clusterRefresh is how often the cluster client re-reads the slot map besides following
// MOVED redirections: a promoted replica is found within it even before a call is redirected.
const clusterRefresh = time.Second

// clusterClientOption is the client configuration for a Valkey Cluster.
func clusterClientOption(opts ValkeyOptions) valkey.ClientOption {
	return valkey.ClientOption{
		InitAddress:   append([]string(nil), opts.Cluster.Addresses...),
		Password:      opts.Cluster.Password,
		ShuffleInit:   true, // many gateways do not all ask the first seed
		ClusterOption: valkey.ClusterOption{ShardsRefreshInterval: clusterRefresh},
	}
}

// errNotACluster: backend.cluster names a store whose cluster support is off. valkey-go falls
// back to a single-node client for one such seed; the ledger refuses it, because the gateways
// configured for a cluster would then all share one node without saying so.
var errNotACluster = errors.New("valkey backend: backend.cluster names a store that is not a Valkey Cluster (cluster_enabled:0); point backend.cluster.addresses at cluster nodes, or use backend.url for a single Valkey")

// checkClusterMode refuses a single-node client where a cluster was configured.
func checkClusterMode(c valkey.Client, wantCluster bool) error {
	if wantCluster && c.Mode() != valkey.ClientModeCluster {
		return errNotACluster
	}
	return nil
}

// HashSlot is the Valkey Cluster hash slot of key: CRC16 (XMODEM) of its hash tag — the text
// between the first '{' and the next '}', when not empty — or of the whole key, modulo 16384.
func HashSlot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	var crc uint16
	for k := 0; k < len(key); k++ {
		crc ^= uint16(key[k]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// HashTag is the hash tag every store key of rule's quota key key carries (the text between
// '{' and '}' in each key's name), which decides their slot: the harness maps the keys it
// finds on each shard back to their subjects with it. Locate's keys carry it (a test checks).
func HashTag(rule, key string) string {
	var tag [32]byte
	hashTag(&tag, rule, key)
	return string(tag[:])
}

// KeyLocation is where a quota key's state lives, for evidence.
type KeyLocation struct {
	Keys   []string `json:"keys"`    // every key the scripts touch for this quota
	Slot   int      `json:"slot"`    // their one hash slot
	Node   string   `json:"node"`    // host:port of the primary that owns the slot (the only node when not a cluster)
	NodeID string   `json:"node_id"` // its cluster node id; "" when not a cluster
}

// Locate reports the keys of rule q's quota key key (a gateway's is CompiledRule.Key(subject,
// model)), their slot and the node that owns it: the primary CLUSTER SLOTS names on a cluster,
// or the one node otherwise. It asks the store, but touches no quota state.
func (v *Valkey) Locate(ctx context.Context, q *Quota, key string) (KeyLocation, error) {
	if q == nil || len(q.Budgets) == 0 {
		return KeyLocation{}, errors.New("ledger: Locate needs a quota with budgets")
	}
	sk := v.layout(q, key, 0)
	loc := KeyLocation{Keys: sk.keys, Slot: HashSlot(sk.keys[0])}
	for _, k := range sk.keys[1:] {
		if s := HashSlot(k); s != loc.Slot {
			return loc, fmt.Errorf("ledger: key %s hashes to slot %d, not %d like %s: the scripts would fail with CROSSSLOT", k, s, loc.Slot, sk.keys[0])
		}
	}
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	c, err := v.conn(ctx)
	if err != nil {
		return loc, v.fail("locate", err)
	}
	if c.Mode() != valkey.ClientModeCluster {
		for addr := range c.Nodes() {
			loc.Node = addr
		}
		return loc, nil
	}
	slots, err := clusterSlots(ctx, c)
	if err != nil {
		return loc, v.fail("locate", fmt.Errorf("CLUSTER SLOTS: %w", err))
	}
	for _, r := range slots {
		f, err := r.ToArray()
		if err != nil || len(f) < 3 {
			continue
		}
		lo, _ := f[0].AsInt64()
		hi, _ := f[1].AsInt64()
		if int64(loc.Slot) < lo || int64(loc.Slot) > hi {
			continue
		}
		primary, err := f[2].ToArray()
		if err != nil || len(primary) < 3 {
			break
		}
		host, _ := primary[0].ToString()
		port, _ := primary[1].AsInt64()
		loc.NodeID, _ = primary[2].ToString()
		loc.Node = net.JoinHostPort(host, strconv.FormatInt(port, 10))
		return loc, nil
	}
	return loc, v.fail("locate", fmt.Errorf("CLUSTER SLOTS names no node for slot %d", loc.Slot))
}

// clusterSlots asks the nodes the client knows, in address order, for CLUSTER SLOTS until one
// answers: a keyless command would go to a node at random, possibly one that is down.
func clusterSlots(ctx context.Context, c valkey.Client) ([]valkey.ValkeyMessage, error) {
	nodes := c.Nodes()
	var lastErr error
	for _, addr := range slices.Sorted(maps.Keys(nodes)) {
		n := nodes[addr]
		slots, err := n.Do(ctx, n.B().ClusterSlots().Build()).ToArray()
		if err == nil {
			return slots, nil
		}
		lastErr = err
	}
	if lastErr == nil {
		lastErr = errors.New("the client knows no node")
	}
	return nil, lastErr
}
