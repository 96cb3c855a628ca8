package gateway

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

const secretValue = "s3cr3t-value-never-printed"

const validConfig = `
listen: 127.0.0.1:8080
admin_listen: 127.0.0.1:9090
auth:
  basic:
    - username: application-a
      password_env: QQ_PASSWORD_1
providers:
  - site: west
    url: http://127.0.0.1:8000
quota:
  backend:
    kind: memory
    timeout: 100ms
  rules:
    - name: per-application-budget
      budgets: [{window: 60s, capacity: 60}]
      reservation_timeout: 30s
      reserved_tokens: 15
`

func testEnv(name string) (string, bool) {
	switch name {
	case "QQ_PASSWORD_1", "QQ_PASSWORD_2", "QQ_API_KEY_1":
		return secretValue, true
	case "QQ_EMPTY":
		return "", true
	}
	return "", false
}

func TestParseConfigValid(t *testing.T) {
	cfg, err := ParseConfig([]byte(validConfig), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.LeaseRenewalEnabled() || cfg.UpstreamTimeoutD().String() != "1m0s" || cfg.ShutdownTimeoutD().String() != "10s" {
		t.Errorf("defaults: renewal %v upstream %s shutdown %s", cfg.LeaseRenewalEnabled(), cfg.UpstreamTimeoutD(), cfg.ShutdownTimeoutD())
	}
	if cfg.Auth.Realm != "quotaqual" || cfg.Policy().Rules[0].Name != "per-application-budget" {
		t.Errorf("realm %q", cfg.Auth.Realm)
	}
}

func TestConfigErrorsNameThePath(t *testing.T) {
	tests := []struct {
		name string
		edit func(string) string
		path string // the error must start a line with this path
		want string // and contain this text
	}{
		{"unknown field", repl("listen:", "listne: x\nlisten:"), "listne", "unknown field"},
		{"listen missing", repl("listen: 127.0.0.1:8080\n", ""), "listen", "required"},
		{"listen not host:port", repl("listen: 127.0.0.1:8080", "listen: localhost"), "listen", "not host:port"},
		{"listen bad port", repl("listen: 127.0.0.1:8080", "listen: 127.0.0.1:99999"), "listen", "port"},
		{"admin same as data", repl("admin_listen: 127.0.0.1:9090", "admin_listen: 127.0.0.1:8080"), "admin_listen", "separate"},
		{"upstream timeout zero", repl("listen:", "upstream_timeout: 0s\nlisten:"), "upstream_timeout", "positive"},
		{"shutdown timeout not a duration", repl("listen:", "shutdown_timeout: 10\nlisten:"), "shutdown_timeout", "duration"},
		{"read timeout zero", repl("listen:", "server: {request_read_timeout: 0s}\nlisten:"), "server.request_read_timeout", "positive"},
		{"in-flight bound negative", repl("listen:", "server: {max_in_flight_per_subject: -1}\nlisten:"), "server.max_in_flight_per_subject", "use 1 to"},
		{"connection bound too large", repl("listen:", "server: {max_connections: 99999999}\nlisten:"), "server.max_connections", "use 1 to"},
		{"no credentials", repl("  basic:\n    - username: application-a\n      password_env: QQ_PASSWORD_1\n", "  realm: x\n"), "auth", "no credentials"},
		{"env var unset", repl("QQ_PASSWORD_1", "QQ_UNSET"), "auth.basic[0].password_env", "QQ_UNSET is not set"},
		{"env var empty", repl("QQ_PASSWORD_1", "QQ_EMPTY"), "auth.basic[0].password_env", "QQ_EMPTY is empty"},
		{"both env and hash", repl("      password_env: QQ_PASSWORD_1", "      password_env: QQ_PASSWORD_1\n      password_sha256: "+strings.Repeat("a", 64)), "auth.basic[0]", "keep one"},
		{"neither env nor hash", repl("      password_env: QQ_PASSWORD_1\n", ""), "auth.basic[0]", "has no password"},
		{"bad hash", repl("password_env: QQ_PASSWORD_1", "password_sha256: abc"), "auth.basic[0].password_sha256", "64 hexadecimal"},
		{"duplicate user", repl("      password_env: QQ_PASSWORD_1\n", "      password_env: QQ_PASSWORD_1\n    - username: application-a\n      password_env: QQ_PASSWORD_2\n"), "auth.basic[1].username", "listed twice"},
		{"colon in username", repl("username: application-a", "username: a:b"), "auth.basic[0].username", "':'"},
		{"api key env unset", repl("providers:", "  api_keys:\n    - subject: batch\n      key_env: QQ_NOPE\nproviders:"), "auth.api_keys[0].key_env", "QQ_NOPE is not set"},
		{"realm with quote", repl("auth:\n", "auth:\n  realm: 'a\"b'\n"), "auth.realm", "quotes"},
		{"no providers", repl("  - site: west\n    url: http://127.0.0.1:8000\n", ""), "providers", "has no value"},
		{"duplicate site", repl("    url: http://127.0.0.1:8000\n", "    url: http://127.0.0.1:8000\n  - site: west\n    url: http://127.0.0.1:8001\n"), "providers[1].site", "listed twice"},
		{"url not http", repl("http://127.0.0.1:8000", "ftp://127.0.0.1:8000"), "providers[0].url", "http:// or https://"},
		{"url without host", repl("http://127.0.0.1:8000", "http://"), "providers[0].url", "with a host"},
		{"url with credentials", repl("http://127.0.0.1:8000", "http://user:pw@127.0.0.1:8000"), "providers[0].url", "credentials"},
		{"policy error is prefixed", repl("capacity: 60", "capacity: 0"), "quota.rules[0].budgets[0].capacity", ""},
		{"policy unknown field is prefixed", repl("reserved_tokens: 15", "reserved_tokens: 15\n      bogus: 1"), "quota.rules[0].bogus", "unknown field"},
		{"lease shorter than renewal allows", repl("reservation_timeout: 30s", "reservation_timeout: 1s"), "quota.rules[0].reservation_timeout", "3 × quota.backend.timeout + 1s = 1300ms"},
		{"lease shorter than upstream without renewal", repl("listen:", "lease_renewal: false\nlisten:"), "quota.rules[0].reservation_timeout", "upstream_timeout is 1m"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := tc.edit(validConfig)
			_, err := ParseConfig([]byte(doc), testEnv)
			if err == nil {
				t.Fatalf("accepted:\n%s", doc)
			}
			msg := err.Error()
			if strings.Contains(msg, secretValue) {
				t.Fatalf("error prints a secret: %s", msg)
			}
			found := false
			for _, line := range strings.Split(msg, "\n") {
				if strings.HasPrefix(line, tc.path+": ") && strings.Contains(line, tc.want) {
					found = true
				}
			}
			if !found {
				t.Fatalf("want a line %q … %q, got:\n%s", tc.path+":", tc.want, msg)
			}
		})
	}
}

func TestLeaseRenewalOffAcceptsLongLease(t *testing.T) {
	doc := strings.Replace(validConfig, "listen:", "lease_renewal: false\nupstream_timeout: 20s\nlisten:", 1)
	if _, err := ParseConfig([]byte(doc), testEnv); err != nil {
		t.Fatal(err)
	}
}

func repl(old, new string) func(string) string {
	return func(s string) string {
		if !strings.Contains(s, old) {
			panic("test edit does not apply: " + old)
		}
		return strings.Replace(s, old, new, 1)
	}
}

// TestGatewayCheckFlag runs the binary: --check exits 0 on a valid config and 2 with the
// path-named errors on an invalid one.
func TestGatewayCheckFlag(t *testing.T) {
	bin := needBinary(t)
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(good, []byte(validConfig), 0o600)
	os.WriteFile(bad, []byte(strings.Replace(validConfig, "QQ_PASSWORD_1", "QQ_CHECK_UNSET", 1)), 0o600)
	env := append(os.Environ(), "QQ_PASSWORD_1="+secretValue)

	cmd := exec.Command(bin, "gateway", "--config", good, "--check")
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("valid config: %v\n%s", err, out)
	}
	cmd = exec.Command(bin, "gateway", "--config", bad, "--check")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 {
		t.Fatalf("invalid config: exit %d (%v), want 2\n%s", cmd.ProcessState.ExitCode(), err, out)
	}
	if !strings.Contains(string(out), "auth.basic[0].password_env: environment variable QQ_CHECK_UNSET is not set") {
		t.Fatalf("output lacks the path-named error:\n%s", out)
	}
	if strings.Contains(string(out), secretValue) {
		t.Fatalf("output prints a secret")
	}
}
