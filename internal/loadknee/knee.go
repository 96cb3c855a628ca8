// Package loadknee drives the sustained-load scenario's open-loop load at a rate and for a
// duration the user chooses, and finds the knee: the highest open-loop rate at which the
// schedule's lag stays under 1 %, no answer is a 5xx (or missing), admission p99 stays within
// its bound and no subject is over-admitted. It is what `quotaqual load` runs. The load itself
// is the scenario's (scenarios/sustained_load.go: 200 subjects across every gateway, a tenth
// driven past their budget, each request sent on its schedule whatever the earlier answers);
// this package only chooses its rate and duration, runs it on one topology it keeps up, and
// judges each step from the facts the scenario records.
package loadknee

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Step is one run of the load at one rate, and its judgement.
type Step struct {
	Rate     int           `json:"rate_per_s"`
	Duration time.Duration `json:"duration_ns"`
	Requests int           `json:"requests"`
	// Sustained is the rate the sends kept (requests − 1 over the span of their send times).
	Sustained float64 `json:"sustained_per_s"`
	// LagP99 is the 99th percentile of how late a request left against its schedule.
	LagP99   time.Duration  `json:"send_lag_p99_ns"`
	Answers  map[string]int `json:"answers"`
	AdmitP50 time.Duration  `json:"admission_p50_ns"`
	AdmitP99 time.Duration  `json:"admission_p99_ns"`
	// OverAdmission is the worst excess, in tokens, of one subject's admitted usage over its
	// capacity within one window (0 for a correct gate).
	OverAdmission int64 `json:"over_admission_tokens"`
	// Verdict is the scenario's own (it also asks that every hot subject was denied, which a
	// low rate need not achieve: the knee does not use it).
	Verdict string `json:"scenario_verdict"`
	// OK: the step met every knee condition; Why lists those it missed.
	OK  bool     `json:"ok"`
	Why []string `json:"why,omitempty"`
}

// Bounds are the knee's conditions.
type Bounds struct {
	// MaxLag is the largest share of the schedule the sends may slip (1 − sustained/target).
	MaxLag float64
	// AdmitP99 bounds the admitted requests' p99 latency (client to gateway and back,
	// provider included).
	AdmitP99 time.Duration
}

// Judge sets s.OK and s.Why against b.
func (b Bounds) Judge(s *Step) {
	s.Why = nil
	if s.Requests == 0 {
		s.Why = append(s.Why, "no request was sent")
	}
	if lag := 1 - s.Sustained/float64(s.Rate); lag > b.MaxLag {
		s.Why = append(s.Why, fmt.Sprintf("the schedule slipped %.1f %% (%.0f/s of %d/s; bound %.1f %%)", 100*lag, s.Sustained, s.Rate, 100*b.MaxLag))
	}
	if n := s.Answers["503"] + s.Answers["other 5xx"]; n > 0 {
		s.Why = append(s.Why, fmt.Sprintf("%d answers were 5xx", n))
	}
	if n := s.Answers["no answer"]; n > 0 {
		s.Why = append(s.Why, fmt.Sprintf("%d requests got no answer", n))
	}
	if s.AdmitP99 > b.AdmitP99 {
		s.Why = append(s.Why, fmt.Sprintf("admission p99 %s over its bound %s", s.AdmitP99.Round(100*time.Microsecond), b.AdmitP99))
	}
	if s.OverAdmission > 0 {
		s.Why = append(s.Why, fmt.Sprintf("over-admitted %d tokens", s.OverAdmission))
	}
	s.OK = len(s.Why) == 0
}

// Probe runs the load at rate and returns its judged step; an error means the step could not
// be run at all (not that the rate was too high).
type Probe func(ctx context.Context, rate int) (Step, error)

// Search finds the knee from start up to max: it doubles the rate while each step meets the
// bounds, then bisects between the last rate that met them and the first that did not, until
// the two are within max(minStep, hi × relStep). knee is the highest step that met the bounds
// (nil when even start did not); steps are every step run, in order.
func Search(ctx context.Context, start, max, minStep int, relStep float64, probe Probe) (knee *Step, steps []Step, err error) {
	if start < 1 || max < start {
		return nil, nil, fmt.Errorf("rates: start %d and max %d must satisfy 1 ≤ start ≤ max", start, max)
	}
	run := func(rate int) (Step, error) {
		s, err := probe(ctx, rate)
		if err == nil {
			steps = append(steps, s)
		}
		return s, err
	}
	var good *Step
	bad := 0
	for rate := start; ; rate = min(2*rate, max) {
		s, err := run(rate)
		if err != nil {
			return good, steps, err
		}
		if !s.OK {
			bad = rate
			break
		}
		good = &s
		if rate >= max {
			return good, steps, nil
		}
	}
	if good == nil {
		return nil, steps, nil
	}
	lo, hi := good.Rate, bad
	for hi-lo > maxInt(minStep, int(float64(hi)*relStep)) {
		mid := (lo + hi) / 2
		s, err := run(mid)
		if err != nil {
			return good, steps, err
		}
		if s.OK {
			good, lo = &s, mid
		} else {
			hi = mid
		}
	}
	return good, steps, nil
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// Line is one step as a table row.
func (s Step) Line() []string {
	verdict := "ok"
	if !s.OK {
		verdict = "over: " + strings.Join(s.Why, "; ")
	}
	return []string{
		fmt.Sprintf("%d", s.Rate), fmt.Sprintf("%.0f", s.Sustained), fmt.Sprintf("%d", s.Requests),
		fmt.Sprintf("%d/%d/%d", s.Answers["200"], s.Answers["429"], s.Answers["503"]+s.Answers["other 5xx"]),
		fmt.Sprintf("%.1f / %.1f", ms(s.AdmitP50), ms(s.AdmitP99)), fmt.Sprintf("%.1f", ms(s.LagP99)),
		fmt.Sprintf("%d", s.OverAdmission), verdict,
	}
}

// Header names Line's columns.
var Header = []string{"rate/s", "kept/s", "requests", "200/429/5xx", "admission p50 / p99 ms", "send lag p99 ms", "over-admitted", "knee conditions"}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
