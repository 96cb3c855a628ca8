package ledger

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/valkey-io/valkey-go"
)

// Every quota key carries a TTL (its longest window plus its lease), so a maxmemory-policy
// that evicts (volatile-* or allkeys-*) may drop live quota state under memory pressure: holds
// vanish, settlements no-op, budgets reset. The Valkey backend checks the policy on every
// connect and refuses a store that evicts, unless the policy says so explicitly
// (backend.allow_eviction).

// evictionPolicy reads the store's maxmemory-policy: CONFIG GET, else INFO memory (CONFIG may
// be disabled or renamed on managed services). ok is false when neither answers.
func evictionPolicy(ctx context.Context, c valkey.Client) (policy string, ok bool) {
	if m, err := c.Do(ctx, c.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap(); err == nil {
		if p, found := m["maxmemory-policy"]; found {
			return p, true
		}
	}
	info, err := c.Do(ctx, c.B().Info().Section("memory").Build()).ToString()
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(info, "\n") {
		if v, found := strings.CutPrefix(strings.TrimSpace(line), "maxmemory_policy:"); found {
			return v, true
		}
	}
	return "", false
}

// evicts reports whether a maxmemory-policy may evict keys.
func evicts(policy string) bool {
	return strings.HasPrefix(policy, "volatile-") || strings.HasPrefix(policy, "allkeys-")
}

// checkEviction refuses a store whose policy evicts, unless allowed. A policy that cannot be
// read is accepted (the check is best effort where the store hides its configuration). On a
// cluster every node the client knows is asked (a keyless CONFIG GET would reach one at random,
// and a replica's policy counts once it is promoted).
func checkEviction(ctx context.Context, c valkey.Client, allow bool) error {
	if allow {
		return nil
	}
	nodes := []valkey.Client{c}
	if c.Mode() == valkey.ClientModeCluster {
		nodes = slices.Collect(maps.Values(c.Nodes()))
	}
	for _, n := range nodes {
		if p, ok := evictionPolicy(ctx, n); ok && evicts(p) {
			return fmt.Errorf("valkey backend: the store's maxmemory-policy is %s, which may evict live quota state (every quota key has a TTL): set maxmemory-policy noeviction on the store, or accept the risk with backend.allow_eviction: true", p)
		}
	}
	return nil
}
