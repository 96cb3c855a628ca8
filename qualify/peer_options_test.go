package qualify

import (
	"errors"
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/topology"
)

// TestPeerRunsAreRefusedBeforeAnythingStarts checks a peer profile's run is a usage error,
// naming the fix, when its engine cannot express the profile's window (envoy ratelimit on the
// quick profile's 4 s), when the topology cannot place its services, or when its engine is not
// built.
func TestPeerRunsAreRefusedBeforeAnythingStarts(t *testing.T) {
	t.Setenv("QUOTAQUAL_PEERS_DIR", t.TempDir()) // nothing built there
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Gateway: "envoy-ai-gateway", Profile: "quick"}, "run it with --profile reference"},
		{Options{Gateway: "gubernator", Profile: "quick", Topology: topology.EngineProcess}, "use --topology netns"},
		{Options{Gateway: "gubernator", Profile: "quick", Topology: topology.EngineNetns}, "make peers"},
		{Options{Gateway: "kuadrant", Profile: "reference", Topology: topology.EngineNetns}, "quotaqual peers build envoy-ratelimit"},
	} {
		err := c.o.Validate()
		var ue *UsageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "--gateway "+c.o.Gateway) {
			t.Errorf("%s on %s/%s: %v, want a usage error naming %q", c.o.Gateway, c.o.Profile, c.o.Topology, err, c.want)
		}
	}
}
