package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/wire"
)

// altGatewayOnDocker are the scenarios TestAltGatewayVerdictsOnDocker runs: a few that pull
// the levers docker has (store stop, gateway↔valkey partition), the black-box ones, and one the
// profile's capabilities skip. Their verdicts are the ones pinned on netns (altGatewayVerdicts):
// the gateway, not the engine, decides them. Left out: gateway-restart, which passes on netns
// but failed in three docker runs on this loaded host (load average ~25 on 2 cores): restarting
// the container took 8, 17 and 18 s (measured once: the altgateway stopped gracefully, exit 0,
// in 1.5 s; the container's start took 16 s), longer than the quick profile's 4 s window, so
// the scenario's own guard ("post-restart checks within one window of the first charge") fails
// and the fixed window has reset by then (200, not 429). quotaqual's own gateway failed it the
// same way in the same conditions (a 17 s restart): the engine's restart time, not the
// altgateway, decides it here. Not determined: the altgateway's verdict on an idle Docker
// host. network-policy passes as on
// netns but takes half a minute; TestRunDockerTopologyPassesAllScenarios covers it.
var altGatewayOnDocker = []string{"valid-auth", "auth-rejection", "shared-budget", "concurrency",
	"valkey-outage", "valkey-partition", "gateway-crash"}

// altGatewayVerdictsOnDocker runs the independent altgateway on docker through its profile
// alone (launch.argv in the run's quotaqual image, its JSON config at the profile's path, its
// /ready on the admin listener, the store password copied into its environment) and checks
// the verdicts are the netns ones.
func altGatewayVerdictsOnDocker(t *testing.T) {
	needDocker(t)
	removeOwnImageAfterwards(t)
	args := []string{"run", "--gateway", shippedProfile("altgateway"), "--topology", "docker", "--json", "--evidence-dir", t.TempDir()}
	for _, s := range altGatewayOnDocker {
		args = append(args, "--scenario", s)
	}
	stdout, stderr, code := quotaqual(t, 6*time.Minute, args...)
	var out runJSON
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("run --json printed no JSON (%v)\nstderr:\n%s", err, stderr)
	}
	if code != wire.ExitFailed {
		t.Errorf("exit %d (%s), want %d: the altgateway fails auth-rejection", code, out.Error, wire.ExitFailed)
	}
	if out.Topology != topology.EngineDocker {
		t.Errorf("topology %q, want docker", out.Topology)
	}
	if len(out.Results) != len(altGatewayOnDocker) {
		t.Fatalf("%d results, want %d", len(out.Results), len(altGatewayOnDocker))
	}
	for _, r := range out.Results {
		checkAltGatewayVerdict(t, r)
	}
	// The containers ran the altgateway (not quotaqual's gateway) on the profile's config.
	for _, g := range topology.GatewayNames(2) {
		log, err := os.ReadFile(filepath.Join(out.BundleDir, "logs", g+".log"))
		if err != nil || !strings.Contains(string(log), "altgateway listening") {
			t.Errorf("%s's log does not show the altgateway starting (%v)", g, err)
		}
		if _, err := os.Stat(filepath.Join(out.BundleDir, "config", g+".json")); err != nil {
			t.Errorf("the bundle lacks %s's rendered JSON config: %v", g, err)
		}
	}
	// The canary scan passed (no secret in the bundle, environment copies included).
	if _, verr, vcode := quotaqual(t, time.Minute, "evidence", "verify", out.BundleDir); vcode != 0 {
		t.Errorf("evidence verify: exit %d: %s", vcode, verr)
	}
	if dout, _, _ := quotaqual(t, time.Minute, "down", "--run-id", out.RunID); strings.Contains(dout, "stopped") {
		t.Errorf("the docker run left resources behind:\n%s", dout)
	}
}

// missingGatewayImageStopsTheRun: a profile whose image is not in the local Docker engine
// (praxis, litellm: never pulled here) stops the run before any network, volume or container
// exists, with an error naming the image and how to provide it; --gateway-image names the fix
// too, and is refused where no image is run.
func missingGatewayImageStopsTheRun(t *testing.T) {
	needDocker(t)
	for _, c := range []struct{ profile, image string }{
		{"praxis", "praxis-ai:dev"},
		{"litellm", "ghcr.io/berriai/litellm:main-stable"},
	} {
		t.Run(c.profile, func(t *testing.T) {
			if exec.Command("docker", "image", "inspect", c.image).Run() == nil {
				t.Skipf("%s is present locally: the profile would run", c.image)
			}
			runID := "seam-" + c.profile
			_, stderr, code := quotaqual(t, 2*time.Minute, "run", "--gateway", c.profile, "--topology", "docker",
				"--run-id", runID, "--scenario", "valid-auth", "--evidence-dir", t.TempDir())
			if code != wire.ExitTopology {
				t.Errorf("exit %d, want %d; stderr: %s", code, wire.ExitTopology, stderr)
			}
			for _, want := range []string{c.image, "docker load", "--gateway-image", "launch.image of gateway profile " + c.profile} {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr does not name %q:\n%s", want, stderr)
				}
			}
			// Nothing of the run exists: the check comes before any network or container.
			for _, what := range [][]string{{"ps", "-a"}, {"network", "ls"}, {"volume", "ls"}} {
				out, err := exec.Command("docker", append(what, "-q", "--filter", "label=org.quotaqual.run-id="+runID)...).Output()
				if err != nil || strings.TrimSpace(string(out)) != "" {
					t.Errorf("docker %s for the run: %q (%v): the run created something", what[0], out, err)
				}
			}
		})
	}
	_, stderr, code := quotaqual(t, 30*time.Second, "run", "--gateway", "praxis", "--topology", "docker",
		"--gateway-image", "quotaqual-no-such-image:0", "--scenario", "valid-auth", "--evidence-dir", t.TempDir())
	if code != wire.ExitTopology || !strings.Contains(stderr, "quotaqual-no-such-image:0 (--gateway-image)") {
		t.Errorf("--gateway-image missing: exit %d, stderr %q", code, stderr)
	}
	if _, stderr, code := quotaqual(t, 30*time.Second, "run", "--topology", "netns", "--gateway-image", "x:1"); code != wire.ExitUsage || !strings.Contains(stderr, "--gateway-image") {
		t.Errorf("--gateway-image on netns: exit %d, stderr %q", code, stderr)
	}
}

// TestRenderGatewayProfile: `quotaqual render --gateway` renders the kind manifests of another
// gateway through its profile (its config under its own file name, its command and probes),
// and a profile that cannot be read is a usage error naming --gateway.
func TestRenderGatewayProfile(t *testing.T) {
	stdout, stderr, code := quotaqual(t, 30*time.Second, "render", "--run-id", "r1", "--gateway", "altgateway")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"altgateway.json: |", "- altgateway\n", "- /etc/quotaqual/altgateway.json\n", "path: /ready\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the manifests lack %q", want)
		}
	}
	if strings.Contains(stdout, "- gateway\n") {
		t.Error("the manifests still run quotaqual's `gateway` command")
	}
	if _, stderr, code := quotaqual(t, 30*time.Second, "render", "--gateway", "no-such-profile.yaml"); code != wire.ExitUsage || !strings.Contains(stderr, "--gateway") {
		t.Errorf("a missing profile: exit %d, stderr %q", code, stderr)
	}
}

// profileEnvCopiesASecretIntoTheContainer: a profile variable copying the run's Valkey
// password ($QUOTAQUAL_VALKEY_PASSWORD) reaches the gateway container's environment: the
// altgateway, told to read its store password from that copy only, admits (it fails closed
// without the store), and the canary scan finds the secret nowhere in the bundle.
func profileEnvCopiesASecretIntoTheContainer(t *testing.T) {
	needDocker(t)
	removeOwnImageAfterwards(t)
	y, err := os.ReadFile(shippedProfile("altgateway"))
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(y), `"password_variable": {{json .Store.PasswordEnv}}`, `"password_variable": "ALT_STORE_PASSWORD"`, 1)
	text = strings.Replace(text, "launch:\n", "launch:\n  env:\n    ALT_STORE_PASSWORD: $QUOTAQUAL_VALKEY_PASSWORD\n", 1)
	if text == string(y) || !strings.Contains(text, "ALT_STORE_PASSWORD: $") || !strings.Contains(text, `"password_variable": "ALT_STORE_PASSWORD"`) {
		t.Fatal("the altgateway profile changed: update this test's edits")
	}
	path := filepath.Join(t.TempDir(), "alt-env.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := quotaqual(t, 5*time.Minute, "run", "--gateway", path, "--topology", "docker", "--json",
		"--scenario", "valid-auth", "--evidence-dir", t.TempDir())
	var out runJSON
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		t.Fatalf("run --json printed no JSON (%v)\nstderr:\n%s", err, stderr)
	}
	if code != 0 || len(out.Results) != 1 || out.Results[0].Status != evidence.Passed {
		t.Fatalf("exit %d (%s), results %+v: the copied password did not reach the container", code, out.Error, out.Results)
	}
	if _, verr, vcode := quotaqual(t, time.Minute, "evidence", "verify", out.BundleDir); vcode != 0 {
		t.Errorf("evidence verify: exit %d: %s", vcode, verr)
	}
}
