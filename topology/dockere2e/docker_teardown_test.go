package dockere2e_test

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/dockerengine"
	"github.com/quotaqual/quotaqual/topology/images"
)

// TestDockerCleanupDisconnectsWhatKeepsARunNetwork: a run's network that still has an endpoint
// after the run's containers are gone is force-disconnected and removed, not left behind with
// "has active endpoints". The endpoint here is a live container without the run's labels (so
// Cleanup does not remove it): a stand-in for the stale endpoint moby keeps when a container
// is removed while the daemon is still disconnecting it, which no test can produce at will.
// Both are cleared the same way, by a forced disconnect by the endpoint's name. The run's own
// container on the network is stopped and removed first, with no error.
func TestDockerCleanupDisconnectsWhatKeepsARunNetwork(t *testing.T) {
	requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Kept, as ensureImages keeps it: the same for every run.
	if err := images.EnsureValkeyImage(ctx); err != nil {
		t.Fatal(err)
	}
	id := topology.NewRunID()
	network := "qq-" + id + "-admin"
	holder := "qq-" + id + "-endpoint-holder"
	docker(t, "network", "create", "--label", images.LabelRunID+"="+id, "--label", images.LabelManaged+"=true", network)
	t.Cleanup(func() {
		_ = exec.Command("docker", "rm", "-f", holder).Run()
		_ = exec.Command("docker", "network", "rm", network).Run()
	})
	docker(t, "run", "-d", "--name", holder, "--network", network, images.DefaultValkeyImage)
	// And one of the run's own, running on the network: stopped and removed, with no error.
	own := "qq-" + id + "-own"
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", own).Run() })
	docker(t, "run", "-d", "--name", own, "--label", images.LabelRunID+"="+id, "--label", images.LabelManaged+"=true",
		"--network", network, images.DefaultValkeyImage)

	td, err := dockerengine.Cleanup(ctx, id)
	if err != nil {
		t.Fatalf("Cleanup: %v (removed %v)", err, td.Removed)
	}
	for _, want := range []string{"network " + network, "container " + own} {
		if !slices.Contains(td.Removed, want) {
			t.Errorf("Cleanup removed %v, not %s", td.Removed, want)
		}
	}
	if out := docker(t, "ps", "-aq", "--filter", "label="+images.LabelRunID+"="+id); out != "" {
		t.Errorf("containers of run %s after Cleanup: %s", id, out)
	}
	if out := docker(t, "network", "ls", "-q", "--filter", "label="+images.LabelRunID+"="+id); out != "" {
		t.Errorf("networks of run %s after Cleanup: %s", id, out)
	}
	// The holder was not the run's: disconnected, not removed.
	if got := docker(t, "inspect", "-f", "{{.State.Running}} {{len .NetworkSettings.Networks}}", holder); got != "true 0" {
		t.Errorf("the holder container (running, networks): %q, want \"true 0\"", got)
	}
}

// docker runs the docker CLI and returns its trimmed output; a failure fails the test.
func docker(t *testing.T, args ...string) string {
	t.Helper()
	out, err := exec.Command("docker", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("docker %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
