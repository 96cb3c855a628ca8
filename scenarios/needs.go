package scenarios

import (
	"fmt"
	"sort"
	"strings"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
)

// Need is a capability a scenario cannot run without: of the topology (its levers) or of the
// gateway under test (its profile's capabilities, package undertest).
type Need string

const (
	NeedNetworkPolicy Need = "network-policy"
	NeedPartition     Need = "partition"

	// NeedRestart: a gateway restarted (or killed) by the topology comes back on the same
	// config; every topology and every profile provides it, declared so a reader sees it.
	NeedRestart Need = "restart"
	// NeedQuotaInspection: the gateway reports a subject's quota state (settled, reserved).
	// A scenario that only prefers it (Scenario.Prefers) uses black-box evidence without it.
	NeedQuotaInspection Need = "quota-inspection"
	// NeedSharedStore: the gateway keeps its quota state in the run's Valkey, so the store
	// levers (stop, partition) are levers on the gateway's quota.
	NeedSharedStore Need = "shared-store"
	// NeedStoreGroup: the gateway can be put on the replicated store group.
	NeedStoreGroup Need = "store-group"
	// NeedScenarioRules: the gateway renders the scenario's own rule — every feature of it
	// (undertest.RuleFeature) its profile's capabilities.rules can express; a skip names the
	// features it lacks. A scenario that only prefers it runs on the run's rule without it.
	NeedScenarioRules Need = "scenario-rules"
	// NeedPolicyChange: the gateway can be restarted on another budget.
	NeedPolicyChange Need = "policy-change"
	// NeedLeases: admitted requests hold reservations that expire unless renewed.
	NeedLeases Need = "leases"
	// NeedAttribution: each admitted response names the provider that served it, and the id
	// it forwarded, so the provider's log confirms it. Only ever preferred: without it the
	// sites are counted at the providers.
	NeedAttribution Need = "attribution"
)

// gatewayNeeds are the needs a gateway profile answers: what each is, in a reason, and
// whether the profile offers it.
var gatewayNeeds = map[Need]struct {
	what string
	has  func(*undertest.Profile) bool
}{
	NeedRestart:         {"a restart", func(*undertest.Profile) bool { return true }},
	NeedQuotaInspection: {"quota inspection", (*undertest.Profile).Inspects},
	NeedSharedStore:     {"its quota state in the run's store", func(g *undertest.Profile) bool { return g.Caps.SharedStore }},
	NeedStoreGroup:      {"the replicated store group", func(g *undertest.Profile) bool { return g.Caps.StoreGroup }},
	NeedPolicyChange:    {"a restart on another budget", func(g *undertest.Profile) bool { return g.Caps.PolicyChange }},
	NeedLeases:          {"reservation leases", func(g *undertest.Profile) bool { return g.Caps.Leases }},
	NeedAttribution: {"attribution headers", func(g *undertest.Profile) bool {
		return g.Expect.Attribution.Header != "" && g.Expect.RequestIDHeader != ""
	}},
}

// missingNeed returns why the topology or the gateway under test cannot run a scenario with
// these needs, or "".
func missingNeed(needs []Need, caps topology.Capabilities, gw *undertest.Profile) string {
	var reasons []string
	for _, n := range needs {
		if n == NeedScenarioRules {
			continue // the scenario's own rule decides: Env.ownRule
		}
		if g, ok := gatewayNeeds[n]; ok {
			if !g.has(gw) {
				reasons = append(reasons, fmt.Sprintf("needs %s, which gateway profile %s does not offer", g.what, gw.Name))
			}
			continue
		}
		switch n {
		case NeedNetworkPolicy:
			if !caps.NetworkPolicy {
				reasons = append(reasons, "needs network policy enforcement: "+orUnknown(caps.NetworkPolicyReason))
			}
		case NeedPartition:
			if !caps.Partition {
				reasons = append(reasons, "needs partitions: "+orUnknown(caps.PartitionReason))
			}
		default:
			reasons = append(reasons, fmt.Sprintf("needs %q, which no topology provides", string(n)))
		}
	}
	sort.Strings(reasons)
	return strings.Join(reasons, "; ")
}

func orUnknown(s string) string {
	if s == "" {
		return "this topology does not provide it"
	}
	return s
}
