package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/quotaqual/quotaqual/providerstub"
)

// runUsageAccountingBlackBox is usage-accounting for a gateway that does not render the
// scenario's own rule or offers no quota inspection: the one case that can be phrased in
// admissions on the run's rule, sent by application-b (the scenario's rule holds application-a
// only, and its capacity no case reaches shows no charge in an admission). A
// stream the client closes after reading capacity chunks has made the provider generate at least
// capacity − inFlightSlack tokens; charged at least that, it leaves less than one estimate of
// the budget, so the subject's next request is denied. A gateway that charges such a stream its
// estimate (it meters only the usage a provider reports at the end, which a cut stream never
// carries) admits it: the scenario fails, as it must.
func runUsageAccountingBlackBox(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	r.DecidedBy("admissions probed from outside", "the providers' call logs")
	why := "no quota inspection"
	if !env.hasOwnRule(usageAccountingRule) {
		why = "the gateway renders no rule of the scenario's (max_tokens estimation, a capacity no case reaches)"
	}
	r.NotMade("the oversized response, both provider errors, n > 1 and both output bounds are charged what the provider counted, "+
		"and settlements handed over together are none of them dropped", why+": on the run's rule those charges deny nothing a probe could see")
	r.NotMade("the cut stream is charged no more than generated + the input estimate, and exactly: only a lower bound shows in admissions", why)
	need := env.admitCost(env.Profile) // what the next request's admission adds before it compares
	stop := int(p.Capacity)
	if env.checksThenCharges() {
		// A check-then-charge gateway refuses only once the charge is past the capacity minus
		// its check's cost: read enough chunks that what certainly was generated is.
		stop = int(p.Capacity-need) + inFlightSlack + 1
	} else if p.Estimate <= inFlightSlack || p.Capacity < p.Estimate {
		return r.Error(fmt.Errorf("profile %s: estimate %d must exceed the in-flight slack %d and capacity %d must hold one estimate, or a cut stream's charge cannot show in an admission",
			p.Name, p.Estimate, inFlightSlack, p.Capacity))
	}
	tokens := max(400, 4*stop)
	r.Fact("rule", fmt.Sprintf("the run's rule: %d tokens reserved, capacity %d per %s", p.Estimate, p.Capacity, p.Window))
	if err := env.fixedWindowStart(ctx, r, env.Profile.Window, fixedWindowMargin); err != nil {
		return r.Error(err)
	}
	start := time.Now()
	before, err := env.settledProviders(ctx)
	if err != nil {
		return r.Error(fmt.Errorf("provider call logs before: %w", err))
	}
	const label = "stream-closed-mid-generation"
	o := env.Chat(ctx, ChatCall{Gateway: gwA, Label: label, Subject: appB, Stream: true, MaxTokens: -1, StopAfterChunks: stop,
		Metadata: map[string]string{providerstub.TokensMetadata: strconv.Itoa(tokens), providerstub.InterTokenMetadata: "5ms"}})
	r.Check(label+": answered 200", http.StatusOK, o.Status, o.Status == http.StatusOK)
	after, err := env.settledProviders(ctx)
	if err != nil {
		return r.Error(fmt.Errorf("provider call logs after: %w", err))
	}
	news := newRequests(before, after)
	pr, found := providerstub.CallRecord{}, len(news) == 1
	if found {
		pr = news[0]
	}
	if !r.Check(label+": the provider logged exactly this request", 1, len(news), found) {
		return r
	}
	r.Check(label+": the client left mid-generation", true, pr.ClientGone, pr.ClientGone)
	lo := pr.GeneratedTokens - inFlightSlack
	r.Fact(label, map[string]any{"status": o.Status, "prompt_tokens": pr.PromptTokens, "generated_tokens": pr.GeneratedTokens,
		"client_gone": pr.ClientGone, "chunks_read": stop})

	// The gateway settles off the response path once the provider's stream has ended; with no
	// inspection to poll, give it a bounded moment (several store round trips) before probing.
	if err := waitUntil(ctx, time.Now().Add(settleGrace(p.StoreTimeout))); err != nil {
		return r.Error(err)
	}
	next := env.Chat(ctx, ChatCall{Gateway: gwB, Label: "next-after-the-cut-stream", Subject: appB})
	r.Fact("charged_at_least_if_metered", lo)
	r.Check(fmt.Sprintf("%s: charged at least what the provider generated (≥ %d): the next request, needing %d of %d, is denied", label, lo, need, p.Capacity),
		http.StatusTooManyRequests, next.Status, lo+need <= p.Capacity || next.Status == http.StatusTooManyRequests)
	if lo+need <= p.Capacity {
		r.Error(fmt.Errorf("the provider generated only %d tokens before the client left: a charge of that size denies nothing, not decided", pr.GeneratedTokens))
	}
	if !env.inOneWindow(start, next.Start, p.Window) {
		r.Error(errors.New("a fixed window's boundary fell between the stream and the probe: not decided"))
	}
	if lo+need > p.Capacity && next.Admitted() {
		r.Key("a stream the client cut short after %d chunks (%d tokens generated) was not charged them: the next request was admitted on a budget of %d", stop, pr.GeneratedTokens, p.Capacity)
		return r
	}
	r.Key("a stream cut after %d chunks read (%d tokens generated); the next request (needs %d of %d) answered %d", stop, pr.GeneratedTokens, need, p.Capacity, next.Status)
	return r
}

// settleGrace is how long a black-box path waits for a gateway to settle a request whose
// provider call has ended, when no inspection can say it has: a few store round trips.
func settleGrace(storeTimeout time.Duration) time.Duration {
	return 200*time.Millisecond + 2*storeTimeout
}

// newRequests lists the requests that arrived at the providers between two snapshots taken
// with none in flight: the last entries of each log (it is bounded: counted by calls, not by
// its length).
func newRequests(before, after ProviderSnapshot) []providerstub.CallRecord {
	var out []providerstub.CallRecord
	for h, c := range after.ByHost {
		n := int(c.Calls - before.ByHost[h].Calls)
		if n > len(c.Requests) {
			n = len(c.Requests)
		}
		if n > 0 {
			out = append(out, c.Requests[len(c.Requests)-n:]...)
		}
	}
	return out
}
