// Command mutants runs the qualification against every mutant of internal/mutant and writes
// the mutation matrix (MUTANTS.md). `make mutants` builds the tagged binary and runs it:
//
//	go run ./internal/mutant/cmd/mutants -bin bin/quotaqual-mutants -out MUTANTS.md
//
// It exits 1 when the unmutated control run fails a scenario (the matrix would mean nothing)
// and 0 otherwise: a mutant no scenario catches is a finding written into the matrix.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/internal/mutant"
	"github.com/quotaqual/quotaqual/scenarios"
)

func main() {
	var (
		bin, out, topo, gateway string
		build                   time.Duration
		only, scens             multi
	)
	flag.StringVar(&bin, "bin", "bin/quotaqual-mutants", "quotaqual binary built with -tags quotaqual_mutants")
	flag.StringVar(&out, "out", "MUTANTS.md", "where to write the matrix")
	flag.StringVar(&topo, "topology", "netns", "topology engine of every run")
	flag.StringVar(&gateway, "gateway", "", "gateway profile of every run (quotaqual run --gateway): a shipped name or a file; default quotaqual's own")
	flag.Var(&scens, "scenario", "run only this scenario (repeatable; default: the profile's default list)")
	flag.DurationVar(&build, "build-time", 0, "how long building the binary took (reported in the matrix)")
	flag.Var(&only, "mutant", "run only this mutant (repeatable; default: the whole catalogue)")
	flag.Parse()

	var names []mutant.Name
	for _, n := range only {
		if _, ok := mutant.Lookup(n); !ok {
			fmt.Fprintf(os.Stderr, "mutants: -mutant %q is not in the catalogue: choose from %s\n", n, strings.Join(mutant.Names(), ", "))
			os.Exit(2)
		}
		names = append(names, mutant.Name(n))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	m, err := mutant.Run(ctx, mutant.RunOptions{Binary: bin, Topology: topo, Gateway: gateway, Scenarios: scens, Log: os.Stderr}, names, scenarios.Names())
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
	if err := os.WriteFile(out, []byte(m.Markdown("make mutants", build)), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "mutants:", err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "mutants: wrote %s (wall time %s)\n", out, m.Wall.Round(time.Second))
	if !m.ControlPassed() {
		fmt.Fprintf(os.Stderr, "mutants: the unmutated control run failed %v: fix that first\n", m.Control.Caught(m.Scenarios))
		os.Exit(1)
	}
}

type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }
