package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/httpget"
	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
	"github.com/quotaqual/quotaqual/wire"
)

// gwA and gwB are the first two gateways, which every run has (topology.MinGateways is two).
// A scenario names them only for one particular replica (the one it restarts, cuts off or rolls
// first, the one it reads a figure from) or, saying why in a comment, where it needs exactly
// two; a scenario that spreads requests, or checks what every replica does, uses
// env.gateways() and env.alternate.
const (
	gwA = topology.HostGatewayA
	gwB = topology.HostGatewayB

	appA = "application-a"
	appB = "application-b"
	appC = "application-c"
)

// gateways are the run's gateway replicas in order (gateway-a, gateway-b, …; --gateways).
func (env *Env) gateways() []string { return env.Topo.Gateways() }

// alternate is the gateway of the i-th request when requests go round every replica in turn:
// gateway-a for i = 0, gateway-b for 1, … and gateway-a again after the last.
func (env *Env) alternate(i int) string {
	gws := env.gateways()
	return gws[i%len(gws)]
}

// othersThan is every gateway of the run but g, in order.
func (env *Env) othersThan(g string) []string {
	var out []string
	for _, h := range env.gateways() {
		if h != g {
			out = append(out, h)
		}
	}
	return out
}

// runBudgetRule is a scenario's own rule that is the run's budget (its capacity and estimate
// per request) over window, with lease: a scenario that needs only a window or a lease of its own.
func runBudgetRule(name string, p deployment.Profile, window, lease time.Duration) deployment.ScenarioRule {
	return deployment.ScenarioRule{Name: name, Window: deployment.FormatDuration(window), Capacity: p.Capacity,
		Lease: deployment.FormatDuration(lease), Estimate: p.Estimate}
}

// shortestRenewedLease is the shortest lease a gateway accepts with renewal, 3 × the store
// timeout + 1 s (2.5 s on quick): the lease of the scenarios' own rules that must see a hold
// outlive its lease (concurrency, long-generation) within seconds.
func shortestRenewedLease(p deployment.Profile) time.Duration {
	return 3*p.StoreTimeout + time.Second
}

// chatUsage is the usage the provider stub reports for the default request with maxTokens.
func chatUsage(p deployment.Profile, maxTokens int64) providerstub.Usage {
	return providerstub.PredictUsage([]providerstub.Message{{Role: "user", Content: "hello"}}, maxTokens, p.CompletionTokens)
}

// fixedWindowStart, for a gateway whose profile declares fixed windows, waits until offset
// after the next boundary of a window w long (the run's rule's, p.Window, or a scenario's own
// rule's; fixed windows are aligned to the Unix epoch, as a counter keyed by now/period is), so
// a sequence that must fit in one window is not cut by a reset in its middle; it records how
// long it waited. For a sliding window it returns at once: any sequence shorter than the window
// fits.
func (env *Env) fixedWindowStart(ctx context.Context, r *Result, w, offset time.Duration) error {
	if !env.epochWindows() {
		// Sliding: any sequence shorter than the window fits. Fixed from a key's first hit:
		// the scenario's own subjects start their windows with their first requests.
		return nil
	}
	wait := (w - time.Duration(time.Now().UnixNano()%int64(w)) + offset) % w
	r.Fact("waited_for_a_fixed_window_start_ms", ms(wait))
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// fixedWindowMargin is how long after a fixed window's boundary a sequence starts: far more
// than the clock skew between the harness and the gateway on one machine.
const fixedWindowMargin = 50 * time.Millisecond

// exhaustion is a sequential run of requests until the first answer that is not 200.
type exhaustion struct {
	Outcomes []Outcome // every request, in order; the last is the first non-200 unless capped
	Admitted int       // 200s before the first non-200
	Denied   bool      // the run ended with a 429
	Settled  []int64   // settled usage read after each admitted request (Quotas().WaitIdle)
	// Blind: Settled is the sum of the admitted responses' own usage, not read from the
	// gateway (it offers no quota inspection).
	Blind bool
}

// exhaust sends requests as k's subject alternating gateway-a, gateway-b, … (starting with
// gateways[0]) until the first non-200 answer or maxAttempts. After each admitted request it
// waits until k's reservation has settled, so the next decision sees settled usage only, and
// records k's settled usage. Its requests ask for the stub's default model: k names a rule
// keyed by subject (no Model).
func (env *Env) exhaust(ctx context.Context, k Key, labelPrefix string, gateways []string, maxAttempts int) (exhaustion, error) {
	var ex exhaustion
	if k.Model != "" {
		return ex, fmt.Errorf("exhausting %s under %s: the key names model %s, but exhaust sends the default model: name no model", k.Subject, k.Rule, k.Model)
	}
	for i := 0; i < maxAttempts; i++ {
		gw := gateways[i%len(gateways)]
		o := env.Chat(ctx, ChatCall{Gateway: gw, Label: fmt.Sprintf("%s-%d", labelPrefix, i+1), Subject: k.Subject})
		ex.Outcomes = append(ex.Outcomes, o)
		if !o.Admitted() {
			ex.Denied = o.Status == http.StatusTooManyRequests
			return ex, nil
		}
		ex.Admitted++
		q, err := env.Quotas().WaitIdle(ctx, gw, k)
		if err != nil {
			return ex, err
		}
		if env.checksThenCharges() {
			// Its charge is sent once the response has ended, fire and forget: let it land, so
			// that the next decision tests the admission rule, not that race.
			if err := waitUntil(ctx, time.Now().Add(chargeLag)); err != nil {
				return ex, err
			}
		}
		if !env.inspects() {
			ex.Blind = true
			var sum int64
			for _, o := range ex.Outcomes {
				if o.Admitted() {
					sum += charge(o, env.admitCost(env.Profile))
				}
			}
			ex.Settled = append(ex.Settled, sum)
			continue
		}
		ex.Settled = append(ex.Settled, q.Settled())
	}
	return ex, nil
}

// spendUntilDenied starts a fresh fixed window and spends appA's budget in it by chat through
// gateway-a until the first denial (exhaust): the budget spent as the gateway itself decides it
// (a request whose usage overshoots may not spend it: its overage may be dropped), and the
// denial seen before a spent pass begins. spentCheck names the check that the spending ended
// in a 429 after at least one admission. It returns the first spending request, whose window
// the spent pass must finish within (checkSpentInWindow), and the providers' counts before the
// pass. ok is false when there is nothing to judge: the result says why.
func (env *Env) spendUntilDenied(ctx context.Context, r *Result, spentCheck string) (first Outcome, before ProviderSnapshot, ok bool) {
	if err := env.fixedWindowStart(ctx, r, env.Profile.Window, fixedWindowMargin); err != nil {
		r.Error(err)
		return first, before, false
	}
	ex, err := env.exhaust(ctx, Key{Rule: RuleName, Subject: appA}, "spend", []string{gwA}, exhaustCap)
	if err != nil {
		r.Error(err)
		return first, before, false
	}
	r.Check(spentCheck, http.StatusTooManyRequests, statuses(ex.Outcomes), ex.Denied && ex.Admitted > 0)
	if !ex.Denied || ex.Admitted == 0 {
		return first, before, false
	}
	before, ok = env.readProviders(ctx, r, "provider call counts before the spent pass")
	return ex.Outcomes[0], before, ok
}

// checkSpentInWindow checks (as name) that the spent pass's last request went before the
// first spending request's window ended: no charge could have left it in between.
func (env *Env) checkSpentInWindow(r *Result, name string, first Outcome, last time.Time) {
	w := env.Profile.Window
	r.Check(name, fmt.Sprintf("before %s after it", w), fmt.Sprintf("%s after it", last.Sub(first.Start).Round(time.Millisecond)),
		last.Before(first.Start.Add(w)))
}

// exchange is one observed sequential request for the prediction.
type exchange struct {
	Admitted bool
	Charge   int64 // what an admitted request settled at (its usage total)
}

// checkPredictedAdmissions checks a sequential exhaustion within one window against the rule
// replayed on the responses' own usage under the gateway's admission model (admit iff
// settled + cost ≤ capacity, cost the estimate or, for check-then-charge, the check's own),
// and every decision as the replay says. It returns the predicted admissions.
func (env *Env) checkPredictedAdmissions(r *Result, ex exhaustion, p deployment.Profile) int {
	cost := env.admitCost(p)
	obs := make([]exchange, len(ex.Outcomes))
	for i, o := range ex.Outcomes {
		obs[i] = exchange{Admitted: o.Admitted(), Charge: charge(o, cost)}
	}
	pred, predicted := predictAdmissions(p.Capacity, cost, chatUsage(p, 1).TotalTokens, obs)
	var wrong []string
	for i := range obs {
		if pred[i] != obs[i].Admitted {
			wrong = append(wrong, fmt.Sprintf("#%d predicted admitted=%v observed status %d", i+1, pred[i], ex.Outcomes[i].Status))
		}
	}
	r.Fact("predicted_admitted", predicted)
	r.Fact("observed_admitted", ex.Admitted)
	r.Check("admitted == predicted from settled usage ("+env.admissionRule()+")", predicted, ex.Admitted, ex.Admitted == predicted)
	r.Check("every decision matches the rule replayed on the observed usage", "no mismatch", wrong, len(wrong) == 0)
	return predicted
}

// predictAdmissions replays a sequential run against the rule within one window: a request is
// admitted iff settled + estimate ≤ capacity, and an admitted request adds its charge to
// settled. pred says, per observed exchange, whether the rule admits it given what actually
// happened before it (observed admissions settled at their observed charge). admitted is the
// pure prediction: how many requests in a row the rule admits from an empty window, using the
// observed charges and fallback (the stub's deterministic usage) beyond them.
func predictAdmissions(capacity, estimate, fallback int64, obs []exchange) (pred []bool, admitted int) {
	chargeOf := func(i int) int64 {
		c := fallback
		if i < len(obs) && obs[i].Admitted {
			c = obs[i].Charge
		}
		if c <= 0 {
			c = estimate
		}
		return c
	}
	// A check-then-charge rule (estimate 0) admits while the charges stay within the
	// capacity; a run of responses without usage would never end: no finite prediction.
	pred = make([]bool, len(obs))
	var settled int64
	for i, o := range obs {
		pred[i] = settled+estimate <= capacity
		if o.Admitted {
			settled += chargeOf(i)
		}
	}
	if estimate < 0 || (estimate == 0 && fallback <= 0) {
		return pred, -1 // every request would be admitted: no finite prediction
	}
	settled = 0
	for i := 0; settled+estimate <= capacity; i++ {
		if i > maxPredicted {
			return pred, -1
		}
		admitted++
		settled += chargeOf(i)
	}
	return pred, admitted
}

// adminProbe sends one GET to a gateway's admin endpoint through the observer and records it.
func (env *Env) adminProbe(ctx context.Context, gateway, path, label string) (int, []byte, time.Duration, error) {
	u := strings.TrimRight(env.Topo.Gateway(gateway).AdminURL, "/") + path
	rec := evidence.RequestRecord{Scenario: env.scenario, Label: label, Gateway: gateway, Credential: "none", Method: http.MethodGet, Path: path}
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(env.Profile))
	defer cancel()
	start := time.Now()
	rec.Time = start.UTC()
	a, err := httpget.Get(ctx, env.Topo.Observer(), u, 16<<20)
	rec.Latency = time.Since(start)
	rec.Status = a.StatusCode
	if err != nil {
		rec.Error = err.Error()
	}
	env.record(rec)
	return a.StatusCode, a.Body, rec.Latency, err
}

// sitesOf lists the site header of each outcome.
func sitesOf(os []Outcome) []string {
	out := make([]string, len(os))
	for i, o := range os {
		out[i] = o.Site
	}
	return out
}

// isSite reports whether s is one of the provider sites.
func isSite(s string) bool {
	for _, x := range deployment.Sites {
		if x == s {
			return true
		}
	}
	return false
}

// seconds renders a duration in seconds with millisecond precision, for facts.
func seconds(d time.Duration) float64 { return float64(d.Milliseconds()) / 1000 }

// readProviders takes a provider snapshot, recording an operational error on failure.
func (env *Env) readProviders(ctx context.Context, r *Result, what string) (ProviderSnapshot, bool) {
	s, err := env.Providers().Read(ctx)
	if err != nil {
		r.Error(fmt.Errorf("%s: %w", what, err))
		return s, false
	}
	return s, true
}

// settledProviders waits until no provider has a request in flight (so every finished request
// is in the logs) and returns the snapshot.
func (env *Env) settledProviders(ctx context.Context) (ProviderSnapshot, error) {
	var s ProviderSnapshot
	_, err := poll(ctx, 10*time.Millisecond, adminTimeout(env.Profile)+longestHold(env.Profile), func(ctx context.Context) (bool, error) {
		var err error
		s, err = env.Providers().Read(ctx)
		if err != nil {
			return false, err
		}
		return s.InFlight() == 0, nil
	})
	return s, err
}

// chatAtOnce sends n chat calls at once, call(i) the i-th, and returns their outcomes in that
// order once every one is answered.
func (env *Env) chatAtOnce(ctx context.Context, n int, call func(i int) ChatCall) []Outcome {
	outs := make([]Outcome, n)
	var wg sync.WaitGroup
	for i := range outs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[i] = env.Chat(ctx, call(i))
		}()
	}
	wg.Wait()
	return outs
}

// waitInFlight waits until the providers hold at least n of this scenario's requests.
func (env *Env) waitInFlight(ctx context.Context, n int64) error {
	_, err := poll(ctx, 10*time.Millisecond, adminTimeout(env.Profile)+2*time.Second, func(ctx context.Context) (bool, error) {
		s, err := env.Providers().Read(ctx)
		if err != nil {
			return false, err
		}
		return s.InFlight() >= n, nil
	})
	return err
}

// gatewayTally is what one replica answered among a scenario's requests.
type gatewayTally struct {
	Sent     int `json:"sent"`
	Admitted int `json:"admitted"`
	Denied   int `json:"denied_429"`
	Other    int `json:"other"`
}

// tallyByGateway counts each replica's answers among outs, outs[i] having gone to gatewayOf(i).
// Every replica of the run is named, also one that got no request, so the evidence shows
// whether requests really spread over all of them.
func (env *Env) tallyByGateway(outs []Outcome, gatewayOf func(i int) string) map[string]gatewayTally {
	t := map[string]gatewayTally{}
	for _, g := range env.gateways() {
		t[g] = gatewayTally{}
	}
	for i, o := range outs {
		g := gatewayOf(i)
		c := t[g]
		c.Sent++
		switch {
		case o.Admitted():
			c.Admitted++
		case o.Status == http.StatusTooManyRequests:
			c.Denied++
		default:
			c.Other++
		}
		t[g] = c
	}
	return t
}

// checkEveryReplicaDecided checks that each replica answered at least one of the requests with
// a decision (admitted or 429): the requests did not silently go to only some of them.
func (env *Env) checkEveryReplicaDecided(r *Result, what string, t map[string]gatewayTally) {
	var missing []string
	for _, g := range env.gateways() {
		if c := t[g]; c.Admitted+c.Denied == 0 {
			missing = append(missing, g)
		}
	}
	r.Check(what+" reached every replica and each decided", fmt.Sprintf("all %d gateways", len(env.gateways())),
		fmt.Sprintf("without a decision: %v", missing), len(missing) == 0)
}

// namedReplicas names every replica of a run in a key fact: "A and B" with two, "all 4" with four.
func namedReplicas(n int) string {
	if n == 2 {
		return "A and B"
	}
	return fmt.Sprintf("all %d", n)
}

// budgetRound spreads default requests (max_tokens 1) over subjects within one window, so that
// a scenario can send one to every replica, sixteen of them too: next picks the subject with
// the fewest requests so far and says whether its budget still admits one (settled + estimate
// ≤ capacity, the stub's usage settled per request). A request past every budget must be
// denied, which is as much a decision from the shared store as an admission.
type budgetRound struct {
	usage, estimate, capacity int64
	sent                      map[string]int64
}

func (env *Env) newBudgetRound() *budgetRound {
	return &budgetRound{usage: chatUsage(env.Profile, 1).TotalTokens, estimate: env.admitCost(env.Profile),
		capacity: env.Profile.Capacity, sent: map[string]int64{}}
}

func (b *budgetRound) next(subs ...string) (subject string, fits bool) {
	subject = subs[0]
	for _, s := range subs[1:] {
		if b.sent[s] < b.sent[subject] {
			subject = s
		}
	}
	fits = b.sent[subject]*b.usage+b.estimate <= b.capacity
	b.sent[subject]++
	return subject, fits
}

// outcomesOf lists the outcome of each of a scenario's recorded steps, in order.
func outcomesOf[S any](steps []S, outcome func(S) Outcome) []Outcome {
	out := make([]Outcome, len(steps))
	for i, s := range steps {
		out[i] = outcome(s)
	}
	return out
}

// startReplay opens a scenario that replays the rule on the responses' usage: without quota
// inspection the responses decide and the ledger check named ledgerCheck is not made. It
// returns the providers' call counts before the scenario's requests.
func (env *Env) startReplay(ctx context.Context, r *Result, ledgerCheck string) (ProviderSnapshot, bool) {
	if !env.inspects() {
		r.DecidedBy("the responses' usage", "the providers' call logs")
		r.NotMade(ledgerCheck, "no quota inspection")
	}
	return env.readProviders(ctx, r, "provider call counts before")
}

// checkDenialsReachedNoProvider checks that the providers were called once per admitted
// request since before, so no denied request reached one.
func (env *Env) checkDenialsReachedNoProvider(ctx context.Context, r *Result, before ProviderSnapshot, admitted int) error {
	after, err := env.settledProviders(ctx)
	if err != nil {
		return fmt.Errorf("provider call counts after: %w", err)
	}
	d := TotalDelta(before, after)
	r.Check("denied requests reached no provider (provider calls == admitted)", admitted, d, d == int64(admitted))
	return nil
}

// spentRoom is the room a spending fill leaves: one token past the capacity, so the budget is
// spent under every admission model (a check-then-charge gateway admits while what it charged
// is ≤ the capacity; a reserving one refuses any estimate).
const spentRoom = -1

// fillRoom sends c (its body without an output bound, so the rule reserves its own estimate)
// asking the provider stub for what leaves exactly room of capacity once the response's usage
// is charged (spentRoom: spent): capacity − room − the prompt's tokens generated. An
// operational error when the profile leaves no such request.
func (env *Env) fillRoom(ctx context.Context, c ChatCall, capacity, room int64) (Outcome, error) {
	prompt := chatUsage(env.Profile, 1).PromptTokens
	tokens := capacity - room - prompt
	if tokens <= 0 {
		return Outcome{}, fmt.Errorf("profile %s: capacity %d leaves no room for a fill request above its prompt (%d) that leaves %d", env.Profile.Name, capacity, prompt, room)
	}
	c.MaxTokens = -1
	if c.Metadata == nil {
		c.Metadata = map[string]string{}
	}
	c.Metadata[providerstub.TokensMetadata] = fmt.Sprint(tokens)
	return env.Chat(ctx, c), nil
}

// idleStates reads the state of each key under rule once no reservation is held. Without
// inspection nothing is read (nil): it waits, from outside, until the providers hold none of the
// scenario's requests and a settlement's grace has passed.
func (env *Env) idleStates(ctx context.Context, r *Result, rule string, keys []modelKey) (map[modelKey]wire.QuotaState, bool) {
	if !env.inspects() {
		if err := env.settleBlind(ctx); err != nil {
			r.Error(err)
			return nil, false
		}
		return nil, true
	}
	out := map[modelKey]wire.QuotaState{}
	for _, k := range keys {
		q, err := env.Quotas().WaitIdleWithin(ctx, gwA, Key{Rule: rule, Subject: k.subject, Model: k.model}, adminTimeout(env.Profile)+env.Profile.StoreTimeout)
		if err != nil {
			r.Error(err)
			return nil, false
		}
		out[k] = q
	}
	return out, true
}

// checkStatesUnchanged checks that what happened between before and after (idleStates; nil
// without inspection, when nothing is checked) changed no key's settled or reserved tokens.
func checkStatesUnchanged(r *Result, keys []modelKey, before, after map[modelKey]wire.QuotaState, what string) {
	if before == nil || after == nil {
		return
	}
	for _, k := range keys {
		b, a := before[k], after[k]
		name := k.subject
		if k.model != "" {
			name = k.String()
		}
		r.Check(fmt.Sprintf("%s: settled and reserved tokens unchanged by %s", name, what),
			fmt.Sprintf("settled %d, reserved %d", b.Settled(), b.ReservedTokens),
			fmt.Sprintf("settled %d, reserved %d", a.Settled(), a.ReservedTokens), a.Settled() == b.Settled() && a.ReservedTokens == b.ReservedTokens)
	}
}

// checkOneEstimateLeft checks, after probes that must not charge who, that who — left room for
// exactly one estimate before them — is admitted once (last) and then denied (over): a probe
// that charged it a single token denies last. It needs a fixed estimate to know the room; on
// another admission model the check is not made.
func (env *Env) checkOneEstimateLeft(r *Result, who string, room, capacity int64, last, over Outcome) {
	gw, est := env.gateway(), env.Profile.Estimate
	if gw.Expect.Admission.Model != undertest.AdmitFixedEstimate {
		r.NotMade(who+" admitted exactly once after the probes",
			"admission model "+gw.Expect.Admission.Model+": a request's estimate includes the gateway's own input estimate, so the room left is not known exactly")
		return
	}
	if room < est || room >= 2*est {
		r.Error(fmt.Errorf("not decided: the fill's usage left %s %d of %d, not room for exactly one estimate of %d", who, room, capacity, est))
	}
	r.Check(fmt.Sprintf("%s charged nothing by the probes: the request it has room for (%d left, %d needed) admitted", who, room, est),
		http.StatusOK, last.Status, last.Admitted())
	denial := gw.Expect.Denial.Status
	r.Check(who+" was at the boundary (the check is not vacuous): the request after it denied", denial, over.Status, over.Status == denial)
}
