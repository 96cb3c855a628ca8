package scenarios

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/topology"
)

// dataPortOnly is a topology whose gateways' data port is one HTTP server and which answers
// nothing else: enough for api-surface's probe of a gateway declaring chat alone.
type dataPortOnly struct {
	capsOnly
	url string
}

func (d dataPortOnly) Client() *http.Client { return http.DefaultClient }
func (d dataPortOnly) Gateway(name string) topology.GatewayEndpoint {
	return topology.GatewayEndpoint{Name: name, DataURL: d.url}
}

// TestAPISurfaceProbesTheDataPortOfAGatewayDeclaringChatAlone: a profile without
// capabilities.endpoints serves chat alone, so api-surface calls no other endpoint (each named
// not made, never passed) but still asks the data port for the admin paths without
// credentials: a gateway answering them 404 passes, one answering /admin/quota with quota
// figures fails on both its probes (with and without a subject) and on no other.
func TestAPISurfaceProbesTheDataPortOfAGatewayDeclaringChatAlone(t *testing.T) {
	for _, tc := range []struct {
		name    string
		handler http.HandlerFunc
		want    evidence.Status
		failing string
	}{
		{"admin paths 404", http.NotFound, evidence.Passed, ""},
		{"quota inspection served", func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/admin/quota" {
				http.NotFound(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"subject":"application-b","capacity":60,"settled":42,"reserved_tokens":0}`))
		}, evidence.Failed, "GET /admin/quota"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			defer srv.Close()
			env := testEnv(topology.Capabilities{})
			env.Topo = dataPortOnly{capsOnly: capsOnly{}, url: srv.URL}
			d, err := deployment.NewDeployment("q-surface", env.Profile, deployment.Named("api-surface"))
			if err != nil {
				t.Fatal(err)
			}
			env.Deployment, env.Gateway = d, altProfile(t)
			res := Run(context.Background(), env, []Scenario{apiSurface()})[0]
			if res.Status != tc.want {
				t.Fatalf("%s %q, want %s", res.Status, res.Reason, tc.want)
			}
			if !strings.Contains(res.Evidence, "capabilities.endpoints") {
				t.Errorf("evidence %q names no endpoint left out for capabilities.endpoints", res.Evidence)
			}
			probes := 0
			for _, a := range res.Assertions {
				if !strings.HasPrefix(a.Name, "data port, no credentials") {
					continue
				}
				probes++
				if wantFail := tc.failing != "" && strings.Contains(a.Name, tc.failing); a.OK == wantFail {
					t.Errorf("check %q ok=%v (observed %v)", a.Name, a.OK, a.Observed)
				}
			}
			if probes != len(adminProbes) {
				t.Errorf("%d admin probes, want %d: %+v", probes, len(adminProbes), res.Assertions)
			}
		})
	}
}
