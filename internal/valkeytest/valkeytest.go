// Package valkeytest starts a real valkey-server for a test: a random port, the test's own temp
// directory, AOF on, stopped when the test ends. There is no mock: a missing valkey-server fails
// the test with the install command, because a skip would hide a broken CI machine.
package valkeytest

import (
	"context"
	"testing"

	"github.com/quotaqual/quotaqual/internal/valkeyproc"
)

// Start launches a server for t and registers its shutdown.
func Start(t testing.TB, opts ...func(*valkeyproc.Options)) *valkeyproc.Server {
	t.Helper()
	o := valkeyproc.Options{Dir: t.TempDir()}
	for _, f := range opts {
		f(&o)
	}
	s, err := valkeyproc.Start(context.Background(), o)
	if err != nil {
		t.Fatalf("start valkey-server: %v", err)
	}
	t.Cleanup(func() { _ = s.Kill() })
	return s
}

// WithPassword requires AUTH.
func WithPassword(pw string) func(*valkeyproc.Options) {
	return func(o *valkeyproc.Options) { o.Password = pw }
}
