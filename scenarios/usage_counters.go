package scenarios

import (
	"context"
	"fmt"
	"time"

	"github.com/quotaqual/quotaqual/providerstub"
)

// usageCounters hold a gateway's usage counters (capabilities.metrics: usage_reported and
// usage_unreported of a rule) to what its providers reported: every settled request is counted
// once, in the series the provider's usage decides. Operators read the unreported series as
// how often providers fail to report usage, and how often a charge is a floor rather than a
// count; a gateway that files every floor as reported (blind 55) hides both.
type usageCounters struct {
	env      *Env
	reported counter
	unread   counter
	before   []float64
	why      string // the check is not made: why
}

// startUsageCounters reads the counters of rule before the scenario's traffic.
func (env *Env) startUsageCounters(ctx context.Context, rule string) *usageCounters {
	m := env.gateway().Caps.Metrics
	u := &usageCounters{env: env}
	var ok bool
	if u.reported, u.why, ok = env.counterOf(m.UsageReported, "usage reported", rule); !ok {
		return u
	}
	if u.unread, u.why, ok = env.counterOf(m.UsageUnreported, "usage not reported", rule); !ok {
		return u
	}
	before, err := env.readCounters(ctx, u.reported, u.unread)
	if err != nil {
		u.why = "the counters could not be read before the traffic: " + err.Error()
		return u
	}
	u.before = before
	return u
}

// usageReading is how a gateway must count a settled request's usage, from the usage its
// provider reported (the stub's usage mode, with what it really counted).
type usageReading int

const (
	// readReported: the true usage, reported plainly — charged as reported.
	readReported usageReading = iota
	// readUnreported: no figure the usage states is at least what was generated (none, a
	// negative one, or one below it). Counting it as reported means charging it, which the
	// charge checks fail; so a gateway that passes them charged a floor or the estimate.
	readUnreported
	// readEither: a reading the contract leaves to the gateway — a total that disagrees with
	// its parts, a figure beyond any budget, a chunk repeated or contradicted — charged as its
	// parts, clamped, or as a floor.
	readEither
)

func readingOf(pr providerstub.CallRecord) usageReading {
	switch pr.UsageMode {
	case "":
		return readReported
	case providerstub.UsageMissing, providerstub.UsageNegativeCompletion:
		return readUnreported
	case providerstub.UsagePromptOnly:
		if pr.PromptTokens < pr.GeneratedTokens {
			return readUnreported
		}
	case providerstub.UsageUnderstated:
		if pr.PromptTokens+1 < pr.GeneratedTokens {
			return readUnreported
		}
	}
	return readEither
}

// check reads the providers' logs (every call of the scenario is one settled request of the
// rule) and waits, until the settlement deadline, for the counters to have counted each once;
// then judges the split. It returns the key fact's part.
func (u *usageCounters) check(ctx context.Context, r *Result) string {
	const what = "the gateway's usage counters"
	if u.before == nil {
		r.NotMade(what+" count each request's usage in the series its provider's report decides", u.why)
		return "usage counters not read"
	}
	env := u.env
	after, err := env.settledProviders(ctx)
	if err != nil {
		r.Error(fmt.Errorf("%s: reading the provider call logs: %w", what, err))
		return "usage counters not judged"
	}
	var calls, reported, unread, either int
	for _, c := range after.ByHost {
		if c.Dropped > 0 {
			r.Error(fmt.Errorf("%s: %s's call log dropped %d records: the calls cannot all be classified", what, c.Host, c.Dropped))
			return "usage counters not judged"
		}
		for _, pr := range c.Requests {
			calls++
			switch readingOf(pr) {
			case readReported:
				reported++
			case readUnreported:
				unread++
			default:
				either++
			}
		}
	}
	// Settlement lands after the response: the last requests' may still be on their way.
	var d []float64
	deadline := adminTimeout(env.Profile) + env.Profile.StoreTimeout
	_, err = poll(ctx, 50*time.Millisecond, deadline, func(ctx context.Context) (bool, error) {
		now, err := env.readCounters(ctx, u.reported, u.unread)
		if err != nil {
			return false, err
		}
		d = []float64{now[0] - u.before[0], now[1] - u.before[1]}
		return d[0]+d[1] >= float64(calls), nil
	})
	if d == nil {
		r.Error(fmt.Errorf("%s: %w", what, err))
		return "usage counters not read"
	}
	dRep, dUnrep := int(d[0]), int(d[1])
	r.Fact("usage_counted", map[string]any{
		"reported": dRep, "unreported": dUnrep, "provider_calls": calls,
		"calls_true_usage": reported, "calls_usage_below_generated_or_missing": unread, "calls_either": either,
		"counters": []string{u.reported.sel.String(), u.unread.sel.String()},
	})
	r.Check(what+": every settled request counted once (reported + unreported = the provider calls)",
		calls, dRep+dUnrep, dRep+dUnrep == calls)
	r.Check(what+": usage counted unreported for every response whose usage was missing or below what was generated, "+
		"and for none whose usage was true", fmt.Sprintf("%d–%d", unread, unread+either), dUnrep, dUnrep >= unread && dUnrep <= unread+either)
	r.Check(what+": usage counted reported for every response whose usage was true", fmt.Sprintf("%d–%d", reported, reported+either),
		dRep, dRep >= reported && dRep <= reported+either)
	return fmt.Sprintf("usage counted reported +%d, unreported +%d for %d calls (%d true, %d missing or below, %d either)",
		dRep, dUnrep, calls, reported, unread, either)
}
