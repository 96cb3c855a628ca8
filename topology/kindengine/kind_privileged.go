package kindengine

// kind starts every node with `docker run --privileged` and reaches into it with
// `docker exec --privileged`. Docker grants a privileged container every capability the kernel
// knows; where the host's capability bounding set lacks one (the project's machines lack
// CAP_SYS_RESOURCE), runc cannot grant it and no privileged container starts at all:
//
//	docker: Error response from daemon: failed to create shim task: OCI runtime create failed:
//	runc create failed: unable to start container process: unable to apply caps: operation not permitted
//
// kind has no option for its docker arguments, so on such a host the engine puts a `docker`
// wrapper first on this process's PATH (kind runs `docker` by name): it runs nodes with every
// capability the host can grant and no confinement instead of --privileged, and drops
// --privileged from `docker exec` (an exec'd process gets the container's capabilities). The
// node image's entrypoint makes the cgroup mounts writable, which --privileged would have done.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/moby/sys/capability"
)

// privilegedFailure is how runc reports a capability it cannot grant.
const privilegedFailure = "unable to apply caps"

var privilegedDocker struct {
	sync.Mutex
	wrapped bool // the wrapper is first on PATH
}

// ensurePrivilegedNodes makes kind's privileged node containers startable on this Docker
// engine: a no-op where `docker run --privileged` works; the PATH wrapper where it fails only
// because the host cannot grant some capabilities; an error naming the cause otherwise.
func (t *kindTopo) ensurePrivilegedNodes(ctx context.Context) error {
	privilegedDocker.Lock()
	defer privilegedDocker.Unlock()
	if privilegedDocker.wrapped {
		return nil
	}
	out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--privileged", "--entrypoint", "/bin/true", t.nodeImage).CombinedOutput()
	if err == nil {
		return nil
	}
	if !strings.Contains(string(out), privilegedFailure) {
		return fmt.Errorf("kind's nodes are privileged containers, and one does not start on this Docker engine (docker run --privileged %s): %s", t.nodeImage, strings.TrimSpace(string(out)))
	}
	missing, err := missingBoundingCapabilities()
	if err != nil {
		return err
	}
	if len(missing) == 0 {
		return fmt.Errorf("kind's nodes are privileged containers, and runc cannot grant their capabilities here although this process's bounding set is full: %s", strings.TrimSpace(string(out)))
	}
	real, err := exec.LookPath("docker")
	if err != nil {
		return fmt.Errorf("docker: %w", err)
	}
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("quotaqual-kind-docker-%d", os.Getuid()))
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("kind docker wrapper: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(dockerWrapper(real, missing)), 0o700); err != nil {
		return fmt.Errorf("kind docker wrapper: %w", err)
	}
	if err := os.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH")); err != nil {
		return fmt.Errorf("kind docker wrapper: %w", err)
	}
	privilegedDocker.wrapped = true
	t.spec.Progress("kind: this host cannot grant %s, so Docker cannot start --privileged containers; kind's nodes run with every other capability instead (docker wrapper %s)",
		strings.Join(missing, ", "), dir)
	return nil
}

// missingBoundingCapabilities names (as Docker spells them) the capabilities the kernel knows
// but this process's bounding set lacks.
func missingBoundingCapabilities() ([]string, error) {
	supported, err := capability.ListSupported()
	if err != nil {
		return nil, fmt.Errorf("listing the kernel's capabilities: %w", err)
	}
	var missing []string
	var errs []error
	for _, c := range supported {
		ok, err := capability.GetBound(c)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !ok {
			missing = append(missing, strings.ToUpper(c.String()))
		}
	}
	return missing, errors.Join(errs...)
}

// dockerWrapper is a POSIX shell script that runs the real docker with `run --privileged`
// replaced by every capability but the missing ones and no confinement, and `exec
// --privileged` without the flag; everything else passes through unchanged.
func dockerWrapper(real string, missing []string) string {
	var unprivileged []string
	unprivileged = append(unprivileged, "--cap-add=ALL")
	for _, c := range missing {
		unprivileged = append(unprivileged, "--cap-drop="+c)
	}
	unprivileged = append(unprivileged,
		"--security-opt=systempaths=unconfined", // /proc and /sys unmasked, as --privileged has them
		"--device-cgroup-rule=a *:* rwm",        // every device allowed, as --privileged allows
	)
	for _, dev := range []string{"/dev/kmsg", "/dev/fuse"} { // the host devices a node uses
		if _, err := os.Stat(dev); err == nil {
			unprivileged = append(unprivileged, "--device="+dev)
		}
	}
	quoted := make([]string, len(unprivileged))
	for i, a := range unprivileged {
		quoted[i] = "'" + a + "'"
	}
	return `#!/bin/sh
# Written by quotaqual's kind engine: this host cannot grant ` + strings.Join(missing, ", ") + `, so
# Docker cannot start --privileged containers (see topology/kindengine/kind_privileged.go).
sub="$1"
for a do
	shift
	if [ "$a" = --privileged ]; then
		case "$sub" in
		run) set -- "$@" ` + strings.Join(quoted, " ") + ` ;;
		exec) ;;
		*) set -- "$@" "$a" ;;
		esac
	else
		set -- "$@" "$a"
	fi
done
exec '` + real + `' "$@"
`
}
