// Package testbin builds the quotaqual binary that end-to-end tests run as real gateway,
// provider and harness processes. It is built static (CGO_ENABLED=0, -trimpath) so the same
// binary also runs inside the scratch images of the docker and kind topologies.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Build compiles github.com/quotaqual/quotaqual/cmd/quotaqual to path, with the given build
// tags (e.g. quotaqual_mutants); the go command's output goes to stderr.
func Build(path string, tags ...string) error {
	args := []string{"build", "-trimpath"}
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
