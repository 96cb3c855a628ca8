// Package testbin builds the quotaqual binary that end-to-end tests run as real gateway,
// provider and harness processes. It is built static (CGO_ENABLED=0, -trimpath) so the same
// binary also runs inside the scratch images of the docker and kind topologies.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// Build compiles github.com/quotaqual/quotaqual/cmd/quotaqual to path, with the given build
// tags (e.g. quotaqual_mutants); the go command's output goes to stderr.
//
// Every build is stamped with a version of its own (test-<pid>-<nanoseconds>), so two test
// packages never build byte-identical binaries: the docker and kind topologies tag their
// image by the binary's digest, and a package that removes its own image afterwards must not
// remove the one another package is about to `docker save` or start (seen as "reference does
// not exist" in the kind test while the docker tests ran beside it).
func Build(path string, tags ...string) error {
	stamp := fmt.Sprintf("test-%d-%d", os.Getpid(), time.Now().UnixNano())
	args := []string{"build", "-trimpath", "-ldflags", "-X github.com/quotaqual/quotaqual/internal/version.Version=" + stamp}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command("go", append(args, "-o", path, "github.com/quotaqual/quotaqual/cmd/quotaqual")...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build ./cmd/quotaqual: %w", err)
	}
	return nil
}
