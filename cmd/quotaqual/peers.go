package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/peers"
	"github.com/quotaqual/quotaqual/internal/peers/table"
	"github.com/quotaqual/quotaqual/undertest"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { subcommands = append(subcommands, newPeersCmd) }

// newPeersCmd groups what concerns the third-party engines quotaqual qualifies through its
// gateway seam (package internal/peers): building them, listing them, their verdict table.
func newPeersCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "peers",
		Short: "Build and list the third-party rate-limit engines qualified through the gateway seam",
	}
	cmd.AddCommand(newPeersBuildCmd(), newPeersListCmd(), newPeersTableCmd())
	return cmd
}

func newPeersBuildCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "build [ENGINE...]",
		Short: "Build the pinned engines from the Go module proxy into the cache directory (a no-op when built)",
		Long: `Builds each pinned engine (all when none is named) with go install <package>@<version> into
$QUOTAQUAL_PEERS_DIR, else $XDG_CACHE_HOME/quotaqual/peers/<name>@<version>/ (~/.cache/...).
Nothing is copied into the repository; an engine already built is left as it is.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			engines, err := enginesNamed(args)
			if err != nil {
				return withCode(wire.ExitUsage, err)
			}
			for _, e := range engines {
				built, err := peers.Build(cmd.Context(), e, cmd.ErrOrStderr())
				if err != nil {
					return withCode(wire.ExitFailed, err)
				}
				p, _ := e.Path()
				if !built {
					fmt.Fprintf(cmd.OutOrStdout(), "%s %s already built: %s\n", e.Name, e.Version, p)
				}
			}
			return nil
		},
	}
}

func newPeersListCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the pinned engines and where each is built",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, e := range peers.All() {
				where := "not built"
				if p, err := e.Path(); err == nil {
					where = p
					if st, err := e.ReadStamp(); err == nil {
						where += fmt.Sprintf(" (built %s with %s in %.0f s)", st.BuiltAt.Format("2006-01-02 15:04Z"), st.GoVersion, st.Seconds)
					}
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%-16s %s\n  %s\n  %s\n", e.Name, e.Version, e.What, where)
			}
			return nil
		},
	}
}

// enginesNamed returns the named engines, or all when names is empty.
func enginesNamed(names []string) ([]peers.Engine, error) {
	if len(names) == 0 {
		return peers.All(), nil
	}
	var out []peers.Engine
	for _, n := range names {
		e, err := peers.ByName(n)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// peerRunMeta is what `peers table` keeps beside each run's JSON.
type peerRunMeta struct {
	Profile  string        `json:"profile"`
	Qualify  string        `json:"qualification_profile"`
	Started  time.Time     `json:"started"`
	Wall     time.Duration `json:"wall_ns"`
	ExitCode int           `json:"exit_code"`
}

func newPeersTableCmd() *cobra.Command {
	var out, runsDir, qualify string
	var only []string
	var rerun bool
	cmd := &cobra.Command{
		Use:   "table --out docs/peers.md",
		Short: "Run every peer profile (netns) and write the verdict table from the runs",
		Long: `Runs the qualification on every shipped peer profile (or those named with --peer), each as
its own "quotaqual run --gateway <peer> --profile reference --json" on netns, and writes the
verdict table (scenario × peer, each verdict and the fact that decided it, the engines'
versions, the date). With --runs DIR, each run's JSON is kept in DIR/<peer>.json and reused
by the next call unless --rerun: the table can be rewritten without running again.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return withCode(wire.ExitUsage, errors.New("--out is required: give the table's path, e.g. docs/peers.md"))
			}
			names := only
			if len(names) == 0 {
				for _, n := range undertest.ShippedNames() {
					if p, err := undertest.Shipped(n); err == nil && p.Status == undertest.Peer {
						names = append(names, n)
					}
				}
			}
			if runsDir == "" {
				d, err := os.MkdirTemp("", "quotaqual-peers-table-")
				if err != nil {
					return withCode(wire.ExitFailed, err)
				}
				runsDir = d
			}
			if err := os.MkdirAll(runsDir, 0o755); err != nil {
				return withCode(wire.ExitFailed, err)
			}
			self, err := os.Executable()
			if err != nil {
				return withCode(wire.ExitFailed, err)
			}
			var runs []table.Run
			for _, n := range names {
				p, err := undertest.Shipped(n)
				if err != nil {
					return withCode(wire.ExitUsage, err)
				}
				r, err := peerRun(cmd, self, runsDir, p, qualify, rerun)
				if err != nil {
					return withCode(wire.ExitFailed, err)
				}
				runs = append(runs, r)
			}
			doc := table.Markdown(runs, "quotaqual peers table --out "+out)
			if err := os.WriteFile(out, doc, 0o644); err != nil {
				return withCode(wire.ExitFailed, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s from %d runs (kept in %s)\n", out, len(runs), runsDir)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&out, "out", "", "where to write the table (docs/peers.md)")
	f.StringVar(&runsDir, "runs", "", "keep each run's JSON here and reuse it (default: a fresh temporary directory)")
	f.StringVar(&qualify, "profile", "reference", "the qualification profile every peer runs (envoy ratelimit expresses no 4 s window)")
	f.StringSliceVar(&only, "peer", nil, "only these peer profiles (repeatable)")
	f.BoolVar(&rerun, "rerun", false, "run again even where DIR/<peer>.json exists")
	return cmd
}

// peerRun returns peer p's run: the one kept in dir, or a new one made and kept there.
func peerRun(cmd *cobra.Command, self, dir string, p *undertest.Profile, qualify string, rerun bool) (table.Run, error) {
	jsonPath := filepath.Join(dir, p.Name+".json")
	metaPath := filepath.Join(dir, p.Name+".meta.json")
	if _, err := os.Stat(jsonPath); err != nil || rerun {
		fmt.Fprintf(cmd.ErrOrStderr(), "running %s (--profile %s) …\n", p.Name, qualify)
		start := time.Now()
		c := exec.CommandContext(cmd.Context(), self, "run", "--gateway", p.Name, "--profile", qualify, "--json",
			"--evidence-dir", filepath.Join(dir, "evidence"))
		var stdout bytes.Buffer
		c.Stdout, c.Stderr = &stdout, cmd.ErrOrStderr()
		err := c.Run()
		code := 0
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			code = ee.ExitCode()
		} else if err != nil {
			return table.Run{}, fmt.Errorf("running %s: %w", p.Name, err)
		}
		if err := os.WriteFile(jsonPath, stdout.Bytes(), 0o644); err != nil {
			return table.Run{}, err
		}
		m, _ := json.MarshalIndent(peerRunMeta{Profile: p.Name, Qualify: qualify, Started: start.UTC(), Wall: time.Since(start), ExitCode: code}, "", "  ")
		if err := os.WriteFile(metaPath, m, 0o644); err != nil {
			return table.Run{}, err
		}
	}
	var out struct {
		RunID    string                    `json:"run_id"`
		Topology string                    `json:"topology"`
		ExitCode int                       `json:"exit_code"`
		Error    string                    `json:"error"`
		Results  []evidence.ScenarioResult `json:"results"`
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		return table.Run{}, err
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return table.Run{}, fmt.Errorf("%s holds no run JSON: %w", jsonPath, err)
	}
	var meta peerRunMeta
	if mb, err := os.ReadFile(metaPath); err == nil {
		_ = json.Unmarshal(mb, &meta)
	}
	r := table.Run{Profile: p, Qualify: meta.Qualify, Topology: out.Topology, RunID: out.RunID, Date: meta.Started,
		Wall: meta.Wall, ExitCode: out.ExitCode, Error: out.Error, Results: out.Results, EngineStamp: map[string]peers.Stamp{}}
	if r.Qualify == "" {
		r.Qualify = qualify
	}
	for _, s := range p.Services {
		e, err := peers.ByName(s.Engine)
		if err != nil || slices.ContainsFunc(r.Engines, func(x peers.Engine) bool { return x.Name == e.Name }) {
			continue
		}
		r.Engines = append(r.Engines, e)
		if st, err := e.ReadStamp(); err == nil {
			r.EngineStamp[e.Name] = st
		}
	}
	return r, nil
}
