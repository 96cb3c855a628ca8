package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestImportGraphRunsOneWay checks the layering DESIGN.md states, from the build's own
// dependency graph: no package of ours that the shipped binary links imports the testing
// package (test helpers such as ledger/ledgertest stay out of it; what remains is
// testcontainers-go's own helpers, which the docker engine brings), and the gateway — what
// is qualified and ships — links neither the scenarios, the harness nor the evidence bundle.
func TestImportGraphRunsOneWay(t *testing.T) {
	deps := func(pkg string) map[string][]string {
		t.Helper()
		out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", pkg).Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		graph := map[string][]string{}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			f := strings.Fields(line)
			graph[f[0]] = f[1:]
		}
		return graph
	}
	const mod = "github.com/quotaqual/quotaqual/"
	for p, imports := range deps("github.com/quotaqual/quotaqual/cmd/quotaqual") {
		if !strings.HasPrefix(p, mod) {
			continue
		}
		for _, i := range imports {
			if i == "testing" {
				t.Errorf("%s imports testing and is linked into the shipped binary: move what it shares into a package without tests' helpers", p)
			}
		}
	}
	gw := deps(mod + "gateway")
	for _, forbidden := range []string{"scenarios", "qualify", "evidence", "topology", "internal/mutant/matrix", "undertest"} {
		if _, ok := gw[mod+forbidden]; ok {
			t.Errorf("the gateway links %s%s: the gateway must not depend on the harness", mod, forbidden)
		}
	}
}
