package undertest_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/undertest"
)

// withCaps is the shipped default profile's YAML with its capabilities.rules line replaced by
// lines (several, or none).
func withCaps(t *testing.T, lines string) []byte {
	t.Helper()
	b, err := undertest.ShippedYAML(undertest.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	const line = "  rules: [own-rules, windows, model-key, hard, lease, output-bound]\n"
	if !strings.Contains(string(b), line) {
		t.Fatalf("quotaqual.yaml has no line %q", line)
	}
	return []byte(strings.Replace(string(b), line, lines, 1))
}

// TestOldScenarioRulesFieldStillLoads checks a profile written before capabilities.rules loads:
// scenario_rules true reads as every rule feature, false as none; giving both is an error
// naming the old field and its replacement.
func TestOldScenarioRulesFieldStillLoads(t *testing.T) {
	for _, c := range []struct {
		line string
		want []undertest.RuleFeature
	}{
		{"  scenario_rules: true\n", undertest.RuleFeatures},
		{"  scenario_rules: false\n", nil},
	} {
		p, err := undertest.Parse(withCaps(t, c.line))
		if err != nil {
			t.Fatalf("%q: %v", c.line, err)
		}
		if !slices.Equal(p.Caps.Rules, c.want) {
			t.Errorf("%q reads as rules %v, want %v", c.line, p.Caps.Rules, c.want)
		}
	}
	_, err := undertest.Parse(withCaps(t, "  scenario_rules: true\n  rules: [own-rules]\n"))
	if err == nil || !strings.Contains(err.Error(), "capabilities.scenario_rules: replaced by capabilities.rules") {
		t.Errorf("both fields: %v, want an error naming capabilities.scenario_rules and its replacement", err)
	}
}

// TestRuleFeaturesAreValidated checks an unknown or repeated feature, and a feature without a
// rule of its own, are refused by their path.
func TestRuleFeaturesAreValidated(t *testing.T) {
	for line, want := range map[string]string{
		"  rules: [own-rules, model-keys]\n": `capabilities.rules[1]: "model-keys" is not a rule feature: use own-rules, windows`,
		"  rules: [own-rules, hard, hard]\n": `capabilities.rules[2]: "hard" is listed twice`,
		"  rules: [windows]\n":               "capabilities.rules: lists [windows] without own-rules",
	} {
		_, err := undertest.Parse(withCaps(t, line))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", line, err, want)
		}
	}
}

// TestRenderHandsTheTemplateOnlyTheRulesItCanExpress renders the default template with fewer
// features declared: a rule needing a missing one is left out of the config (its subjects
// fall to the run's rule), the others stay, and CannotExpress names the missing part.
func TestRenderHandsTheTemplateOnlyTheRulesItCanExpress(t *testing.T) {
	p, err := undertest.Parse(withCaps(t, "  rules: [own-rules, windows, hard, lease]\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := testDeployment(t, deployment.BackendValkey)
	f, err := undertest.FactsFor(d, "gateway-a", testAddrs(), d.Profile)
	if err != nil {
		t.Fatal(err)
	}
	y, err := p.Render(f)
	if err != nil {
		t.Fatal(err)
	}
	for _, rule := range []string{"hard-gate", "layered-budgets", "long-generation", "valkey-failover"} {
		if !strings.Contains(string(y), "- name: "+rule+"\n") {
			t.Errorf("rule %s (expressible) not rendered", rule)
		}
	}
	for _, rule := range []string{"model-budgets", "usage-accounting"} {
		if strings.Contains(string(y), "- name: "+rule+"\n") {
			t.Errorf("rule %s rendered, though the profile cannot express it", rule)
		}
	}
	lease := deployment.FormatDuration(d.Profile.Lease)
	for _, r := range d.ScenarioRules() {
		why := p.CannotExpress(r, lease)
		switch r.Name {
		case "model-budgets":
			want := "needs a rule keyed by subject and model, with an allowlist of models, which gateway profile quotaqual cannot express (capabilities.rules: no model-key)"
			if why != want {
				t.Errorf("model-budgets: %q, want %q", why, want)
			}
		case "usage-accounting":
			if !strings.Contains(why, "no output-bound") {
				t.Errorf("usage-accounting: %q, want it to name output-bound", why)
			}
		default:
			if why != "" {
				t.Errorf("%s: %q, want expressible", r.Name, why)
			}
		}
	}
}
