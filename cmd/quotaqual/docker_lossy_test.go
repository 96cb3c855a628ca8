package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/mutant"
	"github.com/quotaqual/quotaqual/internal/testbin"
	"github.com/quotaqual/quotaqual/topology/images"
)

// lossyStoreLinkFailsFailOpenOnDocker proves lossy-store-link on docker against the defect it
// guards, as a user sees it: a gateway that admits when its store call fails (the fail-open
// mutant, armed through the gateway profile's launch env in the container of a mutants build)
// fails the run (exit 1) on the loss phase's own checks — no store-failure answer, subjects
// over-admitted — so the loss lever really cuts gateway-a's store calls on docker.
func lossyStoreLinkFailsFailOpenOnDocker(t *testing.T) {
	needDocker(t)
	if os.Geteuid() != 0 {
		t.Skip("the docker engine's loss lever needs the harness as root on the Docker host")
	}
	dir := t.TempDir()
	mutants := filepath.Join(dir, "quotaqual-mutants")
	if err := testbin.Build(mutants, mutant.Tag); err != nil {
		t.Fatal(err)
	}
	tag, err := images.QuotaqualImageTag(mutants)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeDockerImage(tag) }) // a fresh build: its image is this test's own
	b, err := os.ReadFile(blackBoxProfile)
	if err != nil {
		t.Fatal(err)
	}
	const argv = "  argv: [\"{{.Binary}}\", gateway, --config, \"{{.ConfigPath}}\"]\n"
	if !strings.Contains(string(b), argv) {
		t.Fatalf("%s has no launch argv line %q to arm the mutant after", blackBoxProfile, argv)
	}
	profile := filepath.Join(dir, "fail-open.yaml")
	armed := strings.Replace(string(b), argv, argv+"  env:\n    "+mutant.EnvVar+": "+string(mutant.FailOpen)+"\n", 1)
	if err := os.WriteFile(profile, []byte(armed), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := quotaqualWith(t, mutants, 5*time.Minute, "run", "--topology", "docker", "--json", "--evidence-dir", filepath.Join(dir, "ev"),
		"--gateway", profile, "--scenario", "lossy-store-link")
	var out runJSON
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("run --json printed no JSON (%v)\nstderr:\n%s", err, stderr)
	}
	if code != 1 || len(out.Results) != 1 {
		t.Fatalf("exit %d with %d results, want 1 (failed) with lossy-store-link's\nstderr:\n%s", code, len(out.Results), stderr)
	}
	r := out.Results[0]
	t.Logf("%s on docker with fail-open: %s (%s)", r.Name, r.Status, firstLineOf(r.Reason))
	for _, want := range []string{"the loss failed some of gateway-a's store calls", "no subject over-admitted"} {
		if r.Status != evidence.Failed || !strings.Contains(r.Reason, want) {
			t.Errorf("%s: %s, want failed on %q: %s", r.Name, r.Status, want, r.Reason)
		}
	}
	if dout, _, _ := quotaqual(t, time.Minute, "down", "--run-id", out.RunID); strings.Contains(dout, "stopped") {
		t.Errorf("the docker run left resources behind:\n%s", dout)
	}
}

func firstLineOf(s string) string { return strings.SplitN(s, "\n", 2)[0] }
