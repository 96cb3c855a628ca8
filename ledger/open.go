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
		v, err := NewValkey(ValkeyOptions{
			URL:       p.Backend.URL,
			Namespace: p.Backend.Namespace,
			Timeout:   p.Backend.Timeout.D(),
			Limits:    p.Limits,

			AllowEviction: p.Backend.AllowEviction,
		})
		if err != nil {
			return nil, fmt.Errorf("backend: %w", err)
		}
		return v, nil
	default:
		return nil, fmt.Errorf("backend.kind: %q is not a backend; write memory or valkey", p.Backend.Kind)
	}
}
