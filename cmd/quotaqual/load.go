package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/internal/loadknee"
	"github.com/quotaqual/quotaqual/internal/ui"
	"github.com/quotaqual/quotaqual/qualify"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { subcommands = append(subcommands, newLoadCmd) }

func newLoadCmd() *cobra.Command {
	var (
		o        loadknee.Options
		topo     string
		maxLag   float64
		p99Bound time.Duration
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "load",
		Short: "Drive the sustained-load scenario at a chosen rate, or find the highest rate one Valkey and N gateways carry",
		Long: `load brings up a Valkey, the gateways and the provider stubs (as run does) and drives the
sustained-load scenario's open-loop load — 200 subjects across every gateway, a tenth of them
past their budget, each request sent on its schedule whatever the answers — at --rate for
--duration, and reports what it saw. With --find-knee it doubles the rate from --rate until a
step misses a bound, then bisects, and reports the knee: the highest rate at which the sends kept
their schedule within --max-lag, no answer was a 5xx or missing, admission p99 stayed within
--p99-bound and no subject was over-admitted. Between steps it waits one window, so each step
starts on fresh budgets. The client, the gateways, the stubs and Valkey share this machine: the
knee is what they carry together here. Exit codes: 0 the step (or the knee's start) met the
bounds, 1 it did not, 2 bad usage, 3 the topology could not be brought up.`,
		Example: `  quotaqual load --rate 500 --duration 10s
  quotaqual load --find-knee --rate 250 --duration 5s --max-rate 8000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := deployment.ProfileByName(o.Profile)
			if err != nil {
				return withCode(wire.ExitUsage, fmt.Errorf("--profile: %w", err))
			}
			if p99Bound == 0 {
				p99Bound = p.StoreTimeout
			}
			if maxLag <= 0 || maxLag >= 1 {
				return withCode(wire.ExitUsage, fmt.Errorf("--max-lag %g: give a share between 0 and 1, e.g. 0.01", maxLag))
			}
			o.Bounds = loadknee.Bounds{MaxLag: maxLag, AdmitP99: p99Bound}
			if err := o.Validate(); err != nil {
				return withCode(wire.ExitUsage, err)
			}
			// The same prepare step as run's: on netns this command runs again inside the
			// run's own namespaces.
			plan, err := qualify.Prepare(qualify.Options{Topology: topo, RunID: o.RunID, Profile: o.Profile})
			if err != nil {
				return withCode(wire.ExitUsage, err)
			}
			if parentDone, code, err := plan.Enter(nil); err != nil {
				return withCode(wire.ExitTopology, err)
			} else if parentDone {
				return withCode(code, nil)
			}
			o.Topology, o.RunID = plan.Engine, plan.RunID
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			progress := ui.New(cmd.ErrOrStderr())
			o.Progress = func(s string) { progress.Note("%s", s) }
			rep, err := loadknee.Run(ctx, o)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				_ = enc.Encode(rep)
			} else {
				printLoad(progress, o, rep)
			}
			if err != nil {
				return withCode(wire.ExitTopology, err)
			}
			if (o.FindKnee && rep.Knee == nil) || (!o.FindKnee && (len(rep.Steps) == 0 || !rep.Steps[0].OK)) {
				return withCode(wire.ExitFailed, nil)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Rate, "rate", 100, "requests per second, sent on schedule (open loop); with --find-knee the first rate tried")
	f.DurationVar(&o.Duration, "duration", 5*time.Second, "how long each step sends (1s to 90s)")
	f.BoolVar(&o.FindKnee, "find-knee", false, "double the rate from --rate until a bound is missed, then bisect: report the highest rate within every bound")
	f.IntVar(&o.MaxRate, "max-rate", 16000, "with --find-knee: the highest rate tried")
	f.Float64Var(&maxLag, "max-lag", 0.01, "the share of the schedule the sends may slip (1 − kept rate / rate)")
	f.DurationVar(&p99Bound, "p99-bound", 0, "the admitted requests' p99 latency bound (default: the profile's store timeout, past which a gateway fails closed)")
	f.StringVar(&topo, "topology", topology.EngineAuto, topologyUsage(topology.EngineKind))
	f.StringVar(&o.Profile, "profile", "quick", "the profile the gateways are rendered from (window, capacity, estimate)")
	f.IntVar(&o.Gateways, "gateways", topology.DefaultGateways, gatewaysUsage)
	f.StringVar(&o.RunID, "run-id", "", "run id (default: generated)")
	f.BoolVar(&asJSON, "json", false, "print the steps as JSON on stdout (progress stays on stderr)")
	return cmd
}

func printLoad(p *ui.Progress, o loadknee.Options, rep loadknee.Report) {
	rows := make([][]string, len(rep.Steps))
	for i, s := range rep.Steps {
		rows[i] = s.Line()
	}
	if len(rows) > 0 {
		p.Table(loadknee.Header, rows)
	}
	p.Plain("topology %s, %d gateways, %s per step; bounds: lag ≤ %.1f %%, no 5xx, admission p99 ≤ %s, over-admission 0",
		rep.Engine, rep.Gateways, o.Duration, 100*o.Bounds.MaxLag, o.Bounds.AdmitP99)
	if !o.FindKnee {
		return
	}
	if rep.Knee == nil {
		p.Plain("knee: none — even %d/s missed a bound", o.Rate)
		return
	}
	p.Plain("knee: %d requests/s (kept %.0f/s, admission p99 %.1f ms, over-admission %d tokens)",
		rep.Knee.Rate, rep.Knee.Sustained, float64(rep.Knee.AdmitP99)/float64(time.Millisecond), rep.Knee.OverAdmission)
}
