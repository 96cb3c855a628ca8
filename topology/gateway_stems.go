package topology

import (
	"cmp"
	"strings"
	"sync"

	"github.com/quotaqual/quotaqual/deployment"
)

// GatewayStems remembers, per gateway, the addresses each of its configs (by file stem:
// gateway-a, gateway-a-store, gateway-a-policy, …) was rendered for, and the stem it runs, so
// that a policy rollout keeps the store the gateway is on: a gateway moved to the replicated
// store group is rolled out on the group's addresses, not on the single Valkey it was first
// launched on. Every engine that relaunches a gateway on another config keeps one (Base for
// the process engines, docker for its containers). The zero value is ready to use.
type GatewayStems struct {
	mu      sync.Mutex
	addrsOf map[string]map[string]deployment.Addresses // gateway → stem → addresses
	current map[string]string                          // gateway → the stem it runs
}

// Rendered records that gateway name's config stem was rendered for addresses a.
func (s *GatewayStems) Rendered(name, stem string, a deployment.Addresses) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.addrsOf == nil {
		s.addrsOf = map[string]map[string]deployment.Addresses{}
	}
	if s.addrsOf[name] == nil {
		s.addrsOf[name] = map[string]deployment.Addresses{}
	}
	s.addrsOf[name][stem] = a
}

// Runs records that gateway name now runs (or next starts) on its config stem.
func (s *GatewayStems) Runs(name, stem string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.current == nil {
		s.current = map[string]string{}
	}
	s.current[name] = stem
}

// RolloutBase is the stem a policy rollout of gateway name starts from — the one it runs,
// without its policy suffix (its first, name, when none was recorded) — and the addresses
// that stem was rendered for; ok is false when no config of that stem was rendered.
func (s *GatewayStems) RolloutBase(name string) (base string, a deployment.Addresses, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	base = strings.TrimSuffix(cmp.Or(s.current[name], name), "-policy")
	a, ok = s.addrsOf[name][base]
	return base, a, ok
}
