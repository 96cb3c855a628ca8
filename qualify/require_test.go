package qualify

import (
	"errors"
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/scenarios"
)

func TestRequireParsesPoliciesAndNames(t *testing.T) {
	quick, err := scenarios.ForProfile("quick", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		values          []string
		policy          string
		requires, spare string // a scenario it requires, one it does not ("" none)
	}{
		{nil, "all", "valkey-partition", ""},
		{[]string{"all"}, "all", "shared-budget", ""},
		{[]string{"none"}, "none", "", "valkey-partition"},
		// repeatable and comma lists, recorded in the catalogue's order
		{[]string{"valkey-partition, shared-budget", "valid-auth"}, "valid-auth,shared-budget,valkey-partition", "valkey-partition", "network-policy"},
	} {
		r, err := parseRequire(c.values, quick)
		if err != nil {
			t.Errorf("%v: %v", c.values, err)
			continue
		}
		if r.policy != c.policy || (c.requires != "" && !r.required(c.requires)) || (c.spare != "" && r.required(c.spare)) {
			t.Errorf("%v: policy %q, requires %s %v, %s %v; want %q", c.values, r.policy, c.requires, r.required(c.requires), c.spare, r.required(c.spare), c.policy)
		}
	}
}

func TestRequireRejectsWhatItCannotMean(t *testing.T) {
	quick, _ := scenarios.ForProfile("quick", nil)
	two, _ := scenarios.Select([]string{"valid-auth", "shared-budget"})
	for _, c := range []struct {
		values   []string
		selected []scenarios.Scenario
		want     []string
	}{
		// an unknown name: the error lists the valid ones
		{[]string{"valkey-partiton"}, quick, []string{"--require", `unknown scenario "valkey-partiton"`, "all, none", "valkey-partition", "rolling-upgrade"}},
		// a known scenario this run does not select: both flags named
		{[]string{"valkey-partition"}, two, []string{"--require valkey-partition", "not selected", "valid-auth, shared-budget", "--scenario"}},
		{[]string{"sustained-load"}, quick, []string{"--require sustained-load", "not selected", "--scenario"}},
		// all and none stand alone
		{[]string{"all,valid-auth"}, quick, []string{"--require all,valid-auth", "stand alone"}},
		{[]string{"none", "all"}, quick, []string{"stand alone"}},
	} {
		_, err := parseRequire(c.values, c.selected)
		if err == nil {
			t.Errorf("%v: accepted", c.values)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q lacks %q", c.values, err, w)
			}
		}
	}
	// Validate puts it before anything starts, as bad usage.
	o := Options{Require: []string{"no-such"}}
	var ue *UsageError
	if err := o.Validate(); err == nil || !errors.As(err, &ue) || !strings.Contains(err.Error(), "--require") {
		t.Errorf("Validate with --require no-such: %v, want a usage error naming --require", err)
	}
}

// A skip the run requires fails it with the reason, naming each skipped scenario and what it
// lacked; --require none accepts the same results as partial.
func TestARequiredSkipIsNamedWithItsReason(t *testing.T) {
	results := []evidence.ScenarioResult{
		{Name: "valid-auth", Status: evidence.Passed},
		{Name: "valkey-partition", Status: evidence.Skipped, Reason: "needs partitions: process topology runs every component on loopback: no network isolation"},
	}
	quick, _ := scenarios.ForProfile("quick", nil)
	all, _ := parseRequire(nil, quick)
	q := all.assess(results)
	if q.Level != evidence.LevelPartial || len(q.RequiredSkipped()) != 1 {
		t.Fatalf("qualification %+v", q)
	}
	msg := partialError(q).Error()
	for _, w := range []string{"partial: a required scenario was skipped (--require all)", "valkey-partition (needs partitions: process topology runs every component on loopback: no network isolation)", "--require none"} {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q lacks %q", msg, w)
		}
	}
	none, _ := parseRequire([]string{"none"}, quick)
	if q := none.assess(results); q.Level != evidence.LevelPartial || len(q.RequiredSkipped()) != 0 || q.Require != "none" {
		t.Errorf("--require none: %+v", q)
	}
	only, _ := parseRequire([]string{"valid-auth"}, quick)
	if q := only.assess(results); len(q.RequiredSkipped()) != 0 {
		t.Errorf("--require valid-auth: %+v, want valkey-partition's skip not required", q)
	}
}
