package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/internal/version"
)

func init() { subcommands = append(subcommands, newVersionCmd) }

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print quotaqual's version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), "quotaqual", version.String())
			return err
		},
	}
}
