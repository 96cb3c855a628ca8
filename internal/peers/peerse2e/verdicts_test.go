// Package peerse2e pins what the qualification says of each peer — a real third-party engine
// behind its shim (internal/peers) — on netns, the way TestAltGatewayVerdicts pins the
// altgateway: every scenario's status, a fragment of its deciding fact, and whether black-box
// evidence decided it. A change is a failure listing every verdict that moved. The tests run
// only where the engines are built (`make peers`; CI builds them), and skip saying so
// elsewhere: `make test` does not need them.
package peerse2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/peers"
	"github.com/quotaqual/quotaqual/internal/testbin"
	"github.com/quotaqual/quotaqual/undertest"
)

// The quotaqual binary the runs use, built once by the first test that runs a peer (none is
// built when every peer test skips).
var (
	buildOnce sync.Once
	binDir    string
	binary    string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func quotaqualBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "quotaqual-peerse2e-")
		if buildErr == nil {
			binary = filepath.Join(binDir, "quotaqual")
			buildErr = testbin.Build(binary)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binary
}

// verdict is one scenario's pinned verdict.
type verdict struct {
	status   evidence.Status
	fragment string // in the deciding fact (key fact or reason); "" for any
	blackBox bool
	// timing, when set, says why the verdict depends on timing the peer does not control
	// (a 20 ms deadline met under load, GLOBAL's copies synchronised every 100 ms): another
	// status is logged, not failed.
	timing string
}

// skipUnlessBuilt skips the test, saying which, when an engine of peer's services is not built.
func skipUnlessBuilt(t *testing.T, peer string) {
	t.Helper()
	p, err := undertest.Shipped(peer)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Services {
		e, err := peers.ByName(s.Engine)
		if err != nil {
			t.Fatal(err)
		}
		if err := peers.Built(e); err != nil {
			t.Skipf("%v", err)
		}
	}
}

// runSlots bounds the peers' runs at once. Three: the three Envoy-based runs (the longest)
// together, then the two gubernator runs together. All five at once moved two gubernator
// verdicts in one of two runs (sustained-load answered 21 503s with admission p99 1.6 s;
// usage-accounting's cut stream generated 1 token: not decided).
var runSlots = make(chan struct{}, 3)

// runPeer runs the whole reference qualification on peer (netns) and returns its results, or
// skips the test when the peer's engines are not built or the run is short.
func runPeer(t *testing.T, peer string, timeout time.Duration) []evidence.ScenarioResult {
	t.Helper()
	if testing.Short() {
		t.Skip("a whole qualification of a peer on netns: not in -short")
	}
	skipUnlessBuilt(t, peer)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, quotaqualBinary(t), "run", "--gateway", pinnedProfile(t, peer), "--profile", "reference", "--json", "--evidence-dir", t.TempDir())
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// The runs go side by side, runSlots at a time: each is mostly waiting out its windows and
	// leases, so one after another they took 25 minutes of CI, and two at a time (go test's
	// -parallel, GOMAXPROCS here) ~720 s; each netns run has namespaces, addresses and keys of
	// its own. The run is started before t.Parallel pauses the test, so the runs start in the
	// sequential phase (a test waits there for a slot) and -parallel only bounds how many tests
	// wait on theirs. The wall is taken when the run ends, not when its test resumes to read it.
	runSlots <- struct{}{}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		<-runSlots
		t.Fatalf("quotaqual run --gateway %s: %v", peer, err)
	}
	var err error
	var wall time.Duration
	waited := make(chan struct{})
	go func() {
		err = cmd.Wait()
		wall = time.Since(start)
		<-runSlots
		close(waited)
	}()
	t.Parallel()
	<-waited
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("quotaqual run --gateway %s: %v\n%s", peer, err, stderr.String())
	}
	var out struct {
		Error   string                    `json:"error"`
		Results []evidence.ScenarioResult `json:"results"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil || len(out.Results) == 0 {
		t.Fatalf("run --json printed no results (%v, %q)\nstderr:\n%s", err, out.Error, stderr.String())
	}
	t.Logf("%s: %d scenarios in %s", peer, len(out.Results), wall.Round(time.Second))
	if dir := os.Getenv(EnvKeepRuns); dir != "" {
		keepRun(t, dir, peer, stdout.Bytes(), start, wall, cmd.ProcessState.ExitCode())
	}
	return out.Results
}

// envoyDefaultTimeout is how the Envoy-based profiles render Envoy's rate-limit filter timeout
// left at its default (20 ms).
const envoyDefaultTimeout = `"timeout_ms": 0,`

// pinnedTimeoutMS is the filter timeout the pinned runs configure instead (Envoy's `timeout`
// field). A healthy rate-limit service misses 20 ms on a loaded 2-core CI machine in any
// scenario — across runs it moved nine different Envoy verdicts, each by a 500 or an unchecked
// admission — so a pin at the default would measure the machine. The pins are of the design;
// docs/peers.md and `quotaqual run --gateway envoy-ai-gateway` keep the shipped default.
const pinnedTimeoutMS = 250

// pinnedProfile is what the pinned run passes to --gateway: the shipped profile's name, or,
// for a profile that leaves Envoy's filter timeout at its default, a copy configuring it.
func pinnedProfile(t *testing.T, peer string) string {
	t.Helper()
	y, err := undertest.ShippedYAML(peer)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(y, []byte(envoyDefaultTimeout)) {
		return peer
	}
	path := filepath.Join(t.TempDir(), peer+".yaml")
	y = bytes.Replace(y, []byte(envoyDefaultTimeout), []byte(fmt.Sprintf(`"timeout_ms": %d,`, pinnedTimeoutMS)), 1)
	if err := os.WriteFile(path, y, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: Envoy's rate-limit filter timeout configured at %d ms (the shipped profile leaves Envoy's 20 ms)", peer, pinnedTimeoutMS)
	return path
}

// EnvKeepRuns, when set, names a directory where each run's JSON is kept as `quotaqual peers
// table --runs` reads it, so the verdict table can be written from the very runs the pins
// were checked on: QUOTAQUAL_PEERS_RUNS=DIR go test ./internal/peers/peerse2e, then quotaqual
// peers table --runs DIR --out docs/peers.md.
const EnvKeepRuns = "QUOTAQUAL_PEERS_RUNS"

// keepRun writes a run's JSON and its meta (what peers table reads) into dir.
func keepRun(t *testing.T, dir, peer string, runJSON []byte, start time.Time, wall time.Duration, code int) {
	t.Helper()
	meta, _ := json.MarshalIndent(map[string]any{"profile": peer, "qualification_profile": "reference",
		"started": start.UTC(), "wall_ns": wall, "exit_code": code}, "", "  ")
	if err := os.MkdirAll(dir, 0o755); err == nil {
		err = errors.Join(os.WriteFile(filepath.Join(dir, peer+".json"), runJSON, 0o644),
			os.WriteFile(filepath.Join(dir, peer+".meta.json"), meta, 0o644))
		if err != nil {
			t.Errorf("keeping the run in %s: %v", dir, err)
		}
	}
}

// checkVerdicts compares results with pinned and fails once, listing every difference.
func checkVerdicts(t *testing.T, peer string, results []evidence.ScenarioResult, pinned map[string]verdict) {
	t.Helper()
	var diffs []string
	seen := map[string]bool{}
	for _, r := range results {
		seen[r.Name] = true
		fact := r.KeyFact + " | " + r.Reason
		want, ok := pinned[r.Name]
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%s: %s (%s), not pinned", r.Name, r.Status, firstLine(fact)))
		case r.Status != want.status || (want.fragment != "" && !strings.Contains(fact, want.fragment)):
			if want.timing != "" {
				t.Logf("%s: %s (pinned %s with %q; timing-dependent: %s): %s", r.Name, r.Status, want.status, want.fragment, want.timing, firstLine(fact))
				break
			}
			diffs = append(diffs, fmt.Sprintf("%s: was %s with %q, now %s: %s", r.Name, want.status, want.fragment, r.Status, firstLine(fact)))
		case r.Status != evidence.Skipped && (r.Evidence != "") != want.blackBox:
			// A timing-dependent verdict may be decided by another check (a 500 the timeout
			// answered before the black-box evidence was gathered): logged, like its status.
			if want.timing != "" {
				t.Logf("%s: black-box %v, pinned %v (timing-dependent: %s)", r.Name, r.Evidence != "", want.blackBox, want.timing)
				break
			}
			diffs = append(diffs, fmt.Sprintf("%s: black-box %v, pinned %v (%s)", r.Name, r.Evidence != "", want.blackBox, r.Evidence))
		}
		t.Logf("%s: %s %s", r.Name, r.Status, firstLine(fact))
	}
	for name := range pinned {
		if !seen[name] {
			diffs = append(diffs, name+": pinned, but the run has no result for it")
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("%s: %d verdicts moved (update docs/peers.md with `make peers-table` and the pins here if the change is meant):\n  %s",
			peer, len(diffs), strings.Join(diffs, "\n  "))
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:297] + "..."
	}
	return s
}

// The verdicts every peer shares by design: the harness-side front door (authentication, the
// proxy), the network policy, and the skips of what no peer profile offers.
func common(over map[string]verdict) map[string]verdict {
	v := map[string]verdict{
		"probe-no-quota": {evidence.Passed, "", true, ""},
		"valid-auth":     {evidence.Passed, "", true, ""},
		"auth-rejection": {evidence.Passed, "", true, ""},
		// The shims meter the subject the harness-side front door authenticated and read no
		// client header or field for it (not yet run against the peers: the pin is the
		// prediction from the shims' code).
		"identity-sources": {evidence.Passed, "", true, ""},
		"network-policy":   {evidence.Passed, "", false, ""},
		"gateway-restart":  {evidence.Passed, "", true, ""},
		// Every other spelling of the chat path is 404 at the front door, and the spent subject
		// is denied on each of the others (measured on all five with --scenario quota-bypass,
		// the Envoy filters at 250 ms: 429×11, 404×9, no provider call).
		"quota-bypass": {evidence.Passed, "", true, ""},
		// The peers' profiles declare no endpoint but chat (capabilities.endpoints): only the
		// admin paths on the data port are probed (measured on all five 2026-12-07: 404 ×5).
		"api-surface": {evidence.Passed, "no endpoint but chat declared", true, ""},
		// A generation outlasting the reference profile's minute cannot fit the gateways'
		// 60 s upstream timeout: the black-box check is not made there.
		"long-generation": {evidence.Skipped, "does not fit the gateways' 1m0s upstream timeout", false, ""},
		// No peer profile renders a rule of the scenario's own (capabilities.rules): every
		// scenario that needs one skips, naming the part the profile cannot express.
		"hard-gate":       {evidence.Skipped, ownRule + " and a rule with enforcement hard", false, ""},
		"layered-budgets": {evidence.Skipped, ownRule + " and a rule with more than one window", false, ""},
		"model-budgets":   {evidence.Skipped, ownRule + " and a rule keyed by subject and model", false, ""},
		"output-bound":    {evidence.Skipped, ownRule + " and a rule with enforcement hard", false, ""},
		"provider-usage":  {evidence.Skipped, ownRule + " and a rule that estimates from the request's output bound", false, ""},
		// Its rule is keyed by subject and model, with an allowlist: no peer profile renders one.
		"model-source":    {evidence.Skipped, ownRule + " and a rule keyed by subject and model", false, ""},
		"valkey-failover": {evidence.Skipped, "needs quota inspection", false, ""},
		// No peer profile can be put on the replicated store group (capabilities.store_group).
		"replica-loss": {evidence.Skipped, "needs the replicated store group", false, ""},
		// The nemesis scenarios that hold requests across a store stall or a frozen gateway
		// judge leases: no peer profile has reservation leases.
		"store-stall":   {evidence.Skipped, "needs reservation leases", false, ""},
		"gateway-pause": {evidence.Skipped, "needs reservation leases", false, ""},
		// Its bound on a subject's charge is an estimate per ambiguous reserve, held to its
		// lease: it needs leases too (the same Needs as store-stall, so the same reason).
		"lossy-store-link": {evidence.Skipped, "needs reservation leases", false, ""},
	}
	for k, x := range over {
		v[k] = x
	}
	return v
}

// ownRule begins the skip reason of a scenario whose own rule a peer profile cannot render.
const ownRule = "needs a rule of its own for the scenario's subjects"

// envoyCheckThenCharge are the verdicts of Envoy AI Gateway's usage-based limit on envoy
// ratelimit, whatever its failure mode: charged only after a response, it admits a whole
// burst, forgets a cut stream, and lets the request that crosses the budget through; its
// fixed epoch window forgets usage at its end; the limit lives in the service's config.
var envoyCheckThenCharge = map[string]verdict{
	// check-then-charge, cost 0: 0…60 charged admit, 7 requests of 10 tokens.
	"shared-budget":    {evidence.Passed, "7 admitted (predicted 7)", true, twentyMSAny},
	"concurrency":      {evidence.Failed, "over-admitted 180 tokens in one window under concurrency", true, ""},
	"window-expiry":    {evidence.Failed, "", true, ""},
	"gateway-crash":    {evidence.Passed, "admitted 5 of 5", true, ""},
	"usage-accounting": {evidence.Failed, "was not charged them", true, cutStreamGenerated},
	"rolling-upgrade":  {evidence.Skipped, "needs a restart on another budget", false, ""},
	"sustained-load":   {evidence.Failed, "", false, ""},
	// envoy ratelimit writes the descriptor's value, the raw username, into its Redis key
	// ("…_rule-0-match-0_application-a@subject-privacy_<epoch>"); its info log and the shim's
	// name no subject; no metrics declared (measured on both, 2026-12-07: 3 of 3 keys raw).
	"subject-privacy": {evidence.Failed, rawStoreKeys, true, ""},
}

// cutStreamGenerated is why usage-accounting's deciding fact can move on the Envoy-based peers:
// its black-box case decides only when the provider generated more than the budget's room
// before the client's cut reached it through Envoy; in one loaded clean-clone run (2026-12-07)
// envoy-ai-gateway-fail-closed's provider had generated 1 token when the cut arrived, and the
// case was "not decided" (still failed, by that error instead of the missing charge).
const cutStreamGenerated = "the tokens generated before a client's cut reaches the provider through Envoy depend on the machine's load"

// rawStoreKeys is subject-privacy's failing check on a peer that keys its counters in the
// run's store by the raw username.
const rawStoreKeys = "no raw subject in the store's keys"

// TestEnvoyAIGatewayVerdicts pins profile envoy-ai-gateway (failure_mode_deny false).
func TestEnvoyAIGatewayVerdicts(t *testing.T) {
	pins := common(envoyCheckThenCharge)
	pins["window-expiry"] = verdict{evidence.Failed, "forgot usage", true, ""}
	pins["sustained-load"] = verdict{evidence.Failed, "over-admitted", false, ""}
	// Fails open: Valkey stopped, or gateway-a cut from the rate-limit service, it admits.
	pins["identity-sources"] = verdict{evidence.Passed, "", true, twentyMSAny}
	pins["valkey-outage"] = verdict{evidence.Failed, "the gateway fails open", true, ""}
	pins["valkey-partition"] = verdict{evidence.Failed, "the gateway fails open", true, ""}
	pins["gateway-restart"] = verdict{evidence.Failed, drainedCharge, true, chargesAtStop}
	// envoy ratelimit's error on a refused write (Redis OOM) lets every request through too.
	pins["store-memory-pressure"] = verdict{evidence.Failed, "the gateway fails open", true, ""}
	checkVerdicts(t, "envoy-ai-gateway", runPeer(t, "envoy-ai-gateway", 15*time.Minute), pins)
}

// TestEnvoyAIGatewayFailClosedVerdicts pins profile envoy-ai-gateway-fail-closed. Its 20 ms
// filter timeout (Envoy's default) is also met under load by a healthy service on a busy
// machine: such a request is refused with 500, which gateway-crash, window-expiry and
// sustained-load see; their first failed check then names it (load-dependent, so only their
// status is pinned where it is).
func TestEnvoyAIGatewayFailClosedVerdicts(t *testing.T) {
	pins := common(envoyCheckThenCharge)
	pins["valkey-outage"] = verdict{evidence.Passed, "answered 500×", true, ""}
	pins["valkey-partition"] = verdict{evidence.Passed, "answered 500×", true, ""}
	pins["store-memory-pressure"] = verdict{evidence.Passed, "answered 500×", true, ""}
	pins["gateway-crash"] = verdict{evidence.Passed, "admitted 5 of 5", true, twentyMS}
	// Passed in the one run since gateway-restart stops gateway-a with streams in flight (2
	// admitted after them, as their 44 tokens predict); its sibling lost a stream's charge.
	pins["gateway-restart"] = verdict{evidence.Passed, "", true, twentyMS + "; " + chargesAtStop}
	pins["identity-sources"] = verdict{evidence.Passed, "", true, twentyMS}
	// A burst on a busy machine meets the timeout for part of it (500s): fewer are admitted,
	// still more than the capacity.
	pins["concurrency"] = verdict{evidence.Failed, "over-admitted", true, ""}
	// A 500 during the exhaustion leaves nothing to wait out: still failed, decided by the 500.
	pins["window-expiry"] = verdict{evidence.Failed, "", true, twentyMS}
	checkVerdicts(t, "envoy-ai-gateway-fail-closed", runPeer(t, "envoy-ai-gateway-fail-closed", 15*time.Minute), pins)
}

// twentyMSAny is why a sequential Envoy verdict can move under load: a check that misses the
// 20 ms timeout admits unchecked (fail open) or answers 500 (fail closed).
const twentyMSAny = "Envoy's 20 ms rate-limit timeout, met by a healthy service on a busy machine, decides by the failure mode"

// drainedCharge is gateway-restart's failing check when the streams in flight at gateway-a's
// graceful stop are charged less than the tokens the providers generated for them.
const drainedCharge = "their subject is admitted afterwards as a charge of their usage"

// chargesAtStop is why gateway-restart can move on the Envoy-based peers: a usage-based limit
// is charged after the response, so the charges of the streams that end during gateway-a's
// stop are sent while Envoy and its shim exit; in the first runs (2026-12-02, one each) some
// were lost — envoy-ai-gateway 1 of 4 (3 admitted after, predicted 2), kuadrant all 4 (6,
// predicted 2) — and none on envoy-ai-gateway-fail-closed. One run each: pinned as observed,
// logged rather than failed until more runs say whether the loss is certain.
const chargesAtStop = "the charges of streams ending during a graceful stop are sent as the gateway exits"

// twentyMS is why a fail-closed Envoy verdict can move under load.
const twentyMS = "Envoy's 20 ms rate-limit timeout, met by a healthy service on a busy machine, answers 500"

// TestKuadrantVerdicts pins profile kuadrant (check count + 1, report after; fails open).
func TestKuadrantVerdicts(t *testing.T) {
	checkVerdicts(t, "kuadrant", runPeer(t, "kuadrant", 15*time.Minute), common(map[string]verdict{
		// count + 1 ≤ 60: six requests of 10 tokens, the sixth leaving exactly 60 charged.
		"shared-budget":    {evidence.Passed, "6 admitted (predicted 6)", true, ""},
		"concurrency":      {evidence.Failed, "over-admitted 180 tokens in one window under concurrency", true, ""},
		"window-expiry":    {evidence.Failed, "forgot usage", true, ""},
		"gateway-crash":    {evidence.Passed, "admitted 5 of 5", true, ""},
		"gateway-restart":  {evidence.Failed, drainedCharge, true, chargesAtStop},
		"valkey-outage":    {evidence.Failed, "the gateway fails open", true, ""},
		"valkey-partition": {evidence.Failed, "the gateway fails open", true, ""},
		// envoy ratelimit answers OK when Redis refuses its writes (OOM): fail open again.
		"store-memory-pressure": {evidence.Failed, "the gateway fails open", true, ""},
		"usage-accounting":      {evidence.Failed, "was not charged them", true, cutStreamGenerated},
		"rolling-upgrade":       {evidence.Skipped, "needs a restart on another budget", false, ""},
		// 10-token requests on 60: count + 1 refuses at exactly 60, so none crosses it.
		"sustained-load": {evidence.Passed, "", false, ""},
		// Limitador's descriptor value, the raw username, is in envoy ratelimit's Redis key
		// ("…_limit.per_user_application-a@subject-privacy_<epoch>"; measured 2026-12-07).
		"subject-privacy": {evidence.Failed, rawStoreKeys, true, ""},
	}))
}

// overageDropped is identity-sources' key fact on gubernator: its spending request's overage
// was refused with the hit that carried it.
const overageDropped = "was not charged in full"

// globalSync is why a GLOBAL verdict can move: each node answers from its own copy of a key
// until the owner's broadcast lands (GUBER_GLOBAL_SYNC_WAIT, 100 ms by default).
const globalSync = "GLOBAL's per-node copies are synchronised asynchronously"

// TestGubernatorGlobalVerdicts pins profile gubernator-global.
func TestGubernatorGlobalVerdicts(t *testing.T) {
	checkVerdicts(t, "gubernator-global", runPeer(t, "gubernator-global", 10*time.Minute), common(map[string]verdict{
		// Each node answers from its own copy until the owner's broadcast lands: a sequential
		// exhaustion is over-admitted when a request reaches a node before the last charge's
		// broadcast, which the machine's load decides (both outcomes seen on one machine).
		"probe-no-quota":  {evidence.Passed, "", true, globalSync},
		"shared-budget":   {evidence.Failed, "admitted == predicted from settled usage", true, globalSync},
		"concurrency":     {evidence.Failed, "over-admitted", true, ""},
		"window-expiry":   {evidence.Failed, "", true, globalSync},
		"gateway-restart": {evidence.Failed, "", true, globalSync},
		// As gubernator's below, before GLOBAL's copies come into it.
		"identity-sources": {evidence.Failed, overageDropped, true, globalSync},
		"gateway-crash":    {evidence.Failed, "", true, globalSync},
		"valkey-outage":    {evidence.Skipped, "needs its quota state in the run's store", false, ""},
		"valkey-partition": {evidence.Skipped, "needs its quota state in the run's store", false, ""},
		// Its state lives in the nodes, not in the run's Valkey: nothing to press.
		"store-memory-pressure": {evidence.Skipped, "needs its quota state in the run's store", false, ""},
		// Both moved in one clean-clone run on a loaded machine (a stream cut after 1 generated
		// token: not decided; a fresh longer-than-announced body counted at a provider though
		// refused) and held in every other run: logged, not failed, until explained.
		"usage-accounting": {evidence.Failed, "was not charged them", true, globalSync},
		"quota-bypass":     {evidence.Passed, "", true, globalSync},
		"rolling-upgrade":  {evidence.Failed, "", true, ""},
		"sustained-load":   {evidence.Passed, "", false, globalSync},
		// As gubernator's below.
		"subject-privacy": {evidence.Passed, "", true, ""},
	}))
}

// TestGubernatorVerdicts pins profile gubernator (BATCHING: every hit decided by the key's
// owner; hits = the estimate, then the difference).
func TestGubernatorVerdicts(t *testing.T) {
	checkVerdicts(t, "gubernator", runPeer(t, "gubernator", 10*time.Minute), common(map[string]verdict{
		"shared-budget":    {evidence.Passed, "5 admitted (predicted 5)", true, ""},
		"concurrency":      {evidence.Passed, "4/24 admitted", true, ""},
		"window-expiry":    {evidence.Passed, "", true, ""},
		"gateway-crash":    {evidence.Passed, "admitted 3 of 5", true, ""},
		"valkey-outage":    {evidence.Skipped, "needs its quota state in the run's store", false, ""},
		"valkey-partition": {evidence.Skipped, "needs its quota state in the run's store", false, ""},
		// Its state lives in the nodes, not in the run's Valkey: nothing to press.
		"store-memory-pressure": {evidence.Skipped, "needs its quota state in the run's store", false, ""},
		// A hit past the limit is refused whole (OVER_LIMIT, nothing taken): the settlement of
		// a request that used a token past the capacity charges nothing beyond the estimate, so
		// the subject is not spent and the identity probes are not sent.
		"identity-sources": {evidence.Failed, overageDropped, true, ""},
		// A client that went away keeps the estimate charged, not what was generated.
		"usage-accounting": {evidence.Failed, "was not charged them", true, ""},
		// P2's 15 s duration on the same key makes gubernator expire it 15 s after its
		// creation: P1's minute forgets the burst early, or P2 still refuses after its own
		// window — which check fails first depends on when the key was created in the round.
		"rolling-upgrade": {evidence.Failed, "", true, ""},
		"sustained-load":  {evidence.Passed, "", false, ""},
		// Passed in every run but one (a clean-clone CI run, 2026-12-02): 3 of the 4 streams
		// reached the providers within the drain's 6 s before gateway-a's stop, so its check
		// could not be made as written. Logged, not failed, until the drain's precondition
		// stops deciding the verdict under load.
		"gateway-restart": {evidence.Passed, "", true, "the drain needs its 4 streams at the providers before the stop, which load can delay"},
		// Its counters live in the nodes' memory (the store check not made) and no metrics are
		// declared: decided by the logs, the gateways' and the nodes' (measured 2026-12-07: no
		// username in 5 logs, 27 lines).
		"subject-privacy": {evidence.Passed, "", true, ""},
	}))
}
