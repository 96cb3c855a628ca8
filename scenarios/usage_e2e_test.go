package scenarios

import (
	"os"
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/mutant"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
)

// withoutInspection is quotaqual's own gateway as a black box that renders the scenarios' rules
// but offers no /admin/quota: what a foreign gateway with the scenario's rule shows. Only the
// declared capability differs, so a catch on it is the black-box path's doing.
func withoutInspection() *undertest.Profile {
	p := *undertest.Default()
	p.Name = "quotaqual-no-inspection"
	p.Caps.QuotaInspection = undertest.InspectNone
	return &p
}

// runMetering runs the named scenarios on the process topology with the mutants build, its
// gateways armed with m ("" for none), seen through gw (nil: quotaqual's own profile, with
// inspection).
func runMetering(t *testing.T, m mutant.Name, gw *undertest.Profile, names ...string) map[string]evidence.ScenarioResult {
	t.Helper()
	bin := os.Getenv(envHookBinary)
	if bin == "" {
		t.Fatal("no mutants quotaqual binary: TestMain builds it unless -short")
	}
	list, err := Select(names)
	if err != nil {
		t.Fatal(err)
	}
	results, _, _ := topologyRunBin(t, topology.EngineProcess, bin, func(d *deployment.Deployment) {
		if m != "" {
			d.GatewayTestEnv = []string{mutant.EnvVar + "=" + string(m)}
		}
	}, func(s *topology.Spec) { s.Gateway = gw }, list)
	out := map[string]evidence.ScenarioResult{}
	for _, r := range results {
		out[r.Name] = r
	}
	return out
}

// evidenceModes are the two ways every check of output-bound and provider-usage must catch its
// defect: with quota inspection, and from outside only.
var evidenceModes = []struct {
	name     string
	gw       func() *undertest.Profile
	blackBox bool
}{
	{"white-box", func() *undertest.Profile { return nil }, false},
	{"black-box", withoutInspection, true},
}

// checkLevel checks the result was decided at the evidence level of its mode.
func checkLevel(t *testing.T, r evidence.ScenarioResult, blackBox bool) {
	t.Helper()
	if got := strings.HasPrefix(r.Evidence, "black-box"); got != blackBox {
		t.Errorf("%s: evidence %q, want black-box %v", r.Name, r.Evidence, blackBox)
	}
}

// TestMeteringScenariosPassOnOurGateway is the control of the mutant tests below: the unbroken
// mutants build passes output-bound and provider-usage, with and without inspection.
func TestMeteringScenariosPassOnOurGateway(t *testing.T) {
	endToEnd(t, "starts real processes")
	for _, mode := range evidenceModes {
		t.Run(mode.name, func(t *testing.T) {
			for _, r := range runMetering(t, "", mode.gw(), outputBoundScenario, providerUsageRule) {
				if r.Status != evidence.Passed {
					t.Errorf("want passed, got %s", describe(r))
				}
				checkLevel(t, r, mode.blackBox)
				t.Logf("%s: %s — %s", r.Name, r.Status, r.KeyFact)
			}
		})
	}
}

// meteringMutants are the defects output-bound and provider-usage target, each with the
// scenario that must fail and the checks it must fail on.
var meteringMutants = []struct {
	mutant   mutant.Name
	scenario string
	failsOn  []string
}{
	{mutant.LegacyEstimate, outputBoundScenario, []string{
		"meter (json): each form reserved the bound the provider honours × n",
		"meter (stream): each form reserved the bound the provider honours × n",
		"hard: no request forwarded with a bound above the client's own"}},
	{mutant.HardClampIgnoresN, outputBoundScenario, []string{
		"hard: no request consumed more than its reservation",
		"hard: every request forwarded with a bound that, times n, leaves the prompt room",
		"hard: usage within the window ≤ capacity"}},
	{mutant.HardClampMaxTokensOnly, outputBoundScenario, []string{
		"hard: no request consumed more than its reservation",
		"hard: every request forwarded with a bound that, times n, leaves the prompt room"}},
	{mutant.HardClampSentFieldsOnly, outputBoundScenario, []string{
		"hard: no request consumed more than its reservation",
		"hard: every request forwarded with a bound that, times n, leaves the prompt room"}},
	// Blind review 12: legacy completions clamped in chat's field, which the legacy API ignores.
	{mutant.LegacyClampWrongField, outputBoundScenario, []string{
		"hard: no request consumed more than its reservation",
		"hard: every request forwarded with a bound that, times n, leaves the prompt room"}},
	{mutant.UsageTrustsTotal, providerUsageRule, []string{
		"json: every mode charged at least what the provider generated",
		"stream: every mode charged at least what the provider generated"}},
	{mutant.UsageTrustsNegative, providerUsageRule, []string{
		"json: every mode charged at least what the provider generated",
		"stream: every mode charged at least what the provider generated"}},
	{mutant.UsageUnbounded, providerUsageRule, []string{
		"json: the gateway keeps serving",
		"stream: the gateway keeps serving"}},
	{mutant.UsageChunksSummed, providerUsageRule, []string{
		"stream: the same usage chunk twice charged once"}},
	{mutant.UsageLastChunkWins, providerUsageRule, []string{
		"stream: every mode charged at least what the provider generated"}},
	{mutant.UsageUnderstatedTrusted, providerUsageRule, []string{
		"json: every mode charged at least what the provider generated",
		"stream: every mode charged at least what the provider generated"}},
}

// TestMeteringScenariosFailOnTheirMutants proves each check of output-bound and provider-usage
// against the defect it guards, with quota inspection and from outside only: each mutant fails
// its scenario on the checks named, at the evidence level of the run.
func TestMeteringScenariosFailOnTheirMutants(t *testing.T) {
	endToEnd(t, "starts real processes")
	for _, c := range meteringMutants {
		for _, mode := range evidenceModes {
			t.Run(string(c.mutant)+"/"+mode.name, func(t *testing.T) {
				r := runMetering(t, c.mutant, mode.gw(), c.scenario)[c.scenario]
				expectFailedOn(t, []evidence.ScenarioResult{r}, c.failsOn...)
				checkLevel(t, r, mode.blackBox)
			})
		}
	}
}

// TestProviderUsageFailsWhenAProvider4xxIsNotBilled proves provider-usage's provider errors
// against blind patch 54 (round 3's 57): a gateway that settles a provider's 4xx at zero, though
// its error reports the usage generated (a content filter after generating, a 429 met
// mid-generation), is charged 0 where the error reported prompt + 40 — seen in the remaining
// header of the probes after it, so it fails white-box and black-box alike; the unpatched
// gateway charges each error exactly its reported usage and passes in both views.
func TestProviderUsageFailsWhenAProvider4xxIsNotBilled(t *testing.T) {
	endToEnd(t, "builds a patched gateway and starts real processes")
	checkBlindCases(t, []blindCase{
		{"54-provider-4xx-not-billed.patch", providerUsageRule,
			[]string{"errors: every non-2xx answer charged the usage it reported"}, nil},
	}, providerUsageRule)
}
