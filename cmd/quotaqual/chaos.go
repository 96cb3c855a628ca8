package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/chaos"
	"github.com/quotaqual/quotaqual/qualify"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { subcommands = append(subcommands, newChaosCmd) }

func newChaosCmd() *cobra.Command {
	var o chaos.Options
	var engine, gateway string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "chaos",
		Short: "Run a seeded random fault schedule under load and judge the whole history",
		Long: `chaos draws a schedule of faults from --seed (gateway partitions from the store, store
stops, gateway crashes and restarts, pauses, store stalls and more; a store failover, a policy change and a
gateway cut from the primary (partition-primary) with --lever store-failover, which runs the gateways on the replicated store group;
50 % packet loss on a gateway's store link only when named, --lever loss, so that recorded seeds keep their schedules), brings the topology up and runs an open-loop load from many
subjects across every gateway while the schedule runs. A checker then reads only the recorded
history — the client's requests, the faults as they were pulled and released, the providers'
call logs — and decides: the hard gate per subject per window, no 200 from a gateway cut off from
the store, no acknowledged reservation lost, every key linearizable against the ledger model, and
recovery within a bound after each release. On a failure it prints the seed and a shrunk schedule
that still fails (delta debugging, one fresh run per candidate); both are in the bundle. The same
seed draws the same schedule. Exit codes: 0 passed, 1 failed, 2 bad usage, 3 the topology could
not be brought up. Runs on the netns and docker topologies; a lever the engine cannot host is left
out of the schedule with the engine's reason. --gateway puts a foreign gateway under chaos, loaded
as run loads it; the checker reads only what a client sees, so nothing changes but the levers
its profile can host (the others are listed as left out, with the reason) and the checks its
answers cannot decide (named as not made, with the reason).`,
		Example: `  quotaqual chaos --seed 7 --duration 20s
  quotaqual chaos --seed 7 --duration 20s --lever partition --lever stop-valkey --shrink-runs 20
  quotaqual chaos --seed 11 --duration 10s --lever store-failover --lever policy-change
  quotaqual chaos --seed 1 --duration 10s --lever store-failover --lever partition-primary --topology docker
  quotaqual chaos --gateway envoy-ai-gateway --seed 1 --duration 10s --shrink-runs 4`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The same prepare step as run's: the engine resolved (auto included) and, on
			// netns, this command run again inside the run's own namespaces.
			// The gateway profile is loaded and checked there too (run's --gateway), against
			// the chaos rule for it (chaos.RuleFor: a window it can express).
			plan, err := qualify.Prepare(qualify.Options{Topology: engine, RunID: o.RunID, Gateway: gateway, Rule: chaos.RuleFor})
			if err != nil {
				return withCode(wire.ExitUsage, err)
			}
			o.Engine, o.Gateway, o.GatewayRef, o.Rule = plan.Engine, plan.Gateway(), gateway, plan.Params()
			if err := o.Validate(); err != nil {
				return withCode(wire.ExitUsage, err)
			}
			if parentDone, code, err := plan.Enter(nil); err != nil {
				return withCode(wire.ExitTopology, err)
			} else if parentDone {
				return withCode(code, nil)
			}
			o.Engine, o.RunID = plan.Engine, plan.RunID
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()
			errOut := cmd.ErrOrStderr()
			o.Progress = func(s string) { fmt.Fprintln(errOut, "chaos:", s) }
			rep, err := chaos.Run(ctx, o)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				_ = enc.Encode(rep)
			} else {
				fmt.Fprint(cmd.OutOrStdout(), chaos.Reproduce(rep))
				if rep.BundleDir != "" {
					fmt.Fprintf(cmd.OutOrStdout(), "bundle: %s\n", rep.BundleDir)
				}
			}
			switch {
			case err != nil && rep.First == nil:
				return withCode(wire.ExitTopology, err)
			case err != nil:
				return withCode(wire.ExitFailed, err)
			case rep.Failed():
				return withCode(wire.ExitFailed, fmt.Errorf("seed %d failed: %s", rep.Seed, strings.Join(rep.First.Verdict.FailedChecks(), "; ")))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Int64Var(&o.Seed, "seed", 1, "the seed the fault schedule is drawn from (the same seed draws the same schedule)")
	f.DurationVar(&o.Duration, "duration", 20*time.Second, "the span the faults lie in; the load runs 3s longer, then drains every subject")
	f.IntVar(&o.Gateways, "gateways", 0, "gateway replicas, 2 to 16 (default 2)")
	f.IntVar(&o.Rate, "rate", chaos.DefaultRate, "requests per second of the open-loop load")
	f.StringSliceVar(&o.Levers, "lever", nil, "the levers the schedule draws from (repeatable; default all: "+strings.Join(chaos.LeverNames(), ", ")+")")
	f.StringVar(&o.StoreReplication, "store-replication", "acknowledged", "with --lever store-failover (which puts the gateways on the replicated store group): acknowledged or async (a failover may then lose what the primary had not replicated, which the checker allows for the subjects it touched and records)")
	f.IntVar(&o.ShrinkRuns, "shrink-runs", chaos.DefaultShrinkRuns, "at most this many runs to shrink a failing schedule (each a fresh topology); negative: do not shrink")
	f.StringVar(&gateway, "gateway", "", "the gateway to put under chaos: a gateway profile file or a shipped profile's name: "+strings.Join(undertest.ShippedNames(), ", ")+" (default: quotaqual's own gateway); levers its profile cannot host are left out, each with the reason")
	f.StringVar(&engine, "topology", topology.EngineAuto, "the topology engine: netns or docker (auto picks netns where it works)")
	f.StringVar(&o.EvidenceDir, "evidence-dir", "quotaqual-evidence", "where the bundle directory is written")
	f.StringVar(&o.RunID, "run-id", "", "the run id (default generated)")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON on stdout")
	return cmd
}
