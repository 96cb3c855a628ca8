package ledger

import (
	"errors"
	"fmt"
)

// Open returns the ledger a compiled policy configures: the memory backend, or the Valkey
// backend at the policy's (resolved) URL, namespace and timeout. Both are bounded by the
// policy's limits. Open does not contact Valkey: a gateway may start before Valkey does, and
// every call fails closed until it answers.
func Open(p *CompiledPolicy) (Ledger, error) {
	if p == nil {
		return nil, errors.New("ledger: no policy")
	}
	switch p.Backend.Kind {
	case "", "memory":
		return NewMemory(p.Limits, nil), nil
	case "valkey":
		opts := ValkeyOptions{
			URL:       p.Backend.URL,
			Namespace: p.Backend.Namespace,
			Timeout:   p.Backend.Timeout.D(),
			Limits:    p.Limits,

			AllowEviction: p.Backend.AllowEviction,
		}
		if s := p.Backend.Sentinel; s != nil {
			opts.Sentinel = &SentinelOptions{MasterName: s.MasterName, Addresses: s.Addresses,
				Password: s.Password, MasterPassword: s.MasterPassword}
		}
		if c := p.Backend.Cluster; c != nil {
			opts.Cluster = &ClusterOptions{Addresses: c.Addresses, Password: c.Password}
		}
		if r := p.Backend.Replication; r != nil && r.Mode == ReplicationAcknowledged {
			opts.MinReplicas, opts.AckTimeout = r.MinReplicas, r.AckTimeout.D()
		}
		v, err := NewValkey(opts)
		if err != nil {
			return nil, fmt.Errorf("backend: %w", err)
		}
		return v, nil
	default:
		return nil, fmt.Errorf("backend.kind: %q is not a backend; write memory or valkey", p.Backend.Kind)
	}
}
