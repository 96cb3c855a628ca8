package ledger

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/strictyaml"
)

// testEnv is the environment the policy tests resolve ${ENV_VAR} from.
func testEnv(k string) (string, bool) {
	v, ok := map[string]string{
		"QUOTAQUAL_VALKEY_URL": "redis://:s3cret-canary@valkey:6379",
		"QUOTAQUAL_EMPTY":      "",
		"QUOTAQUAL_HTTP_URL":   "http://:s3cret-canary@valkey:6379",
	}[k]
	return v, ok
}

func mustLoad(t *testing.T, src string) *CompiledPolicy {
	t.Helper()
	p, err := LoadPolicy([]byte(src), testEnv)
	if err != nil {
		t.Fatalf("LoadPolicy:\n%v", err)
	}
	return p
}

// TestPolicyTestdata loads every file of testdata/policy: valid_* must load, invalid_* must
// fail with every "# want:" line of the file among the errors.
func TestPolicyTestdata(t *testing.T) {
	files, err := filepath.Glob("testdata/policy/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			_, err = LoadPolicy(data, testEnv)
			if strings.HasPrefix(name, "valid_") {
				if err != nil {
					t.Fatalf("want it to load, got:\n%v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("want an error, it loaded")
			}
			var wants []string
			for _, line := range strings.Split(string(data), "\n") {
				if w, ok := strings.CutPrefix(line, "# want: "); ok {
					wants = append(wants, w)
				}
			}
			if len(wants) == 0 {
				t.Fatal("invalid_ file without a # want: line")
			}
			for _, w := range wants {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("want %q among the errors, got:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("error echoes a secret:\n%v", err)
			}
		})
	}
}

func TestLoadPolicyFillsDefaults(t *testing.T) {
	p := mustLoad(t, `
rules:
  - name: default
    budgets: [{window: 60s, capacity: 60}]
    reserved_tokens: 15
`)
	wantBackend := BackendConfig{Kind: "memory", Namespace: "quotaqual", Timeout: Duration(300 * time.Millisecond)}
	if p.Backend != wantBackend {
		t.Errorf("backend = %+v, want %+v", p.Backend, wantBackend)
	}
	wantLimits := Limits{MaxKeys: 100000, MaxKeyLength: 256, MaxActiveReservations: 200000, MaxBodyBytes: 2 << 20}
	if p.Limits != wantLimits {
		t.Errorf("limits = %+v, want %+v", p.Limits, wantLimits)
	}
	r := p.Rules[0]
	if r.Name != "default" || r.KeyMode != KeySubject || r.Strategy != StrategyFixed || r.AllowedModels != nil {
		t.Errorf("rule = %+v", r)
	}
	wantQuota := Quota{Rule: "default", Budgets: []Budget{{Window: time.Minute, Capacity: 60}}, Lease: 30 * time.Second}
	if r.Quota.Rule != wantQuota.Rule || r.Quota.Lease != wantQuota.Lease || len(r.Quota.Budgets) != 1 || r.Quota.Budgets[0] != wantQuota.Budgets[0] {
		t.Errorf("quota = %+v, want %+v", *r.Quota, wantQuota)
	}
	if r.Multiplier != 1 || r.FallbackEstimate != 15 || r.Estimate(RequestFacts{}) != 15 {
		t.Errorf("reserved_tokens 15 compiled to multiplier %v fallback %d estimate %d", r.Multiplier, r.FallbackEstimate, r.Estimate(RequestFacts{}))
	}
	if p.NeedsBody() {
		t.Error("a fixed-only policy must not need the body")
	}
}

func TestLoadPolicyKeepsGivenValues(t *testing.T) {
	p := mustLoad(t, `
backend: {kind: valkey, url: "rediss://u:p@h:6380", namespace: "a:b.c_d-e", timeout: 10s}
limits: {max_keys: 1, max_key_length: 1024, max_active_reservations: 2, max_body_bytes: 3}
rules:
  - name: r
    key: subject_and_model
    allowed_models: [m]
    budgets: [{window: 1s, capacity: 9007199254740992}, {window: 168h, capacity: 1}]
    reservation_timeout: 24h
    estimation: {strategy: max_tokens, fallback_estimate: 1}
`)
	if p.Backend.URL != "rediss://u:p@h:6380" || p.Backend.Namespace != "a:b.c_d-e" || p.Backend.Timeout.D() != 10*time.Second {
		t.Errorf("backend = %+v", p.Backend)
	}
	if p.Limits != (Limits{MaxKeys: 1, MaxKeyLength: 1024, MaxActiveReservations: 2, MaxBodyBytes: 3}) {
		t.Errorf("limits = %+v", p.Limits)
	}
	if q := p.Rules[0].Quota; q.Lease != 24*time.Hour || q.Budgets[1].Window != 168*time.Hour || q.Limit() != 1 {
		t.Errorf("quota = %+v", *q)
	}
	if !p.NeedsBody() {
		t.Error("a max_tokens rule needs the body")
	}
}

func TestBackendURLFromEnvironment(t *testing.T) {
	rule := "\nrules: [{name: r, budgets: [{window: 60s, capacity: 60}], reserved_tokens: 1}]\n"
	t.Run("a whole ${NAME} resolves to the variable's value", func(t *testing.T) {
		p := mustLoad(t, "backend: {kind: valkey, url: '${QUOTAQUAL_VALKEY_URL}'}"+rule)
		if p.Backend.URL != "redis://:s3cret-canary@valkey:6379" {
			t.Fatalf("url not resolved")
		}
	})
	cases := []struct{ name, url, want string }{
		{"an unset variable is named", "${QUOTAQUAL_NOPE}", "backend.url: environment variable QUOTAQUAL_NOPE is not set"},
		{"an empty variable is named", "${QUOTAQUAL_EMPTY}", "backend.url: environment variable QUOTAQUAL_EMPTY is empty"},
		{"a reference inside a URL is refused", "redis://:${QUOTAQUAL_VALKEY_URL}@h:1", "backend.url: an environment variable reference must be the whole value, exactly ${NAME}"},
		{"two references are refused", "${A}${B}", "backend.url: an environment variable reference must be the whole value"},
		{"a lowercase name is refused", "${quotaqual_url}", "backend.url: invalid environment variable name"},
		{"a name starting with a digit is refused", "${1URL}", "backend.url: invalid environment variable name"},
		{"the resolved value's scheme is checked, naming the variable", "${QUOTAQUAL_HTTP_URL}", "backend.url: scheme must be redis:// or rediss:// (in environment variable QUOTAQUAL_HTTP_URL)"},
		{"a literal http URL is refused", "http://:s3cret-canary@h:1", "backend.url: scheme must be redis:// or rediss://"},
		{"a URL without a host is refused", "redis://", "backend.url: has no host"},
		{"an unparsable URL is refused without echoing it", "redis://:s3cret-canary@h:port", "backend.url: not a valid URL"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := LoadPolicy([]byte("backend: {kind: valkey, url: '"+tc.url+"'}"+rule), testEnv)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want %q, got %v", tc.want, err)
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Fatalf("error echoes the secret: %v", err)
			}
		})
	}
}

func TestMatchTakesTheFirstRuleThatHolds(t *testing.T) {
	p := mustLoad(t, `
rules:
  - name: a-on-x
    match: {subjects: [a], models: [x]}
    budgets: [{window: 60s, capacity: 60}]
    reserved_tokens: 1
  - name: a-any
    match: {subjects: [a, b]}
    budgets: [{window: 60s, capacity: 60}]
    reserved_tokens: 1
  - name: on-y
    match: {models: [y]}
    budgets: [{window: 60s, capacity: 60}]
    reserved_tokens: 1
  - name: rest
    budgets: [{window: 60s, capacity: 60}]
    reserved_tokens: 1
`)
	cases := []struct{ subject, model, want string }{
		{"a", "x", "a-on-x"}, // both lists hold
		{"a", "y", "a-any"},  // subject holds, model list of rule 0 does not
		{"b", "x", "a-any"},  // subject membership, not prefix
		{"c", "y", "on-y"},   // models only
		{"c", "x", "rest"},   // catch-all
		{"", "", "rest"},     // catch-all matches even nothing
		{"A", "x", "rest"},   // exact, case-sensitive membership
		{"a ", "x", "rest"},  // no trimming
	}
	for _, tc := range cases {
		t.Run(tc.subject+" on "+tc.model+" matches "+tc.want, func(t *testing.T) {
			r, ok := p.Match(tc.subject, tc.model)
			if !ok || r.Name != tc.want {
				t.Fatalf("Match = %v %v, want %s", r, ok, tc.want)
			}
		})
	}
	t.Run("no rule matches without a catch-all", func(t *testing.T) {
		p := mustLoad(t, "rules: [{name: r, match: {subjects: [a]}, budgets: [{window: 60s, capacity: 60}], reserved_tokens: 1}]")
		if r, ok := p.Match("b", ""); ok || r != nil {
			t.Fatalf("Match = %v %v, want none", r, ok)
		}
	})
}

func TestModelAllowed(t *testing.T) {
	p := mustLoad(t, `
rules:
  - name: listed
    match: {subjects: [a]}
    allowed_models: [gpt-x]
    budgets: [{window: 60s, capacity: 60}]
    reserved_tokens: 1
  - name: any
    budgets: [{window: 60s, capacity: 60}]
    reserved_tokens: 1
`)
	listed, anyModel := p.Rules[0], p.Rules[1]
	for _, tc := range []struct {
		name  string
		rule  *CompiledRule
		model string
		want  bool
	}{
		{"a listed model is allowed", listed, "gpt-x", true},
		{"an unlisted model is refused", listed, "gpt-y", false},
		{"no model is refused when models are listed", listed, "", false},
		{"any model is allowed without a list", anyModel, "gpt-y", true},
		{"no model is allowed without a list", anyModel, "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rule.ModelAllowed(tc.model); got != tc.want {
				t.Fatalf("ModelAllowed(%q) = %v", tc.model, got)
			}
		})
	}
}

func TestKeysHashSubjectsAndModels(t *testing.T) {
	b64 := func(s string) string {
		sum := sha256.Sum256([]byte(s))
		return base64.RawURLEncoding.EncodeToString(sum[:])
	}
	t.Run("SubjectKey is subject:v1: and 43 characters of base64url SHA-256", func(t *testing.T) {
		k := SubjectKey("application-a")
		if k != "subject:v1:"+b64("application-a") || len(k) != len("subject:v1:")+43 {
			t.Fatalf("SubjectKey = %q", k)
		}
		if strings.Contains(k, "application") || strings.ContainsAny(k, "+/=") {
			t.Fatalf("key leaks the subject or is not base64url-nopad: %q", k)
		}
	})
	p := mustLoad(t, `
rules:
  - name: by-model
    match: {subjects: [a]}
    key: subject_and_model
    allowed_models: [qwen3-0.6b, gpt-4o, m]
    budgets: [{window: 60s, capacity: 60}]
    reserved_tokens: 1
  - name: by-subject
    budgets: [{window: 60s, capacity: 60}]
    reserved_tokens: 1
`)
	t.Run("subject key ignores the model", func(t *testing.T) {
		r := p.Rules[1]
		if r.Key("a", "x") != SubjectKey("a") || r.Key("a", "y") != r.Key("a", "x") {
			t.Fatal("subject keys differ by model")
		}
	})
	t.Run("subject_and_model key appends the hashed model", func(t *testing.T) {
		r := p.Rules[0]
		k := r.Key("a", "gpt:x")
		if k != SubjectKey("a")+":model:"+b64("gpt:x") || len(k) != subjectAndModelKeyLen {
			t.Fatalf("Key = %q", k)
		}
		if r.Key("a", "x") == r.Key("a", "y") || r.Key("a", "") == r.Key("b", "") {
			t.Fatal("keys collide")
		}
	})
}

func TestDurationParsing(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"500ms", 500 * time.Millisecond, ""},
		{"30s", 30 * time.Second, ""},
		{"1m", time.Minute, ""},
		{"168h", 168 * time.Hour, ""},
		{" 2h ", 2 * time.Hour, ""},
		{"7d", 0, `"7d": days are not accepted; write hours (7d is 168h)`},
		{"1w", 0, "weeks are not accepted"},
		{"0s", 0, "is zero"},
		{"1.5s", 0, "is not a duration; write a whole number with ms, s, m or h"},
		{"-1s", 0, "is not a duration"},
		{"30", 0, "is not a duration"},
		{"9999999999999999999h", 0, "is not a duration"},
		{"9999999999h", 0, "too long a duration"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			d, err := ParseDuration(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want error %q, got %v (%v)", tc.err, err, d)
				}
				return
			}
			if err != nil || d.D() != tc.want {
				t.Fatalf("ParseDuration = %v, %v; want %v", d, err, tc.want)
			}
		})
	}
	t.Run("a duration must be a scalar", func(t *testing.T) {
		var v struct {
			D Duration `yaml:"d"`
		}
		err := strictyaml.Decode([]byte("d: [30s]"), &v)
		if err == nil || err.Error() != "d: a duration must be a scalar such as 30s" {
			t.Fatalf("got %v", err)
		}
	})
}

func TestCompileReturnsStrictyamlErrors(t *testing.T) {
	_, err := (&Policy{}).Compile(nil)
	var es strictyaml.Errors
	if !errors.As(err, &es) || es.Prefix("quota").Error() != "quota.rules: at least one rule is required" {
		t.Fatalf("got %T %v", err, err)
	}
}
