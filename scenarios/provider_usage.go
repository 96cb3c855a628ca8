package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/providerstub"
)

func init() { register(2000, providerUsage) }

func providerUsage() Scenario {
	return Scenario{
		Name: providerUsageRule,
		Summary: "a provider that reports hostile usage — missing, partial (prompt or completion only), negative, a total below or " +
			"above its parts, beyond any budget, overflowing int64, fewer completion tokens than it sent, and (streamed) the usage " +
			"chunk twice or contradicting itself — in the JSON body and in the SSE usage chunk; and a provider that answers non-2xx " +
			"after generating, its error reporting the usage (a 400 content filter, a 429, a 500, a stream refused with a 400)",
		Invariant: "meter: each request is charged at least what the provider generated (its call log: what it really generated, " +
			"whatever it reported), a self-consistent usage (the same chunk twice) exactly once, a provider's non-2xx answer " +
			"exactly the usage it reported, and the gateway keeps serving: the subject's next request is admitted; where the " +
			"gateway declares its usage counters (capabilities.metrics), they count every request once, as reported or not as " +
			"the provider's usage decides",
		// The charges are read from outside (the remaining header of the next admitted
		// responses); inspection only adds the ledger's figure.
		// The run's rule reserves a fixed estimate whatever the bound, in a window with room for
		// four requests: only the scenario's own rules can show what it checks.
		Needs:    []Need{NeedScenarioRules},
		Prefers:  []Need{NeedQuotaInspection},
		BlackBox: "sees, at the providers, what each request really generated whatever the stub reported (and the status of each error it answered), and each charge through the remaining header of neutral probes sent after it, and whether the next request is admitted; cannot see the ledger's settled figure (with inspection only a cross-check) nor the gateway's usage counters (read only where its profile declares them: its own view of itself)",
		Rules:    providerUsageRules,
		Run:      runProviderUsage,
	}
}

// providerUsageRule estimates from the output bound, with room for every case, like
// usage-accounting's rule (for all three applications).
const providerUsageRule = "provider-usage"

func providerUsageRules(p deployment.Profile) []deployment.ScenarioRule {
	return []deployment.ScenarioRule{{Name: providerUsageRule, Window: deployment.FormatDuration(usageAccountingWindow), Capacity: usageAccountingCapacity,
		Lease: deployment.FormatDuration(p.Lease), Strategy: "max_tokens", Estimate: p.Estimate}}
}

// hostileGenerated is what the stub generates for each case: no bound, so the case's estimate
// is the rule's fallback, below what is generated — a charge still pending never passes for
// one at least what was generated.
const hostileGenerated = 40

// hostileModes are the usage modes of each kind of response, the absurd figures last (a
// gateway that charges them locks the subject's budget for the rest of its cases).
func hostileModes(stream bool) []string {
	modes := []string{providerstub.UsageMissing, providerstub.UsagePromptOnly, providerstub.UsageCompletionOnly,
		providerstub.UsageNegativePrompt, providerstub.UsageNegativeCompletion, providerstub.UsageTotalBelow,
		providerstub.UsageTotalAbove, providerstub.UsageUnderstated}
	if stream {
		modes = append(modes, providerstub.UsageDuplicated, providerstub.UsageContradicting)
	}
	return append(modes, providerstub.UsageHuge, providerstub.UsageOverflow)
}

func runProviderUsage(ctx context.Context, env *Env) *Result {
	res := env.NewResult()
	switch {
	case !env.echoesRequestID():
		return res.Skip(needsRequestID(env))
	}
	res.Fact("rule", fmt.Sprintf("%s: strategy max_tokens, fallback %d, capacity %d per %s; every case generates %d tokens, no bound "+
		"(application-a's JSON bodies, application-b's streams, application-c's provider errors)",
		providerUsageRule, env.Profile.Estimate, usageAccountingCapacity, usageAccountingWindow, hostileGenerated))
	counters := env.startUsageCounters(ctx, providerUsageRule)
	r := &sharedResult{r: res}
	keys := make([]string, 3)
	var wg sync.WaitGroup
	for i, stream := range []bool{false, true} {
		wg.Add(1)
		go func() { defer wg.Done(); keys[i] = checkHostileUsage(ctx, env, r, stream) }()
	}
	// Beside them, on a key of its own: providers that answer non-2xx and report usage.
	wg.Add(1)
	go func() { defer wg.Done(); keys[2] = checkProviderErrorUsage(ctx, env, r) }()
	wg.Wait()
	keys = append(keys, counters.check(ctx, res))
	if !env.inspects() {
		res.DecidedBy("the providers' call logs", "the remaining-tokens header of admitted responses")
		res.NotMade("the ledger's settled usage equals the charges read from outside", "no quota inspection")
	}
	res.Key("%s", strings.Join(keys, "; "))
	return res
}

// checkHostileUsage sends every mode of one kind of response (application-a's JSON bodies,
// application-b's streams), one after another, and checks each one's charge against what the
// provider generated. It returns the key fact's part.
func checkHostileUsage(ctx context.Context, env *Env, r *sharedResult, stream bool) string {
	subject, kind := appA, "json"
	if stream {
		subject, kind = appB, "stream"
	}
	m, ok := env.newChargeMeter(subject, "usage-"+kind, usageAccountingCapacity)
	if !ok {
		r.do(func(r *Result) { r.NotMade(kind+": each mode's charge", errNoRemainingHeader.Error()) })
		return kind + " not made"
	}
	facts := map[string]any{}
	var unanswered, below, notOnce, stopped []string
	var atLeast, served int
	for i, mode := range hostileModes(stream) {
		c := ChatCall{Gateway: env.alternate(i), Subject: subject, Label: kind + "-" + mode, Stream: stream, MaxTokens: -1,
			Metadata: generate(hostileGenerated, mode)}
		o := env.Chat(ctx, c)
		fact := map[string]any{"status": o.Status}
		facts[mode] = fact
		if o.Status != http.StatusOK {
			unanswered = append(unanswered, fmt.Sprintf("%s: %d", mode, o.Status))
			continue
		}
		pr, err := env.providerRecord(ctx, o)
		if err != nil {
			r.do(func(r *Result) { r.Error(fmt.Errorf("%s %s: %w", kind, mode, err)) })
			return kind + " not decided"
		}
		consumed := pr.PromptTokens + pr.GeneratedTokens
		// At least what was generated; a usage that agrees with itself, exactly what it says.
		want := func(n int64) bool { return n >= pr.GeneratedTokens }
		if mode == providerstub.UsageDuplicated {
			want = func(n int64) bool { return n == consumed }
		}
		got, err := m.charge(ctx, want)
		if err != nil {
			r.do(func(r *Result) { r.Error(fmt.Errorf("%s %s: %w", kind, mode, err)) })
			return kind + " not decided"
		}
		fact["charged"], fact["prompt"], fact["generated"], fact["reported_as"], fact["probes"] = got.tokens, pr.PromptTokens, pr.GeneratedTokens, pr.UsageMode, got.probes
		fact["next_request"] = got.last.Status
		if got.tokens >= pr.GeneratedTokens {
			atLeast++
		}
		if got.last.Status == http.StatusOK {
			served++
		}
		switch {
		case got.last.Status != http.StatusOK:
			stopped = append(stopped, fmt.Sprintf("%s: the next request answered %d (charged at least %d)", mode, got.last.Status, got.tokens))
		case !got.wanted && mode == providerstub.UsageDuplicated:
			notOnce = append(notOnce, fmt.Sprintf("%s: charged %d, the usage chunk says %d", mode, got.tokens, consumed))
		case !got.wanted:
			below = append(below, fmt.Sprintf("%s: charged %d < %d generated", mode, got.tokens, pr.GeneratedTokens))
		}
	}
	held, settled := m.held, m.checkLedger(ctx, r, kind, providerUsageRule)
	r.do(func(r *Result) {
		r.Fact(kind+"_cases", facts)
		r.Fact(kind+"_charged_from_headers", held)
		if env.inspects() { // without inspection no ledger figure is known
			r.Fact(kind+"_settled_in_ledger", settled)
		}
		r.Check(kind+": every response relayed (200)", "all 200", unanswered, len(unanswered) == 0)
		r.Check(kind+": every mode charged at least what the provider generated (never below it, nor below zero)", "none below", below, len(below) == 0)
		if stream {
			r.Check(kind+": the same usage chunk twice charged once", "exactly once", notOnce, len(notOnce) == 0)
		}
		r.Check(kind+": the gateway keeps serving: the subject's next request admitted after every mode (no charge spent the budget)",
			"all admitted", stopped, len(stopped) == 0)
	})
	return fmt.Sprintf("%s: %d modes, %d charged ≥ generated, the next request admitted after %d", kind, len(hostileModes(stream)), atLeast, served)
}
