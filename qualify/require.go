package qualify

import (
	"fmt"
	"slices"
	"strings"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/scenarios"
)

// The --require policies that are not scenario names.
const (
	RequireAll  = "all"  // every selected scenario must run: any skip fails the run (the default)
	RequireNone = "none" // a partial qualification is accepted: skips never fail the run
)

// requirement is the parsed --require: which selected scenarios must run, not be skipped.
type requirement struct {
	policy string          // as the bundle records it: "all", "none", or the names, comma-separated
	all    bool            // every selected scenario
	names  map[string]bool // else these
}

func (r requirement) required(name string) bool { return r.all || r.names[name] }

// parseRequire reads --require's values (repeatable, each a comma list) against the catalogue
// and the run's selection. No value means all.
func parseRequire(values []string, selected []scenarios.Scenario) (requirement, error) {
	var items []string
	for _, v := range values {
		for _, item := range strings.Split(v, ",") {
			if item = strings.TrimSpace(item); item != "" {
				items = append(items, item)
			}
		}
	}
	if len(items) == 0 {
		return requirement{policy: RequireAll, all: true}, nil
	}
	if slices.Contains(items, RequireAll) || slices.Contains(items, RequireNone) {
		if len(items) > 1 {
			return requirement{}, fmt.Errorf("--require %s: %s and %s stand alone; give one of them, or scenario names", strings.Join(items, ","), RequireAll, RequireNone)
		}
		return requirement{policy: items[0], all: items[0] == RequireAll}, nil
	}
	var names []string
	for _, s := range selected {
		names = append(names, s.Name)
	}
	r := requirement{names: map[string]bool{}}
	var unknown, unselected []string
	for _, item := range items {
		switch {
		case !slices.Contains(scenarios.Names(), item):
			unknown = append(unknown, fmt.Sprintf("%q", item))
		case !slices.Contains(names, item):
			unselected = append(unselected, item)
		default:
			r.names[item] = true
		}
	}
	if len(unknown) > 0 {
		return requirement{}, fmt.Errorf("--require: unknown scenario %s: use %s, %s, or scenario names from %s", strings.Join(unknown, ", "), RequireAll, RequireNone, strings.Join(scenarios.Names(), ", "))
	}
	if len(unselected) > 0 {
		return requirement{}, fmt.Errorf("--require %s: not selected by this run, which runs %s (the --scenario flags, else the profile's default list): select it with --scenario (which then runs only the scenarios named), or leave it out of --require",
			strings.Join(unselected, ","), strings.Join(names, ", "))
	}
	for _, s := range selected { // the catalogue's order, whatever order they were given in
		if r.names[s.Name] {
			r.policy += "," + s.Name
		}
	}
	r.policy = strings.TrimPrefix(r.policy, ",")
	return r, nil
}

// assess is the run's qualification under r.
func (r requirement) assess(results []evidence.ScenarioResult) evidence.Qualification {
	return evidence.Assess(results, r.policy, r.required)
}

// partialError says which required scenarios were skipped and why, and how to accept less.
func partialError(q evidence.Qualification) error {
	return fmt.Errorf("partial: a required scenario was skipped (--require %s), so the run did not qualify it: %s; "+
		"accept a partial qualification with --require none, or require only the scenarios this run can make (--require NAME,…)",
		q.Require, evidence.SkipList(q.RequiredSkipped()))
}
