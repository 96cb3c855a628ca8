package engines_test

import (
	"testing"

	"github.com/quotaqual/quotaqual/topology"
	_ "github.com/quotaqual/quotaqual/topology/engines"
)

// TestEveryEngineIsBuiltIn: importing package engines registers every engine, which is what
// the commands and qualify rely on.
func TestEveryEngineIsBuiltIn(t *testing.T) {
	for _, name := range []string{topology.EngineNetns, topology.EngineProcess, topology.EngineDocker, topology.EngineKind} {
		if !topology.IsEngine(name) {
			t.Errorf("engine %q is not registered", name)
		}
	}
	if topology.IsEngine(topology.EngineAuto) {
		t.Error("auto is registered as an engine: it only picks one")
	}
}
