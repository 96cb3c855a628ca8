package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/providerstub"
)

func init() { register(1700, modelBudgets) }

func modelBudgets() Scenario {
	return Scenario{
		Name: "model-budgets",
		Summary: "under a rule keyed by subject and model, one subject spends its budget on one model and is still admitted on " +
			"the other, and another subject on the spent model; the quota headers speak for the key asked",
		Invariant: "hard gate: each (subject, model) key admits iff its own settled + estimate ≤ capacity (replayed on the " +
			"responses' usage); a spent key refuses nothing of another key; remaining is the key's own on every response",
		// Its rule is the only one keyed by model: without the scenarios' rules there is nothing
		// to qualify. Without inspection, the responses' usage stands for the ledger's.
		Needs:   []Need{NeedScenarioRules},
		Prefers: []Need{NeedQuotaInspection},
		BlackBox: "sees every decision per (subject, model) key against the rule replayed on the responses' own usage, and the " +
			"quota headers of each answer; cannot see the ledger's settled usage per key, nor which key a charge landed on except through " +
			"the admissions that follow it",
		Rules: modelBudgetsRules,
		Run:   runModelBudgets,
	}
}

// modelBudgetsRule keys its subjects' quota by subject and model, two estimates per model over
// a window that outlasts the run (nothing leaves it mid-scenario), and allows the two models
// modelBudgetsModels: the provider stub's default and one more (the stub serves any model name
// it is asked for). model-source's rule has the same shape.
const (
	modelBudgetsRule   = "model-budgets"
	modelBudgetsWindow = 10 * time.Minute
)

var modelBudgetsModels = []string{providerstub.DefaultModel, "qwen3-8b"}

func modelBudgetsRules(p deployment.Profile) []deployment.ScenarioRule {
	return []deployment.ScenarioRule{modelKeyedRule(modelBudgetsRule, p)}
}

// modelKeyedRule is the rule shape of model-budgets and model-source: keyed by subject and
// model, two estimates per key over modelBudgetsWindow, allowing only modelBudgetsModels.
func modelKeyedRule(name string, p deployment.Profile) deployment.ScenarioRule {
	return deployment.ScenarioRule{Name: name, Window: deployment.FormatDuration(modelBudgetsWindow), Capacity: 2 * p.Estimate,
		Lease: deployment.FormatDuration(p.Lease), Estimate: p.Estimate, KeyByModel: true, Models: modelBudgetsModels}
}

// modelKey is one (subject, model) key of model-budgets.
type modelKey struct{ subject, model string }

func (k modelKey) String() string { return k.subject + "/" + k.model }

// modelStep is one request of model-budgets and what the rule, replayed on the responses'
// usage, says of it.
type modelStep struct {
	key     modelKey
	o       Outcome
	settled int64 // the key's settled usage before the request (replayed)
	ledger  int64 // the key's settled usage read after the request settled (-1: not read)
}

func (s modelStep) fits(est, capacity int64) bool { return s.settled+est <= capacity }

// modelMaxPerKey bounds one key's requests: the capacity holds two.
const modelMaxPerKey = 5

func runModelBudgets(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	est, capacity := p.Estimate, 2*p.Estimate
	m1, m2 := modelBudgetsModels[0], modelBudgetsModels[1]
	r.Fact("rule", fmt.Sprintf("%s: key subject_and_model, %d tokens per %s per key, %d reserved per request, models %v",
		modelBudgetsRule, capacity, modelBudgetsWindow, est, modelBudgetsModels))
	before, ok := env.startReplay(ctx, r, "the ledger's settled usage per key against the responses'")
	if !ok {
		return r
	}

	var steps []modelStep
	settled := map[modelKey]int64{}
	// send sends one request for key on the next gateway in turn, and waits until it settled.
	send := func(k modelKey, label string) (Outcome, error) {
		gw := env.alternate(len(steps))
		st := modelStep{key: k, settled: settled[k], ledger: -1}
		st.o = env.Chat(ctx, ChatCall{Gateway: gw, Label: label, Subject: k.subject,
			Fields: map[string]any{"model": k.model}})
		defer func() { steps = append(steps, st) }()
		if !st.o.Admitted() {
			return st.o, nil
		}
		q, err := env.Quotas().WaitIdle(ctx, gw, Key{Rule: modelBudgetsRule, Subject: k.subject, Model: k.model})
		if err != nil {
			return st.o, err
		}
		settled[k] += charge(st.o, est)
		if env.inspects() {
			st.ledger = q.Settled()
		}
		return st.o, nil
	}
	// exhaust sends requests for k until the first non-200.
	exhaust := func(k modelKey, label string) error {
		for i := 0; i < modelMaxPerKey; i++ {
			o, err := send(k, fmt.Sprintf("%s-%d", label, i+1))
			if err != nil || !o.Admitted() {
				return err
			}
		}
		return fmt.Errorf("%s: %d requests admitted in a row, more than the capacity %d holds", k, modelMaxPerKey, capacity)
	}

	spent, other, neighbour := modelKey{appA, m1}, modelKey{appA, m2}, modelKey{appB, m1}
	if err := exhaust(spent, "spend-"+m1); err != nil {
		return r.Error(err)
	}
	// Not vacuous: the spent key refuses an estimate, so a key shared across models would
	// refuse the other model's first request too.
	if spent := settled[spent]; spent+est <= capacity {
		return r.Error(fmt.Errorf("not decided: %s settled %d and still has room for an estimate of %d in %d", modelKey{appA, m1}, spent, est, capacity))
	}
	if err := exhaust(other, "other-model-"+m2); err != nil {
		return r.Error(err)
	}
	if _, err := send(neighbour, "other-subject-"+m1); err != nil {
		return r.Error(err)
	}

	var wrong []string
	admitted, firstAdmitted := 0, map[modelKey]bool{}
	for i, s := range steps {
		if s.o.Admitted() {
			admitted++
			if s.settled == 0 {
				firstAdmitted[s.key] = true
			}
		}
		if s.fits(est, capacity) != s.o.Admitted() || (s.o.Status != http.StatusOK && s.o.Status != http.StatusTooManyRequests) {
			wrong = append(wrong, fmt.Sprintf("#%d %s: %d + %d ≤ %d is %v; status %d", i+1, s.key, s.settled, est, capacity, s.fits(est, capacity), s.o.Status))
		}
	}
	r.Fact("statuses", statuses(outcomesOf(steps, func(s modelStep) Outcome { return s.o })))
	r.Fact("settled_per_key_from_responses", map[string]int64{spent.String(): settled[spent], other.String(): settled[other], neighbour.String(): settled[neighbour]})
	r.Check("every decision as the rule replayed on the responses' usage says (each key its own settled + estimate ≤ capacity)",
		"no mismatch", wrong, len(wrong) == 0)
	r.Check(fmt.Sprintf("the same subject on %s admitted after its %s budget was spent", m2, m1), true, firstAdmitted[other], firstAdmitted[other])
	r.Check(fmt.Sprintf("another subject on %s admitted after application-a spent its budget there", m1), true, firstAdmitted[neighbour], firstAdmitted[neighbour])

	if name := env.gateway().Expect.QuotaHeaders.Remaining; name == "" {
		r.NotMade("the remaining header is the key's own", "the gateway sends none")
	} else {
		var lies []string
		for i, s := range steps {
			want := max(0, capacity-s.settled)
			if s.o.Admitted() {
				want = max(0, capacity-s.settled-est)
			}
			if got := s.o.Headers.Get(name); got != strconv.FormatInt(want, 10) {
				lies = append(lies, fmt.Sprintf("#%d %s (%d): %q, truthful %d", i+1, s.key, s.o.Status, got, want))
			}
		}
		r.Check(strings.ToLower(name)+" is the key's own remaining on every response", "all exact", lies, len(lies) == 0)
	}
	for i, s := range steps {
		if s.o.Status == http.StatusTooManyRequests {
			env.checkErrorBody(r, fmt.Sprintf("#%d %s's 429", i+1, s.key), s.o)
		}
	}
	if env.inspects() {
		var differ []string
		for i, s := range steps {
			if s.ledger >= 0 && s.ledger != s.settled+charge(s.o, est) {
				differ = append(differ, fmt.Sprintf("#%d %s: ledger %d, responses %d", i+1, s.key, s.ledger, s.settled+charge(s.o, est)))
			}
		}
		r.Check("the ledger's settled usage per key == the responses' usage", "equal after every admission", differ, len(differ) == 0)
	}
	if err := env.checkDenialsReachedNoProvider(ctx, r, before, admitted); err != nil {
		return r.Error(err)
	}
	besides := func(k modelKey) string {
		if firstAdmitted[k] {
			return k.String() + " admitted"
		}
		return k.String() + " not admitted"
	}
	// settled[spent] is the responses' usage, whatever the evidence level: said so.
	r.Key("%d admitted: %s spent (%d tokens by its responses' usage); after it %s, %s", admitted, spent, settled[spent], besides(other), besides(neighbour))
	return r
}
