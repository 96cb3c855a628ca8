package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/topology"
)

// gateway-pause's second part: a gateway frozen right after it admitted a request and thawed
// just short of that request's lease. Its hold must still be live when the thawed gateway
// settles it (a hold ends no earlier than its last renewal + lease, and the reserve is a
// renewal no earlier than the request was sent), so the request is charged the usage the
// provider counted — below its estimate — and not the estimate a hold that ran out is charged.
//
// This judges the lease's end to a quarter of a second, where the first admission after a
// crash (gateway-crash) sees it only through a window's one-second buckets: a store clock read
// in whole seconds (the scripts' now up to 999 ms behind the store's TIME, so every deadline
// now + lease up to a second early) passes there and fails here. One hold cannot catch it
// every time: its deadline is early by the store clock's fraction of a second at the reserve,
// which is below the slack a quarter of the time. So two holds, one on each of two gateways,
// are reserved half a second apart, and on any clock one of them falls in the second's latter
// half: early by more than the slack. The store's clock is never read (a foreign store's
// phase is unknown); the stagger is what makes the catch independent of it.
const (
	// thawSlack is how long before the hold can end (sent + lease) the gateway is thawed:
	// the thawed gateway's first store call (the overdue renewal, or the settlement of the
	// response the provider sent meanwhile) must reach the store within it.
	thawSlack = 250 * time.Millisecond
	// thawStagger is between the two holds' sends: half a second, so their phases in any
	// clock's second are half a second apart.
	thawStagger = 500 * time.Millisecond
	// thawTokens is each frozen request's completion: its usage stays below the estimate, so a
	// kept hold is charged less than one that ran out.
	thawTokens = 2
)

// thawRound is one frozen request: its gateway, its subject, and when it was sent, its
// gateway frozen and thawed.
type thawRound struct {
	gateway, subject     string
	sent, paused, thawed time.Time
	thawDone             time.Time // when the resume lever returned: the gateway runs again
	resume               func() error
	out                  Outcome
}

// pauseShortOfLease freezes each of two gateways right after it admitted a request (the two
// half a second apart), thaws each thawSlack before its request's send + lease, and checks that
// each request was charged its usage: its hold was kept. It returns its part of the key fact.
func (env *Env) pauseShortOfLease(ctx context.Context, r *Result) string {
	p := env.Profile
	const notMade = "a gateway frozen right after an admission and thawed just short of the lease keeps its hold (charged the usage, not the estimate)"
	gws := env.gateways()
	switch {
	case len(gws) < 2:
		r.NotMade(notMade, fmt.Sprintf("%d gateway: the two staggered holds need two", len(gws)))
		return "not thawed short of the lease (one gateway)"
	case !env.leaseStated():
		r.NotMade(notMade, "the gateway's profile does not render the run's lease: the lease its holds must keep is unknown")
		return "not thawed short of the lease (lease unknown)"
	case !env.inspects() && env.gateway().Expect.QuotaHeaders.Remaining == "":
		r.NotMade(notMade, "no quota inspection and no remaining header: a request's charge cannot be read")
		return "not thawed short of the lease (no charge to read)"
	}
	if !env.inspects() {
		r.DecidedBy("each thawed request's charge read from a probe's remaining header")
	}
	hold := p.Lease / 2 // the provider answers while its gateway is frozen: the settlement is due at the thaw
	if hold <= thawStagger || p.Lease-thawSlack <= hold {
		r.Error(fmt.Errorf("profile %s: a lease of %s leaves no time to freeze a gateway after a %s stagger and thaw it %s short of the lease", p.Name, p.Lease, thawStagger, thawSlack))
		return "thawed short of the lease: not completed"
	}
	rounds := []*thawRound{{gateway: gws[0], subject: appB}, {gateway: gws[1], subject: appC}}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer func() {
		for _, rd := range rounds {
			if rd.resume != nil {
				healOnExit(r, rd.resume)
			}
		}
	}()
	start := time.Now()
	for i, rd := range rounds {
		if err := waitUntil(ctx, start.Add(time.Duration(i)*thawStagger)); err != nil {
			r.Error(err)
			return "thawed short of the lease: not completed"
		}
		env.Progressf("freezing %s right after it admits a request", rd.gateway)
		rd.sent = time.Now() // no later than the request leaves: its reserve is no earlier
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd.out = env.Chat(ctx, ChatCall{Gateway: rd.gateway, Label: fmt.Sprintf("frozen-short-of-lease-%d", i+1), Subject: rd.subject, MaxTokens: -1,
				Hold: hold, NoTransportRetry: true, Metadata: map[string]string{providerstub.TokensMetadata: strconv.Itoa(thawTokens)}})
		}()
		if err := env.waitInFlight(ctx, int64(i+1)); err != nil {
			r.Error(fmt.Errorf("waiting for %s's request to reach a provider: %w", rd.gateway, err))
			return "thawed short of the lease: not completed"
		}
		resume, err := env.pull(ctx, topology.Pause, topology.Target{Host: rd.gateway})
		if err != nil {
			r.Error(fmt.Errorf("pausing %s: %w", rd.gateway, err))
			return "thawed short of the lease: not completed"
		}
		rd.paused, rd.resume = time.Now(), resume
	}
	for _, rd := range rounds {
		if err := waitUntil(ctx, rd.sent.Add(p.Lease-thawSlack)); err != nil {
			r.Error(err)
			return "thawed short of the lease: not completed"
		}
		env.Progressf("thawing %s %s before its request's lease can end", rd.gateway, thawSlack)
		rd.thawed = time.Now()
		healOnExit(r, rd.resume)
		rd.thawDone = time.Now()
	}
	wg.Wait()
	return env.judgeThaws(ctx, r, rounds, start)
}

// judgeThaws checks each thawed request's charge: its usage (below the estimate), read once
// the providers are idle. The fact keeps how long the part took, from the first send.
func (env *Env) judgeThaws(ctx context.Context, r *Result, rounds []*thawRound, start time.Time) string {
	p := env.Profile
	after, err := env.settledProviders(ctx)
	if err != nil {
		r.Error(fmt.Errorf("provider call logs after the thaws: %w", err))
		return "thawed short of the lease: not completed"
	}
	facts := make([]map[string]any, len(rounds))
	charges := make([]string, len(rounds))
	for i, rd := range rounds {
		o := rd.out
		facts[i] = map[string]any{"gateway": rd.gateway, "sent_after_first_ms": ms(rd.sent.Sub(rounds[0].sent)),
			"paused_after_send_ms": ms(rd.paused.Sub(rd.sent)), "thawed_after_send_ms": ms(rd.thawed.Sub(rd.sent)), "status": o.Status}
		charges[i] = fmt.Sprintf("%s's request %s, its charge not read", rd.gateway, tally([]int{o.Status}))
		r.Check(fmt.Sprintf("%s's request frozen short of its lease completed after the thaw", rd.gateway), http.StatusOK, o.Status, o.Admitted())
		_, pr, found := after.FindRequest(o.RequestID)
		if !o.Admitted() || !found {
			continue
		}
		usage := pr.Consumed()
		facts[i]["usage"] = usage
		if usage >= p.Estimate {
			r.Error(fmt.Errorf("%s's request used %d, not below the estimate %d: a kept hold's charge cannot be told from one that ran out", rd.gateway, usage, p.Estimate))
			continue
		}
		settled, how, err := env.settledOf(ctx, rd.subject, usage)
		if err != nil {
			r.Error(fmt.Errorf("%s's charge after the thaw: %w", rd.subject, err))
			continue
		}
		facts[i]["settled"] = settled
		facts[i]["thaw_returned_after_send_ms"] = ms(rd.thawDone.Sub(rd.sent))
		if late := rd.thawDone.Sub(rd.sent.Add(p.Lease - thawSlack)); settled != usage && late > thawSlack/2 {
			// The lever itself ate most of the slack (a loaded machine, a slow container API):
			// a hold charged the estimate then says nothing of where the lease ends. A kept
			// hold is still judged below, late thaw or not.
			r.NotMade(fmt.Sprintf("%s's hold kept through a thaw short of the lease", rd.gateway),
				fmt.Sprintf("the resume returned %s past its moment, more than half the %s slack: charged %d for usage %d, which a lease ending on time also gives", late.Round(time.Millisecond), thawSlack, settled, usage))
			charges[i] = fmt.Sprintf("%s's charged %d for usage %d, thawed %s late (not judged)", rd.gateway, settled, usage, late.Round(time.Millisecond))
			continue
		}
		r.Check(fmt.Sprintf("%s's request, its gateway frozen right after the admission and thawed %s before send + lease: the hold was kept "+
			"(a hold ends no earlier than its last renewal + lease) — charged the usage the provider counted, not the estimate a hold that ran out is charged (%s)",
			rd.gateway, thawSlack, how), fmt.Sprintf("%d (estimate %d)", usage, p.Estimate), settled, settled == usage)
		charges[i] = fmt.Sprintf("%s's charged %d for usage %d", rd.gateway, settled, usage)
	}
	r.Fact("thawed_short_of_lease", map[string]any{"holds": facts, "elapsed_ms": ms(time.Since(start))})
	return fmt.Sprintf("thawed %s short of the lease, sent %s apart: %s", thawSlack, rounds[1].sent.Sub(rounds[0].sent).Round(time.Millisecond),
		strings.Join(charges, ", "))
}
