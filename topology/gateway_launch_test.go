package topology

import (
	"testing"

	"github.com/quotaqual/quotaqual/deployment"
)

// A policy rollout starts from the store the gateway runs on: a gateway moved to the
// replicated store group is rolled out on the group's addresses and back to the group, not
// to the single Valkey it was first launched on.
func TestRolloutKeepsTheGatewaysStore(t *testing.T) {
	single := deployment.Addresses{ValkeyAddr: "10.0.0.9:6379"}
	group := deployment.Addresses{ValkeyAddr: "10.0.0.9:6379", Store: &deployment.StoreAddrs{MasterName: StoreMasterName}}
	b := &Base{gwRecipes: map[string]*gatewayRecipe{HostGatewayA: {addrs: single}}}
	b.stems.Rendered(HostGatewayA, HostGatewayA, single)
	b.stems.Rendered(HostGatewayA, HostGatewayA+"-store", group)
	for _, c := range []struct {
		current, base string
		onGroup       bool
	}{
		{"", HostGatewayA, false},
		{HostGatewayA + "-policy", HostGatewayA, false},
		{HostGatewayA + "-store", HostGatewayA + "-store", true},
		{HostGatewayA + "-store-policy", HostGatewayA + "-store", true},
	} {
		if c.current != "" {
			b.stems.Runs(HostGatewayA, c.current)
		}
		_, base, addrs := b.rolloutBase(HostGatewayA)
		if base != c.base || (addrs.Store != nil) != c.onGroup {
			t.Errorf("running %q: rollout from %q on the group %v, want %q on the group %v", c.current, base, addrs.Store != nil, c.base, c.onGroup)
		}
	}
	if r, _, _ := b.rolloutBase(HostGatewayB); r != nil {
		t.Error("a gateway never launched has a recipe")
	}
}
