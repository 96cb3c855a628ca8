package qualify

import (
	"errors"
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/topology"
)

// TestPrepareNamesTheRegisteredEngines checks that --topology's choices come from the engine
// registry: an unknown engine is a usage error naming the flag and every registered engine, and
// a command that serves fewer leaves those out.
func TestPrepareNamesTheRegisteredEngines(t *testing.T) {
	names := topology.EngineNames()
	if len(names) < 4 {
		t.Fatalf("registered engines %v: want every engine of topology/engines", names)
	}
	_, err := Prepare(Options{Topology: "vm"})
	var ue *UsageError
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), `--topology "vm"`) {
		t.Fatalf("Prepare with --topology vm: %v, want a usage error naming --topology", err)
	}
	for _, n := range append([]string{topology.EngineAuto}, names...) {
		if !strings.Contains(err.Error(), n) {
			t.Errorf("the error %q does not offer %s", err, n)
		}
	}
	if c := topology.EngineChoices(topology.EngineKind); strings.Contains(c, topology.EngineKind) || !strings.Contains(c, topology.EngineNetns) {
		t.Errorf("TopologyChoices without kind: %q", c)
	}
}

// TestPrepareResolvesOnce checks that Prepare leaves a plan nothing needs to check again: auto
// resolved to a registered engine, a run id, the profile's parameters and its scenarios.
func TestPrepareResolvesOnce(t *testing.T) {
	p, err := Prepare(Options{Profile: "quick"})
	if err != nil {
		t.Fatal(err)
	}
	if !topology.IsEngine(p.Engine) {
		t.Errorf("auto resolved to %q, not a registered engine", p.Engine)
	}
	if err := topology.ValidateRunID(p.RunID); err != nil {
		t.Errorf("run id: %v", err)
	}
	if p.Params().Name != "quick" || len(p.Selected()) == 0 {
		t.Errorf("profile %q with %d scenarios: want quick's default run", p.Params().Name, len(p.Selected()))
	}
	spec := p.Spec(t.TempDir(), "/bin/true", nil)
	if spec.RunID != p.RunID || spec.Store != topology.StoreSingle {
		t.Errorf("spec run id %q store %q: want the plan's %q and single", spec.RunID, spec.Store, p.RunID)
	}
	if _, err := Prepare(Options{Topology: topology.EngineProcess, Kind: topology.KindOptions{Context: "c"}}); err == nil || !strings.Contains(err.Error(), "--context") {
		t.Errorf("--context without kind: %v, want an error naming it", err)
	}
}
