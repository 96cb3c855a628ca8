package kindengine

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// The docker wrapper rewrites exactly `run --privileged` and `exec --privileged`, keeps every
// other argument (spaces included) in order, and runs the real docker.
func TestDockerWrapperRewritesOnlyPrivileged(t *testing.T) {
	dir := t.TempDir()
	real := filepath.Join(dir, "real-docker")
	if err := os.WriteFile(real, []byte("#!/bin/sh\nfor a do printf '%s\\n' \"$a\"; done\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(dir, "docker")
	if err := os.WriteFile(wrapper, []byte(dockerWrapper(real, []string{"SYS_RESOURCE"})), 0o700); err != nil {
		t.Fatal(err)
	}
	args := func(a ...string) []string {
		out, err := exec.Command(wrapper, a...).Output()
		if err != nil {
			t.Fatalf("wrapper %v: %v", a, err)
		}
		return strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	}

	run := args("run", "--name", "n 1", "--privileged", "--security-opt", "seccomp=unconfined", "img")
	if slices.Contains(run, "--privileged") {
		t.Errorf("run kept --privileged: %q", run)
	}
	for _, want := range []string{"--cap-add=ALL", "--cap-drop=SYS_RESOURCE", "--security-opt=systempaths=unconfined", "--device-cgroup-rule=a *:* rwm"} {
		if !slices.Contains(run, want) {
			t.Errorf("run lacks %q: %q", want, run)
		}
	}
	if run[0] != "run" || run[2] != "n 1" || run[len(run)-1] != "img" {
		t.Errorf("run's other arguments changed: %q", run)
	}

	if got, want := args("exec", "--privileged", "-i", "node", "ctr", "images", "import", "-"), []string{"exec", "-i", "node", "ctr", "images", "import", "-"}; !slices.Equal(got, want) {
		t.Errorf("exec: %q, want %q", got, want)
	}
	if got, want := args("ps", "-a", "--filter", "label=a b"), []string{"ps", "-a", "--filter", "label=a b"}; !slices.Equal(got, want) {
		t.Errorf("ps: %q, want %q", got, want)
	}
}
