package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/scenarios"
)

func init() { subcommands = append(subcommands, newScenariosCmd) }

func newScenariosCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "scenarios",
		Short: "List the qualification scenarios",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			for i, s := range scenarios.All() {
				summary := s.Summary
				if len(s.Profiles) > 0 {
					summary += " [runs by default in " + strings.Join(s.Profiles, ", ") + "; elsewhere ask for it with --scenario]"
				}
				fmt.Fprintf(w, "%d\t%s\t%s\n", i+1, s.Name, summary)
			}
			return w.Flush()
		},
	}
}
