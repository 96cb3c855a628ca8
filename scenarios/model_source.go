package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/quotaqual/quotaqual/deployment"
)

func init() { register(1800, modelSource) }

func modelSource() Scenario {
	return Scenario{
		Name: "model-source",
		Summary: "under a rule keyed by subject and model with an allowlist, a subject whose key for one model is spent sends the " +
			"model header and the body's model disagreeing, models outside the allowlist, and case and whitespace variants of the " +
			"spent model, in the body and in the header; another subject's admitted requests are charged on the key of the model the " +
			"provider served",
		Invariant: "hard gate: one model decides the key and is the model served: a request naming two models, a model outside the " +
			"allowlist or a variant of an allowed one is refused or charged on the canonical model's key — never admitted on a " +
			"budget of its own, never forwarded; an admitted request's charge lands on the key of the model the provider served",
		// The allowlist and the key per model are the rule's: without them there is nothing to
		// qualify. Without inspection, admissions at a known boundary stand for the ledger.
		Needs:   []Need{NeedScenarioRules},
		Prefers: []Need{NeedQuotaInspection},
		BlackBox: "sees every answer, the models the providers were asked for, the spent key's denials and the other key of the " +
			"same subject, left room for exactly one estimate before, admitted once and only once after, and each admitted response's " +
			"remaining header against its key's replayed usage; cannot see a charge on a key it does not probe (a made-up model's) " +
			"except through an admission, nor the spent key's settled usage",
		Rules: modelSourceRules,
		Run:   runModelSource,
	}
}

// modelSourceRule is model-budgets' rule shape (modelKeyedRule), so every other spelling of a
// model is outside the allowlist.
const modelSourceRule = "model-source"

func modelSourceRules(p deployment.Profile) []deployment.ScenarioRule {
	return []deployment.ScenarioRule{modelKeyedRule(modelSourceRule, p)}
}

// otherModelHeaders are model headers other gateways route on (Envoy AI Gateway, the Gateway
// API inference extension, generic proxies). Each names a model other than the body's, whose
// key is spent: whatever header a gateway reads, admitting such a request charges a key of a
// model it does not serve, or serves a spent key.
var otherModelHeaders = []string{"X-Ai-Eg-Model", "X-Gateway-Model-Name", "X-Model-Name", "X-Target-Model", "Model"}

// modelSpellings are variants of an allowed model a client could send to find a fresh budget.
var modelSpellings = []struct {
	name  string
	spell func(string) string
}{
	{"upper-case", strings.ToUpper},
	{"first-letter-upper", func(m string) string { return strings.ToUpper(m[:1]) + m[1:] }},
	{"leading-space", func(m string) string { return " " + m }},
	{"trailing-space", func(m string) string { return m + " " }},
	{"trailing-newline", func(m string) string { return m + "\n" }},
	{"tab-inside", func(m string) string { return strings.Replace(m, "-", "-\t", 1) }},
}

// modelProbe is one request of model-source's probe phase.
type modelProbe struct {
	label string
	call  ChatCall
}

// runModelSource spends application-a's key for the first model with one request (its usage a
// token past the key's capacity) and leaves its key for the second model room for exactly one
// estimate. Then, as application-a, it sends requests naming models that must not be admitted
// against either key; afterwards the second key admits once and then denies, which shows from
// outside that no probe charged it. Application-b's requests, with the models agreeing, in the
// body only and in the header only, check where an admitted request's charge lands.
func runModelSource(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	gw := env.gateway()
	est, capacity := p.Estimate, 2*p.Estimate
	m1, m2 := modelBudgetsModels[0], modelBudgetsModels[1]
	rule := modelSourceRule
	denial := gw.Expect.Denial.Status
	r.Fact("rule", fmt.Sprintf("%s: key subject_and_model, %d tokens per %s per key, %d reserved per request, allowed models %v",
		rule, capacity, modelBudgetsWindow, est, modelBudgetsModels))
	if !env.inspects() {
		r.DecidedBy("admissions probed from outside", "the providers' call logs", "the responses' usage")
		r.NotMade("settled and reserved tokens of the probed keys unchanged, and each key's settled usage == its responses'", "no quota inspection")
	}
	withModel := func(c ChatCall, m string) ChatCall {
		c.Fields = map[string]any{"model": m}
		return c
	}
	spent, err := env.fillRoom(ctx, withModel(ChatCall{Gateway: gwA, Label: "spend-" + m1, Subject: appA}, m1), capacity, spentRoom)
	if err != nil {
		return r.Error(err)
	}
	boundary, err := env.fillRoom(ctx, withModel(ChatCall{Gateway: gwB, Label: "fill-" + m2, Subject: appA}, m2), capacity, est)
	if err != nil {
		return r.Error(err)
	}
	r.Check(fmt.Sprintf("application-a's %s key spent by one request", m1), http.StatusOK, spent.Status, spent.Admitted())
	r.Check(fmt.Sprintf("application-a's %s key filled to room for one estimate", m2), http.StatusOK, boundary.Status, boundary.Admitted())
	room := capacity - charge(boundary, est)
	r.Fact("room_left_on_"+m2, room)
	keys := []modelKey{{appA, m1}, {appA, m2}}
	before, ok := env.idleStates(ctx, r, rule, keys)
	if !ok {
		return r
	}
	pBefore, ok := env.readProviders(ctx, r, "provider call counts before the probes")
	if !ok {
		return r
	}

	// The probes: none may be admitted. Disagreeing models name the spent key on one side, so
	// an admission either charges a key of a model not served or spends a spent key.
	var probes []modelProbe
	add := func(label string, c ChatCall) { probes = append(probes, modelProbe{label, c}) }
	// The model header the gateway documents (expect.model_header) is held to its documented
	// refusal of a disagreement both ways; a gateway documenting none may serve and charge the
	// body's model whatever a header says, so only the direction where the body's key is spent
	// is probed (through the other headers below), and nothing rests on a header alone.
	modelHeader := gw.Expect.ModelHeader
	if modelHeader != "" {
		add(fmt.Sprintf("body-%s-%s-%s", m1, modelHeader, m2), withModel(ChatCall{Headers: map[string]string{modelHeader: m2}}, m1))
		add(fmt.Sprintf("body-%s-%s-%s", m2, modelHeader, m1), withModel(ChatCall{Headers: map[string]string{modelHeader: m1}}, m2))
	} else {
		r.NotMade("a model header disagreeing with the body refused, and a model named in that header alone", "the gateway's profile documents no model header (expect.model_header)")
	}
	for _, h := range otherModelHeaders {
		add(fmt.Sprintf("body-%s-%s-%s", m1, h, m2), withModel(ChatCall{Headers: map[string]string{h: m2}}, m1))
	}
	for _, o := range []struct{ name, model string }{{"gpt-4o", "gpt-4o"}, {"suffixed", m1 + "-unmetered"}, {"empty", ""}} {
		add("outside-allowlist-body-"+o.name, withModel(ChatCall{}, o.model))
	}
	if modelHeader != "" {
		add("outside-allowlist-header-gpt-4o", ChatCall{NoModel: true, Headers: map[string]string{modelHeader: "gpt-4o"}})
	}
	for _, s := range modelSpellings {
		v := s.spell(m1)
		add("variant-"+s.name+"-body", withModel(ChatCall{}, v))
		if modelHeader != "" && !strings.ContainsAny(v, "\r\n") { // a header value cannot carry a line break
			add("variant-"+s.name+"-header", ChatCall{NoModel: true, Headers: map[string]string{modelHeader: v}})
		}
	}
	var outs []Outcome
	var admittedProbes, notRefusals []string
	for i, pr := range probes {
		c := pr.call
		c.Gateway, c.Label, c.Subject = env.alternate(i), pr.label, appA
		o := env.Chat(ctx, c)
		outs = append(outs, o)
		switch {
		case o.Admitted():
			admittedProbes = append(admittedProbes, pr.label)
		case o.Status < 400 || o.Status >= 500:
			notRefusals = append(notRefusals, fmt.Sprintf("%s: %d", pr.label, o.Status))
		}
	}
	r.Check(fmt.Sprintf("%d requests naming two models, a model outside the allowlist, or a variant of the spent %s: none admitted", len(probes), m1),
		"none", admittedProbes, len(admittedProbes) == 0)
	r.Check("each of them refused with a 4xx (a client error or the spent key's denial), not a server error", "none otherwise", notRefusals, len(notRefusals) == 0)

	pAfter, err := env.settledProviders(ctx)
	if err != nil {
		return r.Error(fmt.Errorf("provider call counts after the probes: %w", err))
	}
	var served []string
	for _, q := range newRequests(pBefore, pAfter) {
		served = append(served, strconv.Quote(q.Model))
	}
	d := TotalDelta(pBefore, pAfter)
	r.Check("none of the probes reached a provider (the models the providers were asked for)", "none", served, d == 0)
	after, ok := env.idleStates(ctx, r, rule, keys)
	if !ok {
		return r
	}
	checkStatesUnchanged(r, keys, before, after, "the probes")
	last := env.Chat(ctx, withModel(ChatCall{Gateway: gwB, Label: m2 + "-last-the-rule-admits", Subject: appA}, m2))
	over := env.Chat(ctx, withModel(ChatCall{Gateway: gwA, Label: m2 + "-one-past-the-rule", Subject: appA}, m2))
	still := env.Chat(ctx, withModel(ChatCall{Gateway: gwB, Label: m1 + "-still-spent", Subject: appA}, m1))
	env.checkOneEstimateLeft(r, modelKey{appA, m2}.String(), room, capacity, last, over)
	r.Check(fmt.Sprintf("application-a/%s, spent before the probes, still denied after them", m1), denial, still.Status, still.Status == denial)

	served2 := env.checkServedKeys(ctx, r, rule, m1, m2)
	r.Fact("probe_statuses", tally(statuses(outs)))
	r.Key("%d probes naming two models, outside the allowlist or a variant of %s: %s, provider calls +%d; application-a/%s after: %d then %d; application-b: %s",
		len(probes), m1, tally(statuses(outs)), d, m2, last.Status, over.Status, served2)
	return r
}

// checkServedKeys sends application-b's requests that must be admitted, or may be refused,
// and checks that each admitted one was served the model it named and charged on that
// model's key: the body and the header agreeing, the body alone, the header alone (which a
// gateway that reads no model header may refuse). It returns what they were answered.
func (env *Env) checkServedKeys(ctx context.Context, r *Result, rule, m1, m2 string) string {
	p := env.Profile
	est, capacity := p.Estimate, 2*p.Estimate
	type servedCase struct {
		label, model string
		call         ChatCall
		mayRefuse    bool
	}
	cases := []servedCase{{"body-only-" + m1, m1, ChatCall{Fields: map[string]any{"model": m1}}, false}}
	if h := env.gateway().Expect.ModelHeader; h != "" {
		cases = append(cases,
			servedCase{"agreeing-" + m2, m2, ChatCall{Fields: map[string]any{"model": m2}, Headers: map[string]string{h: m2}}, false},
			servedCase{"header-only-" + m2, m2, ChatCall{NoModel: true, Headers: map[string]string{h: m2}}, true})
	} else {
		cases = append(cases, servedCase{"body-only-" + m2, m2, ChatCall{Fields: map[string]any{"model": m2}}, false})
	}
	before, ok := env.readProviders(ctx, r, "provider call counts before application-b's requests")
	if !ok {
		return "not sent"
	}
	settled := map[string]int64{}
	var named, lies, wrong []string
	var outs []Outcome
	remaining := env.gateway().Expect.QuotaHeaders.Remaining
	for i, c := range cases {
		call := c.call
		call.Gateway, call.Label, call.Subject = env.alternate(i), c.label, appB
		o := env.Chat(ctx, call)
		outs = append(outs, o)
		switch {
		case o.Admitted():
			named = append(named, strconv.Quote(c.model))
			if remaining != "" {
				want := max(0, capacity-settled[c.model]-est)
				if got := o.Headers.Get(remaining); got != strconv.FormatInt(want, 10) {
					lies = append(lies, fmt.Sprintf("%s: %q, %s's key %d", c.label, got, c.model, want))
				}
			}
			settled[c.model] += charge(o, est)
		case !c.mayRefuse || o.Status < 400 || o.Status >= 500:
			wrong = append(wrong, fmt.Sprintf("%s: %d", c.label, o.Status))
		}
		if _, err := env.Quotas().WaitIdle(ctx, gwA, Key{Rule: rule, Subject: appB, Model: c.model}); err != nil {
			r.Error(err)
			return "interrupted"
		}
	}
	r.Check("application-b: the models agreeing and the body alone admitted (the header alone admitted or refused with a 4xx)", "none otherwise", wrong, len(wrong) == 0)
	after, err := env.settledProviders(ctx)
	if err != nil {
		r.Error(fmt.Errorf("provider call counts after application-b's requests: %w", err))
		return "interrupted"
	}
	var served []string
	for _, q := range newRequests(before, after) {
		served = append(served, strconv.Quote(q.Model))
	}
	slices.Sort(served)
	slices.Sort(named)
	r.Check("application-b: the providers were asked for exactly the models its admitted requests named", named, served, slices.Equal(named, served))
	if remaining == "" {
		r.NotMade("application-b: each admitted response's remaining is its model's key's own", "the gateway sends no remaining header")
	} else {
		r.Check("application-b: "+strings.ToLower(remaining)+" of each admitted response is the remaining of the named (and served) model's key",
			"all exact", lies, len(lies) == 0)
	}
	if env.inspects() {
		var differ []string
		for _, m := range []string{m1, m2} {
			q, err := env.Quotas().Read(ctx, gwB, Key{Rule: rule, Subject: appB, Model: m})
			if err != nil {
				r.Error(err)
				continue
			}
			if q.Settled() != settled[m] {
				differ = append(differ, fmt.Sprintf("%s: ledger %d, responses %d", m, q.Settled(), settled[m]))
			}
		}
		r.Check("application-b: each model's key settled what the responses served with that model used", "equal", differ, len(differ) == 0)
	}
	return tally(statuses(outs))
}
