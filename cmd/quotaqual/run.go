package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/ui"
	"github.com/quotaqual/quotaqual/qualify"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { subcommands = append(subcommands, newRunCmd) }

func newRunCmd() *cobra.Command {
	var o qualify.Options
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the qualification and write an evidence bundle",
		Long: `run brings up two consumer gateways, three provider stubs and a real Valkey on the chosen
topology, runs the qualification scenarios, and writes a redacted, checksummed evidence
bundle with JUnit. The run states what it qualified: qualified (every selected scenario
passed), partial (none failed, some were skipped: each is named with what it lacked) or
failed. Exit codes: 0 every required scenario ran and none failed, 1 a scenario failed, 2 bad
usage or config, 3 the topology could not be brought up, 4 partial: a required scenario was
skipped (--require: all by default; --require none accepts a partial qualification).`,
		Example: `  quotaqual run
  quotaqual run --topology process --scenario shared-budget --scenario concurrency
  quotaqual run --topology process --require none
  quotaqual run --profile reference --bundle tar.gz --evidence-dir /tmp/evidence`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			survivePipeLoss()
			o.Kind.Keep = o.Keep
			plan, err := qualify.Prepare(o)
			if err != nil {
				return withCode(wire.ExitUsage, err)
			}
			if parentDone, code, err := plan.Enter(nil); err != nil {
				return withCode(wire.ExitTopology, err)
			} else if parentDone {
				// The run happened where the engine entered; it already printed everything.
				// However it ended (kill -9 included), the mount point of its in-memory work
				// directory goes now.
				removed, errs := topology.RemoveDeadWorkDirs(plan.RunID)
				reportRemoved(cmd.ErrOrStderr(), removed, errs)
				return withCode(code, nil)
			}
			// A terminal hang-up ends the run like Ctrl-C: torn down, bundle written.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
			defer stop()

			// Progress goes to stderr in both modes, so stdout stays pure JSON with --json.
			progress := ui.New(cmd.ErrOrStderr())
			plan.Reporter = progress
			out := qualify.Run(ctx, plan)
			if asJSON {
				printJSON(cmd, out)
			} else {
				// The closing table is the run's result: stdout, so `run > result.txt` keeps it
				// and `2>/dev/null` leaves only it; the progress before it stays on stderr.
				printSummary(ui.New(cmd.OutOrStdout()), out)
			}
			if out.Code != wire.ExitOK {
				var ue *qualify.UsageError
				if errors.As(out.Err, &ue) {
					return withCode(wire.ExitUsage, out.Err)
				}
				return withCode(out.Code, out.Err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Gateway, "gateway", "", "the gateway to qualify: a gateway profile file (launch, config template, expectations), or a shipped profile's name: "+strings.Join(undertest.ShippedNames(), ", ")+" (default: quotaqual's own gateway)")
	f.StringVar(&o.Topology, "topology", topology.EngineAuto, topologyUsage())
	f.StringVar(&o.Profile, "profile", "quick", "scenario parameters: quick (short window) or reference (the upstream 60 s window)")
	f.StringArrayVar(&o.Scenarios, "scenario", nil, "run only this scenario (repeatable); see `quotaqual scenarios`")
	f.StringArrayVar(&o.Require, "require", nil, "scenarios whose skip fails the run with exit 4: all (every selected scenario), none (accept a partial qualification), or scenario names (repeatable, or a comma list) (default all)")
	f.StringVar(&o.EvidenceDir, "evidence-dir", "quotaqual-evidence", "directory that receives <run-id>/")
	f.StringVar(&o.Bundle, "bundle", "", "also pack the bundle: tar.gz")
	f.BoolVar(&o.Keep, "keep", false, "keep the topology up after the scenarios until interrupted")
	f.StringVar(&o.RunID, "run-id", "", "run id (default: generated); namespaces keys, hosts and the bundle")
	f.IntVar(&o.Gateways, "gateways", topology.DefaultGateways, gatewaysUsage)
	f.StringVar(&o.DenyMode, "deny-mode", "reject", "how the network policy denies on netns: reject (fast) or drop (as most CNIs do)")
	f.StringVar(&o.StoreReplication, "store-replication", "acknowledged", "how the gateways write to the replicated store in valkey-failover and replica-loss: acknowledged (a replica confirms each write) or async (Valkey's default: a failover can spend a budget twice; replica-loss skips)")
	f.StringVar(&o.Store, "store", "single", "the store the gateways share: single (one Valkey) or cluster (a Valkey Cluster of three primaries, on the engines that run one)")
	f.StringVar(&o.ValkeyImage, "valkey-image", "", "docker: Valkey image to run (default: quotaqual-valkey:8, built from the host's valkey-server; with a registry e.g. valkey/valkey:8)")
	f.StringVar(&o.Image, "image", "", "docker: quotaqual image to run (default: built from this binary)")
	f.StringVar(&o.GatewayImage, "gateway-image", "", "docker, kind: image of the gateway under test, present locally (docker load; nothing is pulled) (default: the profile's launch.image, else the quotaqual image)")
	f.StringVar(&o.Kind.NodeImage, "kind-node-image", "", "kind: node image for the run's cluster (default: QUOTAQUAL_KIND_NODE_IMAGE, else kind's, else the local build of make kind-node-image)")
	f.StringVar(&o.Kind.Kubeconfig, "kubeconfig", "", "kind: run in a namespace of an existing cluster instead of creating one")
	f.StringVar(&o.Kind.Context, "context", "", "kind: kubeconfig context of the existing cluster")
	f.BoolVar(&asJSON, "json", false, "print the results as JSON on stdout instead of the closing table (progress stays on stderr)")
	return cmd
}

func printSummary(p *ui.Progress, out qualify.Outcome) {
	if len(out.Results) > 0 {
		rows := make([][]string, 0, len(out.Results))
		for _, r := range out.Results {
			detail := r.KeyFact
			if r.Status != evidence.Passed && r.Reason != "" {
				detail = r.Reason
			}
			rows = append(rows, []string{r.Name, p.Verdict(string(r.Status)), ui.Truncate(detail, 90)})
		}
		q := out.Qualification
		p.Table([]string{"scenario", "verdict: " + string(q.Level), "key fact"}, rows)
		p.Plain("%s %s", p.Verdict(string(q.Level)), ui.Truncate(strings.TrimPrefix(q.String(), string(q.Level)+": "), 400))
	}
	if out.BundleDir != "" {
		p.Plain("evidence: %s", out.BundleDir)
		if out.BundleTar != "" {
			p.Plain("bundle:   %s", out.BundleTar)
		}
		p.Plain("summary:  %s", filepath.Join(out.BundleDir, evidence.SummaryFile))
		if _, err := os.Stat(filepath.Join(out.BundleDir, evidence.ReportFile)); err == nil {
			p.Plain("report:   %s", filepath.Join(out.BundleDir, evidence.ReportFile))
		}
	}
}

func printJSON(cmd *cobra.Command, out qualify.Outcome) {
	v := struct {
		RunID         string                    `json:"run_id"`
		Topology      string                    `json:"topology"`
		ExitCode      int                       `json:"exit_code"`
		Error         string                    `json:"error,omitempty"`
		Qualification *evidence.Qualification   `json:"qualification,omitempty"`
		BundleDir     string                    `json:"bundle_dir,omitempty"`
		BundleTar     string                    `json:"bundle_tar,omitempty"`
		Results       []evidence.ScenarioResult `json:"results"`
	}{out.RunID, out.Engine, out.Code, "", nil, out.BundleDir, out.BundleTar, out.Results}
	if out.Qualification.Level != "" {
		v.Qualification = &out.Qualification
	}
	if out.Err != nil {
		v.Error = out.Err.Error()
	}
	enc := json.NewEncoder(cmd.OutOrStdout())
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), "quotaqual: write JSON:", err)
	}
}

// topologyUsage is --topology's help: the engines the registry holds, without those a command
// does not serve.
func topologyUsage(except ...string) string {
	return fmt.Sprintf("where components run: %s (auto: %s where this host can build network namespaces, else %s where a Docker engine answers, else %s)",
		topology.EngineChoices(except...), topology.EngineNetns, topology.EngineDocker, topology.EngineProcess)
}
