package ledger

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzLoadPolicy feeds arbitrary documents to the strict decoder and the compiler. Whatever the
// input: no panic; an accepted policy is within every bound; a refused one says where.
func FuzzLoadPolicy(f *testing.F) {
	files, _ := filepath.Glob("testdata/policy/*.yaml")
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(""))
	f.Add([]byte("rules: [{name: a, budgets: [{window: 1s, capacity: 1}], estimation: {strategy: model_scaled, fallback_estimate: 1, model_multipliers: {x: 1e308}}}]"))
	f.Add([]byte("a: &x [*x]"))

	facts := []RequestFacts{
		{},
		{Model: "x", MaxTokens: i64(1 << 62), BodyBytes: 1 << 62},
		{MaxCompletionTokens: i64(17), BodyBytes: 123},
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := LoadPolicy(data, testEnv)
		if err != nil {
			for _, line := range strings.Split(err.Error(), "\n") {
				path, msg, ok := strings.Cut(line, ": ")
				if !ok || path == "" || strings.TrimSpace(msg) == "" {
					t.Fatalf("error line without a path and a message: %q", line)
				}
			}
			return
		}
		if n := len(p.Rules); n < 1 || n > MaxRules {
			t.Fatalf("%d rules accepted", n)
		}
		for _, r := range p.Rules {
			if n := len(r.Quota.Budgets); n < 1 || n > MaxBudgets {
				t.Fatalf("rule %q: %d budgets accepted", r.Name, n)
			}
			for _, b := range r.Quota.Budgets {
				if b.Capacity <= 0 || b.Capacity > MaxCapacity || b.Window < MinWindow || b.Window > MaxWindow {
					t.Fatalf("rule %q: budget %+v accepted", r.Name, b)
				}
			}
			for _, fa := range facts {
				if e := r.Estimate(fa); e < 1 || e > MaxEstimate {
					t.Fatalf("rule %q: estimate %d for %+v", r.Name, e, fa)
				}
			}
			_ = r.Key("s", "m")
		}
		_, _ = p.Match("s", "m")
	})
}
