//go:build !linux

package topology

import (
	"errors"
	"net"
	"os"
	"runtime"
)

// Inside is always false off Linux.
func Inside() bool { return false }

// InsideRunID is always "" off Linux.
func InsideRunID() string { return "" }

// ReexecIntoNamespace does nothing off Linux: there are no namespaces, inside is false and the
// caller carries on with the process engine.
func ReexecIntoNamespace(runID string, files []*os.File) (inside bool, code int, err error) {
	return false, 0, NetnsUnavailable()
}

// InheritedListeners is always nil off Linux.
func InheritedListeners() ([]net.Listener, error) { return nil, nil }

// Detect always picks process off Linux.
func Detect() (string, string) {
	return EngineProcess, "netns needs Linux network namespaces; this is " + runtime.GOOS
}

// NetnsUnavailable is the error of the netns engine off Linux.
func NetnsUnavailable() error {
	return errors.New("the netns topology needs Linux network namespaces; this is " + runtime.GOOS + ": use --topology process")
}
