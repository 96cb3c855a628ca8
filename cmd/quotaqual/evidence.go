package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/wire"
)

func init() { subcommands = append(subcommands, newEvidenceCmd) }

func newEvidenceCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "evidence",
		Short: "Work with evidence bundles",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withCode(wire.ExitUsage, errors.New("evidence: missing subcommand (try: quotaqual evidence verify DIR)"))
		},
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "verify DIR|BUNDLE.tar.gz",
		Short: "Re-check a bundle's checksums and re-run its canary scan",
		Long: `verify re-checks every SHA-256 in the bundle's manifest.json (a missing, extra or changed
file fails) and re-runs the credential canary scan from canaries.json plus the generic
credential patterns. Exit 0: intact and clean; 1: a checksum mismatch or a finding; 2: bad usage
or not a readable bundle.`,
		Args: exactlyOneBundle("verify"),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := evidence.Verify(args[0])
			if err != nil {
				return withCode(wire.ExitUsage, err)
			}
			printVerifyReport(cmd.OutOrStdout(), rep)
			if !rep.OK() {
				return withCode(wire.ExitFailed, nil)
			}
			return nil
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "report DIR|BUNDLE.tar.gz",
		Short: "Render the bundle's report.html again from its files",
		Long: `report renders report.html from the bundle's manifest.json, results.json and
requests.jsonl. For a directory it replaces DIR/report.html, updates its checksum in
manifest.json and re-verifies the bundle; a .tar.gz is left untouched and the report is written
next to it as NAME.report.html. It prints the report's path. Exit 0: written; 1: written but the
bundle no longer verifies; 2: bad usage or not a readable bundle.`,
		Args: exactlyOneBundle("report"),
		RunE: func(cmd *cobra.Command, args []string) error {
			out, err := evidence.RegenerateReport(args[0])
			if err != nil {
				if out != "" {
					return withCode(wire.ExitFailed, err)
				}
				return withCode(wire.ExitUsage, err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), out)
			return nil
		},
	})
	var diffJSON bool
	var threshold float64
	diff := &cobra.Command{
		Use:   "diff BASELINE CANDIDATE",
		Short: "Compare two bundles: levels, verdict changes, measures that moved, settings that differ",
		Long: `diff compares a candidate bundle with a baseline (each a directory or .tar.gz): the level
each qualified (qualified, partial, failed), scenarios whose verdict changed, numeric facts and per-status request counts and latencies that moved
(with the relative change; smaller changes than --threshold are only counted), and differences of versions, topology, profile and effective
configs. Exit 0: no verdict regressed; 1: a verdict or the level regressed (a pass that is
now failed, skipped or missing, a skip that is now a failure, a lower level); 2: bad usage or
not a readable bundle.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 2 {
				return withCode(wire.ExitUsage, fmt.Errorf("evidence diff takes a baseline and a candidate bundle, got %d arguments", len(args)))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if threshold < 0 {
				return withCode(wire.ExitUsage, fmt.Errorf("--threshold %g: give a relative change ≥ 0, e.g. 0.25 for 25%%", threshold))
			}
			d, err := evidence.DiffBundles(args[0], args[1], threshold)
			if err != nil {
				return withCode(wire.ExitUsage, err)
			}
			if diffJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				if err := enc.Encode(d); err != nil {
					return err
				}
			} else {
				d.WriteText(cmd.OutOrStdout())
			}
			if d.Regressed {
				return withCode(wire.ExitFailed, nil)
			}
			return nil
		},
	}
	diff.Flags().BoolVar(&diffJSON, "json", false, "print the diff as JSON")
	diff.Flags().Float64Var(&threshold, "threshold", evidence.DefaultThreshold, "list a measure when its relative change is at least this (0: every change)")
	cmd.AddCommand(diff)
	return cmd
}

// exactlyOneBundle accepts one bundle directory or .tar.gz argument.
func exactlyOneBundle(sub string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != 1 {
			return withCode(wire.ExitUsage, fmt.Errorf("evidence %s takes exactly one bundle directory or .tar.gz, got %d arguments", sub, len(args)))
		}
		return nil
	}
}

func printVerifyReport(w io.Writer, rep evidence.VerifyReport) {
	fmt.Fprintf(w, "bundle   %s (run %s)\n", rep.Bundle, rep.RunID)
	if rep.Partial != "" {
		fmt.Fprintf(w, "partial  %s\n", rep.Partial)
	}
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
