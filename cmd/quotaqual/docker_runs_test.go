package main

import "testing"

// The whole runs of this package go side by side, two at a time (go test's -parallel, which
// is GOMAXPROCS): each `quotaqual run` is a process of its own, a netns run in namespaces,
// addresses and keys of its own. One after another they were cmd/quotaqual's ~900 s of CI.
// The docker runs are subtests of one test, one after another and not parallel: they run
// before the parallel netns runs start, with no whole run of this package beside them (with
// netns runs beside them, a clean-clone CI run saw gateway-crash's release bound missed by
// 150 ms on docker: the machine's load, not the gateway).

// TestDockerRuns runs this package's tests on the docker engine, in order.
func TestDockerRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: whole qualifications on docker; not in -short")
	}
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"RunDockerTopologyPassesAllScenarios", runDockerTopologyPassesAllScenarios},
		{"RunDockerValkeyFailoverFailsWithAsyncReplication", runDockerValkeyFailoverFailsWithAsyncReplication},
		{"RunDockerOnAClusterStore", runDockerOnAClusterStore},
		{"LossyStoreLinkFailsFailOpenOnDocker", lossyStoreLinkFailsFailOpenOnDocker},
		{"AltGatewayVerdictsOnDocker", altGatewayVerdictsOnDocker},
		{"MissingGatewayImageStopsTheRun", missingGatewayImageStopsTheRun},
		{"ProfileEnvCopiesASecretIntoTheContainer", profileEnvCopiesASecretIntoTheContainer},
	} {
		t.Run(c.name, c.run)
	}
}
