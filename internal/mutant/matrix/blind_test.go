package matrix_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/mutant/matrix"
)

// repoRoot is the repository the tests run in (this package is three levels down).
var repoRoot = filepath.Join("..", "..", "..")

// TestBlindSetIsWholeAndStillApplies: the blind set's catalogue is valid, lists every patch in
// its directory exactly once, each patch changes only product code (the gateway, the ledger,
// the shared vocabulary — never the scenarios, the stub or the harness, which the writer did
// not know), and each still applies to the tree as it is. A refactor that makes a patch stale
// fails here, so the patch is ported in the same change rather than found stale by the next
// `make mutants`.
func TestBlindSetIsWholeAndStillApplies(t *testing.T) {
	set, err := matrix.LoadBlind(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	if len(set.Mutants) < 20 {
		t.Errorf("the blind set has %d mutants; the qualification's blind catch rate needs at least 20", len(set.Mutants))
	}
	listed := map[string]bool{}
	for _, m := range set.Mutants {
		listed[m.Patch] = true
	}
	files, err := filepath.Glob(filepath.Join(repoRoot, matrix.BlindDir, "*.patch"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if !listed[filepath.Base(f)] {
			t.Errorf("%s is not listed in catalogue.yaml", filepath.Base(f))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, m := range set.Matrix(repoRoot) {
		t.Run(m.Name, func(t *testing.T) {
			b, err := os.ReadFile(m.Patch)
			if err != nil {
				t.Fatal(err)
			}
			changed := matrix.PatchedFiles(b)
			if len(changed) == 0 {
				t.Fatalf("%s changes no file", m.Patch)
			}
			for _, f := range changed {
				if !slices.ContainsFunc([]string{"gateway/", "ledger/", "wire/"}, func(p string) bool { return strings.HasPrefix(f, p) }) ||
					strings.HasSuffix(f, "_test.go") {
					t.Errorf("changes %s: a blind mutant changes only product code (gateway/, ledger/, wire/), never tests", f)
				}
			}
			if err := matrix.CheckApplies(ctx, repoRoot, m.Patch); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestProfileLaunchingReplacesOnlyTheBinary: the generated profile launches the given binary
// and keeps everything else of the profile it copies (its capabilities decide the view).
func TestProfileLaunchingReplacesOnlyTheBinary(t *testing.T) {
	dir := t.TempDir()
	for _, profile := range []string{"", matrix.DefaultBlackBoxProfile} {
		path, err := matrix.ProfileLaunching(repoRoot, profile, "/opt/gw/quotaqual-patched", dir)
		if err != nil {
			t.Fatalf("%q: %v", profile, err)
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(got), `argv: ["/opt/gw/quotaqual-patched", gateway,`) || strings.Contains(string(got), "{{.Binary}}") {
			t.Errorf("%q: the generated profile does not launch the patched binary alone:\n%s", profile, got)
		}
		want := "quota_inspection: quotaqual-admin"
		if profile != "" {
			want = "quota_inspection: none"
		}
		if !strings.Contains(string(got), want) {
			t.Errorf("%q: the generated profile lost its capabilities (want %q)", profile, want)
		}
	}
	if _, err := matrix.ProfileLaunching(repoRoot, "undertest/profiles/altgateway.yaml", "/x", dir); err == nil {
		t.Error("a profile that does not launch quotaqual's gateway was rewritten")
	}
}
