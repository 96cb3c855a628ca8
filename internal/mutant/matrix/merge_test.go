package matrix

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
)

// TestMergeJoinsPartsAndKeepsAFailedControl: two parts saved and loaded merge into one matrix
// with both parts' rows and the span of both runs; a control one part failed stays failed.
func TestMergeJoinsPartsAndKeepsAFailedControl(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	pass := Run{Status: map[string]evidence.Status{"s1": evidence.Passed}}
	fail := Run{Status: map[string]evidence.Status{"s1": evidence.Failed}}
	base := Matrix{Topology: "netns", Views: []View{{Name: WhiteBox}}, Scenarios: []string{"s1"}}
	a, b := base, base
	a.Started, a.Wall = t0, 10*time.Minute
	a.Controls = map[string]Run{WhiteBox: pass}
	a.Rows = []Row{{Mutant: Mutant{Name: "m1", Origin: OriginCatalogue}, Runs: map[string]Run{WhiteBox: fail}}}
	b.Started, b.Wall = t0.Add(time.Minute), 30*time.Minute
	b.Controls = map[string]Run{WhiteBox: fail, controlKey(WhiteBox, true): pass}
	b.Rows = []Row{{Mutant: Mutant{Name: "m2", Origin: OriginBlind}, Runs: map[string]Run{WhiteBox: pass}}}
	dir := t.TempDir()
	for i, m := range []Matrix{a, b} {
		if err := m.Save(filepath.Join(dir, string(rune('a'+i))+".json")); err != nil {
			t.Fatal(err)
		}
	}
	la, err := Load(filepath.Join(dir, "a.json"))
	if err != nil {
		t.Fatal(err)
	}
	lb, err := Load(filepath.Join(dir, "b.json"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := Merge(la, lb)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Rows) != 2 || m.Rows[0].Mutant.Name != "m1" || m.Rows[1].Mutant.Name != "m2" {
		t.Errorf("rows %+v, want m1 then m2", m.Rows)
	}
	if !m.Started.Equal(t0) || m.Wall != 31*time.Minute {
		t.Errorf("started %s, wall %s: want %s and 31m0s", m.Started, m.Wall, t0)
	}
	if m.ControlsPassed() || len(m.Controls) != 2 {
		t.Errorf("controls %+v: want both keys, the failed white-box control kept", m.Controls)
	}
	c := base
	c.Scenarios = []string{"s2"}
	if _, err := Merge(a, c); err == nil {
		t.Error("parts with other scenario lists merged without an error")
	}
}
