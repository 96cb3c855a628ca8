package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/internal/peers"
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
	cmd.AddCommand(newPeersBuildCmd(), newPeersListCmd())
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
