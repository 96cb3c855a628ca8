package scenarios

import "testing"

// TestSubjectPrivacyFailsOnRawSubjectInLogs proves subject-privacy against blind patch 04: a
// gateway whose per-request log line carries the raw username in its subject_hash field. The
// scenario reads the gateways' logs — what any gateway the harness launches leaves — so it
// fails in both views (it uses no inspection), and passes on the unpatched gateway, whose log
// line holds the subject's hash.
func TestSubjectPrivacyFailsOnRawSubjectInLogs(t *testing.T) {
	endToEnd(t, "builds a patched gateway and starts real processes")
	checkBlindCases(t, []blindCase{
		{"04-raw-subject-in-logs.patch", "subject-privacy", []string{"no raw subject in the gateways' logs"}, nil},
	}, "subject-privacy")
}
