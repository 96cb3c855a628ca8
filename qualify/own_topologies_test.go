package qualify

import (
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/topology"
)

// TestOwnTopologiesOnlyWhereCheap: lever scenarios get topologies of their own on netns only,
// and every other case states its reason: the other engines, --keep, --store cluster, and a
// run id too long to name one.
func TestOwnTopologiesOnlyWhereCheap(t *testing.T) {
	plan := func(engine string, edit func(*Plan)) *Plan {
		p := &Plan{Options: Options{RunID: "q20261207-221111-k3v9", Store: topology.StoreSingle}, Engine: engine}
		if edit != nil {
			edit(p)
		}
		return p
	}
	if why := ownTopologiesWhyNot(plan(topology.EngineNetns, nil)); why != "" {
		t.Errorf("netns: %q, want own topologies", why)
	}
	for _, c := range []struct {
		p    *Plan
		want string
	}{
		{plan(topology.EngineDocker, nil), "on docker a topology is containers"},
		{plan(topology.EngineKind, nil), "on kind a topology is containers"},
		{plan(topology.EngineProcess, nil), "on process every topology's components share"},
		{plan(topology.EngineNetns, func(p *Plan) { p.Keep = true }), "--keep"},
		{plan(topology.EngineNetns, func(p *Plan) { p.Store = topology.StoreCluster }), "--store cluster"},
		{plan(topology.EngineNetns, func(p *Plan) { p.RunID = "a-run-id-of-24-character" }), "too long"},
	} {
		if why := ownTopologiesWhyNot(c.p); !strings.Contains(why, c.want) {
			t.Errorf("%s (keep %v, store %s, run id %s): %q, want a reason with %q", c.p.Engine, c.p.Keep, c.p.Store, c.p.RunID, why, c.want)
		}
	}
}
