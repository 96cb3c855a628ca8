package peers

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNotBuiltSaysHowToBuild checks an engine missing from the cache directory is reported
// with the command that builds it, and one present (an executable at <dir>/bin/<binary>) is
// found and left alone by Build (a second build is a no-op: no go command is run).
func TestNotBuiltSaysHowToBuild(t *testing.T) {
	t.Setenv(EnvCacheDir, t.TempDir())
	_, err := EnvoyRatelimit.Path()
	if err == nil || !strings.Contains(err.Error(), "make peers") || !strings.Contains(err.Error(), EnvoyRatelimit.Version) {
		t.Fatalf("Path of an engine not built: %v", err)
	}
	if nb := (*NotBuiltError)(nil); !errors.As(err, &nb) {
		t.Errorf("%T is not a *NotBuiltError", err)
	}
	dir, _ := EnvoyRatelimit.Dir()
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", EnvoyRatelimit.Binary), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", "") // a build would need go: there is none, so it must not try
	built, err := Build(context.Background(), EnvoyRatelimit, io.Discard)
	if err != nil || built {
		t.Errorf("Build of a built engine: built=%v, %v; want a no-op", built, err)
	}
	if err := Built(EnvoyRatelimit); err != nil {
		t.Errorf("Built: %v", err)
	}
	if err := Built(EnvoyRatelimit, Gubernator); err == nil || !strings.Contains(err.Error(), Gubernator.Name) {
		t.Errorf("Built with gubernator missing: %v", err)
	}
}

// TestEnginesArePinnedOnce checks every engine names an exact version and a package of its
// module, and ByName finds each and refuses others naming the known ones.
func TestEnginesArePinnedOnce(t *testing.T) {
	for _, e := range All() {
		if !strings.HasPrefix(e.Version, "v") || strings.Contains(e.Version, "latest") || !strings.HasPrefix(e.Package, e.Module) || filepath.Base(e.Package) != e.Binary {
			t.Errorf("%s: version %q, package %q, binary %q", e.Name, e.Version, e.Package, e.Binary)
		}
		if got, err := ByName(e.Name); err != nil || got != e {
			t.Errorf("ByName(%s): %v", e.Name, err)
		}
	}
	if _, err := ByName("limitador"); err == nil || !strings.Contains(err.Error(), "envoy-ratelimit") {
		t.Errorf("ByName(limitador): %v", err)
	}
}
