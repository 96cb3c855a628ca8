// Package testbin builds the quotaqual binary that end-to-end tests run as real gateway,
// provider and harness processes. It is built static (CGO_ENABLED=0, -trimpath) so the same
// binary also runs inside the scratch images of the docker and kind topologies.
package testbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// LinkFlags are the linker flags of every binary the tests build, as `make build` links
// bin/quotaqual: no symbol table and no DWARF, which nothing the tests run reads (stack traces
// come from the pclntab, kept). Measured on this 2-core machine, a relink of cmd/quotaqual
// (each build is stamped, so each relinks) took ~3.5 s of CPU with them against ~5.7 s
// without, and a suite builds the binary some thirty times (each package's own, the mutants
// build, every blind patch).
const LinkFlags = "-s -w"

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
	args := []string{"build", "-trimpath", "-ldflags", LinkFlags + " -X github.com/quotaqual/quotaqual/internal/version.Version=" + stamp}
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

// Main is the TestMain of a test package that runs one quotaqual binary (what names the
// package's tests in an error): it builds the binary into a temporary directory, sets *binary
// to its path, runs the tests and removes the directory, and returns the exit code for
// os.Exit. m is the package's *testing.M.
func Main(m interface{ Run() int }, what string, binary *string) int {
	dir, err := os.MkdirTemp("", "quotaqual-"+what+"-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	*binary = filepath.Join(dir, "quotaqual")
	if err := Build(*binary); err != nil {
		fmt.Fprintf(os.Stderr, "building the quotaqual binary for the %s tests: %v\n", what, err)
		return 1
	}
	return m.Run()
}
