package undertest_test

import (
	"bytes"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/undertest"
)

// The default profile's rendering, decoded: what quotaqual's gateway is given. (Moved here
// from deployment with the renderer.)

// plainDeployment is a run of scenarios without rules of their own: one rule rendered.
func plainDeployment(t *testing.T) *deployment.Deployment {
	t.Helper()
	p, err := deployment.ProfileByName("quick")
	if err != nil {
		t.Fatal(err)
	}
	d, err := deployment.NewDeployment("run-20260101-abc", p, deployment.Named("valid-auth", "shared-budget", "auth-rejection"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// threeSites are the addresses of a netns-like topology: three provider sites.
func threeSites() deployment.Addresses {
	return deployment.Addresses{
		DataListen:  "0.0.0.0:8080",
		AdminListen: "0.0.0.0:9090",
		ValkeyAddr:  "198.18.0.31:6379",
		Providers: []deployment.ProviderAddr{
			{Site: "west", URL: "http://198.18.0.21:8000"},
			{Site: "central", URL: "http://198.18.0.22:8000"},
			{Site: "east", URL: "http://198.18.0.23:8000"},
		},
	}
}

type renderedGateway struct {
	Listen          string `yaml:"listen"`
	AdminListen     string `yaml:"admin_listen"`
	UpstreamTimeout string `yaml:"upstream_timeout"`
	ShutdownTimeout string `yaml:"shutdown_timeout"`
	Auth            struct {
		Realm string `yaml:"realm"`
		Basic []struct {
			Username    string `yaml:"username"`
			PasswordEnv string `yaml:"password_env"`
		} `yaml:"basic"`
	} `yaml:"auth"`
	Providers []struct {
		Site string `yaml:"site"`
		URL  string `yaml:"url"`
	} `yaml:"providers"`
	Quota struct {
		Backend struct {
			Kind      string `yaml:"kind"`
			URL       string `yaml:"url"`
			Namespace string `yaml:"namespace"`
			Timeout   string `yaml:"timeout"`
		} `yaml:"backend"`
		Rules []struct {
			Name    string `yaml:"name"`
			Key     string `yaml:"key"`
			Budgets []struct {
				Window   string `yaml:"window"`
				Capacity int64  `yaml:"capacity"`
			} `yaml:"budgets"`
			ReservationTimeout string `yaml:"reservation_timeout"`
			ReservedTokens     int64  `yaml:"reserved_tokens"`
		} `yaml:"rules"`
	} `yaml:"quota"`
}

func decodeGateway(t *testing.T, b []byte) renderedGateway {
	t.Helper()
	var g renderedGateway
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&g); err != nil {
		t.Fatalf("rendered config does not decode strictly: %v\n%s", err, b)
	}
	return g
}

func TestGatewayConfig(t *testing.T) {
	d := plainDeployment(t)
	a := threeSites()
	out, err := undertest.Default().RenderFor(d, "gateway-a", a, d.Profile)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("no secret appears in the rendered YAML", func(t *testing.T) {
		for _, s := range d.Secrets() {
			if bytes.Contains(out, []byte(s)) {
				t.Fatal("a secret appears literally in the rendered config")
			}
		}
	})
	t.Run("structure matches the gateway schema", func(t *testing.T) {
		g := decodeGateway(t, out)
		if g.Listen != "0.0.0.0:8080" || g.AdminListen != "0.0.0.0:9090" || g.UpstreamTimeout != "60s" || g.ShutdownTimeout != "10s" {
			t.Errorf("top level = %+v", g)
		}
		if g.Auth.Realm != "quotaqual" || len(g.Auth.Basic) != len(d.Credentials) {
			t.Fatalf("auth = %+v", g.Auth)
		}
		for i, c := range d.Credentials {
			if g.Auth.Basic[i].Username != c.Username || g.Auth.Basic[i].PasswordEnv != c.EnvVar {
				t.Errorf("user %d = %+v, want %s/%s", i, g.Auth.Basic[i], c.Username, c.EnvVar)
			}
		}
		if len(g.Providers) != 3 || g.Providers[0].Site != "west" || g.Providers[2].URL != "http://198.18.0.23:8000" {
			t.Errorf("providers = %+v", g.Providers)
		}
		b := g.Quota.Backend
		if b.Kind != "valkey" || b.URL != "${QUOTAQUAL_VALKEY_URL}" || b.Namespace != d.Namespace || b.Timeout != "500ms" {
			t.Errorf("backend = %+v", b)
		}
		if len(g.Quota.Rules) != 1 {
			t.Fatalf("rules = %+v", g.Quota.Rules)
		}
		r := g.Quota.Rules[0]
		if r.Name != "per-application-budget" || r.Key != "subject" || len(r.Budgets) != 1 ||
			r.Budgets[0].Window != "4s" || r.Budgets[0].Capacity != 60 || r.ReservationTimeout != "3s" || r.ReservedTokens != 15 {
			t.Errorf("rule = %+v", r)
		}
	})
	t.Run("reference profile renders a 60s window", func(t *testing.T) {
		p, _ := deployment.ProfileByName("reference")
		rd, err := deployment.NewDeployment("ref", p, nil)
		if err != nil {
			t.Fatal(err)
		}
		out, err := undertest.Default().RenderFor(rd, "gateway-b", a, rd.Profile)
		if err != nil {
			t.Fatal(err)
		}
		if w := decodeGateway(t, out).Quota.Rules[0].Budgets[0].Window; w != "60s" {
			t.Fatalf("window = %q", w)
		}
	})
	t.Run("memory backend has no url", func(t *testing.T) {
		md := *d
		md.Backend = deployment.BackendMemory
		out, err := undertest.Default().RenderFor(&md, "gateway-a", a, md.Profile)
		if err != nil {
			t.Fatal(err)
		}
		b := decodeGateway(t, out).Quota.Backend
		if b.Kind != "memory" || b.URL != "" {
			t.Fatalf("backend = %+v", b)
		}
	})
	t.Run("addresses that need quoting survive", func(t *testing.T) {
		v6 := a
		v6.DataListen, v6.AdminListen = "[::1]:8080", ":9090"
		out, err := undertest.Default().RenderFor(d, "gateway-a", v6, d.Profile)
		if err != nil {
			t.Fatal(err)
		}
		g := decodeGateway(t, out)
		if g.Listen != "[::1]:8080" || g.AdminListen != ":9090" {
			t.Fatalf("listen = %q, admin = %q", g.Listen, g.AdminListen)
		}
	})
	t.Run("bad inputs are refused", func(t *testing.T) {
		for name, mut := range map[string]func(*deployment.Addresses, *deployment.Deployment){
			"listen without port": func(a *deployment.Addresses, _ *deployment.Deployment) { a.DataListen = "0.0.0.0" },
			"no providers":        func(a *deployment.Addresses, _ *deployment.Deployment) { a.Providers = nil },
			"provider userinfo": func(a *deployment.Addresses, _ *deployment.Deployment) {
				a.Providers = []deployment.ProviderAddr{{Site: "west", URL: "http://u:p@h:1"}}
			},
			"bad site": func(a *deployment.Addresses, _ *deployment.Deployment) {
				a.Providers = []deployment.ProviderAddr{{Site: "West Side", URL: "http://h:1"}}
			},
			"unknown backend kind": func(_ *deployment.Addresses, d *deployment.Deployment) { d.Backend = "etcd" },
		} {
			aa, dd := threeSites(), *d
			mut(&aa, &dd)
			if _, err := undertest.Default().RenderFor(&dd, "gateway-a", aa, dd.Profile); err == nil {
				t.Errorf("%s: accepted", name)
			}
		}
	})
}
