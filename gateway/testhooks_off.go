//go:build !quotaqual_testhooks

package gateway

// testHook reports whether a deliberate regression is switched on: in every build but the
// test build (testhooks_on.go) it is constant false, and the hooked branches compile away.
func testHook(string) bool { return false }
