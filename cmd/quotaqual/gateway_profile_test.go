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
	t.Parallel() // a whole run: side by side (docker_runs_test.go)
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
	// No quota inspection: filled to capacity − estimate, the one request the rule still has
	// room for is admitted after the probes (a probe that spent quota would deny it).
	"probe-no-quota": {evidence.Passed, "", true},
	// No attribution header or request id: the sites are counted at the providers.
	"valid-auth": {evidence.Passed, "", true},
	// Go's HTTP server waits for an announced body before the 401 reaches the client.
	"auth-rejection": {evidence.Failed, "a POST announcing a body it never sends gets 401", true},
	// It meters the Basic-Auth user alone and reads no other header or field: the spent subject
	// is denied whatever it names; the username lookup is exact (other spellings get 401).
	"identity-sources": {evidence.Passed, "", true},
	// One fixed-window counter shared by both gateways: one budget, predicted exactly.
	// Its mux routes the canonical path only: every other spelling is refused without a
	// provider call, and the spent subject is denied on each.
	"quota-bypass": {evidence.Passed, "", true},
	// Its profile declares no endpoint but chat: its mux serves the chat path alone, and
	// answers every admin path on the data port 404.
	"api-surface":   {evidence.Passed, "", true},
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
	// No scenario rules (capabilities.rules empty): the cut stream on the run's rule. The altgateway finds the usage only
	// at the end of a response, which a stream the client closes never reaches, so it keeps
	// the per-call charge: the next request is admitted where the generated tokens deny it.
	"usage-accounting": {evidence.Failed, "charged at least what the provider generated", true},
	// No leases, no scenario rules: fill requests and a generation longer than the window.
	// The fixed window forgets the generation (and the fills) at its boundary, so concurrent
	// requests are admitted while it still runs.
	"long-generation": {evidence.Failed, "every concurrent request was denied", true},
	// Its config has one allowance for every caller: no rule of a scenario's own can be
	// expressed, and the skip names each part the scenario's rule needs.
	"hard-gate":       {evidence.Skipped, "which gateway profile altgateway cannot express (capabilities.rules: no own-rules, no hard)", false},
	"layered-budgets": {evidence.Skipped, "which gateway profile altgateway cannot express (capabilities.rules: no own-rules, no windows)", false},
	"model-budgets":   {evidence.Skipped, "which gateway profile altgateway cannot express (capabilities.rules: no own-rules, no model-key)", false},
	"model-source":    {evidence.Skipped, "which gateway profile altgateway cannot express (capabilities.rules: no own-rules, no model-key)", false},
	"output-bound":    {evidence.Skipped, "which gateway profile altgateway cannot express (capabilities.rules: no own-rules", false},
	"provider-usage":  {evidence.Skipped, "which gateway profile altgateway cannot express (capabilities.rules: no own-rules", false},
	// Its config cannot name the replicated store group: nothing to fail over.
	"valkey-failover": {evidence.Skipped, "needs the replicated store group", false},
	"replica-loss":    {evidence.Skipped, "needs the replicated store group", false},
	// Each policy's window is a counter key of its own (the key holds Unix time / period), so the two
	// policies do not share the subject's state: together they admit beyond the larger
	// capacity, and P1 no longer counts what was admitted under P2.
	"rolling-upgrade": {evidence.Failed, "tokens held at once ≤ the larger capacity", true},
	// No leases: nothing to hold across a stall or a frozen gateway.
	"store-stall":   {evidence.Skipped, "needs reservation leases", false},
	"gateway-pause": {evidence.Skipped, "needs reservation leases", false},
	// Its INCRBY is refused under noeviction: no admission (503), as with the store stopped
	// (measured: 503×6 within 8 ms, recovered).
	"store-memory-pressure": {evidence.Passed, "", true},
	// Its bound on a subject's charge is an estimate per ambiguous reserve held to its lease:
	// no leases, nothing to bound it by.
	"lossy-store-link": {evidence.Skipped, "needs reservation leases", false},
	// Its counter key is "<prefix>:alt:<caller>:<window>", the caller the raw username
	// (measured 2026-12-07: 3 of 3 store keys); its log names no caller on success; no metrics
	// declared, so that part is not made.
	"subject-privacy": {evidence.Failed, "no raw subject in the store's keys", true},
}

// TestAltGatewayVerdicts proves the gateway seam with a second, independent gateway: the whole
// qualification runs on it through its profile alone, and reports exactly which scenarios it
// passes, fails and skips, and why.
func TestAltGatewayVerdicts(t *testing.T) {
	t.Parallel() // a whole run: side by side (docker_runs_test.go)
	out, code := runGateway(t, shippedProfile("altgateway"), 5*time.Minute)
	if code != wire.ExitFailed {
		t.Errorf("exit %d (%s), want %d: the altgateway fails six scenarios", code, out.Error, wire.ExitFailed)
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

// TestTheProgressLineSaysEveryScenarioRanAlone: the altgateway does not forward the scenario
// header, so every scenario has a topology to itself (the providers cannot tell their calls
// apart otherwise), also those that pull no lever: the lever scenario on a topology of its own
// (netns), the others alone on the run's; the closing progress line says so, and why,
// instead of counting the scenarios' own levers.
func TestTheProgressLineSaysEveryScenarioRanAlone(t *testing.T) {
	t.Parallel() // a whole run: side by side (docker_runs_test.go)
	_, stderr, code := quotaqual(t, 2*time.Minute, "run", "--gateway", shippedProfile("altgateway"),
		"--scenario", "valid-auth", "--scenario", "concurrency", "--scenario", "valkey-outage", "--evidence-dir", t.TempDir())
	if code != wire.ExitOK {
		t.Errorf("exit %d, want 0\n%s", code, stderr)
	}
	want := "0 side by side, 1 on topologies of their own, 2 alone (2 because gateway profile altgateway does not forward the scenario header): 3 of 3 passed"
	if !strings.Contains(stderr, want) {
		t.Errorf("the closing progress line does not say %q:\n%s", want, stderr)
	}
}

// TestBlackBoxCatchesProbesThatSpendQuota proves probe-no-quota's black-box path on a foreign
// gateway: the altgateway (no quota inspection) passes it on admissions alone, and the same
// gateway with its probe-charge defect switched on (every /live and /ready charges 15 tokens
// to the caller admitted last; undertest/testdata/altgateway-probes-charge.yaml) fails it on
// the admission the rule had room for, with the provider calls unchanged — what the scenario
// used to count alone, and passed. Neither result reports a settled figure: without
// inspection none is known.
func TestBlackBoxCatchesProbesThatSpendQuota(t *testing.T) {
	t.Parallel() // a whole run: side by side (docker_runs_test.go)
	for _, c := range []struct {
		profile  string
		status   evidence.Status
		failedOn string
	}{
		{shippedProfile("altgateway"), evidence.Passed, ""},
		{filepath.Join("..", "..", "undertest", "testdata", "altgateway-probes-charge.yaml"), evidence.Failed, "the probes spent no quota"},
	} {
		out, _ := runGateway(t, c.profile, 2*time.Minute, "probe-no-quota")
		if len(out.Results) != 1 {
			t.Fatalf("%s: %d results, want 1 (%s)", c.profile, len(out.Results), out.Error)
		}
		r := out.Results[0]
		if r.Status != c.status || (c.failedOn != "" && !failedOn(r, c.failedOn)) || !strings.HasPrefix(r.Evidence, "black-box") {
			t.Errorf("%s: %s (%s) at evidence %q, want %s at the black-box level%s", c.profile, r.Status, r.Reason, r.Evidence, c.status,
				map[bool]string{true: " failed on " + c.failedOn}[c.failedOn != ""])
		}
		for _, a := range r.Assertions {
			if strings.Contains(a.Name, "provider calls unchanged") && !a.OK {
				t.Errorf("%s: %s failed: the probes reach no provider, so only the admission can tell", c.profile, a.Name)
			}
		}
		for _, f := range r.Facts {
			if strings.Contains(f.Name, "settled") {
				t.Errorf("%s: fact %s reported without inspection", c.profile, f.Name)
			}
		}
		t.Logf("%s: %s %s | %s", c.profile, r.Status, firstReason(r), r.KeyFact)
	}
}

// blackBoxProfile is quotaqual's own gateway with quota inspection declared absent.
var blackBoxProfile = filepath.Join("..", "..", "undertest", "testdata", "quotaqual-blackbox.yaml")

// TestBlackBoxProfileVerdicts runs the whole quick qualification on quotaqual's own gateway
// through the black-box profile (no quota inspection; the scenarios' own rules rendered, as the
// gateway can express them): every scenario runs its black-box path and passes, but
// valkey-failover, which needs inspection and says so. The scenarios that read no ledger at
// all (valid-auth with its attribution header, window-expiry, network-policy, and
// subject-privacy, whose logs, metrics and store keys the profile still offers) keep the full
// evidence level. No result reports a ledger figure it cannot know.
func TestBlackBoxProfileVerdicts(t *testing.T) {
	t.Parallel() // a whole run: side by side (docker_runs_test.go)
	out, code := runGateway(t, blackBoxProfile, 5*time.Minute)
	// valkey-failover's skip makes the run partial, which the default --require all fails.
	if code != wire.ExitPartial || out.Qual.Level != evidence.LevelPartial {
		t.Errorf("exit %d, qualification %q (%s), want %d and partial: valkey-failover skipped", code, out.Qual.Level, out.Error, wire.ExitPartial)
	}
	list, err := scenarios.ForProfile("quick", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Results) != len(list) {
		t.Fatalf("%d results, want the quick run's %d", len(out.Results), len(list))
	}
	fullEvidence := map[string]bool{"valid-auth": true, "window-expiry": true, "network-policy": true, "subject-privacy": true}
	for _, r := range out.Results {
		switch {
		case r.Name == "valkey-failover":
			if r.Status != evidence.Skipped || !strings.Contains(r.Reason, "needs quota inspection, which gateway profile quotaqual-blackbox does not offer") {
				t.Errorf("%s: %s (%s), want skipped for quota inspection", r.Name, r.Status, r.Reason)
			}
		case r.Status != evidence.Passed:
			t.Errorf("%s: %s (%s), want passed on its black-box path", r.Name, r.Status, r.Reason)
		case fullEvidence[r.Name] == strings.HasPrefix(r.Evidence, "black-box"):
			t.Errorf("%s: evidence %q, want black-box %v", r.Name, r.Evidence, !fullEvidence[r.Name])
		}
		for _, f := range r.Facts {
			if unknowableWithoutInspection(f.Name) {
				t.Errorf("%s: fact %s reported without quota inspection", r.Name, f.Name)
			}
		}
		t.Logf("%s: %s %s | %s", r.Name, r.Status, firstReason(r), r.KeyFact)
	}
}

// unknowableWithoutInspection reports whether a fact named so states a ledger figure, which
// only quota inspection can read: a settled or reserved figure not marked as summed from the
// responses or reconstructed from the request history, or the ledger's sampled trace.
func unknowableWithoutInspection(name string) bool {
	if name == evidence.LedgerSamplesFact || strings.Contains(name, "sampled") || strings.Contains(name, "ledger") {
		return true
	}
	if strings.Contains(name, "settled") || strings.Contains(name, "reserved") {
		return !strings.Contains(name, "from_responses") && !strings.Contains(name, "reconstructed")
	}
	return false
}
