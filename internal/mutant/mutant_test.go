package mutant_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/quotaqual/quotaqual/internal/mutant"
	"github.com/quotaqual/quotaqual/internal/testbin"
)

// TestCatalogueIsConsistent: names are unique, every entry says what it breaks and its class,
// and every mutant either names the scenarios expected to catch it or says why none can.
func TestCatalogueIsConsistent(t *testing.T) {
	seen := map[mutant.Name]bool{}
	for _, m := range mutant.Catalogue {
		if seen[m.Name] {
			t.Errorf("%s: listed twice", m.Name)
		}
		seen[m.Name] = true
		if m.Breaks == "" || m.Class == "" || (m.Layer != "gateway" && m.Layer != "ledger") {
			t.Errorf("%s: needs what it breaks, its class and its layer: %+v", m.Name, m)
		}
		if len(m.CaughtBy) == 0 && m.Note == "" {
			t.Errorf("%s: no scenario is expected to catch it and no note says why", m.Name)
		}
	}
}

// TestShippedBinaryCarriesNoMutant: the default build of quotaqual contains none of the
// mutants' code (the hooks are constant and folded away), while the tagged build does — the
// positive control that the probe strings are the right ones.
func TestShippedBinaryCarriesNoMutant(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the quotaqual binary twice; not in -short")
	}
	dir := t.TempDir()
	plain, tagged := filepath.Join(dir, "quotaqual"), filepath.Join(dir, "quotaqual-mutants")
	if err := testbin.Build(plain); err != nil {
		t.Fatal(err)
	}
	if err := testbin.Build(tagged, "quotaqual_mutants"); err != nil {
		t.Fatal(err)
	}
	probes := []string{mutant.EnvVar, "mutant armed: this gateway is deliberately broken", ":swept"}
	for _, c := range []struct {
		path string
		want bool
	}{{plain, false}, {tagged, true}} {
		b, err := os.ReadFile(c.path)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range probes {
			if got := bytes.Contains(b, []byte(p)); got != c.want {
				t.Errorf("%s contains %q: %v, want %v", filepath.Base(c.path), p, got, c.want)
			}
		}
	}
}
