package main

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { subcommands = append(subcommands, newDownCmd) }

func newDownCmd() *cobra.Command {
	var runID string
	cmd := &cobra.Command{
		Use:   "down [--run-id ID]",
		Short: "Remove what a crashed run left behind — only what that run created",
		Long: `down removes the leftovers of a run that did not tear itself down.

A netns run cannot leave anything behind: its namespaces, bridge, firewall rules and
processes all live inside the run's own user, network, mount and pid namespaces, and the
kernel removes them when the run's process tree ends. down still checks that no process of
that run is left.

A docker run's containers, networks and volumes carry the label org.quotaqual.run-id; down
removes exactly those. A process run's gateways, providers and Valkey carry the run id in their environment
(` + topology.EnvRunID + `), as do those of the topologies a run brought up for single scenarios
(the run id, "--" and a letter); down stops exactly those (SIGTERM, then SIGKILL after 5s) and
nothing else. Once the run is dead, down also removes every file it left outside its bundle — its work
directory (configs, logs, the Sentinels' config files; on netns only the empty mount point and
its owner file) and up's credentials file quotaqual-up-<run-id>.env (in $XDG_RUNTIME_DIR,
/dev/shm or the temporary directory) — and names each. Without --run-id it lists the runs that
still have processes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if runID == "" {
				runs := topology.FindRuns()
				if len(runs) == 0 {
					fmt.Fprintln(out, "no quotaqual run has processes left")
					return nil
				}
				ids := make([]string, 0, len(runs))
				for id := range runs {
					ids = append(ids, id)
				}
				sort.Strings(ids)
				fmt.Fprintln(out, "runs with processes left (remove one with quotaqual down --run-id ID):")
				for _, id := range ids {
					fmt.Fprintf(out, "  %s  pids %v\n", id, runs[id])
				}
				return nil
			}
			if err := topology.ValidateRunID(runID); err != nil {
				return withCode(wire.ExitUsage, err)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			td := topology.KillRunProcesses(ctx, runID, 5*time.Second)
			// A docker run leaves containers, networks and volumes labelled with its run id, a
			// kind run a cluster named after it (when --keep or a crash): each engine removes its own.
			ctd := topology.CleanupEngines(ctx, runID)
			td.Removed = append(td.Removed, ctd.Removed...)
			td.Errors = append(td.Errors, ctd.Errors...)
			// Its work directory (configs, logs, the Valkey password file) once it is dead.
			wdRemoved, wdErrs := topology.RemoveDeadWorkDirs(runID)
			td.Errors = append(td.Errors, wdErrs...)
			fmt.Fprintln(out, "netns runs leave no namespace, process or network behind: they die with the run's process tree.")
			if len(td.Removed) == 0 && len(wdRemoved) == 0 && len(td.Errors) == 0 {
				fmt.Fprintf(out, "run %s: nothing left\n", runID)
				return nil
			}
			for _, r := range td.Removed {
				fmt.Fprintln(out, "stopped", r)
			}
			for _, r := range wdRemoved {
				fmt.Fprintln(out, "removed", r)
			}
			if len(td.Errors) > 0 {
				return withCode(wire.ExitFailed, fmt.Errorf("%s", strings.Join(td.Errors, "; ")))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&runID, "run-id", "", "the run whose leftovers to remove")
	return cmd
}
