// Package peers is the catalogue of the third-party rate-limit engines quotaqual qualifies
// through its gateway seam, and their build. Each engine is pinned here, in one place, to the
// one version the Go module proxy serves on these machines; `quotaqual peers build` (make
// peers) installs it from the proxy with `go install <package>@<version>` into a cache
// directory outside the repository ($XDG_CACHE_HOME/quotaqual/peers/<name>@<version>/), so
// none of their source is ever copied here. A second build is a no-op.
//
// The shims that drive them like the real gateways do live in the packages beside this one
// (rls, envoyaigw, kuadrant, gubershim); the profiles that launch them are
// undertest/profiles/<peer>.yaml.
package peers

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Engine is one third-party engine: where it comes from, pinned, and the binary it installs.
type Engine struct {
	// Name is how profiles and commands name it (envoy-ratelimit, gubernator).
	Name string
	// Module is the Go module, Package the main package go install builds, Version the pin.
	Module, Package, Version string
	// Binary is the installed command's file name (the last element of Package).
	Binary string
	// What it is, one line, for `quotaqual peers list` and the verdict table.
	What string
}

// The engines, pinned. Why these versions: each is the only build of its project the module
// proxy serves here (see ../shared/reference/peers-and-nemeses.md §1.1 and §3).
var (
	// EnvoyRatelimit is envoyproxy/ratelimit at commit 3fb70258 (2026-01-22, "bump go version
	// 1.25.6"): the global rate-limit service behind Envoy Gateway and Envoy AI Gateway. It
	// predates envoyproxy/ratelimit#1059, so quota_mode descriptors never deny in it.
	EnvoyRatelimit = Engine{
		Name:    "envoy-ratelimit",
		Module:  "github.com/envoyproxy/ratelimit",
		Package: "github.com/envoyproxy/ratelimit/src/service_cmd",
		Version: "v1.4.1-0.20260122083618-3fb702589d36",
		Binary:  "service_cmd",
		What:    "envoyproxy/ratelimit, the global rate-limit service (gRPC ShouldRateLimit) on the run's Valkey",
	}
	// Gubernator is gubernator-io/gubernator v2.13.0 (commit a7295734, 2025-04-21): a
	// peer-to-peer rate limiter that keeps its counters in the owning node's memory.
	Gubernator = Engine{
		Name:    "gubernator",
		Module:  "github.com/gubernator-io/gubernator/v2",
		Package: "github.com/gubernator-io/gubernator/v2/cmd/gubernator",
		Version: "v2.13.0",
		Binary:  "gubernator",
		What:    "gubernator, a peer-to-peer rate limiter (counters in the owning node's memory, no store)",
	}
)

// All lists the engines in a stable order.
func All() []Engine { return []Engine{EnvoyRatelimit, Gubernator} }

// ByName returns the engine called name.
func ByName(name string) (Engine, error) {
	var names []string
	for _, e := range All() {
		if e.Name == name {
			return e, nil
		}
		names = append(names, e.Name)
	}
	return Engine{}, fmt.Errorf("no peer engine %q: choose one of %s", name, strings.Join(names, ", "))
}

// EnvCacheDir overrides where the engines are built (default: the user's cache directory).
const EnvCacheDir = "QUOTAQUAL_PEERS_DIR"

// CacheDir is the directory every engine is built under: $QUOTAQUAL_PEERS_DIR, else
// $XDG_CACHE_HOME/quotaqual/peers (~/.cache/quotaqual/peers).
func CacheDir() (string, error) {
	if d := os.Getenv(EnvCacheDir); d != "" {
		return filepath.Abs(d)
	}
	base, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory for the peer engines (%w): set %s", err, EnvCacheDir)
	}
	return filepath.Join(base, "quotaqual", "peers"), nil
}

// Dir is where e is built: <CacheDir>/<name>@<version>.
func (e Engine) Dir() (string, error) {
	c, err := CacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(c, e.Name+"@"+e.Version), nil
}

// Path is e's built binary, or an error that says how to build it.
func (e Engine) Path() (string, error) {
	d, err := e.Dir()
	if err != nil {
		return "", err
	}
	p := filepath.Join(d, "bin", e.Binary)
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		return "", &NotBuiltError{Engine: e, Path: p}
	}
	return p, nil
}

// NotBuiltError says an engine has not been built yet, and how to build it.
type NotBuiltError struct {
	Engine Engine
	Path   string
}

func (e *NotBuiltError) Error() string {
	return fmt.Sprintf("peer engine %s %s is not built (no %s): run `make peers` or `quotaqual peers build %s` (go install from the module proxy, a few minutes the first time)",
		e.Engine.Name, e.Engine.Version, e.Path, e.Engine.Name)
}

// Built reports which engines are built, and the first one that is not (nil when all are).
func Built(engines ...Engine) error {
	for _, e := range engines {
		if _, err := e.Path(); err != nil {
			return err
		}
	}
	return nil
}
