package matrix

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"time"
)

// Save writes the matrix as JSON, so parts run apart (the catalogue and the blind set, side by
// side on two machines' worth of waiting) can be merged into one MUTANTS.md.
func (m Matrix) Save(path string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// Load reads a matrix Save wrote.
func Load(path string) (Matrix, error) {
	var m Matrix
	b, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: not a saved matrix: %w", path, err)
	}
	return m, nil
}

// Merge joins parts run with the same views, scenarios and topology into one matrix: their
// rows in order, their controls together (a control both parts ran is kept from the part where
// it failed, so a merge never hides a failed control), started at the earliest part's start and
// lasting until the latest part's end.
func Merge(parts ...Matrix) (Matrix, error) {
	if len(parts) == 0 {
		return Matrix{}, fmt.Errorf("nothing to merge")
	}
	out := parts[0]
	out.Controls = map[string]Run{}
	out.Rows = nil
	end := out.Started.Add(out.Wall)
	for i, p := range parts {
		if p.Topology != out.Topology || !slices.Equal(p.Scenarios, out.Scenarios) || !slices.Equal(p.Views, out.Views) {
			return Matrix{}, fmt.Errorf("part %d ran another topology, scenario list or views than part 1: merge only parts of one run's settings", i+1)
		}
		for k, c := range p.Controls {
			if old, ok := out.Controls[k]; !ok || (old.Error == "" && len(old.Caught(out.Scenarios)) == 0) {
				out.Controls[k] = c
			}
		}
		out.Rows = append(out.Rows, p.Rows...)
		if p.Started.Before(out.Started) {
			out.Started = p.Started
		}
		if e := p.Started.Add(p.Wall); e.After(end) {
			end = e
		}
	}
	out.Wall = end.Sub(out.Started).Round(time.Second)
	return out, nil
}
