package scenarios

import "testing"

// TestLongGenerationRetryAfterFailsOnBlind62 proves long-generation's Retry-After check on the
// 429s its hold causes (contract §4: a 429 caused by in-flight holds announces no earlier than
// the earliest hold can end) against blind 62, which answers every such 429 "Retry-After: 1":
// the client, which knows its generation is still in flight and when it sent it, and the
// lease and renewal schedule its gateway's profile states, sees each Retry-After send it back
// before the hold could end (2.5 s lease renewed every 833 ms in quick: no earlier than
// 1.67 s). It fails white-box (quotaqual's profile) and black-box (quotaqual-blackbox.yaml:
// what a client sees), where round 4's measurement found 62 escaping every scenario, and
// passes on the unpatched gateway in both views.
func TestLongGenerationRetryAfterFailsOnBlind62(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end: builds a patched gateway and starts real processes; not in -short")
	}
	checkBlindCases(t, []blindCase{
		{"62-held-retry-after-one-second.patch", "long-generation",
			[]string{"every 429 while the generation's hold fills the budget carries a Retry-After no earlier than that hold can end"}, nil},
	}, "long-generation")
}
