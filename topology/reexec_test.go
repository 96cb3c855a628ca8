//go:build linux

package topology

import "testing"

// TestDetectAgreesWithItsNamespaceProbe: Detect gives a reason, and when it picks netns here
// (outside any namespace, so from its checks rather than the inside marker) the probe it runs
// succeeds when run again. The netns engine's tests (topology/netnsengine) check Detect
// inside the namespace and that auto builds what it picks.
func TestDetectAgreesWithItsNamespaceProbe(t *testing.T) {
	engine, reason := Detect()
	if reason == "" {
		t.Error("Detect gave no reason")
	}
	err := probeNamespaces()
	if engine == EngineNetns && err != nil {
		t.Errorf("Detect picks netns (%s) but the namespace probe fails: %v", reason, err)
	}
	if engine != EngineNetns && err == nil && !Inside() {
		t.Logf("Detect picks %s (%s) although the namespace probe succeeds: a tool is missing", engine, reason)
	}
}
