package scenarios

import (
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
)

// ownRulesOf is the scenario rules a quick run of names renders, by name.
func ownRulesOf(t *testing.T, profile string, names ...string) map[string]deployment.ScenarioRule {
	t.Helper()
	p, err := deployment.ProfileByName(profile)
	if err != nil {
		t.Fatal(err)
	}
	list, err := Select(names)
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDeployment("run-20260101-abc", p, list)
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]deployment.ScenarioRule{}
	for _, r := range d.ScenarioRules() {
		rules[r.Name] = r
	}
	return rules
}

// TestOwnRulesOfTheQuickRun: the rules window-expiry, concurrency, hard-gate, long-generation,
// valkey-failover and identity-sources declare (Scenario.Rules) reach the deployment with the numbers their checks
// derive from, for their own subjects only; valid-auth declares none.
func TestOwnRulesOfTheQuickRun(t *testing.T) {
	rules := ownRulesOf(t, "quick", "valid-auth", "window-expiry", "concurrency", "hard-gate", "long-generation", "valkey-failover", "identity-sources")
	if len(rules) != 6 {
		t.Fatalf("rules = %+v, want one for each scenario but valid-auth (it has none)", rules)
	}
	p, _ := deployment.ProfileByName("quick")
	for _, c := range []struct {
		name, window, lease string
		capacity, estimate  int64
		enforcement         string
	}{
		// Each scenario's own budget: its own window or lease or capacity, the rest the run's.
		{windowExpiryRuleName, "2s", "3s", p.Capacity, p.Estimate, ""},
		{concurrencyRuleName, "4s", "2500ms", p.Capacity, p.Estimate, ""},
		{hardGateRuleName, "4s", "3s", 180, 60, "hard"},
		{longGenerationRuleName, "4s", "2500ms", p.Estimate, p.Estimate, ""},
		{valkeyFailoverRule, "4s", "30s", p.Capacity, p.Estimate, ""},
		{identitySourcesRule, "600s", "3s", p.Capacity, p.Estimate, ""},
	} {
		r := rules[c.name]
		if r.Window != c.window || r.Lease != c.lease || r.Capacity != c.capacity || r.Estimate != c.estimate || r.Enforcement != c.enforcement ||
			len(r.Subjects) != 3 || r.Subjects[0] != "application-a@"+c.name {
			t.Errorf("%s rule = %+v, want window %s, lease %s, capacity %d, estimate %d, enforcement %q, for its three subjects",
				c.name, r, c.window, c.lease, c.capacity, c.estimate, c.enforcement)
		}
	}
	// reference waits out the upstream window on window-expiry's own rule too.
	if w := ownRulesOf(t, "reference", "window-expiry")[windowExpiryRuleName].Window; w != "60s" {
		t.Errorf("reference window-expiry window = %s, want the profile's 60s", w)
	}
}

// TestConcurrencyHoldsOutlastTheirLease: on either rule concurrency's holds outlast the lease by
// the same margin, with a lease renewal can keep (at least 3 × store timeout + 1 s).
func TestConcurrencyHoldsOutlastTheirLease(t *testing.T) {
	for _, name := range deployment.ProfileNames() {
		p, _ := deployment.ProfileByName(name)
		for _, own := range []bool{true, false} {
			lease, hold := concurrencyHold(p, own)
			if hold <= lease || lease < 3*p.StoreTimeout+time.Second || hold > longestHold(p) {
				t.Errorf("%s (own rule %v): lease %s, hold %s, longest hold %s: want 3 × store timeout + 1s ≤ lease < hold ≤ longest",
					name, own, lease, hold, longestHold(p))
			}
		}
		ownLease, ownHold := concurrencyHold(p, true)
		if _, hold := concurrencyHold(p, false); hold-p.Lease != ownHold-ownLease {
			t.Errorf("%s: on the run's rule the hold outlasts the lease by %s, on its own by %s: want the same margin",
				name, hold-p.Lease, ownHold-ownLease)
		}
	}
}

// TestOneScenarioWithTwoRules: output-bound's hard rule matches application-a only and its
// meter rule the other two, each with the numbers the scenario's expectations derive from.
func TestOneScenarioWithTwoRules(t *testing.T) {
	p, _ := deployment.ProfileByName("quick")
	rules := ownRulesOf(t, "quick", outputBoundScenario, providerUsageRule)
	hard, meter, usage := rules[outputBoundHardRule], rules[outputBoundMeterRule], rules[providerUsageRule]
	if len(rules) != 3 || strings.Join(hard.Subjects, ",") != "application-a@output-bound" || hard.Enforcement != "hard" ||
		hard.Strategy != "" || hard.Estimate != outputBoundHardEstimate || hard.Capacity != outputBoundHardCapacity || hard.Window != "600s" {
		t.Errorf("rules %v; hard rule = %+v", len(rules), hard)
	}
	if strings.Join(meter.Subjects, ",") != "application-b@output-bound,application-c@output-bound" || meter.Enforcement != "" ||
		meter.Strategy != "max_tokens" || meter.Estimate != p.Estimate || meter.Capacity != usageAccountingCapacity {
		t.Errorf("meter rule = %+v", meter)
	}
	if len(usage.Subjects) != 3 || usage.Strategy != "max_tokens" || usage.Estimate != p.Estimate || usage.Capacity != usageAccountingCapacity {
		t.Errorf("provider-usage rule = %+v", usage)
	}
}
