package scenarios

import (
	"os"
	"testing"

	"github.com/quotaqual/quotaqual/topology"
)

// TestReplicaLossFailsOnBlindDefects proves replica-loss catches the acknowledged-mode defects
// of the blind set that only show while replicas are missing and the primary is up, each
// built into a gateway of its own and run on netns (the replicated store group and its
// partitions), white-box and black-box:
//   - 56 (round 3's 61): WAIT's timeout sent in seconds, so 0 — block until the replicas
//     answer. Every refusal still comes as a 503, but at the store timeout, not after
//     ack_timeout: the check of the refusals' median time fails.
//   - 29: WAIT sent on its own connection, which confirms its empty history at once, and 30:
//     an unacknowledged reserve admitted. Either admits with no replica there: the
//     store-failure check fails, and the admissions reach a provider.
//
// On the unpatched gateway it passes in both views.
func TestReplicaLossFailsOnBlindDefects(t *testing.T) {
	endToEnd(t, "builds patched gateways and starts the replicated store group in namespaces")
	if reason := os.Getenv(envNoNetns); reason != "" {
		t.Skip("netns topology unavailable on this host: " + reason)
	}
	checkBlindCasesOn(t, topology.EngineNetns, []blindCase{
		{"56-wait-timeout-in-seconds.patch", "replica-loss",
			[]string{"the refusals' median within ack_timeout + slack"}, nil},
		{"29-wait-sent-on-own-connection.patch", "replica-loss",
			[]string{"with the replicas cut off → 503", "no provider contacted while the replicas were cut off"}, nil},
		{"30-unacked-reserve-admitted.patch", "replica-loss",
			[]string{"with the replicas cut off → 503", "no provider contacted while the replicas were cut off"}, nil},
	}, "replica-loss")
}
