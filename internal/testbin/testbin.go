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

// Build compiles github.com/quotaqual/quotaqual/cmd/quotaqual to path; the go command's output
// goes to stderr.
func Build(path string) error { return BuildTags(path) }

// TestHooksTag is the build tag of the test build whose gateway can switch deliberate
// regressions on (gateway/testhooks.go): tests use it to prove a scenario catches each.
const TestHooksTag = "quotaqual_testhooks"

// BuildTags is Build with build tags.
func BuildTags(path string, tags ...string) error {
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
