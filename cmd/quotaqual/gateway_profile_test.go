package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/scenarios"
	"github.com/quotaqual/quotaqual/wire"
)

// shippedProfile is the path of a shipped gateway profile from this package's directory.
func shippedProfile(name string) string {
	return filepath.Join("..", "..", "undertest", "profiles", name+".yaml")
}

// runGateway runs `quotaqual run --gateway profile --json` with the scenarios given and
// returns the decoded output and the exit code.
func runGateway(t *testing.T, profile string, timeout time.Duration, only ...string) (runJSON, int) {
	t.Helper()
	args := []string{"run", "--gateway", profile, "--json", "--evidence-dir", t.TempDir()}
	for _, s := range only {
		args = append(args, "--scenario", s)
	}
	stdout, stderr, code := quotaqual(t, timeout, args...)
	var out runJSON
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("run --json printed no JSON (%v)\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
	return out, code
}

// TestRunGatewayProfileErrorsNameTheField checks a broken profile is refused before anything
// starts, with exit code 2 and the problem named by its path in the profile.
func TestRunGatewayProfileErrorsNameTheField(t *testing.T) {
	good, err := os.ReadFile(shippedProfile("altgateway"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, to, want string }{
		{"readiness:", "readyness:", `readyness: unknown field; did you mean "readiness"?`},
		{"store_failure: {status: 503}", "store_failure: {status: 200}", "expect.store_failure.status: 200 is not an error status"},
	} {
		path := filepath.Join(t.TempDir(), "broken.yaml")
		if err := os.WriteFile(path, []byte(strings.Replace(string(good), c.from, c.to, 1)), 0o600); err != nil {
			t.Fatal(err)
		}
		_, stderr, code := quotaqual(t, 30*time.Second, "run", "--gateway", path, "--evidence-dir", t.TempDir())
		if code != wire.ExitUsage {
			t.Errorf("exit %d, want %d; stderr: %s", code, wire.ExitUsage, stderr)
		}
		for _, want := range []string{"--gateway", path, c.want} {
			if !strings.Contains(stderr, want) {
				t.Errorf("stderr %q does not name %q", stderr, want)
			}
		}
	}
	if _, stderr, code := quotaqual(t, 30*time.Second, "run", "--gateway", "no-such-profile.yaml"); code != wire.ExitUsage || !strings.Contains(stderr, "--gateway") {
		t.Errorf("a missing profile: exit %d, stderr %q", code, stderr)
	}
}

// TestKnownBadProfileFails runs the shipped known-bad profile (quotaqual's gateway on a
// per-process memory ledger) on netns: the scenarios that prove a shared, durable, fail-closed
// budget fail, each on the assertion naming the broken invariant, while a scenario that does
// not depend on the store still passes (the failures are the ledger's, not a broken launch).
func TestKnownBadProfileFails(t *testing.T) {
	wantFailed := map[string]string{
		"shared-budget":    "admitted == predicted from settled usage",
		"concurrency":      "admitted == capacity / estimate",
		"gateway-restart":  "still denied on the restarted gateway-a",
		"valkey-outage":    "→ 503",
		"valkey-partition": "→ 503",
	}
	only := []string{"valid-auth"}
	for s := range wantFailed {
		only = append(only, s)
	}
	out, code := runGateway(t, shippedProfile("quotaqual-memory"), 4*time.Minute, only...)
	if code != wire.ExitFailed {
		t.Errorf("exit %d (%s), want %d", code, out.Error, wire.ExitFailed)
	}
	if len(out.Results) != len(only) {
		t.Fatalf("%d results, want %d", len(out.Results), len(only))
	}
	for _, r := range out.Results {
		want, mustFail := wantFailed[r.Name]
		if !mustFail {
			if r.Status != evidence.Passed {
				t.Errorf("%s: %s (%s), want passed: the memory profile launches and serves", r.Name, r.Status, r.Reason)
			}
			continue
		}
		if r.Status != evidence.Failed || !failedOn(r, want) {
			t.Errorf("%s: %s (%s), want failed on %q", r.Name, r.Status, r.Reason, want)
			continue
		}
		t.Logf("%s failed as it must: %s", r.Name, firstReason(r))
	}
}

// verdict is what the qualification says of one scenario on the altgateway: its status, a
// fragment of its reason (failed, skipped) and whether black-box evidence decided it.
type verdict struct {
	status   evidence.Status
	fragment string
	blackBox bool
}

// altGatewayVerdicts pins what the qualification says of the independent altgateway
// (internal/altgateway, undertest/profiles/altgateway.yaml) on netns, and why.
var altGatewayVerdicts = map[string]verdict{
	// No quota inspection: the ledger figures are not read; provider counts decide.
	"probe-no-quota": {evidence.Passed, "", true},
	// No attribution header or request id: the sites are counted at the providers.
	"valid-auth": {evidence.Passed, "", true},
	// Go's HTTP server waits for an announced body before the 401 reaches the client.
	"auth-rejection": {evidence.Failed, "a POST announcing a body it never sends gets 401", true},
	// One fixed-window counter shared by both gateways: one budget, predicted exactly.
	"shared-budget": {evidence.Passed, "", true},
	// INCRBY is atomic: exactly capacity/estimate of the burst, peak reconstructed ≤ capacity.
	"concurrency": {evidence.Passed, "", true},
	// A fixed window forgets everything at its boundary: usage leaves before a window passed.
	"window-expiry":   {evidence.Failed, "not admitted before the charge could leave", true},
	"gateway-restart": {evidence.Passed, "", true},
	// No inspection, no leases: the black-box path. The crashed request's charge is kept (the
	// burst after the crash admits exactly (capacity − estimate) / estimate) and the subject
	// is admitted again later; the after-the-lease probe is not made (no leases).
	"gateway-crash": {evidence.Passed, "", true},
	// The counter is in Valkey: no store, no admission (503).
	"valkey-outage":    {evidence.Passed, "", true},
	"network-policy":   {evidence.Passed, "", false},
	"valkey-partition": {evidence.Passed, "", true},
	// No scenario rules: the cut stream on the run's rule. The altgateway finds the usage only
	// at the end of a response, which a stream the client closes never reaches, so it keeps
	// the per-call charge: the next request is admitted where the generated tokens deny it.
	"usage-accounting": {evidence.Failed, "charged at least what the provider generated", true},
	// No leases, no scenario rules: fill requests and a generation longer than the window.
	// The fixed window forgets the generation (and the fills) at its boundary, so concurrent
	// requests are admitted while it still runs.
	"long-generation": {evidence.Failed, "every concurrent request was denied", true},
	// No black-box path: the run's rule promises no hard gate, and there is no other rule.
	"hard-gate": {evidence.Skipped, "no black-box check of it can be made", false},
	// Neither a rule with enforcement hard nor one estimating from the output bound; nor one
	// with room for every hostile usage case.
	"output-bound":   {evidence.Skipped, "needs the scenario's own rules", false},
	"provider-usage": {evidence.Skipped, "needs the scenario's own rule", false},
	// Its rules have one window each and the scenarios' own rules are not rendered for it.
	"layered-budgets": {evidence.Skipped, "needs the scenarios' own rules", false},
	"model-budgets":   {evidence.Skipped, "needs the scenarios' own rules", false},
	// Its config cannot name the replicated store group: nothing to fail over.
	"valkey-failover": {evidence.Skipped, "needs the replicated store group", false},
	// Each policy's window is a counter key of its own (the key holds Unix time / period), so the two
	// policies do not share the subject's state: together they admit beyond the larger
	// capacity, and P1 no longer counts what was admitted under P2.
	"rolling-upgrade": {evidence.Failed, "tokens held at once ≤ the larger capacity", true},
}

// TestAltGatewayVerdicts proves the gateway seam with a second, independent gateway: the whole
// qualification runs on it through its profile alone, and reports exactly which scenarios it
// passes, fails and skips, and why.
func TestAltGatewayVerdicts(t *testing.T) {
	out, code := runGateway(t, shippedProfile("altgateway"), 5*time.Minute)
	if code != wire.ExitFailed {
		t.Errorf("exit %d (%s), want %d: the altgateway fails five scenarios", code, out.Error, wire.ExitFailed)
	}
	// The run is the quick profile's default list (sustained-load runs only when asked there).
	list, err := scenarios.ForProfile("quick", nil)
	if err != nil {
		t.Fatal(err)
	}
	var defaults []string
	for _, s := range list {
		defaults = append(defaults, s.Name)
	}
	if len(altGatewayVerdicts) != len(defaults) {
		t.Fatalf("the pinned list has %d scenarios, the quick qualification %d: pin every scenario", len(altGatewayVerdicts), len(defaults))
	}
	var got []string
	for _, r := range out.Results {
		got = append(got, r.Name)
		checkAltGatewayVerdict(t, r)
	}
	if want := defaults; !slices.Equal(got, want) {
		t.Errorf("results for %v, want %v", got, want)
	}
}

// failedOn reports whether r has a failed assertion whose name contains want.
func failedOn(r evidence.ScenarioResult, want string) bool {
	for _, a := range r.Assertions {
		if !a.OK && strings.Contains(a.Name, want) {
			return true
		}
	}
	return false
}

// checkAltGatewayVerdict checks r against its verdict pinned in altGatewayVerdicts (the same on
// every engine): status, reason, and whether its evidence is black-box.
func checkAltGatewayVerdict(t *testing.T, r evidence.ScenarioResult) {
	t.Helper()
	want, ok := altGatewayVerdicts[r.Name]
	if !ok {
		t.Errorf("%s: no pinned verdict", r.Name)
		return
	}
	if r.Status != want.status || (want.fragment != "" && !strings.Contains(r.Reason, want.fragment)) {
		t.Errorf("%s: %s (%s), want %s with %q", r.Name, r.Status, r.Reason, want.status, want.fragment)
	}
	if r.Status != evidence.Skipped && (r.Evidence != "") != want.blackBox {
		t.Errorf("%s: evidence %q, want black-box %v", r.Name, r.Evidence, want.blackBox)
	}
	t.Logf("%s: %s %s %s", r.Name, r.Status, firstReason(r), r.Evidence)
}

func firstReason(r evidence.ScenarioResult) string {
	s, _, _ := strings.Cut(r.Reason, "; ")
	return s
}
