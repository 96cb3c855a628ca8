package main

import (
	"fmt"
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
				fmt.Fprintf(w, "%d\t%s\t%s\n", i+1, s.Name, s.Summary)
			}
			return w.Flush()
		},
	}
}
