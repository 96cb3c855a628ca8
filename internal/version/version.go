// Package version holds quotaqual's version, set at link time by the Makefile
// (-ldflags "-X github.com/quotaqual/quotaqual/internal/version.Version=...").
package version

import "runtime/debug"

// Version is the release or commit quotaqual was built from.
var Version = "dev"

// String returns Version, falling back to the module version the binary was built with.
func String() string {
	if Version != "dev" {
		return Version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return Version
}
