package main

import (
	"bytes"
	"errors"
	"os"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/wire"
)

func init() { subcommands = append(subcommands, newConcatCmd) }

// newConcatCmd joins files into one, readable by its owner only. The kind topology's Sentinel
// pods need a writable config made of the ConfigMap's monitor lines and the Secret's auth-pass;
// the images are FROM scratch (no shell, no cat), so the quotaqual image writes it in an init
// container.
func newConcatCmd() *cobra.Command {
	var out string
	c := &cobra.Command{
		Use:    "concat --out FILE FILE...",
		Short:  "Write the given files, one after another, into --out (mode 0600)",
		Hidden: true,
		Args:   cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if out == "" {
				return withCode(wire.ExitUsage, errors.New("concat: --out is required: name the file to write"))
			}
			var b bytes.Buffer
			for _, in := range args {
				data, err := os.ReadFile(in)
				if err != nil {
					return withCode(wire.ExitFailed, err)
				}
				b.Write(data)
				if len(data) > 0 && data[len(data)-1] != '\n' {
					b.WriteByte('\n')
				}
			}
			if err := os.WriteFile(out, b.Bytes(), 0o600); err != nil {
				return withCode(wire.ExitFailed, err)
			}
			return nil
		},
	}
	c.Flags().StringVar(&out, "out", "", "the file to write")
	return c
}
