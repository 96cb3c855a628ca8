package scenarios

import (
	"net/http"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/topology"
)

// TestOverAdmissionFromHistory: the per-subject window check finds usage admitted beyond the
// capacity within one window, and only then.
func TestOverAdmissionFromHistory(t *testing.T) {
	t0 := time.Unix(1000, 0)
	req := func(sentMS, tookMS int, status int) loadRequest {
		start := t0.Add(time.Duration(sentMS) * time.Millisecond)
		return loadRequest{Outcome: Outcome{Status: status, Start: start, End: start.Add(time.Duration(tookMS) * time.Millisecond),
			Usage: &evidence.Usage{TotalTokens: 10}}}
	}
	ok, no := http.StatusOK, http.StatusTooManyRequests
	tests := []struct {
		name string
		hist []loadRequest
		want int64
	}{
		{"none admitted", []loadRequest{req(0, 5, no)}, 0},
		{"six in one window: exactly capacity", []loadRequest{req(0, 5, ok), req(100, 5, ok), req(200, 5, ok), req(300, 5, ok), req(400, 5, ok), req(500, 5, ok), req(600, 5, no)}, 0},
		{"seven in one window: 10 over", []loadRequest{req(0, 5, ok), req(100, 5, ok), req(200, 5, ok), req(300, 5, ok), req(400, 5, ok), req(500, 5, ok), req(600, 5, ok)}, 10},
		{"seven spread over two windows", []loadRequest{req(0, 5, ok), req(100, 5, ok), req(200, 5, ok), req(300, 5, ok), req(400, 5, ok), req(500, 5, ok), req(4100, 5, ok)}, 0},
		{"an answer after the window's end does not count in it", []loadRequest{req(0, 5, ok), req(100, 5, ok), req(200, 5, ok), req(300, 5, ok), req(400, 5, ok), req(500, 5, ok), req(3990, 20, ok)}, 0},
		{"denials do not count", []loadRequest{req(0, 5, ok), req(100, 5, ok), req(200, 5, ok), req(300, 5, ok), req(400, 5, ok), req(500, 5, ok), req(600, 5, no), req(700, 5, no)}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, _ := overAdmission(tt.hist, 4*time.Second, 60, 15); got != tt.want {
				t.Fatalf("overAdmission = %d, want %d", got, tt.want)
			}
		})
	}
}

// TestLoadPlanDrivesATenthPastTheirBudget: the plan reaches every subject, each through both
// gateways in turn, and sends half the requests to a tenth of them.
func TestLoadPlanDrivesATenthPastTheirBudget(t *testing.T) {
	plan := newLoadPlan(topology.GatewayNames(2))
	seen := map[string]int{}
	via := map[string]map[string]int{}
	for k := range 2000 {
		s, gw := plan.subject(k)
		seen[s]++
		if via[s] == nil {
			via[s] = map[string]int{}
		}
		via[s][gw]++
	}
	for s, gws := range via {
		if gws[gwA] == 0 || gws[gwB] == 0 || gws[gwA]-gws[gwB] > 1 || gws[gwB]-gws[gwA] > 1 {
			t.Fatalf("%s went through the gateways %v: each subject must alternate between them", s, gws)
		}
	}
	if len(plan.hot) != 20 || len(seen) != 200 {
		t.Fatalf("%d hot subjects, %d reached; want 20 of 200", len(plan.hot), len(seen))
	}
	if seen[plan.hot[0]] <= 5*seen[plan.cool[0]] {
		t.Fatalf("hot subject %d requests, cool %d: the hot ones must get many times more", seen[plan.hot[0]], seen[plan.cool[0]])
	}
}

// TestEveryProfileHasASustainedLoad: sustained-load owns its load per profile; a profile added
// without one would leave the scenario an error, so it fails here first.
func TestEveryProfileHasASustainedLoad(t *testing.T) {
	for _, name := range deployment.ProfileNames() {
		p, err := deployment.ProfileByName(name)
		if err != nil {
			t.Fatal(err)
		}
		env := &Env{Profile: p}
		l, err := env.sustainedLoad()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		t.Logf("%s: %d/s for %s", name, l.Rate, l.For)
	}
	env := &Env{Profile: deployment.Profile{Name: "reference"}, Load: &SustainedLoad{Rate: 7, For: time.Second}}
	if l, _ := env.sustainedLoad(); l.Rate != 7 || l.For != time.Second {
		t.Errorf("Env.Load does not override the profile's load: %+v", l)
	}
}
