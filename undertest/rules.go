package undertest

import (
	"fmt"
	"slices"
	"strings"

	"github.com/quotaqual/quotaqual/deployment"
)

// RuleFeature is one thing a scenario's own rule may ask of a gateway's config beyond a rule
// of its own: a profile lists those its template can render (capabilities.rules), and a
// scenario whose rule needs one it lacks runs its fallback or is skipped, naming the feature.
type RuleFeature string

// The rule features, in the order reasons name them.
const (
	// RuleOwn: a rule of its own for a list of subjects (the scenario's), with its own window,
	// capacity and per-request estimate, matched ahead of the run's rule. Every other feature
	// is a property of such a rule.
	RuleOwn RuleFeature = "own-rules"
	// RuleWindows: more than one window in one rule, a request admitted only if it fits every one.
	RuleWindows RuleFeature = "windows"
	// RuleModelKey: the rule keyed by subject and model, allowing only the models listed.
	RuleModelKey RuleFeature = "model-key"
	// RuleHard: enforcement hard, the output bound forwarded clamped to the reservation.
	RuleHard RuleFeature = "hard"
	// RuleLease: a reservation lease of the rule's own, not the run's.
	RuleLease RuleFeature = "lease"
	// RuleOutputBound: the estimate taken from the request's output bound (times n, plus its
	// input), with a fallback for a request that has none.
	RuleOutputBound RuleFeature = "output-bound"
)

// RuleFeatures lists every rule feature.
var RuleFeatures = []RuleFeature{RuleOwn, RuleWindows, RuleModelKey, RuleHard, RuleLease, RuleOutputBound}

// ruleFeatureWhat says what each feature is, in a skip reason: "needs <what>".
var ruleFeatureWhat = map[RuleFeature]string{
	RuleOwn:         "a rule of its own for the scenario's subjects",
	RuleWindows:     "a rule with more than one window",
	RuleModelKey:    "a rule keyed by subject and model, with an allowlist of models",
	RuleHard:        "a rule with enforcement hard (the output bound clamped to the reservation)",
	RuleLease:       "a rule with a reservation lease of its own",
	RuleOutputBound: "a rule that estimates from the request's output bound",
}

// RuleNeeds lists the features rule needs of a template, the run's lease being runLease
// ("4s", as deployment.FormatDuration writes it): a rule whose lease is the run's needs no
// lease of its own.
func RuleNeeds(rule deployment.ScenarioRule, runLease string) []RuleFeature {
	out := []RuleFeature{RuleOwn}
	if len(rule.MoreBudgets) > 0 {
		out = append(out, RuleWindows)
	}
	if rule.KeyByModel || len(rule.Models) > 0 {
		out = append(out, RuleModelKey)
	}
	if rule.Enforcement == "hard" {
		out = append(out, RuleHard)
	}
	if rule.Lease != runLease {
		out = append(out, RuleLease)
	}
	if rule.Strategy != "" {
		out = append(out, RuleOutputBound)
	}
	return out
}

// Expresses reports whether the profile's template can render feature.
func (p *Profile) Expresses(feature RuleFeature) bool { return slices.Contains(p.Caps.Rules, feature) }

// CannotExpress says why the profile's template cannot render rule ("" when it can): each
// feature it lacks, by what it is and by its name in capabilities.rules.
func (p *Profile) CannotExpress(rule deployment.ScenarioRule, runLease string) string {
	var what, names []string
	for _, f := range RuleNeeds(rule, runLease) {
		if !p.Expresses(f) {
			what = append(what, ruleFeatureWhat[f])
			names = append(names, "no "+string(f))
		}
	}
	if len(what) == 0 {
		return ""
	}
	return fmt.Sprintf("needs %s, which gateway profile %s cannot express (capabilities.rules: %s)",
		strings.Join(what, " and "), p.Name, strings.Join(names, ", "))
}

// expressible is the rules of f the template can render, in order: Render hands the template
// only those, so a scenario whose rule is not among them finds its subjects on the run's rule.
func (p *Profile) expressible(f Facts) []deployment.ScenarioRule {
	lease := deployment.FormatDuration(f.Budget.Lease)
	var out []deployment.ScenarioRule
	for _, r := range f.ScenarioRules {
		if p.CannotExpress(r, lease) == "" {
			out = append(out, r)
		}
	}
	return out
}

// validateRules checks capabilities.rules and turns the replaced capabilities.scenario_rules
// into it: true was every feature of the time, false none.
func (p *Profile) validateRules(bad func(path, format string, args ...any)) {
	if p.Caps.ScenarioRules != nil {
		if p.Caps.Rules != nil {
			bad("capabilities.scenario_rules", "replaced by capabilities.rules: give only capabilities.rules (the features your template renders: %s)", featureList())
			return
		}
		if *p.Caps.ScenarioRules {
			p.Caps.Rules = slices.Clone(RuleFeatures)
		} else {
			p.Caps.Rules = []RuleFeature{}
		}
		p.Caps.ScenarioRules = nil
		return
	}
	seen := map[RuleFeature]bool{}
	for i, f := range p.Caps.Rules {
		path := fmt.Sprintf("capabilities.rules[%d]", i)
		switch {
		case ruleFeatureWhat[f] == "":
			bad(path, "%q is not a rule feature: use %s", f, featureList())
		case seen[f]:
			bad(path, "%q is listed twice: name each feature once", f)
		}
		seen[f] = true
	}
	if len(p.Caps.Rules) > 0 && !seen[RuleOwn] {
		bad("capabilities.rules", "lists %s without %s: every other feature is a property of a rule of its own for a scenario's subjects", p.Caps.Rules, RuleOwn)
	}
}

func featureList() string {
	s := make([]string, len(RuleFeatures))
	for i, f := range RuleFeatures {
		s[i] = string(f)
	}
	return strings.Join(s, ", ")
}
