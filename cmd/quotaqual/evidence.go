package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/evidence"
)

func init() { subcommands = append(subcommands, newEvidenceCmd) }

func newEvidenceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "evidence",
		Short: "Work with evidence bundles",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withCode(ExitUsage, errors.New("evidence: missing subcommand (try: quotaqual evidence verify DIR)"))
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "verify DIR|BUNDLE.tar.gz",
		Short: "Re-check a bundle's checksums and re-run its canary scan",
		Long: `verify re-checks every SHA-256 in the bundle's manifest.json (a missing, extra or changed
file fails) and re-runs the credential canary scan from canaries.json plus the generic
credential patterns. Exit 0: intact and clean; 1: a checksum mismatch or a finding; 2: bad usage
or not a readable bundle.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return withCode(ExitUsage, fmt.Errorf("evidence verify takes exactly one bundle directory or .tar.gz, got %d arguments", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := evidence.Verify(args[0])
			if err != nil {
				return withCode(ExitUsage, err)
			}
			printVerifyReport(cmd.OutOrStdout(), rep)
			if !rep.OK() {
				return withCode(ExitFailed, nil)
			}
			return nil
		},
	})
	return cmd
}

func printVerifyReport(w io.Writer, rep evidence.VerifyReport) {
	fmt.Fprintf(w, "bundle   %s (run %s)\n", rep.Bundle, rep.RunID)
	bad := len(rep.Missing) + len(rep.Extra) + len(rep.Changed)
	if bad == 0 {
		fmt.Fprintf(w, "checksum ok: %d files match manifest.json\n", rep.Files)
	} else {
		fmt.Fprintf(w, "checksum FAILED: %d of %d files\n", bad, rep.Files)
		for _, l := range []struct {
			what  string
			files []string
		}{{"missing", rep.Missing}, {"extra", rep.Extra}, {"changed", rep.Changed}} {
			if len(l.files) > 0 {
				fmt.Fprintf(w, "  %-8s %s\n", l.what, strings.Join(l.files, ", "))
			}
		}
	}
	if len(rep.Findings) == 0 {
		fmt.Fprintf(w, "canaries ok: no credential found (%d hashed forms and the generic patterns checked)\n", rep.Canaries)
	} else {
		fmt.Fprintf(w, "canaries FAILED: %d finding(s)\n", len(rep.Findings))
		for _, f := range rep.Findings {
			fmt.Fprintf(w, "  %s\n", f)
		}
	}
	if rep.OK() {
		fmt.Fprintln(w, "verdict  ok")
	} else {
		fmt.Fprintln(w, "verdict  FAILED")
	}
}
