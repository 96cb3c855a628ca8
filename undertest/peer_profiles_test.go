package undertest_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/internal/peers"
	"github.com/quotaqual/quotaqual/internal/peers/envoyaigw"
	"github.com/quotaqual/quotaqual/internal/peers/gubershim"
	"github.com/quotaqual/quotaqual/internal/peers/kuadrant"
	"github.com/quotaqual/quotaqual/undertest"
)

// peerShimLoaders load each peer profile's rendered gateway config the way its shim does.
var peerShimLoaders = map[string]func(path string, getenv func(string) (string, bool)) error{
	"envoy-ai-gateway": func(p string, g func(string) (string, bool)) error { _, _, err := envoyaigw.Load(p, g); return err },
	"kuadrant":         func(p string, g func(string) (string, bool)) error { _, _, err := kuadrant.Load(p, g); return err },
	"gubernator":       func(p string, g func(string) (string, bool)) error { _, _, err := gubershim.Load(p, g); return err },
}

// TestPeerProfilesRender renders every shipped peer profile for the reference profile (a window
// their engines express): each names a pinned engine, its services render (argv, environment
// with the store's password copied from the run's variable, files), and its shim accepts the
// gateway config rendered with the services' addresses; the quick profile's 4 s window is
// refused by the ones that list their windows.
func TestPeerProfilesRender(t *testing.T) {
	d := testDeployment(t, deployment.BackendValkey)
	ref, err := deployment.ProfileByName("reference")
	if err != nil {
		t.Fatal(err)
	}
	secrets := append(d.GatewayEnv("10.0.0.5:6379"), d.StoreEnv()...)
	getenv := lookupIn(secrets)
	found := 0
	for _, name := range undertest.ShippedNames() {
		p, err := undertest.Shipped(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.Status != undertest.Peer {
			continue
		}
		found++
		t.Run(name, func(t *testing.T) {
			if len(p.Services) == 0 {
				t.Fatal("a peer profile runs its engine as a service: none declared")
			}
			f, err := undertest.FactsFor(d, "gateway-a", testAddrs(), ref)
			if err != nil {
				t.Fatal(err)
			}
			f.Services = map[string][]undertest.ServiceReplica{}
			ip := 60
			for _, s := range p.Services {
				if _, err := peers.ByName(s.Engine); err != nil {
					t.Errorf("service %s: %v", s.Name, err)
				}
				for i, h := range s.ReplicaHosts() {
					f.Services[s.Name] = append(f.Services[s.Name], undertest.ServiceReplica{Service: s.Name, Host: h, Index: i + 1, IP: fmt.Sprintf("198.18.0.%d", ip), Ports: s.Ports})
					ip++
				}
			}
			for _, s := range p.Services {
				for _, r := range f.Services[s.Name] {
					argv, env, files, err := s.RenderService(undertest.ServiceFacts{Facts: f, Engine: "/cache/bin/engine", Dir: "/run/" + r.Host, Replica: r, Replicas: f.Services[s.Name]}, secrets)
					if err != nil {
						t.Fatal(err)
					}
					if len(argv) == 0 || argv[0] != "/cache/bin/engine" {
						t.Errorf("%s: argv %q does not start with the engine's binary", r.Host, argv)
					}
					for _, sec := range d.Secrets() {
						if strings.Contains(strings.Join(argv, " "), sec) {
							t.Errorf("%s: a secret in argv", r.Host)
						}
						for _, b := range files {
							if strings.Contains(string(b), sec) {
								t.Errorf("%s: a secret in a rendered file", r.Host)
							}
						}
					}
					if s.Reach.Store && !strings.Contains(strings.Join(env, "\n"), "="+d.ValkeyPassword) {
						t.Errorf("%s: a service on the store gets no password from the run's variable: %q", r.Host, env)
					}
				}
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
			shim := p.Launch.Argv[2]
			load, ok := peerShimLoaders[shim]
			if !ok {
				t.Fatalf("no loader for shim %q", shim)
			}
			if err := load(f.ConfigPath, getenv); err != nil {
				t.Fatalf("the shim refuses the rendered config: %v\n%s", err, y)
			}
			if len(p.Expect.Admission.Windows) > 0 && p.ExpressesWindow(d.Profile.Window) {
				t.Errorf("it claims to express the quick profile's %s window", d.Profile.Window)
			}
		})
	}
	if found == 0 {
		t.Fatal("no shipped peer profile")
	}
}

// lookupIn is a getenv over a NAME=value list.
func lookupIn(env []string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		for _, kv := range env {
			if name, v, _ := strings.Cut(kv, "="); name == k {
				return v, true
			}
		}
		return "", false
	}
}
