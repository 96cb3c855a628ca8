package undertest_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/gateway"
	"github.com/quotaqual/quotaqual/internal/altgateway"
	"github.com/quotaqual/quotaqual/undertest"
)

// TestShippedProfiles checks every shipped profile parses strictly and renders for a run's
// facts, and that the configs of the profiles this repository can run are accepted by the
// gateway they are for.
func TestShippedProfiles(t *testing.T) {
	names := undertest.ShippedNames()
	for _, want := range []string{"quotaqual", "quotaqual-memory", "altgateway", "praxis", "litellm"} {
		if !slices.Contains(names, want) {
			t.Errorf("shipped profiles %v lack %s", names, want)
		}
	}
	d := testDeployment(t, deployment.BackendValkey)
	secrets := append(d.GatewayEnv("10.0.0.5:6379"), d.StoreEnv()...)
	getenv := lookupIn(secrets)
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			p, err := undertest.Shipped(name)
			if err != nil {
				t.Fatal(err)
			}
			f, err := undertest.FactsFor(d, "gateway-a", testAddrs(), d.Profile)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			f.Binary, f.ConfigPath = "/bin/quotaqual", filepath.Join(dir, p.Config.File)
			y, err := p.Render(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f.ConfigPath, y, 0o600); err != nil {
				t.Fatal(err)
			}
			for _, s := range d.Secrets() {
				if strings.Contains(string(y), s) {
					t.Errorf("the rendered config contains a secret")
				}
			}
			argv, err := p.Argv(f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := p.Env(f, secrets); err != nil {
				t.Fatal(err)
			}
			switch name {
			case "quotaqual", "quotaqual-memory":
				if want := []string{"/bin/quotaqual", "gateway", "--config", f.ConfigPath}; !slices.Equal(argv, want) {
					t.Errorf("argv %q, want %q", argv, want)
				}
				cfg, err := gateway.ParseConfig(y, getenv)
				if err != nil {
					t.Fatalf("quotaqual's gateway refuses the rendered config: %v\n%s", err, y)
				}
				kind := cfg.Quota.Backend.Kind
				if want := map[string]string{"quotaqual": "valkey", "quotaqual-memory": "memory"}[name]; kind != want {
					t.Errorf("backend %q, want %q", kind, want)
				}
			case "altgateway":
				if _, err := altgateway.LoadConfig(f.ConfigPath, getenv); err != nil {
					t.Fatalf("altgateway refuses the rendered config: %v\n%s", err, y)
				}
			default:
				if p.Status == undertest.Peer {
					return // TestPeerProfilesRender renders them, on a window they express
				}
				if p.Status != undertest.Unverified || !strings.Contains(p.Description, "UNVERIFIED") {
					t.Errorf("foreign profile %s is %s (%q): a template this repository never ran must say it is unverified", name, p.Status, p.Description)
				}
			}
		})
	}
}

// TestParseNamesEveryProblemByPath checks strict decoding: unknown fields, bad values and
// broken templates are all reported, each at its path.
func TestParseNamesEveryProblemByPath(t *testing.T) {
	good, err := undertest.ShippedYAML("altgateway")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, from, to, wantPath string
	}{
		{"unknown field", "readiness:\n", "readyness:\n", "readyness"},
		{"unknown listener", "listener: admin", "listener: side", "readiness.listener"},
		{"store failure looks like a denial", "store_failure: {status: 503}", "store_failure: {status: 429}", "expect.store_failure.status"},
		{"broken template", `"{{.ConfigPath}}"`, `"{{.ConfigPath"`, "launch.argv[3]"},
		{"unknown inspection", "quota_inspection: none", "quota_inspection: sql", "capabilities.quota_inspection"},
		{"bad granularity", "granularity: 1s", "granularity: soon", "expect.admission.granularity"},
		{"bad header", "limit: X-Allowance-Limit", "limit: X Allowance", "expect.quota_headers.limit"},
		{"config file with a path", "file: altgateway.json", "file: ../x.json", "config.file"},
		{"unknown endpoint", "quota_inspection: none", "quota_inspection: none\n  endpoints: [chat, rerank]", "capabilities.endpoints[1]"},
		{"endpoint twice", "quota_inspection: none", "quota_inspection: none\n  endpoints: [chat, models, models]", "capabilities.endpoints[2]"},
		{"endpoints without chat", "quota_inspection: none", "quota_inspection: none\n  endpoints: [embeddings]", "capabilities.endpoints"},
		{"counters without a path", "quota_inspection: none", "quota_inspection: none\n  metrics: {store_errors: errors_total}", "capabilities.metrics.path"},
		{"a counter that is no selector", "quota_inspection: none", "quota_inspection: none\n  metrics: {path: /metrics, store_errors: 'errors_total{reason=reserve}'}", "capabilities.metrics.store_errors"},
		{"usage counted across rules", "quota_inspection: none", "quota_inspection: none\n  metrics: {path: /metrics, usage_reported: 'u{r=\"k\"}', usage_unreported: 'u{rule=\"{{.Rule}}\"}'}", "capabilities.metrics.usage_reported"},
		{"usage reported alone", "quota_inspection: none", "quota_inspection: none\n  metrics: {path: /metrics, usage_reported: 'u{rule=\"{{.Rule}}\"}'}", "capabilities.metrics"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			bad := strings.Replace(string(good), c.from, c.to, 1)
			if bad == string(good) {
				t.Fatalf("%q not in the profile", c.from)
			}
			_, err := undertest.Parse([]byte(bad))
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), c.wantPath+": ") {
				t.Errorf("error %q does not name %s", err, c.wantPath)
			}
		})
	}
	if _, err := undertest.Parse([]byte("name: x\n")); err == nil || !strings.Contains(err.Error(), "launch.argv: missing") {
		t.Errorf("a profile without launch: %v", err)
	}
}

// TestLoadFromFile reads a profile from disk and names the file in its errors.
func TestLoadFromFile(t *testing.T) {
	y, _ := undertest.ShippedYAML("quotaqual-memory")
	path := filepath.Join(t.TempDir(), "p.yaml")
	if err := os.WriteFile(path, y, 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := undertest.Load(path)
	if err != nil || p.Name != "quotaqual-memory" || p.Status != undertest.KnownBad {
		t.Fatalf("Load: %v, %+v", err, p)
	}
	if err := os.WriteFile(path, append(y, "extra: 1\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := undertest.Load(path); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "extra: ") {
		t.Errorf("Load of a profile with an unknown field: %v", err)
	}
}

// TestEnvCopiesOnlyTheRunsVariables checks a profile's $NAME copies a secret of the run and
// that naming one the run does not set is an error, not an empty value.
func TestEnvCopiesOnlyTheRunsVariables(t *testing.T) {
	y, _ := undertest.ShippedYAML("litellm")
	p, err := undertest.Parse(y)
	if err != nil {
		t.Fatal(err)
	}
	env, err := p.Env(undertest.Facts{}, []string{"QUOTAQUAL_VALKEY_PASSWORD=pw1"})
	if err != nil || !slices.Contains(env, "REDIS_PASSWORD=pw1") {
		t.Errorf("env %q, %v: want REDIS_PASSWORD copied", env, err)
	}
	if _, err := p.Env(undertest.Facts{}, nil); err == nil || !strings.Contains(err.Error(), "QUOTAQUAL_VALKEY_PASSWORD") {
		t.Errorf("env without the copied variable: %v", err)
	}
}

// TestGranularity checks the ledger rule and a fixed granularity.
func TestGranularity(t *testing.T) {
	def := undertest.Default()
	for w, want := range map[string]string{"4s": "1s", "60s": "1s", "2m": "2s", "10m": "10s", "61s": "2s"} {
		wd, _ := timeParse(w)
		if got := def.Granularity(wd).String(); got != want {
			t.Errorf("ledger granularity of %s = %s, want %s", w, got, want)
		}
	}
	alt, _ := undertest.Shipped("altgateway")
	if got := alt.Granularity(0).String(); got != "1s" {
		t.Errorf("altgateway granularity %s, want 1s", got)
	}
}

func timeParse(s string) (time.Duration, error) { return time.ParseDuration(s) }

// TestEndpointsDefaultToChat: a profile that declares no endpoints serves chat alone (a
// foreign gateway is never assumed to serve more); quotaqual's own profiles declare them all.
func TestEndpointsDefaultToChat(t *testing.T) {
	for name, want := range map[string][]string{
		"altgateway":       {undertest.EndpointChat},
		"quotaqual":        undertest.AllEndpoints,
		"quotaqual-memory": undertest.AllEndpoints,
	} {
		p, err := undertest.Shipped(name)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range undertest.AllEndpoints {
			if p.Serves(e) {
				got = append(got, e)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s serves %v, want %v", name, got, want)
		}
	}
	good, err := undertest.ShippedYAML("altgateway")
	if err != nil {
		t.Fatal(err)
	}
	_, err = undertest.Parse([]byte(strings.Replace(string(good), "quota_inspection: none", "quota_inspection: none\n  endpoints: [chat, rerank]", 1)))
	if err == nil || !strings.Contains(err.Error(), "use chat, responses, embeddings, completions, models") {
		t.Errorf("an unknown endpoint: %v, want the error to list the known ones", err)
	}
}
