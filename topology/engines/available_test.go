package engines_test

import (
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/internal/enginetest"
)

// TestLeversAvailablePerEngine: each existing lever's Available gives every engine's answer,
// with the reason when it is no — the one answer to "can this engine do X" that replaced the
// capability flags, ErrUnsupported skips and type assertions. Topologies are built (New) but
// not brought up: availability is a property of the engine and the run's spec. (netns, which
// builds only inside its namespaces, has its own: TestNetnsLeversAvailable.)
func TestLeversAvailablePerEngine(t *testing.T) {
	tests := []struct {
		engine string
		adjust func(*topology.Spec)
		no     map[string]string // lever → a reason it must give
	}{
		{engine: topology.EngineProcess, no: map[string]string{
			"partition":       "no network isolation",
			"network-policy":  "no network isolation",
			"use-store-group": "runs no replicated store group"}},
		{engine: topology.EngineDocker},
		{engine: topology.EngineDocker, adjust: func(s *topology.Spec) { s.Store = topology.StoreCluster },
			no: map[string]string{"use-store-group": topology.ClusterNoStoreGroup}},
		{engine: topology.EngineKind, no: map[string]string{"use-store-group": "runs no replicated store group"}},
	}
	for _, tc := range tests {
		spec := newSpec(t)
		name := tc.engine
		if tc.adjust != nil {
			tc.adjust(&spec)
			name += "/" + spec.Store
			if spec.WithoutStoreGroup {
				name += "/without-store-group"
			}
		}
		t.Run(name, func(t *testing.T) {
			topo, err := topology.New(tc.engine, spec)
			if err != nil {
				t.Fatal(err)
			}
			enginetest.CheckAvailable(t, topo, tc.no)
		})
	}
	// An unavailable lever refuses to inject, with its reason, and touches nothing.
	topo, err := topology.New(topology.EngineProcess, newSpec(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := topology.Partition.Inject(t.Context(), topo, topology.Target{Host: topology.HostGatewayA, Peer: topology.HostValkey}); err == nil || !contains(err.Error(), "no network isolation") {
		t.Errorf("injecting a partition on the process engine: %v, want the reason it cannot", err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// newSpec is a run's Spec for a topology that is built, never brought up (no binary runs).
func newSpec(t *testing.T) topology.Spec { return enginetest.SpecFor(t, "/bin/true", "") }
