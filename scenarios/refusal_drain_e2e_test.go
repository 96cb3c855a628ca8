package scenarios

import "testing"

// TestGracefulStopAndRefusalsFailOnBlindDefects proves the two checks added for defects that
// had escaped every scenario (the contract's gap row "settlements at shutdown", and one
// subject's refusals past max_in_flight_per_subject), each against the blind patch it exists
// to catch, built into a gateway of its own:
//   - 38, the settler closed before the drain: gateway-restart's streams in flight through
//     gateway-a's graceful stop finish but are not settled (white-box: settled 0, 4 held), and
//     their subject is admitted for less than their usage predicts (both views: 0, predicted 1);
//   - 49, the in-flight slot kept on every refusal: valid-auth's 100 malformed requests per
//     gateway turn into 429s after the 64th, and the subject is not admitted afterwards.
//
// Each fails white-box (quotaqual's profile) and black-box (quotaqual-blackbox.yaml: what a
// client and the providers see), and both pass on the unpatched gateway.
func TestGracefulStopAndRefusalsFailOnBlindDefects(t *testing.T) {
	endToEnd(t, "builds patched gateways and starts real processes")
	checkBlindCases(t, []blindCase{
		{"38-shutdown-closes-settler-before-drain.patch", "gateway-restart",
			[]string{"their subject is admitted afterwards as a charge of their usage"},
			[]string{"the streams were settled at the usage the providers counted"}},
		{"49-inflight-slot-leaks-on-denial.patch", "valid-auth",
			[]string{"malformed requests of application-a on each gateway are each refused with 400",
				"application-a admitted on gateway-a after its 100 refusals there"}, nil},
	}, "gateway-restart", "valid-auth")
}
