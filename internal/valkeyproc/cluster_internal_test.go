package valkeyproc

import "testing"

// A random ephemeral port is above 55535 about one time in five; clusterPort never picks one,
// so a node's bus port (port + 10000) exists.
func TestClusterPortLeavesRoomForTheBus(t *testing.T) {
	for range 200 {
		p, err := clusterPort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		if p < 1 || p+clusterBusOffset > 65535 {
			t.Fatalf("clusterPort picked %d: its bus port %d is out of range", p, p+clusterBusOffset)
		}
	}
}
