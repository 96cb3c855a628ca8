package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// concat joins its inputs (a missing final newline added) into a file only its owner reads,
// and names the missing flag when --out is absent: the kind Sentinel pods' init container
// depends on both.
func TestConcatJoinsFilesOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	a, b, out := filepath.Join(dir, "a.conf"), filepath.Join(dir, "b.conf"), filepath.Join(dir, "out.conf")
	if err := os.WriteFile(a, []byte("sentinel monitor m 10.0.0.1 6379 2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(b, []byte("sentinel auth-pass m \"pw\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, stderr, code := quotaqual(t, 30*time.Second, "concat", "--out", out, a, b); code != 0 {
		t.Fatalf("concat: exit %d: %s", code, stderr)
	}
	got, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if want := "sentinel monitor m 10.0.0.1 6379 2\nsentinel auth-pass m \"pw\"\n"; string(got) != want {
		t.Errorf("joined %q, want %q", got, want)
	}
	if st, err := os.Stat(out); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v (%v), want 0600", st.Mode().Perm(), err)
	}
	if _, stderr, code := quotaqual(t, 30*time.Second, "concat", a); code != 2 || !strings.Contains(stderr, "--out is required") {
		t.Errorf("concat without --out: exit %d, %q; want exit 2 naming --out", code, stderr)
	}
}
