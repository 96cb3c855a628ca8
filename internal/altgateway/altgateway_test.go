package altgateway

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "alt.json")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const goodConfig = `{"bind": ":8080", "health_bind": ":9090",
 "counter": {"address": "127.0.0.1:6379", "password_variable": "PW", "key_prefix": "k", "deadline_ms": 500},
 "allowance": {"period_seconds": 4, "tokens": 60, "charge_per_call": 15},
 "callers": [{"id": "a", "secret_variable": "S1"}], "backends": ["http://127.0.0.1:8000"]}`

func env(vars map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
}

// TestLoadConfig checks the JSON config is strict and its secrets come from the environment.
func TestLoadConfig(t *testing.T) {
	s, err := LoadConfig(writeConfig(t, goodConfig), env(map[string]string{"PW": "p", "S1": "s"}))
	if err != nil || s.secrets["a"] != "s" || s.password != "p" || s.period != 4*time.Second {
		t.Fatalf("LoadConfig: %v %+v", err, s)
	}
	for name, c := range map[string]struct{ body, want string }{
		"unknown field":         {strings.Replace(goodConfig, `"bind"`, `"bnd"`, 1), "unknown field"},
		"unset secret":          {goodConfig, "$PW is not set"},
		"no backends":           {strings.Replace(goodConfig, `["http://127.0.0.1:8000"]`, `[]`, 1), "backends is empty"},
		"zero allowance":        {strings.Replace(goodConfig, `"tokens": 60`, `"tokens": 0`, 1), "must all be positive"},
		"negative probe charge": {strings.Replace(goodConfig, `"backends"`, `"probe_charge": -1, "backends"`, 1), "probe_charge must not be negative"},
	} {
		vars := map[string]string{"PW": "p", "S1": "s"}
		if name == "unset secret" {
			delete(vars, "PW")
		}
		if _, err := LoadConfig(writeConfig(t, c.body), env(vars)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// TestWindowAndUsage checks the fixed window's number and remaining time, and that the usage
// correction reads the last total_tokens of a response (the stream's final chunk).
func TestWindowAndUsage(t *testing.T) {
	c := counter{s: &Settings{period: 4 * time.Second}}
	n, left := c.window(time.Unix(10, 500_000_000))
	if n != 2 || left != 1500*time.Millisecond {
		t.Errorf("window %d, left %s; want 2, 1.5s", n, left)
	}
	sse := []byte(`data: {"usage":{"total_tokens":3}}` + "\n\n" + `data: {"usage":{"prompt_tokens":9,"total_tokens": 17}}` + "\n\ndata: [DONE]\n")
	if got := lastTotal(sse); got != 17 {
		t.Errorf("lastTotal %d, want 17", got)
	}
	if got := lastTotal([]byte(`{"choices":[]}`)); got != 0 {
		t.Errorf("lastTotal without usage %d, want 0", got)
	}
	tb := &tailBuffer{max: 4}
	tb.Write([]byte("abc"))
	tb.Write([]byte("defg"))
	if string(tb.b) != "defg" {
		t.Errorf("tail %q, want defg", tb.b)
	}
}
