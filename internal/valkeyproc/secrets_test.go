package valkeyproc_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/valkeyproc"
)

// TestPasswordsReachNoFileButTheSentinelsOwnerOnlyOnes: a plain server takes its passwords on
// standard input, so no file in its directory holds them; a Sentinel's config — which it rewrites
// with what it learns, as Valkey does with mode 0644 less its umask — stays 0600, and so does
// every other file the servers create (issue 26: sentinel.conf was left at 0644).
func TestPasswordsReachNoFileButTheSentinelsOwnerOnlyOnes(t *testing.T) {
	const pw = "test-password-not-in-any-file-9x7"
	root := t.TempDir()
	o := valkeyproc.ReplicatedOptions{
		Primary: valkeyproc.Options{Dir: filepath.Join(root, "primary"), Password: pw},
		Replica: valkeyproc.Options{Dir: filepath.Join(root, "replica"), Password: pw, MasterAuth: pw},
	}
	for i := range 3 {
		o.Sentinels = append(o.Sentinels, valkeyproc.Options{Dir: filepath.Join(root, "sentinel", string(rune('1'+i)))})
	}
	r, err := valkeyproc.StartReplicated(t.Context(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Kill)
	time.Sleep(2 * time.Second) // the Sentinels rewrite their configs as they learn the replica
	sentinelFiles := 0
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		st, _ := d.Info()
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v: readable by others", p, st.Mode().Perm())
		}
		b, _ := os.ReadFile(p)
		holds := bytes.Contains(b, []byte(pw))
		isSentinelConf := filepath.Base(p) == "sentinel.conf"
		if isSentinelConf && holds {
			sentinelFiles++
		}
		if holds && !isSentinelConf {
			t.Errorf("%s holds the password", p)
		}
		return nil
	})
	if sentinelFiles != 3 {
		t.Errorf("%d sentinel.conf files hold the password, want 3 (else this test shows nothing about their mode)", sentinelFiles)
	}
}
