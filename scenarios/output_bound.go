package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/undertest"
)

func init() { register(1900, outputBound) }

func outputBound() Scenario {
	return Scenario{
		Name: outputBoundScenario,
		Summary: "every form of the output bound — max_completion_tokens only, max_tokens only, both (disagreeing by an order of " +
			"magnitude either way, or the client's own below the clamp), neither, n > 1 — streamed and not, under a hard rule " +
			"(a burst of all of them, each asking for far more than its reservation) and under a meter rule (one after another)",
		Invariant: "hard gate: nothing generated beyond the reservation, counted at the providers — per request (prompt + generated ≤ " +
			"reserved, the bound forwarded × n ≤ reserved − prompt and never above the client's own) and per window (≤ capacity); " +
			"meter: the reservation is the bound the provider honours (max_completion_tokens before max_tokens, else the fallback) " +
			"× n, and the charge what the provider counted",
		// Both clauses are read from outside (the providers' call logs, the remaining header);
		// inspection only adds the ledger's figures.
		// The run's rule reserves a fixed estimate whatever the bound, in a window with room for
		// four requests: only the scenario's own rules can show what it checks.
		Needs:    []Need{NeedScenarioRules},
		Prefers:  []Need{NeedQuotaInspection},
		BlackBox: "sees, at the providers, every request's honoured bound, what it generated and the prompt it counted, and each reservation and charge through the remaining header of the request's own response and of neutral probes sent after it; cannot see the ledger's settled and reserved figures (with inspection only a cross-check)",
		Rules:    outputBoundRules,
		Run:      runOutputBound,
	}
}

// The scenario's two rules over a window that outlasts the run: the hard one (application-a)
// reserves outputBoundHardEstimate per choice and holds exactly what its cases reserve together
// (outputBoundHardCapacity, which the scenario checks); the meter one (application-b and -c)
// estimates from the output bound like usage-accounting's rule.
const (
	outputBoundScenario     = "output-bound"
	outputBoundHardRule     = "output-bound-hard"
	outputBoundMeterRule    = "output-bound-meter"
	outputBoundWindow       = 10 * time.Minute
	outputBoundHardEstimate = int64(100)
	outputBoundHardCapacity = int64(3400)
)

// The subjects of each of the scenario's rules.
var (
	outputBoundHardLabels  = []string{"application-a"}
	outputBoundMeterLabels = []string{"application-b", "application-c"}
)

func outputBoundRules(p deployment.Profile) []deployment.ScenarioRule {
	lease := deployment.FormatDuration(p.Lease)
	return []deployment.ScenarioRule{
		{Name: outputBoundHardRule, Scenario: outputBoundScenario, Labels: outputBoundHardLabels,
			Window: deployment.FormatDuration(outputBoundWindow), Capacity: outputBoundHardCapacity,
			Lease: lease, Estimate: outputBoundHardEstimate, Enforcement: "hard"},
		{Name: outputBoundMeterRule, Scenario: outputBoundScenario, Labels: outputBoundMeterLabels,
			Window: deployment.FormatDuration(outputBoundWindow), Capacity: usageAccountingCapacity,
			Lease: lease, Strategy: "max_tokens", Estimate: p.Estimate},
	}
}

// outputBoundAsk is what the stub generates per choice unless the bound it honours is smaller:
// far beyond the hard rule's reservation, and beyond the meter cases' small bounds.
const outputBoundAsk = 500

// outputBoundForms are the output-bound forms every clause is tried with. big and small are the
// bounds of a form; n its choices.
func outputBoundForms(big, small int64) []struct {
	label string
	call  ChatCall
} {
	mct := func(v int64, more ...any) map[string]any {
		f := map[string]any{"max_completion_tokens": int(v)}
		for i := 0; i+1 < len(more); i += 2 {
			f[more[i].(string)] = more[i+1]
		}
		return f
	}
	return []struct {
		label string
		call  ChatCall
	}{
		{"max_completion_tokens", ChatCall{MaxTokens: -1, Fields: mct(big)}},
		{"max_tokens", ChatCall{MaxTokens: big}},
		{"both-completion-larger", ChatCall{MaxTokens: big / 10, Fields: mct(big)}},
		{"both-max-tokens-larger", ChatCall{MaxTokens: big, Fields: mct(big / 10)}},
		{"both-own-below", ChatCall{MaxTokens: big, Fields: mct(small)}},
		{"neither", ChatCall{MaxTokens: -1}},
		{"n3-max_completion_tokens", ChatCall{MaxTokens: -1, Fields: mct(big, "n", 3)}},
		{"n3-max_tokens", ChatCall{MaxTokens: big, Fields: map[string]any{"n": 3}}},
		{"n3-neither", ChatCall{MaxTokens: -1, Fields: map[string]any{"n": 3}}},
	}
}

func runOutputBound(ctx context.Context, env *Env) *Result {
	res := env.NewResult()
	if !env.echoesRequestID() {
		return res.Skip(needsRequestID(env))
	}
	res.Fact("meter_rule", fmt.Sprintf("%s: strategy max_tokens, fallback %d, capacity %d per %s",
		outputBoundMeterRule, env.Profile.Estimate, usageAccountingCapacity, outputBoundWindow))
	r := &sharedResult{r: res}
	var wg sync.WaitGroup
	var hardKey string
	meterKeys := make([]string, 2)
	wg.Add(3)
	go func() { defer wg.Done(); hardKey = checkHardOutputBounds(ctx, env, r) }()
	// The meter cases, one after another per subject, both subjects at once: application-b's
	// not streamed, application-c's streamed.
	for i, stream := range []bool{false, true} {
		go func() { defer wg.Done(); meterKeys[i] = checkMeterOutputBounds(ctx, env, r, stream) }()
	}
	wg.Wait()
	if !env.inspects() {
		res.DecidedBy("the providers' call logs", "the remaining-tokens header of admitted responses")
		res.NotMade("the ledger's settled usage equals the charges read from outside", "no quota inspection")
	}
	res.Key("hard: %s; meter: %s", hardKey, strings.Join(meterKeys, ", "))
	return res
}

// checkHardOutputBounds sends every form, streamed and not, at once under the hard rule
// (OutputBoundHardEstimate per choice; a capacity of exactly what they all reserve) and checks
// at the providers that nothing was generated beyond any reservation. It returns the key fact's
// part.
func checkHardOutputBounds(ctx context.Context, env *Env, r *sharedResult) string {
	est, capacity := outputBoundHardEstimate, outputBoundHardCapacity
	type hardCase struct {
		label       string
		call        ChatCall
		own, n      int64
		reservation int64
		// path and body: a case sent to another metered endpoint (hardEndpointCases), as is.
		path string
		body []byte
	}
	var cases []hardCase
	var total int64
	for _, c := range hardEndpointCases(env, r, 10*outputBoundAsk) {
		cases = append(cases, hardCase{label: c.label, own: c.own, n: 1, reservation: est, path: c.path, body: c.body})
		total += est
	}
	chatFrom := len(cases)
	for _, stream := range []bool{false, true} {
		for _, f := range outputBoundForms(10*outputBoundAsk, 3) {
			c := hardCase{label: f.label, call: f.call, own: boundOf(f.call), n: choicesOf(f.call)}
			if stream {
				c.label += "-stream"
			}
			c.reservation = est * c.n
			c.call.Stream, c.call.Subject, c.call.Label = stream, appA, "hard-"+c.label
			c.call.Metadata = generate(outputBoundAsk, "")
			total += c.reservation
			cases = append(cases, c)
		}
	}
	r.do(func(r *Result) {
		r.Fact("hard_rule", fmt.Sprintf("%s: enforcement hard, %d tokens reserved per choice, capacity %d per %s (all %d cases at once)",
			outputBoundHardRule, est, capacity, outputBoundWindow, len(cases)))
	})
	if total != capacity {
		r.do(func(r *Result) {
			r.Error(fmt.Errorf("the hard cases reserve %d together, the rule's capacity is %d: they must be equal for every case to be admitted and the window to be full, not decided", total, capacity))
		})
		return "not decided"
	}
	// The other endpoints' cases first, one after another (their reservations are in the
	// capacity), then the chat burst.
	outs := make([]Outcome, chatFrom)
	for i, c := range cases[:chatFrom] {
		id := "qq-" + env.scenario + "-hard-" + c.label
		st, _ := env.surfaceDo(ctx, env.alternate(i), appA, CredValid, http.MethodPost, c.path, id, c.body)
		outs[i] = Outcome{Status: st, RequestID: id}
	}
	outs = append(outs, env.chatAtOnce(ctx, len(cases)-chatFrom, func(i int) ChatCall {
		c := cases[chatFrom+i].call
		c.Gateway = env.alternate(chatFrom + i)
		return c
	})...)
	snap, err := env.settledProviders(ctx)
	if err != nil {
		r.do(func(r *Result) { r.Error(fmt.Errorf("hard: reading the provider call logs: %w", err)) })
		return "not decided"
	}
	var admitted, logged int
	var windowUsage, largest int64
	var over, unbounded, raised []string
	facts := map[string]any{}
	for i, c := range cases {
		o := outs[i]
		_, pr, found := snap.FindRequest(o.RequestID)
		f := map[string]any{"status": o.Status, "reservation_by_the_rule": c.reservation}
		facts[c.label] = f
		if o.Status != http.StatusOK {
			continue
		}
		if admitted++; !found {
			continue
		}
		logged++
		consumed := pr.PromptTokens + pr.GeneratedTokens
		windowUsage += consumed
		largest = max(largest, consumed)
		f["consumed"], f["generated"], f["prompt"], f["bound_field"] = consumed, pr.GeneratedTokens, pr.PromptTokens, pr.BoundField
		if consumed > c.reservation {
			over = append(over, fmt.Sprintf("%s: %d > %d", c.label, consumed, c.reservation))
		}
		switch {
		case pr.MaxTokens == nil:
			unbounded = append(unbounded, c.label+": no bound")
		default:
			f["bound"] = *pr.MaxTokens
			if *pr.MaxTokens*c.n > c.reservation-pr.PromptTokens {
				unbounded = append(unbounded, fmt.Sprintf("%s: %d × %d > %d − %d", c.label, *pr.MaxTokens, c.n, c.reservation, pr.PromptTokens))
			}
			if c.own > 0 && *pr.MaxTokens > c.own {
				raised = append(raised, fmt.Sprintf("%s: %d > the client's %d", c.label, *pr.MaxTokens, c.own))
			}
		}
	}
	var settled any = "not read (no quota inspection)"
	if env.inspects() {
		if q, err := env.Quotas().WaitIdle(ctx, gwA, Key{Rule: outputBoundHardRule, Subject: appA}); err != nil {
			r.do(func(r *Result) { r.Error(fmt.Errorf("hard: %w", err)) })
		} else {
			settled = q.Settled()
		}
	}
	r.do(func(r *Result) {
		r.Fact("hard_cases", facts)
		r.Fact("hard_window_usage_at_the_providers", windowUsage)
		if env.inspects() { // without inspection no ledger figure is known
			r.Fact("hard_settled_in_ledger", settled)
		}
		r.Check("hard: every form admitted (together they reserve exactly the capacity)", len(cases), admitted, admitted == len(cases))
		r.Check("hard: every admitted request logged by a provider", admitted, logged, logged == admitted)
		r.Check("hard: no request consumed more than its reservation (prompt + generated, at the providers)", "none over", over, len(over) == 0)
		r.Check("hard: every request forwarded with a bound that, times n, leaves the prompt room in its reservation", "all bounded", unbounded, len(unbounded) == 0)
		r.Check("hard: no request forwarded with a bound above the client's own", "none raised", raised, len(raised) == 0)
		r.Check("hard: usage within the window ≤ capacity (at the providers)", fmt.Sprintf("≤ %d", capacity), windowUsage, windowUsage <= capacity)
	})
	return fmt.Sprintf("%d/%d admitted, window usage %d (cap %d), largest request %d", admitted, len(cases), windowUsage, capacity, largest)
}

// checkMeterOutputBounds sends every form under the meter rule, one after another, streamed or
// not, and checks each one's reservation and charge through a chargeMeter. It returns the key
// fact's part.
func checkMeterOutputBounds(ctx context.Context, env *Env, r *sharedResult, stream bool) string {
	subject, kind := appB, "json"
	if stream {
		subject, kind = appC, "stream"
	}
	fallback := env.Profile.Estimate
	const ask = 40 // per choice: above the small bounds, below the large ones
	m, ok := env.newChargeMeter(subject, "meter-"+kind, usageAccountingCapacity)
	if !ok {
		r.do(func(r *Result) {
			r.NotMade("meter ("+kind+"): each form's reservation and charge", errNoRemainingHeader.Error())
		})
		return kind + " not made"
	}
	forms := outputBoundForms(300, 3)
	if stream {
		// A stream whose client asks for no usage: the gateway must still read it.
		forms = append(forms, struct {
			label string
			call  ChatCall
		}{"max_completion_tokens-no-include-usage", ChatCall{MaxTokens: -1, Fields: map[string]any{"max_completion_tokens": 30, "stream_options": nil}}})
	}
	facts := map[string]any{}
	var wrongReserved, wrongCharge []string
	var exact int
	for i, f := range forms {
		c := f.call
		c.Gateway, c.Subject, c.Label, c.Stream = env.alternate(i), subject, "meter-"+kind+"-"+f.label, stream
		c.Metadata = generate(ask, "")
		o := env.Chat(ctx, c)
		fact := map[string]any{"status": o.Status}
		facts[f.label] = fact
		if o.Status != http.StatusOK {
			wrongReserved = append(wrongReserved, fmt.Sprintf("%s: answered %d", f.label, o.Status))
			continue
		}
		pr, err := env.providerRecord(ctx, o)
		if err != nil {
			r.do(func(r *Result) { r.Error(fmt.Errorf("meter %s: %w", f.label, err)) })
			return kind + " not decided"
		}
		reserved, err := m.reserved(o)
		if err != nil {
			r.do(func(r *Result) { r.Error(fmt.Errorf("meter %s: %w", f.label, err)) })
			return kind + " not decided"
		}
		// The contract's reservation: the bound the provider honoured (its own log) × n, the
		// rule's fallback when it honoured none.
		bound := fallback
		if pr.MaxTokens != nil {
			bound = *pr.MaxTokens
		}
		want := bound * max(1, pr.Choices)
		consumed := pr.PromptTokens + pr.GeneratedTokens
		got, err := m.charge(ctx, func(n int64) bool { return n == consumed })
		if err != nil {
			r.do(func(r *Result) { r.Error(fmt.Errorf("meter %s: %w", f.label, err)) })
			return kind + " not decided"
		}
		fact["reserved"], fact["bound_honoured"], fact["bound_field"], fact["choices"] = reserved, pr.MaxTokens, pr.BoundField, pr.Choices
		fact["charged"], fact["prompt"], fact["generated"], fact["probes"] = got.tokens, pr.PromptTokens, pr.GeneratedTokens, got.probes
		if reserved != want {
			wrongReserved = append(wrongReserved, fmt.Sprintf("%s: reserved %d, the bound honoured %d × %d choices is %d", f.label, reserved, bound, pr.Choices, want))
		}
		if !got.wanted || got.last.Status != http.StatusOK {
			wrongCharge = append(wrongCharge, fmt.Sprintf("%s: charged %d, the provider counted %d (next request %d)", f.label, got.tokens, consumed, got.last.Status))
		} else {
			exact++
		}
	}
	held, settled := m.held, m.checkLedger(ctx, r, "meter ("+kind+")", outputBoundMeterRule)
	r.do(func(r *Result) {
		r.Fact("meter_"+kind+"_cases", facts)
		r.Fact("meter_"+kind+"_charged_from_headers", held)
		if env.inspects() {
			r.Fact("meter_"+kind+"_settled_in_ledger", settled)
		}
		r.Check("meter ("+kind+"): each form reserved the bound the provider honours × n (max_completion_tokens before max_tokens, else the fallback)",
			"all exact", wrongReserved, len(wrongReserved) == 0)
		r.Check("meter ("+kind+"): each form charged what the provider counted (prompt + generated)", "all exact", wrongCharge, len(wrongCharge) == 0)
	})
	return fmt.Sprintf("%s %d/%d charged as counted", kind, exact, len(forms))
}

// hardEndpointCase is a hard-rule case sent to a metered endpoint other than chat, whose output
// bound is its own field: the Responses API's max_output_tokens, legacy completions' max_tokens
// (which knows no max_completion_tokens).
type hardEndpointCase struct {
	label, path string
	own         int64 // the client's own bound; 0: none
	body        []byte
}

// hardEndpointCases are the hard-rule cases of the other endpoints with an output bound: each
// with the bound far above the reservation and without one, so the clamp must write the
// endpoint's own field whether or not the client sent it. An endpoint the gateway profile does
// not declare (capabilities.endpoints) is stood in for by chat, so the cases still reserve the
// whole capacity, and its check says it was not made.
func hardEndpointCases(env *Env, r *sharedResult, big int64) []hardEndpointCase {
	var out []hardEndpointCase
	for _, ep := range meteredSurface {
		if ep.name == undertest.EndpointChat || ep.name == undertest.EndpointEmbeddings {
			continue // chat's forms are the burst's; embeddings generate no output
		}
		path, body := ep.path, ep.body
		if !env.gateway().Serves(ep.name) {
			r.do(func(r *Result) {
				r.NotMade("hard: "+ep.name+" forwarded with its own output bound clamped", "the gateway profile does not declare it (capabilities.endpoints; chat stands in)")
			})
			path, body = ChatPath, meteredSurface[0].body
		}
		for _, own := range []int64{big, 0} {
			b := body(own, "")
			form := "own-bound"
			if own == 0 {
				form = "no-bound"
				for _, f := range []string{"max_tokens", "max_output_tokens"} {
					delete(b, f)
				}
			}
			b["model"], b["metadata"] = providerstub.DefaultModel, generate(outputBoundAsk, "")
			raw, _ := json.Marshal(b)
			out = append(out, hardEndpointCase{label: ep.name + "-" + form, path: path, own: own, body: raw})
		}
	}
	return out
}
