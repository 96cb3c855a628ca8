//go:build !linux

package topology

import (
	"errors"
	"runtime"
)

func errNetnsPlatform() error {
	return errors.New("the netns topology needs Linux network namespaces; this is " + runtime.GOOS + ": use --topology process")
}

func newNetns(spec Spec) (Topology, error) { return nil, errNetnsPlatform() }
