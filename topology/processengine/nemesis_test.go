package processengine

import (
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/internal/enginetest"
)

// TestProcessNemesisLevers: pause (SIGSTOP of the gateway's process group), store stall and
// memory pressure work on the process engine; loss does not, and says why.
func TestProcessNemesisLevers(t *testing.T) {
	spec := enginetest.NewSpec(t, "")
	topo, _ := enginetest.UpTopology(t, topology.EngineProcess, spec)
	if ok, why := topology.Loss.Available(topo); ok || why == "" {
		t.Errorf("loss on process: %v %q, want unavailable with a reason", ok, why)
	}
	enginetest.CheckNemesisLevers(t, topo, spec.Deployment)
}

// TestProcessHasNoLinkProxy: the store-link levers need a namespace per gateway; the process
// engine says so rather than pulling them.
func TestProcessHasNoLinkProxy(t *testing.T) {
	topo, err := topology.New(topology.EngineProcess, enginetest.NewSpec(t, ""))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range topology.LinkLevers() {
		if ok, why := l.Available(topo); ok || !strings.Contains(why, "no LinkProxier") {
			t.Errorf("%s on process: %v %q, want unavailable for want of a LinkProxier", l.Name(), ok, why)
		}
	}
}
