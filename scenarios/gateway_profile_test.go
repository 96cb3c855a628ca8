package scenarios

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
)

func altProfile(t *testing.T) *undertest.Profile {
	t.Helper()
	p, err := undertest.Shipped("altgateway")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestGatewayNeedsSkipWithTheProfileNamed checks a scenario needing a capability the gateway
// under test lacks is skipped, naming the capability and the profile, and never runs; and that
// a scenario needing its own rule is skipped only for the parts of the rule the profile cannot
// express, each named by its feature.
func TestGatewayNeedsSkipWithTheProfileNamed(t *testing.T) {
	env := testEnv(topology.Capabilities{})
	list, err := Select([]string{"model-budgets"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := NewDeployment("q-needs", env.Profile, list)
	if err != nil {
		t.Fatal(err)
	}
	env.Deployment = d
	ran := false
	run := func(needs ...Need) evidence.ScenarioResult {
		ran = false
		return Run(context.Background(), env, []Scenario{fake("model-budgets", needs, func(ctx context.Context, env *Env) *Result {
			ran = true
			r := env.NewResult()
			r.Check("ok", 1, 1, true)
			return r
		})})[0]
	}
	env.Gateway = altProfile(t)
	res := run(NeedScenarioRules, NeedQuotaInspection)
	if ran || res.Status != evidence.Skipped {
		t.Fatalf("ran %v, status %s", ran, res.Status)
	}
	for _, want := range []string{"quota inspection", "a rule of its own for the scenario's subjects", "a rule keyed by subject and model",
		"altgateway", "capabilities.rules: no own-rules, no model-key"} {
		if !strings.Contains(res.Reason, want) {
			t.Errorf("reason %q does not name %s", res.Reason, want)
		}
	}
	// A profile with rules of its own but no model key: only that part is named.
	own, err := undertest.Shipped(undertest.DefaultName)
	if err != nil {
		t.Fatal(err)
	}
	own.Caps.Rules = []undertest.RuleFeature{undertest.RuleOwn, undertest.RuleWindows}
	env.Gateway = own
	res = run(NeedScenarioRules)
	want := "needs a rule keyed by subject and model, with an allowlist of models, which gateway profile quotaqual cannot express (capabilities.rules: no model-key)"
	if ran || res.Status != evidence.Skipped || res.Reason != want {
		t.Errorf("ran %v, %s %q, want skipped %q", ran, res.Status, res.Reason, want)
	}
	// The default gateway offers every gateway capability and expresses the rule: it runs.
	env.Gateway = nil
	res = run(NeedScenarioRules, NeedQuotaInspection, NeedStoreGroup, NeedLeases, NeedPolicyChange, NeedSharedStore, NeedRestart)
	if !ran || res.Status != evidence.Passed {
		t.Errorf("default gateway: %s %q", res.Status, res.Reason)
	}
}

// TestNotMadeLowersTheEvidence checks a check the gateway cannot support is named in the
// result's evidence level and the key fact, and that a result without one keeps the default
// (empty) evidence.
func TestNotMadeLowersTheEvidence(t *testing.T) {
	res := Run(context.Background(), testEnv(topology.Capabilities{}), []Scenario{
		fake("blind", nil, func(ctx context.Context, env *Env) *Result {
			r := env.NewResult()
			r.Check("counted at the providers", 1, 1, true)
			r.NotMade("settled unchanged", "no quota inspection")
			r.Key("k")
			return r
		}),
		fake("full", nil, func(ctx context.Context, env *Env) *Result {
			r := env.NewResult()
			r.Check("ok", 1, 1, true)
			r.Key("k")
			return r
		}),
	})
	if !strings.HasPrefix(res[0].Evidence, "black-box") || !strings.Contains(res[0].Evidence, "settled unchanged (no quota inspection)") {
		t.Errorf("evidence %q", res[0].Evidence)
	}
	if res[0].KeyFact != "[black-box] k" {
		t.Errorf("key fact %q", res[0].KeyFact)
	}
	if res[1].Evidence != "" || res[1].KeyFact != "k" {
		t.Errorf("full evidence changed: %q %q", res[1].Evidence, res[1].KeyFact)
	}
}

// TestDecidedByNamesTheEvidence checks the black-box evidence a scenario names is what its
// evidence level says decided it, also with no check left unmade, and that a black-box
// verdict that failed keeps its level (a failure found from outside is still black-box).
func TestDecidedByNamesTheEvidence(t *testing.T) {
	res := Run(context.Background(), testEnv(topology.Capabilities{}), []Scenario{
		fake("decided", nil, func(ctx context.Context, env *Env) *Result {
			r := env.NewResult()
			r.DecidedBy("admissions probed from outside", "the providers' call logs", "admissions probed from outside")
			r.Check("next request denied", 429, 429, true)
			r.Key("k")
			return r
		}),
		fake("failed", nil, func(ctx context.Context, env *Env) *Result {
			r := env.NewResult()
			r.DecidedBy("admissions probed from outside")
			r.NotMade("settled charge", "no quota inspection")
			r.Check("next request denied", 429, 200, false)
			return r
		}),
	})
	if want := "black-box: decided by admissions probed from outside, the providers' call logs"; res[0].Evidence != want || res[0].Status != evidence.Passed {
		t.Errorf("evidence %q (%s), want %q", res[0].Evidence, res[0].Status, want)
	}
	if res[0].KeyFact != "[black-box] k" {
		t.Errorf("key fact %q", res[0].KeyFact)
	}
	if want := "black-box: decided by admissions probed from outside; not made: settled charge (no quota inspection)"; res[1].Evidence != want || res[1].Status != evidence.Failed {
		t.Errorf("evidence %q (%s), want %q failed", res[1].Evidence, res[1].Status, want)
	}
}

// TestNewRequestsCountsCallsNotLogLength checks the requests between two snapshots are the
// last entries of each log by the call counts, also when the bounded log dropped old ones.
func TestNewRequestsCountsCallsNotLogLength(t *testing.T) {
	req := func(id string) providerstub.CallRecord { return providerstub.CallRecord{RequestID: id} }
	before := ProviderSnapshot{ByHost: map[string]ProviderLog{
		"p1": {CallLog: providerstub.CallLog{Calls: 5, Requests: []providerstub.CallRecord{req("a"), req("b"), req("c")}}},
		"p2": {CallLog: providerstub.CallLog{Calls: 1, Requests: []providerstub.CallRecord{req("x")}}},
	}}
	after := ProviderSnapshot{ByHost: map[string]ProviderLog{
		"p1": {CallLog: providerstub.CallLog{Calls: 6, Requests: []providerstub.CallRecord{req("b"), req("c"), req("d")}}}, // full: "a" dropped
		"p2": {CallLog: providerstub.CallLog{Calls: 1, Requests: []providerstub.CallRecord{req("x")}}},
		"p3": {CallLog: providerstub.CallLog{Calls: 1, Requests: []providerstub.CallRecord{req("y")}}},
	}}
	var got []string
	for _, r := range newRequests(before, after) {
		got = append(got, r.RequestID)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"d", "y"}) {
		t.Errorf("new requests %v, want [d y]", got)
	}
}

// TestQuotaReadWithoutInspectionSkips checks a quota read of a gateway without inspection is
// an unsupported lever: the scenario that needed it is skipped, never passed.
func TestQuotaReadWithoutInspectionSkips(t *testing.T) {
	env := testEnv(topology.Capabilities{})
	env.Gateway = altProfile(t)
	res := Run(context.Background(), env, []Scenario{fake("reads", nil, func(ctx context.Context, env *Env) *Result {
		r := env.NewResult()
		r.Check("admitted", 200, 200, true)
		_, err := env.Quotas().Read(ctx, gwA, Key{Rule: RuleName, Subject: appA})
		return r.Error(err)
	})})
	if res[0].Status != evidence.Skipped || !strings.Contains(res[0].Reason, "offers no quota inspection") {
		t.Fatalf("got %s %q", res[0].Status, res[0].Reason)
	}
}

// TestExpectationsComeFromTheProfile checks the header names, the store failure and the
// bucket follow the gateway under test.
func TestExpectationsComeFromTheProfile(t *testing.T) {
	def := &Env{}
	if got := def.quotaHeadersLabel(); got != "Retry-After and x-ratelimit-*" {
		t.Errorf("default label %q", got)
	}
	alt := &Env{Gateway: altProfile(t)}
	if got := alt.quotaHeaderNames(); strings.Join(got, ",") != "Retry-After,X-Allowance-Limit,X-Allowance-Remaining" {
		t.Errorf("altgateway quota headers %v", got)
	}
	r := NewResult()
	alt.checkStoreFailure(r, "req", Outcome{Status: 503})
	if r.Failed() || len(r.notMade) != 1 {
		t.Errorf("altgateway's 503 without an error type: failed %v, not made %v", r.Failed(), r.notMade)
	}
	r = NewResult()
	def.checkStoreFailure(r, "req", Outcome{Status: 503, ErrorType: "other"})
	if !r.Failed() {
		t.Error("quotaqual's 503 with the wrong error type passed")
	}
}
