package loadknee

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/testbin"
	"github.com/quotaqual/quotaqual/topology"
)

// A real knee search at low rates on the process topology (a real valkey-server, gateways and
// provider stubs as processes): every step ran the scenario's load at its rate and duration,
// each step's facts were read back, and the knee is the highest step that met the bounds. It
// asserts the mechanics, not a rate: this machine may be loaded.
func TestKneeSearchRunsTheLoadAtLowRates(t *testing.T) {
	if testing.Short() {
		t.Skip("brings a topology up: not in -short")
	}
	bin := filepath.Join(t.TempDir(), "quotaqual")
	if err := testbin.Build(bin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := Options{Topology: topology.EngineProcess, Profile: "quick", Binary: bin, Rate: 20, Duration: time.Second,
		FindKnee: true, MaxRate: 40, Bounds: Bounds{MaxLag: 0.01, AdmitP99: 2 * time.Second},
		Progress: func(s string) { t.Log(s) }}
	rep, err := Run(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Steps) == 0 || rep.Steps[0].Rate != 20 {
		t.Fatalf("steps %+v: want a first step at 20/s", rep.Steps)
	}
	var best *Step
	for i, s := range rep.Steps {
		if want := int(float64(s.Rate) * o.Duration.Seconds()); s.Requests != want {
			t.Errorf("step %d at %d/s: %d requests, want %d (rate × duration)", i, s.Rate, s.Requests, want)
		}
		answered := 0
		for _, n := range s.Answers {
			answered += n
		}
		if answered != s.Requests {
			t.Errorf("step %d: answers %v add up to %d, want %d", i, s.Answers, answered, s.Requests)
		}
		if s.Answers["200"] == 0 || s.AdmitP50 <= 0 {
			t.Errorf("step %d: nothing admitted or no admission latency: %+v", i, s)
		}
		if s.OverAdmission != 0 {
			t.Errorf("step %d: over-admitted %d tokens", i, s.OverAdmission)
		}
		if s.OK && (best == nil || s.Rate > best.Rate) {
			best = &rep.Steps[i]
		}
		if !s.OK {
			t.Logf("step at %d/s missed: %q (a loaded machine can)", s.Rate, s.Why)
		}
	}
	if (best == nil) != (rep.Knee == nil) || (best != nil && best.Rate != rep.Knee.Rate) {
		t.Fatalf("knee %+v, want the highest step within the bounds %+v", rep.Knee, best)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatal(err)
	}
}

func TestValidateNamesTheFlag(t *testing.T) {
	o := Options{Profile: "nope", Rate: 0, Duration: time.Hour, FindKnee: true, MaxRate: -1}
	err := o.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, flag := range []string{"--rate", "--duration", "--max-rate", "--p99-bound", "--profile"} {
		if !contains(err.Error(), flag) {
			t.Errorf("error %q does not name %s", err, flag)
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
