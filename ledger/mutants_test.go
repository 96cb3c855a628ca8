//go:build quotaqual_mutants

package ledger

import (
	"testing"

	"github.com/quotaqual/quotaqual/internal/mutant"
)

// TestMutantRewritesApply: every script mutant's rewrite matches every script as it ships
// (go test -tags quotaqual_mutants ./ledger; make mutants runs it first).
func TestMutantRewritesApply(t *testing.T) {
	for n := range rewrites {
		if err := checkRewrite(n); err != nil {
			t.Error(err)
		}
	}
	if err := checkRewrite(mutant.Name("not-a-script-mutant")); err != nil {
		t.Errorf("a mutant without a rewrite: %v", err)
	}
}
