package scenarios

import (
	"context"
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/topology"
)

// TestAPISurfaceSkipsAGatewayDeclaringChatAlone: a profile without capabilities.endpoints
// serves chat alone, so api-surface has nothing to check and is skipped — never passed —
// naming the profile key, before it sends anything (the test topology answers no request).
func TestAPISurfaceSkipsAGatewayDeclaringChatAlone(t *testing.T) {
	env := testEnv(topology.Capabilities{})
	d, err := deployment.NewDeployment("q-surface", env.Profile, []string{"api-surface"})
	if err != nil {
		t.Fatal(err)
	}
	env.Deployment, env.Gateway = d, altProfile(t)
	res := Run(context.Background(), env, []Scenario{apiSurface()})[0]
	if res.Status != evidence.Skipped || !strings.Contains(res.Reason, "declares no endpoint but chat (capabilities.endpoints)") {
		t.Errorf("%s %q, want skipped naming capabilities.endpoints", res.Status, res.Reason)
	}
}
