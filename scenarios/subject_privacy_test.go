package scenarios

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/ledger"
)

// TestScanLogsFindsRawSubjectsOnly: a line with the username (as sent or percent-encoded) is a
// hit; its hash, the provider stubs' logs and hosts not asked for are not; the request ids are
// counted wherever they appear; no gateway log is an error, not a pass.
func TestScanLogsFindsRawSubjectsOnly(t *testing.T) {
	dir := t.TempDir()
	user := "application-a@subject-privacy"
	needles := map[string]string{}
	for _, n := range usernameForms(user) {
		needles[n] = "application-a"
	}
	write := func(host, text string) {
		if err := os.WriteFile(filepath.Join(dir, host+".log"), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("gateway-a", `{"msg":"request","request_id":"r1","subject_hash":"`+ledger.SubjectKey(user)+`"}`+"\n")
	write("gateway-b", `{"msg":"request","request_id":"r2","subject_hash":"`+user+`"}`+"\n"+`GET /x?u=application-a%40subject-privacy`+"\n")
	write("provider-west", `{"user":"`+user+`"}`+"\n") // the harness's stub: not searched

	s, found, err := scanLogs(dir, []string{"gateway-a", "gateway-b", "ratelimit-1"}, needles, []string{"r1", "r2", "r3"})
	if err != nil {
		t.Fatal(err)
	}
	if s.files != 2 || s.lines != 3 || found != 2 {
		t.Errorf("files %d, lines %d, ids found %d; want 2, 3, 2", s.files, s.lines, found)
	}
	if len(s.hits) != 2 || !strings.HasPrefix(s.hits[0], "gateway-b.log:1: application-a") || !strings.HasPrefix(s.hits[1], "gateway-b.log:2:") {
		t.Errorf("hits %q, want gateway-b's two lines", s.hits)
	}
	if _, _, err := scanLogs(dir, []string{"gateway-c"}, needles, nil); err == nil {
		t.Error("no gateway log collected: no error")
	}
}
