package loadknee

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/scenarios"
	"github.com/quotaqual/quotaqual/topology"
	_ "github.com/quotaqual/quotaqual/topology/engines" // every engine topology.New knows
)

// Options are what `quotaqual load` takes.
type Options struct {
	Topology string // an engine that needs no entering here (the command enters netns first)
	RunID    string
	Profile  string // the qualification profile the gateways are rendered from (quick)
	Gateways int    // 0: topology.DefaultGateways
	Binary   string // the quotaqual binary the gateways and stubs run as; default os.Executable

	Rate     int           // the rate of the one step, or the knee search's first
	Duration time.Duration // each step's
	FindKnee bool
	MaxRate  int // the knee search's highest rate
	Bounds   Bounds
	Progress func(string) // may be nil
}

// Validate checks the load's own options, naming the flag and the fix.
func (o *Options) Validate() error {
	var errs []error
	if o.Rate < 1 || o.Rate > 100000 {
		errs = append(errs, fmt.Errorf("--rate %d is out of range: give requests per second from 1 to 100000", o.Rate))
	}
	if o.Duration < time.Second || o.Duration > 90*time.Second {
		errs = append(errs, fmt.Errorf("--duration %s is out of range: give 1s to 90s (the scenario's deadline bounds one step)", o.Duration))
	}
	if o.FindKnee && (o.MaxRate < o.Rate || o.MaxRate > 100000) {
		errs = append(errs, fmt.Errorf("--max-rate %d: give a rate from --rate (%d) to 100000", o.MaxRate, o.Rate))
	}
	if o.Bounds.AdmitP99 <= 0 {
		errs = append(errs, fmt.Errorf("--p99-bound %s: give a positive duration, e.g. 500ms", o.Bounds.AdmitP99))
	}
	if _, err := deployment.ProfileByName(o.Profile); err != nil {
		errs = append(errs, fmt.Errorf("--profile: %w", err))
	}
	return errors.Join(errs...)
}

// Report is what a load run measured.
type Report struct {
	RunID    string
	Engine   string
	Gateways int
	Steps    []Step
	Knee     *Step // with FindKnee: the highest step that met the bounds (nil: none did)
}

// Run brings one topology up (a Valkey, the gateways, the provider stubs), runs the load at
// o.Rate, or searches the knee from there, and tears the topology down.
func Run(ctx context.Context, o Options) (Report, error) {
	rep := Report{RunID: o.RunID}
	if err := o.Validate(); err != nil {
		return rep, err
	}
	progress := o.Progress
	if progress == nil {
		progress = func(string) {}
	}
	if rep.RunID == "" {
		rep.RunID = topology.NewRunID()
	}
	base, _ := deployment.ProfileByName(o.Profile)
	list, err := scenarios.Select([]string{scenarios.SustainedLoadName})
	if err != nil {
		return rep, err
	}
	binary := o.Binary
	if binary == "" {
		if binary, err = os.Executable(); err != nil {
			return rep, fmt.Errorf("find the quotaqual binary to run as gateway and provider: %w", err)
		}
	}
	wd, err := topology.NewWorkDir("quotaqual-load-", rep.RunID)
	if err != nil {
		return rep, err
	}
	defer wd.Remove()
	dep, err := scenarios.NewDeployment(rep.RunID, base, list)
	if err != nil {
		return rep, fmt.Errorf("generate the run's credentials: %w", err)
	}
	topo, err := topology.New(o.Topology, topology.Spec{RunID: rep.RunID, WorkDir: wd.Path, Binary: binary, Deployment: dep,
		Gateways: o.Gateways, WithoutStoreGroup: true})
	if err != nil {
		return rep, err
	}
	progress(fmt.Sprintf("topology up (%s)", o.Topology))
	if err := topo.Up(ctx); err != nil {
		_, _ = topo.Down(context.Background())
		return rep, fmt.Errorf("bring the %s topology up: %w", o.Topology, err)
	}
	defer func() { _, _ = topo.Down(context.Background()) }()
	rep.Engine, rep.Gateways = topo.Engine(), len(topo.Gateways())
	env := &scenarios.Env{Topo: topo, Deployment: dep, Profile: base, Progress: progress}

	first := true
	probe := func(ctx context.Context, rate int) (Step, error) {
		// The same subjects every step: let the previous step's windows run out first, so a
		// step starts on budgets as fresh as the first's.
		if !first {
			select {
			case <-ctx.Done():
				return Step{}, ctx.Err()
			case <-time.After(base.Window + time.Second):
			}
		}
		first = false
		env.Load = &scenarios.SustainedLoad{Rate: rate, For: o.Duration}
		res := scenarios.Run(ctx, env, list)
		if ctx.Err() != nil {
			return Step{}, ctx.Err()
		}
		s, err := stepFrom(res[0], rate, o.Duration)
		if err != nil {
			return Step{}, err
		}
		o.Bounds.Judge(&s)
		progress(fmt.Sprintf("%d/s: kept %.0f/s, admission p99 %.1f ms, %d×5xx, over-admitted %d: %s", rate, s.Sustained,
			ms(s.AdmitP99), s.Answers["503"]+s.Answers["other 5xx"], s.OverAdmission, map[bool]string{true: "within the bounds", false: "over"}[s.OK]))
		return s, nil
	}
	if !o.FindKnee {
		s, err := probe(ctx, o.Rate)
		if err == nil {
			rep.Steps = []Step{s}
		}
		return rep, err
	}
	knee, steps, err := Search(ctx, o.Rate, o.MaxRate, 10, 0.1, probe)
	rep.Knee, rep.Steps = knee, steps
	return rep, err
}

// stepFrom reads a step from the facts the sustained-load scenario recorded.
func stepFrom(r evidence.ScenarioResult, rate int, d time.Duration) (Step, error) {
	s := Step{Rate: rate, Duration: d, Verdict: string(r.Status), Answers: map[string]int{}}
	seen := 0
	for _, f := range r.Facts {
		switch v := f.Value.(type) {
		case int:
			if f.Name == "requests" {
				s.Requests, seen = v, seen+1
			}
		case int64:
			if f.Name == "over_admission_worst_tokens" {
				s.OverAdmission, seen = v, seen+1
			}
		case float64:
			if f.Name == "rate_sustained_per_s" {
				s.Sustained, seen = v, seen+1
			}
		case map[string]int:
			if f.Name == "answers" {
				s.Answers, seen = v, seen+1
			}
		case map[string]float64:
			switch f.Name {
			case "admission_latency_ms":
				s.AdmitP50, s.AdmitP99, seen = fromMs(v["p50"]), fromMs(v["p99"]), seen+1
			case "send_lag_behind_schedule_ms":
				s.LagP99, seen = fromMs(v["p99"]), seen+1
			}
		}
	}
	// The over-admission fact is recorded only when the history was judged; without the six
	// facts the scenario did not get as far as its load.
	if seen < 5 {
		why := r.Reason
		if why == "" {
			why = r.KeyFact
		}
		return s, fmt.Errorf("the load at %d/s recorded no history (%s): %s", rate, r.Status, why)
	}
	return s, nil
}

func fromMs(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
