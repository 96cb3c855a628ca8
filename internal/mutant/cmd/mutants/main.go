// Command mutants runs the qualification against every mutant — the catalogue of
// internal/mutant and the blind set of internal/mutant/blind — in the white-box and the
// black-box view, and writes the mutation matrix (MUTANTS.md). `make mutants` builds the
// binaries and runs it:
//
//	go run ./internal/mutant/cmd/mutants -tagged bin/quotaqual-mutants -plain bin/quotaqual -out MUTANTS.md
//
// It exits 1 when a control run (the unmutated gateway) fails a scenario — the matrix would
// mean nothing — and 0 otherwise: a mutant no scenario catches is a finding written into the
// matrix, and so is a blind patch that no longer applies.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/internal/mutant/matrix"
	"github.com/quotaqual/quotaqual/scenarios"
	"github.com/quotaqual/quotaqual/topology"
)

func main() {
	var (
		tagged, plain, plainGateway, out, topo, blackProfile, origin, views, save string
		build                                                                     time.Duration
		only, scens, merge                                                        multi
	)
	flag.StringVar(&tagged, "tagged", "bin/quotaqual-mutants", "quotaqual binary built with -tags quotaqual_mutants (harness and gateway of the catalogue runs)")
	flag.StringVar(&plain, "plain", "bin/quotaqual", "unmutated quotaqual binary (harness of the blind runs)")
	flag.StringVar(&plainGateway, "plain-gateway", "", "the unmutated gateway binary of the blind path's control (default -plain; give the binary itself when -plain is a wrapper)")
	flag.StringVar(&out, "out", "MUTANTS.md", "where to write the matrix")
	flag.StringVar(&topo, "topology", topology.EngineNetns, "topology engine of every run")
	flag.StringVar(&blackProfile, "blackbox-profile", matrix.DefaultBlackBoxProfile, "the gateway profile of the black-box view")
	flag.StringVar(&origin, "origin", "all", "which mutants: catalogue, blind or all")
	flag.StringVar(&views, "views", "white-box,black-box", "the views to run, comma-separated: white-box, black-box")
	flag.Var(&scens, "scenario", "run only this scenario (repeatable; default: the profile's default list)")
	flag.DurationVar(&build, "build-time", 0, "how long building the binaries took (reported in the matrix)")
	flag.Var(&only, "mutant", "run only this mutant, of either origin (repeatable; default: all of -origin)")
	flag.StringVar(&save, "save", "", "also write the matrix as JSON to this file (for -merge)")
	flag.Var(&merge, "merge", "run nothing: merge matrices saved with -save (repeatable) and write -out from them")
	flag.Parse()

	usage := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "mutants: "+format+"\n", args...)
		os.Exit(2)
	}
	var vs []matrix.View
	for _, v := range strings.Split(views, ",") {
		switch strings.TrimSpace(v) {
		case matrix.WhiteBox:
			vs = append(vs, matrix.View{Name: matrix.WhiteBox})
		case matrix.BlackBox:
			vs = append(vs, matrix.View{Name: matrix.BlackBox, Profile: blackProfile})
		default:
			usage("-views: %q is not a view: use white-box and/or black-box", v)
		}
	}
	var all []matrix.Mutant
	var blind *matrix.BlindSet
	switch origin {
	case "catalogue", "blind", "all":
	default:
		usage("-origin %q: use catalogue, blind or all", origin)
	}
	if origin != "blind" {
		all = append(all, matrix.Catalogue()...)
	}
	if origin != "catalogue" {
		set, err := matrix.LoadBlind(".")
		if err != nil {
			usage("%v", err)
		}
		blind = &set
		all = append(all, set.Matrix(".")...)
	}
	var names []string
	for _, m := range all {
		names = append(names, m.Name)
	}
	if len(only) > 0 {
		var picked []matrix.Mutant
		for _, n := range only {
			i := slices.Index(names, n)
			if i < 0 {
				usage("-mutant %q is not a mutant of -origin %s: choose from %s", n, origin, strings.Join(names, ", "))
			}
			picked = append(picked, all[i])
		}
		all = picked
	}
	m, err := runOrMerge(vs, all, merge, matrix.RunOptions{Tagged: tagged, Plain: plain, PlainGateway: plainGateway, Topology: topo, Views: vs,
		Scenarios: scens, Root: ".", Log: os.Stderr})
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
	if save != "" {
		if err := m.Save(save); err != nil {
			fmt.Fprintln(os.Stderr, "mutants:", err)
			os.Exit(1)
		}
	}
	if err := os.WriteFile(out, []byte(m.Markdown("make mutants", build, blind)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "mutants: wrote %s (wall time %s)\n", out, m.Wall.Round(time.Second))
	for _, r := range m.Rates() {
		fmt.Fprintf(os.Stderr, "mutants: %s: %d mutants, caught %v\n", orAll(string(r.Origin)), r.Mutants, r.Caught)
	}
	if !m.ControlsPassed() {
		fmt.Fprintln(os.Stderr, "mutants: a control run (no mutant) failed: fix that first")
		os.Exit(1)
	}
}

// runOrMerge runs every mutant of all, or, given saved parts, merges them instead.
func runOrMerge(vs []matrix.View, all []matrix.Mutant, parts []string, o matrix.RunOptions) (matrix.Matrix, error) {
	if len(parts) == 0 {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
		defer stop()
		return matrix.RunAll(ctx, o, all, scenarios.Names())
	}
	var ms []matrix.Matrix
	for _, p := range parts {
		m, err := matrix.Load(p)
		if err != nil {
			return matrix.Matrix{}, err
		}
		ms = append(ms, m)
	}
	return matrix.Merge(ms...)
}

func orAll(s string) string {
	if s == "" {
		return "all"
	}
	return s
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }
