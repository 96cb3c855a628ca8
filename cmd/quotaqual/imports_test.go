package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The layering DESIGN.md states, as data the build's own dependency graph is checked against.
//
// layers lists the module's packages bottom first: a package may import packages of its own
// layer and of the layers below it, never of a layer above (an import that "runs back up").
// An entry is a package path relative to the module, or a path ending in "/..." for every
// package below it; the longest entry that matches a package places it. A package no entry
// places fails the test: a new package is given its place here.
var layers = [][]string{
	// Vocabulary and helpers with one job, importing nothing of ours above them.
	{"wire", "internal/hostport", "internal/strictyaml", "internal/httpget", "internal/version",
		"internal/valkeyproc", "internal/ui", "internal/mutant", "internal/testlock",
		"internal/testbin", "internal/valkeytest", "internal/quantile", "internal/peers", "internal/peers/rls",
		"internal/peers/shim", "topology/images", "topology/k8s", "walkthrough",
		"hack/..."},
	// The limiter, the provider stub, the evidence bundle and the peers' shims.
	{"ledger", "providerstub", "evidence", "internal/peers/..."},
	// What is qualified (the gateway, a second gateway) and what a run deploys.
	{"ledger/...", "gateway", "internal/altgateway", "deployment"},
	// The seam to the gateway under test, and the peers' table built on it.
	{"undertest", "internal/peers/table"},
	// The engine contract and the engines behind it.
	{"topology"},
	{"topology/..."},
	{"topology/engines"},
	// The scenarios, then the run's wiring and the mutation matrix that drive them.
	{"scenarios"},
	{"qualify", "internal/mutant/matrix"},
	// What drives a topology outside the qualification's scenarios: the chaos schedule, the
	// load knee, and the admission benchmark beside the peers.
	{"chaos", "internal/loadknee", "internal/peers/peerbench"},
	// Commands and examples.
	{"cmd/...", "internal/mutant/cmd/...", "internal/peers/peerbench/cmd/...", "internal/benchtargets/cmd/...", "examples/..."},
}

// neverLinks lists, for a package, packages its build must never contain, directly or through
// any other import: what ships or is qualified stays free of the harness.
var neverLinks = map[string][]string{
	// The gateway is what is qualified and ships: it consults the mutant switch and nothing
	// of the harness — not the bundle, the matrix runner, the scenarios, the engines or the
	// seam.
	"gateway": {"evidence", "internal/mutant/matrix", "scenarios", "qualify", "topology",
		"undertest", "deployment", "providerstub"},
	// The mutant switch the gateway and the ledger consult: the matrix runner and the bundle
	// stay on the harness's side of it.
	"internal/mutant": {"internal/mutant/matrix", "evidence"},
	"ledger":          {"gateway", "evidence", "internal/mutant/matrix"},
	// The scenarios reach the engines only through the contract (package topology).
	"scenarios": {"qualify", "topology/engines", "topology/dockerengine", "topology/kindengine",
		"topology/netnsengine", "topology/processengine"},
}

// testingVia names the packages outside the module that the shipped binary may link "testing"
// through, each with why; any other path to it fails. Drop an entry when its reason goes.
var testingVia = map[string]string{
	// The docker engine (topology/dockerengine) drives containers with testcontainers-go,
	// whose root and log packages import testing for their test helpers.
	"github.com/testcontainers/testcontainers-go":     "the docker engine's container client",
	"github.com/testcontainers/testcontainers-go/log": "the docker engine's container client",
}

const modulePath = "github.com/quotaqual/quotaqual"

// importGraph is the non-test import graph of pkgs under build tags: each package to its
// imports, every dependency included when deps is set.
func importGraph(t *testing.T, tags string, deps bool, pkgs ...string) map[string][]string {
	t.Helper()
	args := []string{"list", "-tags", tags, "-f", "{{.ImportPath}} {{join .Imports \" \"}}"}
	if deps {
		args = append(args, "-deps")
	}
	cmd := exec.Command("go", append(args, pkgs...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	graph := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		graph[f[0]] = f[1:]
	}
	return graph
}

// rel is p relative to the module, and whether p is in it.
func rel(p string) (string, bool) {
	if p == modulePath {
		return ".", true
	}
	r, ok := strings.CutPrefix(p, modulePath+"/")
	return r, ok
}

// layerOf places a module package (relative path) by its longest matching entry of layers.
func layerOf(p string) (layer int, ok bool) {
	best := -1
	for i, entries := range layers {
		for _, e := range entries {
			n := 0
			switch {
			case e == p:
				n = len(e) + 1 // an exact entry beats a "/..." entry of the same length
			case strings.HasSuffix(e, "/...") && strings.HasPrefix(p, strings.TrimSuffix(e, "...")):
				n = len(e) - 3
			}
			if n > best {
				best, layer, ok = n, i, true
			}
		}
	}
	return layer, ok
}

// TestImportGraphRunsOneWay checks the layering above on the module's import graph, with and
// without the mutants' build tag.
func TestImportGraphRunsOneWay(t *testing.T) {
	for _, tags := range []string{"", "quotaqual_mutants"} {
		graph := importGraph(t, tags, false, "./...")
		for p, imports := range graph {
			from, ok := rel(p)
			if !ok {
				continue
			}
			lf, ok := layerOf(from)
			if !ok {
				t.Errorf("package %s has no place in the layering: add it to layers in imports_test.go", from)
				continue
			}
			for _, i := range imports {
				to, ok := rel(i)
				if !ok {
					continue
				}
				if lt, ok := layerOf(to); ok && lt > lf {
					t.Errorf("tags %q: %s imports %s, a layer above it: the import runs back up (move what %s needs down, or %s up)", tags, from, to, from, from)
				}
			}
		}
	}
}

// TestNeverLinks checks neverLinks on each package's full dependency closure, with and without
// the mutants' build tag (the mutants' code is what the gateway compiles in under it).
func TestNeverLinks(t *testing.T) {
	for _, tags := range []string{"", "quotaqual_mutants"} {
		for pkg, forbidden := range neverLinks {
			deps := importGraph(t, tags, true, modulePath+"/"+pkg)
			for _, f := range forbidden {
				if _, ok := deps[modulePath+"/"+f]; ok {
					t.Errorf("tags %q: %s links %s: it must not depend on it (see neverLinks)", tags, pkg, f)
				}
			}
		}
	}
}

// TestBinaryLinksNoTestingOfOurs checks that the shipped binary links the testing package only
// through testingVia: no package of ours imports it (test helpers such as ledger/ledgertest stay
// out of the binary), and no new dependency brings it.
func TestBinaryLinksNoTestingOfOurs(t *testing.T) {
	deps := importGraph(t, "", true, modulePath+"/cmd/quotaqual")
	var via []string
	for p, imports := range deps {
		if slices.Contains(imports, "testing") {
			via = append(via, p)
		}
	}
	slices.Sort(via)
	for _, p := range via {
		if _, ok := testingVia[p]; !ok {
			t.Errorf("%s imports testing and is linked into the shipped binary: move what the binary needs into a package without tests' helpers", p)
		}
	}
	for p := range testingVia {
		if !slices.Contains(via, p) {
			t.Errorf("testingVia allows %s, which no longer brings testing into the binary: drop the entry", p)
		}
	}
}
