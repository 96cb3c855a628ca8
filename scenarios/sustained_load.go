package scenarios

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/internal/quantile"
)

func init() { register(2300, sustainedLoad) }

// SustainedLoadName is the scenario's name (internal/loadknee runs it alone); it sends as the
// three applications and sustainedLoadSubjects load subjects (deployment.LoadSubject).
const (
	SustainedLoadName     = "sustained-load"
	sustainedLoadSubjects = 200
)

// sustainedLoad drives many subjects through both gateways at a fixed open-loop rate (each
// request leaves on its schedule, whatever the answers to the earlier ones), a tenth of them
// well past their budget, and judges the hard gate from the recorded history alone — never
// from the gateways' own counters.
func sustainedLoad() Scenario {
	return Scenario{
		Name: SustainedLoadName,
		Summary: fmt.Sprintf("%d subjects across both gateways at a fixed open-loop rate, a tenth of them well past their budget: "+
			"no subject over-admitted in any window, no 5xx", sustainedLoadSubjects),
		Invariant: "hard gate under load: per subject, the usage admitted within any window-long stretch of the recorded history ≤ capacity; " +
			"no 5xx; denials reach no provider; a subject within its budget is never denied",
		Exclusive:    "drives the machine at a fixed rate: its latencies, and the timing of any scenario beside it, must each be their own",
		WholeMachine: true,
		Profiles:     []string{"reference"},
		BlackBox: "sees every answer of the load and the providers' calls, and judges each subject's admitted usage per " +
			"window from the recorded history; it reads no gateway counter, so it sees the same with inspection and without",
		Subjects: func(deployment.Profile) []string { return deployment.LoadSubjects(sustainedLoadSubjects) },
		Run:      runSustainedLoad,
	}
}

// loadPlan is who gets request k and through which gateway: the even requests go to the hot
// subjects (every tenth), the odd ones to the rest, each group in turn; each subject alternates
// gateways from one of its requests to the next, and neighbours start on different ones.
type loadPlan struct {
	hot, cool []string
	gateways  []string // each subject's visits go round these in turn
}

func newLoadPlan(gateways []string) loadPlan {
	p := loadPlan{gateways: gateways}
	for i := range sustainedLoadSubjects {
		if i%10 == 0 {
			p.hot = append(p.hot, deployment.LoadSubject(i))
		} else {
			p.cool = append(p.cool, deployment.LoadSubject(i))
		}
	}
	return p
}

func (p loadPlan) subject(k int) (subject, gateway string) {
	group := p.cool
	if k%2 == 0 {
		group = p.hot
	}
	i, visit := (k/2)%len(group), (k/2)/len(group)
	return group[i], p.gateways[(i+visit)%len(p.gateways)]
}

// SustainedLoad is sustained-load's open loop: Rate requests a second, each sent on its
// schedule whatever the answers, for For. Env.Load sets it (quotaqual load steps the rate);
// unset, the run's profile's (sustainedLoads).
type SustainedLoad struct {
	Rate int
	For  time.Duration
}

// sustainedLoads is the load on each profile: short on quick, so asking for it costs seconds (a
// quick window still sees each hot subject past its budget); twice as long on reference, where
// it runs by default.
var sustainedLoads = map[string]SustainedLoad{
	"quick":     {Rate: 100, For: 5 * time.Second},
	"reference": {Rate: 100, For: 10 * time.Second},
}

// sustainedLoad is the load this run drives: Env.Load, else the profile's.
func (env *Env) sustainedLoad() (SustainedLoad, error) {
	if env.Load != nil {
		return *env.Load, nil
	}
	l, ok := sustainedLoads[env.Profile.Name]
	if !ok || l.Rate <= 0 || l.For <= 0 {
		return l, fmt.Errorf("profile %s has no sustained rate and duration: give it an entry in sustainedLoads (scenarios/sustained_load.go)", env.Profile.Name)
	}
	return l, nil
}

// loadRequest is one request of the load: its schedule and what came back.
type loadRequest struct {
	Subject, Gateway string
	Scheduled        time.Time
	Outcome
}

func runSustainedLoad(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	load, err := env.sustainedLoad()
	if err != nil {
		return r.Error(err)
	}
	plan := newLoadPlan(env.gateways())
	total := int(load.For.Seconds() * float64(load.Rate))
	every := time.Second / time.Duration(load.Rate)
	before, ok := env.readProviders(ctx, r, "provider call counts before")
	if !ok {
		return r
	}

	env.Progressf("%d requests at %d/s for %s to %d subjects (%d driven past their budget)",
		total, load.Rate, load.For, sustainedLoadSubjects, len(plan.hot))
	reqs := make([]loadRequest, total)
	var wg sync.WaitGroup
	start := time.Now().Add(50 * time.Millisecond)
	sent := 0
	for k := range reqs {
		at := start.Add(time.Duration(k) * every)
		if err := waitUntil(ctx, at); err != nil {
			break
		}
		subject, gw := plan.subject(k)
		reqs[k] = loadRequest{Subject: subject, Gateway: gw, Scheduled: at}
		sent++
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs[k].Outcome = env.Chat(ctx, ChatCall{Gateway: reqs[k].Gateway, Label: fmt.Sprintf("load-%d", k+1), Subject: reqs[k].Subject})
		}()
	}
	wg.Wait()
	reqs = reqs[:sent]
	after, err := env.settledProviders(ctx)
	if err != nil {
		return r.Error(fmt.Errorf("provider call counts after: %w", err))
	}
	judgeSustainedLoad(r, env.checksThenCharges(), p, load, plan, reqs, TotalDelta(before, after), after)
	return r
}

// judgeSustainedLoad records the load's facts and decides it from the history.
func judgeSustainedLoad(r *Result, ctc bool, p deployment.Profile, load SustainedLoad, plan loadPlan, reqs []loadRequest, providerCalls int64, providers ProviderSnapshot) {
	var admitted, denied, unavailable, other5xx, noAnswer, otherStatus int
	var admitLat, denyLat, lag []time.Duration
	for _, q := range reqs {
		lag = append(lag, q.Start.Sub(q.Scheduled))
		switch s := q.Status; {
		case s == http.StatusOK:
			admitted++
			admitLat = append(admitLat, q.Latency)
		case s == http.StatusTooManyRequests:
			denied++
			denyLat = append(denyLat, q.Latency)
		case s == http.StatusServiceUnavailable:
			unavailable++
		case s >= 500:
			other5xx++
		case s == 0:
			noAnswer++
		default:
			otherStatus++
		}
	}
	if len(reqs) == 0 {
		r.Check("the load was sent", "requests", 0, false)
		return
	}
	span := reqs[len(reqs)-1].Start.Sub(reqs[0].Start)
	rate := 0.0
	if span > 0 {
		rate = float64(len(reqs)-1) / span.Seconds()
	}
	r.Fact("subjects", fmt.Sprintf("%d (%d driven past their budget)", len(plan.hot)+len(plan.cool), len(plan.hot)))
	r.Fact("requests", len(reqs))
	r.Fact("rate_target_per_s", load.Rate)
	r.Fact("rate_sustained_per_s", math.Round(rate*10)/10)
	r.Fact("send_lag_behind_schedule_ms", map[string]float64{"p50": ms(quantile.Of(lag, 0.5)), "p99": ms(quantile.Of(lag, 0.99)), "max": ms(quantile.Of(lag, 1))})
	r.Fact("answers", map[string]int{"200": admitted, "429": denied, "503": unavailable, "other 5xx": other5xx, "no answer": noAnswer, "other": otherStatus})
	r.Fact("admission_latency_ms", map[string]float64{"p50": ms(quantile.Of(admitLat, 0.5)), "p99": ms(quantile.Of(admitLat, 0.99))})
	r.Fact("denial_latency_ms", map[string]float64{"p50": ms(quantile.Of(denyLat, 0.5)), "p99": ms(quantile.Of(denyLat, 0.99))})
	overhead := gatewayOverhead(reqs, providers)
	r.Fact("gateway_overhead_ms", map[string]float64{"p50": ms(quantile.Of(overhead, 0.5)), "p99": ms(quantile.Of(overhead, 0.99)), "requests": float64(len(overhead))})

	r.Check("no 5xx (503 included) under the load", 0, unavailable+other5xx, unavailable+other5xx == 0)
	r.Check("every request got an HTTP answer", 0, noAnswer, noAnswer == 0)
	r.Check("every answer is 200 or 429", 0, otherStatus, otherStatus == 0)
	r.Check("denials reached no provider (provider calls == admitted)", admitted, providerCalls, providerCalls == int64(admitted))

	// Over-admission per subject per window, from the history alone.
	bySubject := map[string][]loadRequest{}
	var overCharged []string
	for _, q := range reqs {
		bySubject[q.Subject] = append(bySubject[q.Subject], q)
		if q.Admitted() && charge(q.Outcome, p.Estimate) > p.Estimate {
			overCharged = append(overCharged, fmt.Sprintf("%s %s: %d", q.Subject, q.RequestID, charge(q.Outcome, p.Estimate)))
		}
	}
	r.Check("every admitted response used no more than its estimate (so admitted usage is what the gate held)",
		fmt.Sprintf("≤ %d tokens each", p.Estimate), overCharged, len(overCharged) == 0)
	var over, spurious, neverDenied []string
	worst := int64(0)
	for _, s := range append(append([]string(nil), plan.hot...), plan.cool...) {
		hist := bySubject[s]
		if excess, at := overAdmission(hist, p.Window, p.Capacity, p.Estimate); excess > 0 {
			over = append(over, fmt.Sprintf("%s: %d tokens over %d in the window from %s", s, excess, p.Capacity, at.Format("15:04:05.000")))
			worst = max(worst, excess)
		}
		n429 := 0
		for _, q := range hist {
			if q.Status == http.StatusTooManyRequests {
				n429++
			}
		}
		// Within its budget even if every request held its full estimate at once: no rule
		// may deny it.
		if int64(len(hist))*p.Estimate <= p.Capacity && n429 > 0 {
			spurious = append(spurious, fmt.Sprintf("%s: %d of %d denied", s, n429, len(hist)))
		}
		if slices.Contains(plan.hot, s) && n429 == 0 {
			neverDenied = append(neverDenied, fmt.Sprintf("%s (%d requests)", s, len(hist)))
		}
	}
	r.Fact("over_admission_worst_tokens", worst)
	r.Check("no subject over-admitted: admitted usage within any window-long stretch of the history ≤ capacity",
		"0 tokens over, every subject", over, len(over) == 0)
	r.Check("no subject within its budget (requests × estimate ≤ capacity) was denied", "none", spurious, len(spurious) == 0)
	r.Check("every subject driven past its budget was denied (the load reached the gate)", "all denied at least once", neverDenied, len(neverDenied) == 0)
	if len(over) > 0 {
		why := ""
		if ctc {
			why = ": each request is admitted on the usage already charged, so the one that crosses the budget is let through"
		}
		r.Key("over-admitted up to %d tokens in one window for %d of %d subjects under %d requests at %.0f/s%s",
			worst, len(over), len(plan.hot)+len(plan.cool), len(reqs), rate, why)
		return
	}
	r.Key("%d requests at %.0f/s (target %d) to %d subjects: %d admitted, %d denied, %d 503; over-admission %d tokens; admission p50/p99 %.1f/%.1f ms, gateway overhead p50/p99 %.1f/%.1f ms",
		len(reqs), rate, load.Rate, len(plan.hot)+len(plan.cool), admitted, denied, unavailable, worst,
		ms(quantile.Of(admitLat, 0.5)), ms(quantile.Of(admitLat, 0.99)), ms(quantile.Of(overhead, 0.5)), ms(quantile.Of(overhead, 0.99)))
}

// overAdmission returns by how many tokens the usage admitted to one subject within a window
// exceeded capacity (0 when never), and where that window starts. A set of admitted requests
// counts together when every one was sent at or after the first one's send time and answered
// before that time plus the window: each was then admitted within one window of every other,
// and the last of them admitted saw all the others held (reserved at their estimate) or
// settled (at their usage, never aged out early). So a correct gate keeps their usage within
// capacity, as long as no response used more than its estimate (checked apart).
func overAdmission(hist []loadRequest, window time.Duration, capacity, estimate int64) (excess int64, at time.Time) {
	var adm []loadRequest
	for _, q := range hist {
		if q.Admitted() {
			adm = append(adm, q)
		}
	}
	sort.Slice(adm, func(i, j int) bool { return adm[i].Start.Before(adm[j].Start) })
	for i, first := range adm {
		end := first.Start.Add(window)
		var sum int64
		for _, q := range adm[i:] {
			if q.Start.After(end) {
				break
			}
			if q.End.Before(end) {
				sum += charge(q.Outcome, estimate)
			}
		}
		if sum-capacity > excess {
			excess, at = sum-capacity, first.Start
		}
	}
	return excess, at
}

// gatewayOverhead is, per admitted request the providers logged, what the gateway added: the
// client's latency minus the time the provider took.
func gatewayOverhead(reqs []loadRequest, providers ProviderSnapshot) []time.Duration {
	took := map[string]float64{}
	for _, c := range providers.ByHost {
		for _, pr := range c.Requests {
			took[pr.RequestID] = pr.DurationMS
		}
	}
	var out []time.Duration
	for _, q := range reqs {
		if d, ok := took[q.RequestID]; ok && q.Admitted() && q.RequestID != "" {
			out = append(out, q.Latency-time.Duration(d*float64(time.Millisecond)))
		}
	}
	return out
}
