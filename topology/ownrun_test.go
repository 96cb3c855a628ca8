package topology

import "testing"

// TestOwnTopologyRunID: a run's own topologies get run ids of their own that `down --run-id`
// still finds under the run's id, and another run's id is not taken for one of them.
func TestOwnTopologyRunID(t *testing.T) {
	base := "q20261207-221111-k3v9" // as NewRunID makes them: 21 characters
	seen := map[string]bool{}
	for i := range 13 {
		id, ok := OwnTopologyRunID(base, i)
		if !ok || ValidateRunID(id) != nil {
			t.Fatalf("OwnTopologyRunID(%q, %d) = %q, %v: not a run id", base, i, id, ok)
		}
		if seen[id] {
			t.Fatalf("OwnTopologyRunID(%q, %d) = %q twice", base, i, id)
		}
		seen[id] = true
		if !OfRun(id, base) {
			t.Errorf("OfRun(%q, %q) = false", id, base)
		}
		if OfRun(base, id) {
			t.Errorf("OfRun(%q, %q) = true: the run is not its own topology's", base, id)
		}
	}
	if _, ok := OwnTopologyRunID(base+"xyz", 0); ok {
		t.Error("a 24-character run id got an own topology id: it cannot hold the suffix")
	}
	if _, ok := OwnTopologyRunID(base, 36); ok {
		t.Error("the 37th own topology got an id: the suffix has one character")
	}
	for _, other := range []string{"q20261207-221111-k3v9-a", "q20261207-221111-k3v", "q20261207-221111-k3v9--ab", "demo--a"} {
		if OfRun(other, base) {
			t.Errorf("OfRun(%q, %q) = true: another run's id", other, base)
		}
	}
}
