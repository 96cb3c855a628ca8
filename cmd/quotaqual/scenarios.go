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
	var markdown bool
	cmd := &cobra.Command{
		Use:   "scenarios",
		Short: "List the qualification scenarios",
		Long: `List the qualification scenarios, one line each. With --markdown, write the page
docs/scenarios.md from the catalogue (` + scenarios.MarkdownCommand + `).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if markdown {
				return scenarios.WriteMarkdown(cmd.OutOrStdout(), scenarios.All())
			}
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
	cmd.Flags().BoolVar(&markdown, "markdown", false, "write the catalogue as the Markdown page docs/scenarios.md")
	return cmd
}
