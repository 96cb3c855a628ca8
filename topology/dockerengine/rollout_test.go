package dockerengine

import (
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
)

// TestRolloutKeepsTheStoreGroup: a policy rollout of a gateway that UseReplicatedStore put on
// the replicated store group renders its config on the group (the Sentinels, the master
// name), on the new policy and back on the run's own; a gateway never moved stays on the
// single Valkey. Before the fix the rollout rendered every gateway on the single Valkey,
// silently taking a gateway off the group it was being judged on.
func TestRolloutKeepsTheStoreGroup(t *testing.T) {
	p, err := deployment.ProfileByName("quick")
	if err != nil {
		t.Fatal(err)
	}
	d, err := deployment.NewDeployment("rollouttest", p, nil)
	if err != nil {
		t.Fatal(err)
	}
	dt, err := newDocker(topology.Spec{RunID: "rollouttest", WorkDir: t.TempDir(), Deployment: d})
	if err != nil {
		t.Fatal(err)
	}
	dt.provAddrs = []deployment.ProviderAddr{{Site: "west", URL: "http://provider-west:8000"}}
	for _, gw := range dt.Gateways() {
		dt.stems.Rendered(gw, gw, dt.gatewayAddrs(gw, dt.provAddrs)) // as startGateway records it
	}
	onGroup := func(cfg []byte) bool {
		return strings.Contains(string(cfg), topology.StoreMasterName) && strings.Contains(string(cfg), topology.StoreSentinelAddrs(func(h string) string { return h })[0])
	}
	if cfg, err := dt.storeConfig(topology.HostGatewayA, true); err != nil || !onGroup(cfg) {
		t.Fatalf("the store config of gateway-a is not on the group (err %v):\n%s", err, cfg)
	}
	p2 := p
	p2.Capacity *= 2
	for _, step := range []struct {
		gw     string
		policy *deployment.Profile
		group  bool
	}{
		{topology.HostGatewayA, &p2, true},
		{topology.HostGatewayA, nil, true},
		{topology.HostGatewayB, &p2, false},
		{topology.HostGatewayB, nil, false},
	} {
		cfg, err := dt.rolloutConfig(step.gw, step.policy)
		if err != nil {
			t.Fatal(err)
		}
		if onGroup(cfg) != step.group {
			t.Errorf("%s rolled out (new policy %v): on the store group %v, want %v:\n%s", step.gw, step.policy != nil, onGroup(cfg), step.group, cfg)
		}
	}
	if cfg, err := dt.storeConfig(topology.HostGatewayA, false); err != nil || onGroup(cfg) {
		t.Fatalf("gateway-a back on the single Valkey is still on the group (err %v)", err)
	}
	if cfg, _ := dt.rolloutConfig(topology.HostGatewayA, &p2); onGroup(cfg) {
		t.Error("gateway-a, back on the single Valkey, was rolled out on the group")
	}
}
