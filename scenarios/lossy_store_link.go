package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
)

func init() { register(2290, lossyStoreLink) }

func lossyStoreLink() Scenario { return lossyStoreLinkRun{}.scenario() }

// lossyStoreLinkRun is one way to run lossy-store-link: only, when set, narrows its phases to
// those whose lever it names (a test proves the later phases on their own); nil runs them all.
type lossyStoreLinkRun struct {
	only []string
}

func (l lossyStoreLinkRun) scenario() Scenario {
	return Scenario{
		Name: "lossy-store-link",
		Summary: fmt.Sprintf("three faults in turn on gateway-a's store link while several subjects' requests run through both gateways: "+
			"%d %% packet loss, replies delayed near the store timeout (%d ± %d %% of it), and every reply lost while every write is applied "+
			"(store calls past the timeout, reserves and settlements that ran with their answer lost): "+
			"over-admission 0, no 5xx but the store-failure 503 within the store timeout plus a margin, each subject's "+
			"settled usage within what its admitted requests used and what its ambiguous reserves may hold, recovery after each heal; "+
			"then clients that leave while their reserve crosses a link delayed %d %% of the timeout: the subject that left charged only what "+
			"reached a provider, and the gateway's store-error counter (where declared) moved only by the store-failure answers clients got",
			lossyPercent, lossyLatency, lossyJitter, leavingLatency),
		Invariant: "fail closed in bounded time on an unreliable store link; an ambiguous reserve is released or charged at most its " +
			"estimate, a retried settlement charges once, and the hard gate holds; a client that leaves is no store failure and " +
			"costs nothing that reached no provider",
		Exclusive: "makes gateway-a's store link drop packets, delay replies and lose them, and reads gateway-wide counters",
		Lasts:     12 * time.Second,
		Needs:     []Need{NeedSharedStore, NeedLeases},
		BlackBox: "sees every answer and its time, the providers' calls, each subject's admitted usage per window from the history, " +
			"and the settled usage of each subject kept within its budget through one probe's remaining header after the heal; " +
			"needs no inspection, so it sees the same with it and without; cannot tell which store calls were " +
			"ambiguous, so the settled usage is judged against the bound the contract allows, not one exact value; reads the " +
			"gateway's store-error counter only where its profile declares it (capabilities.metrics: its own view of itself), " +
			"so a store error counted for a client that left is not seen from outside",
		Subjects: func(deployment.Profile) []string { return deployment.LoadSubjects(lossyStoreLinkSubjects) },
		Run:      l.run,
	}
}

// The load, for the quick profile (capacity 60, estimate 15, 500 ms store timeout, 4 s window).
// Loss of lossyPercent % in both directions: TCP's first retransmission waits at least 200 ms,
// so a call whose request or answer is lost twice passes the store timeout, and the client
// library may give up on a call the store has run. The cool subjects send lossyCoolRequests
// each (three estimates: within the capacity with room for the probe that reads them after the
// heal), half of them two through gateway-a, the other half two through gateway-b — whose
// charge leaves less room for a store failure's estimate, so a doubled settlement shows; the hot ones lossyHotRequests each, far past their
// budget, alternating gateways. Every request asks for exactly its estimate, so a settlement
// lost to the link (its hold charged the estimate at the lease's end) costs what it would have
// charged, and the settled usage is bounded by the history alone.
const (
	lossyPercent      = 50
	lossyCool         = 6
	lossyCoolRequests = 3
	lossyHot          = 2
	lossyHotRequests  = 12
	lossyBurst        = 800 * time.Millisecond
)

// lossyStoreLinkSubjects is how many load subjects (deployment.LoadSubject) the scenario sends
// as besides the three applications: 9 for each of its three faults (loss, latency, lost
// replies), 3 for clients leaving mid-reserve.
const lossyStoreLinkSubjects = 30

// lossySubject is the scenario's i-th subject (lossyStoreLinkSubjects of them: the cool ones,
// the hot ones, and one that probes the recovery).
func lossySubject(i int) string { return deployment.LoadSubject(i) }

// A lossyPhase is one fault the scenario pulls on gateway-a's store link, with its own
// subjects (lossyPerPhase of them) and the same load and checks. The phases after the first
// prefix their checks and facts with their lever's name.
type lossyPhase struct {
	lever  topology.Lever
	target topology.Target
	what   string // the fault, as the checks name it
	// name prefixes the phase's checks and facts, and names it to lossyStoreLinkRun.only; ""
	// is the lever's name.
	name string
	// leave: the phase is runLeavingPhase's (clients that leave mid-reserve), with
	// leavingSubjects subjects, not the load of lossyPerPhase.
	leave bool
	// decides: gateway-a still decides through the fault, so the burst waits for its first
	// decision (pulling a link lever resets its live store connection once, and its store
	// client reconnects through the proxy after a backoff — the burst is to meet the slow
	// link, not that reconnect).
	decides bool
}

// lossyPerPhase is how many subjects each phase sends as: the cool ones, the hot ones, and
// one that probes the recovery.
const lossyPerPhase = lossyCool + lossyHot + 1

// lossyPhases: packet loss (the kernel: TCP retransmits, calls delayed past the timeout);
// replies delayed near the store timeout (lossyLatency ± lossyJitter of it, so that an answer
// lands on either side of it — a call that times out has run in the store); and every reply
// lost, every write applied (a reserve taken, a settlement charged, a release made, each
// unanswered). The last two go through the userspace proxy of topology.LinkProxier.
func lossyPhases(p deployment.Profile) []lossyPhase {
	return []lossyPhase{
		{lever: topology.Loss, target: topology.Target{Host: gwA, Peer: topology.HostValkey, Percent: lossyPercent}, what: "the loss"},
		{lever: topology.StoreLatency, target: topology.Target{Host: gwA, Peer: topology.HostValkey,
			Latency: p.StoreTimeout * lossyLatency / 100, Jitter: p.StoreTimeout * lossyJitter / 100}, what: "the latency", decides: true},
		{lever: topology.StoreLostReplies, target: topology.Target{Host: gwA, Peer: topology.HostValkey}, what: "the lost replies"},
		{lever: topology.StoreLatency, target: topology.Target{Host: gwA, Peer: topology.HostValkey,
			Latency: p.StoreTimeout * leavingLatency / 100}, what: "clients leaving mid-reserve", name: leavingPhase, leave: true},
	}
}

// phaseName is what prefixes ph's checks and names it to lossyStoreLinkRun.only.
func (ph lossyPhase) phaseName() string {
	if ph.name != "" {
		return ph.name
	}
	return ph.lever.Name()
}

// subjects is how many of the scenario's subjects ph sends as.
func (ph lossyPhase) subjects() int {
	if ph.leave {
		return leavingSubjects
	}
	return lossyPerPhase
}

// The latency phase's delay and jitter, in percent of the store timeout (400 ± 150 ms of the
// quick profile's 500 ms, uniform): about one reply in six lands past the timeout on a live
// connection — a call the store ran whose answer the gateway gave up on. At 300 ± 100 ms no
// reply ever did (the phase then saw a 503 only while a connection was being re-established).
const (
	lossyLatency = 80
	lossyJitter  = 30
)

func (l lossyStoreLinkRun) run(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	if ok, why := topology.Loss.Available(env.Topo); !ok {
		return r.Error(fmt.Errorf("%s: %w", why, topology.ErrUnsupported))
	}
	phases := lossyPhases(p)
	n := 0
	for _, ph := range phases {
		n += ph.subjects()
	}
	if n > lossyStoreLinkSubjects {
		return r.Error(fmt.Errorf("lossy-store-link sends as %d subjects, the deployment has credentials for %d (lossyStoreLinkSubjects)", n, lossyStoreLinkSubjects))
	}
	if (lossyCoolRequests+1)*p.Estimate > p.Capacity || lossyHotRequests/2*p.Estimate <= p.Capacity {
		return r.Error(fmt.Errorf("profile %s: lossy-store-link is sized for %d requests and a probe within the capacity and %d past it on one gateway (capacity %d, estimate %d)",
			p.Name, lossyCoolRequests, lossyHotRequests/2, p.Capacity, p.Estimate))
	}
	var keys []string
	first := 0
	for i, ph := range phases {
		from := first
		first += ph.subjects()
		if l.only != nil && !slices.Contains(l.only, ph.phaseName()) {
			continue
		}
		if ok, why := ph.lever.Available(env.Topo); !ok {
			r.NotMade(ph.what+" on gateway-a's store link ("+ph.lever.Name()+")", why)
			continue
		}
		a, f := len(r.assertions), len(r.facts)
		run := runLossyPhase
		if ph.leave {
			run = runLeavingPhase
		}
		key, ok := run(ctx, env, r, ph, from)
		if i > 0 {
			r.prefixSince(a, f, ph.phaseName()+": ")
		}
		keys = append(keys, key)
		if !ok {
			break
		}
	}
	if !env.inspects() {
		// Every check here reads the request history, the providers' counts and a probe's
		// remaining header, with inspection or without: say so on the black-box path.
		r.DecidedBy("the request history", "the providers' call counts", "a probe's remaining header after the heal")
	}
	r.Key("%s", strings.Join(keys, "; "))
	return r
}

// runLossyPhase sends the load as subjects first … first+lossyPerPhase−1 while ph's fault is
// held on gateway-a's store link, heals it, and checks the history. ok false: an operational
// error ended the phase (recorded on r), and no later phase runs.
func runLossyPhase(ctx context.Context, env *Env, r *Result, ph lossyPhase, first int) (key string, ok bool) {
	p := env.Profile
	subject := func(i int) string { return lossySubject(first + i) }
	want := env.gateway().Expect.StoreFailure
	// max_tokens such that the provider generates exactly the estimate (it honours max_tokens
	// under the configured generation): a held estimate and a settled usage are then equal.
	maxTokens := max(1, p.Estimate-chatUsage(p, 1).PromptTokens)

	// The plan: the even cool subjects visit a, b, a, the odd ones b, a, b; hot subject j
	// alternates from a or b. Interleaved so that every subject's requests spread over the
	// whole burst.
	var plan []loadRequest
	for k := 0; k < max(lossyCoolRequests, lossyHotRequests); k++ {
		for i := 0; i < lossyCool && k < lossyCoolRequests; i++ {
			plan = append(plan, loadRequest{Subject: subject(i), Gateway: []string{gwA, gwB}[(k+i)%2]})
		}
		for j := 0; j < lossyHot && k < lossyHotRequests; j++ {
			plan = append(plan, loadRequest{Subject: subject(lossyCool + j), Gateway: []string{gwA, gwB}[(k+j)%2]})
		}
	}
	r.Fact("fault", fmt.Sprintf("%s %s; store timeout %s", ph.lever.Name(), describeLink(ph.target), p.StoreTimeout))
	r.Fact("usage_per_request", chatUsage(p, maxTokens).TotalTokens)
	r.Fact("subjects", fmt.Sprintf("%d within their budget (%d requests each), %d past it (%d each)", lossyCool, lossyCoolRequests, lossyHot, lossyHotRequests))
	before, ok := env.readProviders(ctx, r, "provider call counts before")
	if !ok {
		return "", false
	}

	env.Progressf("%s: %s", ph.lever.Name(), describeLink(ph.target))
	heal, err := env.pull(ctx, ph.lever, ph.target)
	if err != nil {
		r.Error(fmt.Errorf("%s between %s and the store: %w", ph.lever.Name(), gwA, err))
		return "", false
	}
	defer healOnExit(r, heal)

	warmed := 0 // the provider calls of that first decision
	if ph.decides {
		w := env.awaitRecovery(ctx, gwA, subject(lossyCool+lossyHot), time.Now(), Outcome.Admitted)
		if w.got.Admitted() {
			warmed = 1
		}
		r.Fact("first_decision_through_the_fault", fmt.Sprintf("%v after %s (%v)", w.statuses, w.elapsed.Round(time.Millisecond), w.err))
	}

	// Open loop: each request leaves on its schedule, whatever the answers to the earlier ones.
	every := lossyBurst / time.Duration(len(plan))
	start := time.Now().Add(50 * time.Millisecond)
	var wg sync.WaitGroup
	sent := 0
	for k := range plan {
		at := start.Add(time.Duration(k) * every)
		if err := waitUntil(ctx, at); err != nil {
			break
		}
		plan[k].Scheduled = at
		sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			plan[k].Outcome = env.Chat(ctx, ChatCall{Gateway: plan[k].Gateway, Label: fmt.Sprintf("lossy-%d", k+1), Subject: plan[k].Subject, MaxTokens: maxTokens})
		}()
	}
	wg.Wait()
	plan = plan[:sent]

	env.Progressf("healing the link")
	healedAt := time.Now()
	if err := heal(); err != nil {
		r.Error(err)
		return "", false
	}

	// The answers, from the history.
	slo := p.StoreTimeout + p.OutageSLO
	var admitted, denied, failed int
	var slow, wrong, cleanFailed, overCharged []string
	var failMs []float64
	for _, q := range plan {
		switch {
		case q.Admitted():
			admitted++
			if c := charge(q.Outcome, p.Estimate); c > p.Estimate {
				overCharged = append(overCharged, fmt.Sprintf("%s %s: %d", q.Subject, q.RequestID, c))
			}
		case q.Status == http.StatusTooManyRequests:
			denied++
		case q.Status == want.Status && (want.ErrorType == "" || q.ErrorType == want.ErrorType):
			failed++
			failMs = append(failMs, ms(q.Latency))
			if q.Latency > slo {
				slow = append(slow, fmt.Sprintf("%s %s: %s", q.Gateway, q.Subject, q.Latency.Round(time.Millisecond)))
			}
			if q.Gateway != gwA {
				cleanFailed = append(cleanFailed, fmt.Sprintf("%s %s", q.Gateway, q.Subject))
			}
		default:
			wrong = append(wrong, fmt.Sprintf("%s %s: %d %s", q.Gateway, q.Subject, q.Status, q.ErrorType))
		}
	}
	r.Fact("answers", map[string]int{"200": admitted, "429": denied, fmt.Sprint(want.Status): failed, "other": len(wrong)})
	r.Fact("store_failure_decision_ms", failMs)
	r.Check("every answer is 200, 429 or the store-failure answer (no other 5xx, none missing)",
		fmt.Sprintf("200, 429 or %d %s", want.Status, want.ErrorType), wrong, len(wrong) == 0)
	if ph.decides && failed == 0 {
		// Replies delayed below the store timeout fail a call only when its round trips add
		// up past it: some runs see none (a clean-clone CI run saw 0 of 42). Nothing failed,
		// so the store-failure checks have nothing to judge; the other checks still decide.
		r.NotMade(ph.what+" failed some of gateway-a's store calls (a store-failure answer)",
			"no store call outlasted the timeout through the delayed replies in this run")
	} else {
		r.Check(ph.what+" failed some of gateway-a's store calls (a store-failure answer)", "≥ 1", failed, failed > 0)
	}
	r.Check("every store-failure answer decided within store timeout + margin", "≤ "+slo.String(), slow, len(slow) == 0)
	r.Check("no store-failure answer from a gateway whose store link is clean", "none", cleanFailed, len(cleanFailed) == 0)
	r.Check("every admitted response used no more than its estimate (so admitted usage is what the gate held)",
		fmt.Sprintf("≤ %d tokens each", p.Estimate), overCharged, len(overCharged) == 0)
	if after, err := env.settledProviders(ctx); err != nil {
		r.Error(fmt.Errorf("provider call counts after: %w", err))
	} else {
		d := TotalDelta(before, after)
		r.Check("only admitted requests reached a provider (provider calls == admitted)", admitted+warmed, d, d == int64(admitted+warmed))
	}

	bySubject := map[string][]loadRequest{}
	for _, q := range plan {
		bySubject[q.Subject] = append(bySubject[q.Subject], q)
	}
	var over, spurious []string
	for i := range lossyCool + lossyHot {
		s := subject(i)
		if excess, at := overAdmission(bySubject[s], p.Window, p.Capacity, p.Estimate); excess > 0 {
			over = append(over, fmt.Sprintf("%s: %d tokens over %d in the window from %s", s, excess, p.Capacity, at.Format("15:04:05.000")))
		}
		if i < lossyCool {
			for _, q := range bySubject[s] {
				if q.Status == http.StatusTooManyRequests {
					spurious = append(spurious, fmt.Sprintf("%s via %s", s, q.Gateway))
				}
			}
		}
	}
	r.Check("no subject over-admitted: admitted usage within any window-long stretch of the history ≤ capacity",
		"0 tokens over, every subject", over, len(over) == 0)
	r.Check("no subject within its budget was denied (a store error is not a quota denial)", "none", spurious, len(spurious) == 0)

	charged := env.lossySettled(ctx, r, bySubject, subject)

	rec := env.awaitRecovery(ctx, gwA, subject(lossyCool+lossyHot), healedAt, Outcome.Admitted)
	r.Fact("recovery_statuses", rec.statuses)
	rec.check(r, "admission recovered on gateway-a within RecoveryMax of the heal", p.RecoveryMax)
	return fmt.Sprintf("%s: %d requests, %d admitted, %d denied, %d %d (slowest %s); over-admission %d subjects; %s",
		ph.lever.Name(), len(plan), admitted, denied, failed, want.Status, durAtMost(maxMs(failMs), "SLO", slo), len(over), charged), true
}

// describeLink renders a link fault's target: "gateway-a–valkey 50 %", "… +400ms ±100ms".
func describeLink(t topology.Target) string {
	s := t.Host + "–" + t.Peer
	if t.Percent != 0 {
		s += fmt.Sprintf(" %d %% loss both ways", t.Percent)
	}
	if t.Latency != 0 {
		s += fmt.Sprintf(" replies +%s", t.Latency)
	}
	if t.Jitter != 0 {
		s += fmt.Sprintf(" ±%s", t.Jitter)
	}
	return s
}

// lossySettled reads each cool subject's charge (settled plus still held) through one probe's
// remaining header on gateway-b, and checks it against the history. For a subject of admitted
// requests with usage u each, estimate e, and f store-failure answers:
//
//	counted ≤ charge ≤ counted + Σ(e − u) + f·e
//
// counted, the usage its admitted requests generated: each is settled at its usage u, or — its
// settlement failed every attempt, as it does on this link — held to its lease and then charged
// e ≥ u (the e − u of each admitted request is the bound's slack beside f·e; the requests ask
// for exactly e, so it is 0 unless a provider generated less); never less (nothing lost), and a
// settlement retried after a lost reply charges once (settle is idempotent by reservation id). f·e: a reserve that failed may have run with its answer lost;
// the gateway releases it (settles its id at zero) and, should every release attempt fail, its
// lease runs out at the estimate — never more. The probe must read within the window of the
// subject's first admission, or a charge could have aged out: a late probe is an error.
func (env *Env) lossySettled(ctx context.Context, r *Result, bySubject map[string][]loadRequest, subject func(int) string) string {
	p := env.Profile
	h := env.gateway().Expect.QuotaHeaders.Remaining
	if h == "" {
		r.NotMade("each subject's settled usage within the bound", "the gateway's profile names no remaining header")
		return "settled usage not read"
	}
	// Settlements in flight at the heal retry on a link that answers again.
	if err := waitUntil(ctx, time.Now().Add(p.StoreTimeout+300*time.Millisecond)); err != nil {
		r.Error(err)
		return "settled usage not read"
	}
	var outside []string
	extra := int64(0)
	for i := range lossyCool {
		s := subject(i)
		var counted, f, slack int64
		first := time.Time{}
		for _, q := range bySubject[s] {
			if q.Admitted() {
				c := charge(q.Outcome, p.Estimate)
				counted += c
				slack += max(0, p.Estimate-c)
			} else if q.Status != http.StatusTooManyRequests {
				f++
			}
			if first.IsZero() || q.Start.Before(first) {
				first = q.Start
			}
		}
		o := env.Chat(ctx, ChatCall{Gateway: gwB, Label: "settled-probe", Subject: s})
		if o.End.After(first.Add(p.Window)) {
			r.Error(fmt.Errorf("the probe of %s read %s after its first request, past the %s window: its charges may have aged out", s, o.End.Sub(first).Round(time.Millisecond), p.Window))
			continue
		}
		if !o.Admitted() {
			outside = append(outside, fmt.Sprintf("%s: the probe answered %d (counted %d, %d store failures)", s, o.Status, counted, f))
			continue
		}
		rem, err := strconv.ParseInt(headerOf(o.Headers, h), 10, 64)
		if err != nil {
			r.Error(fmt.Errorf("the probe's %s is %q: %w", h, headerOf(o.Headers, h), err))
			continue
		}
		got := p.Capacity - p.Estimate - rem
		extra += max(0, got-counted)
		if hi := counted + slack + f*p.Estimate; got < counted || got > hi {
			outside = append(outside, fmt.Sprintf("%s: charged %d, generated %d, %d store failures (allowed %d–%d)", s, got, counted, f, counted, hi))
		}
	}
	r.Fact("charged_above_generated_tokens", extra)
	r.Check("each subject within its budget charged what it generated, plus at most an estimate per ambiguous reserve (read from a probe's "+h+")",
		"generated ≤ charged ≤ generated + Σ(estimate − usage) + failures × estimate", outside, len(outside) == 0)
	return fmt.Sprintf("subjects within their budget charged %d tokens above what they generated (an estimate per 503 allowed)", extra)
}

// maxMs is the largest of ms milliseconds, as a duration.
func maxMs(ms []float64) time.Duration {
	worst := 0.0
	for _, m := range ms {
		worst = max(worst, m)
	}
	return time.Duration(worst * float64(time.Millisecond))
}
