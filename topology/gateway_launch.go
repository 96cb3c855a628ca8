package topology

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/undertest"
)

// The gateway under test is launched only through its profile (package undertest): the
// profile renders the config from the run's facts, and gives the argv, the environment and
// the readiness path. The engines of processes (netns, process) start every gateway through
// LaunchGateway and never render a gateway config themselves.

// GatewayUnderTest is the profile of the gateway the run qualifies.
func (b *Base) GatewayUnderTest() *undertest.Profile {
	if b.Spec.Gateway != nil {
		return b.Spec.Gateway
	}
	return undertest.Default()
}

// GatewayLaunch is one way to start a gateway: its full argv (the engine's wrapper first)
// and environment, its config already written.
type GatewayLaunch struct {
	Argv, Env []string
}

// gatewayRecipe is what a gateway was first launched with, to launch it again on another
// config (a policy change, the replicated store).
type gatewayRecipe struct {
	addrs    deployment.Addresses
	wrap     []string
	launches map[string]GatewayLaunch // by config file stem: gateway-a, gateway-a-store, …
}

// launchGateway renders gateway name's config for addresses a under qualification profile p
// into config/<stem><ext> and returns how to start it; wrap is the engine's command prefix
// (a namespace entry), nil for none. The launch is remembered under stem.
func (b *Base) LaunchGateway(name, stem string, a deployment.Addresses, p deployment.Profile, wrap []string) (GatewayLaunch, error) {
	gw := b.GatewayUnderTest()
	f, err := undertest.FactsFor(b.Spec.Deployment, name, a, p)
	if err != nil {
		return GatewayLaunch{}, err
	}
	f.Binary = b.Spec.Binary
	f.ConfigPath = filepath.Join(b.configDir(), stem+filepath.Ext(gw.Config.File))
	y, err := gw.Render(f)
	if err != nil {
		return GatewayLaunch{}, err
	}
	if err := os.WriteFile(f.ConfigPath, y, 0o600); err != nil {
		return GatewayLaunch{}, fmt.Errorf("writing the config of %s: %w", name, err)
	}
	argv, err := gw.Argv(f)
	if err != nil {
		return GatewayLaunch{}, err
	}
	secrets := append(b.Spec.Deployment.GatewayEnv(a.ValkeyAddr), b.Spec.Deployment.StoreEnv()...)
	env, err := gw.Env(f, secrets)
	if err != nil {
		return GatewayLaunch{}, err
	}
	l := GatewayLaunch{Argv: append(append([]string(nil), wrap...), argv...), Env: ComponentEnv(b.Spec.RunID, env...)}
	b.Mu.Lock()
	defer b.Mu.Unlock()
	if b.gwRecipes == nil {
		b.gwRecipes = map[string]*gatewayRecipe{}
	}
	r := b.gwRecipes[name]
	if r == nil {
		r = &gatewayRecipe{addrs: a, wrap: wrap, launches: map[string]GatewayLaunch{}}
		b.gwRecipes[name] = r
	}
	r.launches[stem] = l
	return l, nil
}

// GatewayReadyURL is the gateway's readiness URL given its data and admin base URLs.
func (b *Base) GatewayReadyURL(dataURL, adminURL string) string {
	return b.GatewayUnderTest().ReadyURL(dataURL, adminURL)
}

// RelaunchAs makes gateway name's next start use the launch remembered under stem.
func (b *Base) RelaunchAs(name, stem string) error {
	b.Mu.Lock()
	r := b.gwRecipes[name]
	c := b.comps[name]
	b.Mu.Unlock()
	if r == nil || c == nil {
		return NoGatewayError(name, b.Spec.GatewayHosts())
	}
	l, ok := r.launches[stem]
	if !ok {
		return fmt.Errorf("gateway %s has no config %s", name, stem)
	}
	c.mu.Lock()
	c.argv, c.env = l.Argv, l.Env
	c.mu.Unlock()
	return nil
}

// RestartGatewayWithPolicy restarts a gateway on the rule's policy of p (window, capacity,
// estimate, lease), as one step of a rolling change; nil p restarts it on the run's own
// profile again. The gateway's config file is <name>-policy.<ext> while it runs p.
func (b *Base) RestartGatewayWithPolicy(ctx context.Context, name string, p *deployment.Profile) error {
	b.Mu.Lock()
	r := b.gwRecipes[name]
	b.Mu.Unlock()
	if r == nil {
		return NoGatewayError(name, b.Spec.GatewayHosts())
	}
	stem := name
	if p != nil {
		stem = name + "-policy"
		if _, err := b.LaunchGateway(name, stem, r.addrs, *p, r.wrap); err != nil {
			return err
		}
	}
	if err := b.RelaunchAs(name, stem); err != nil {
		return err
	}
	return b.RestartGateway(ctx, name)
}

// The container engines (docker, kind) place the config themselves (a file copied into the
// container, a ConfigMap); they render it, and the docker engine its command, through the
// profile too. They launch only quotaqual's own gateway so far (New refuses another), whose
// image entrypoint is the quotaqual binary.

// gatewayProfile is spec's gateway under test.
func gatewayProfile(spec Spec) *undertest.Profile {
	if spec.Gateway != nil {
		return spec.Gateway
	}
	return undertest.Default()
}

// RenderGatewayConfig renders gateway name's config on addresses a under qualification
// profile p through spec's gateway profile.
func RenderGatewayConfig(spec Spec, name string, a deployment.Addresses, p deployment.Profile) ([]byte, error) {
	return gatewayProfile(spec).RenderFor(spec.Deployment, name, a, p)
}

// ContainerGatewayArgs is the gateway's command in a container whose entrypoint is the
// quotaqual binary at bin, its config at configPath: the profile's argv after the binary.
func ContainerGatewayArgs(spec Spec, name, bin, configPath string) ([]string, error) {
	gw := gatewayProfile(spec)
	argv, err := gw.Argv(undertest.Facts{Name: name, RunID: spec.RunID, Binary: bin, ConfigPath: configPath})
	if err != nil {
		return nil, err
	}
	if len(argv) == 0 || argv[0] != bin {
		return nil, fmt.Errorf("gateway profile %s: launch.argv must start with {{.Binary}} in a container whose entrypoint is %s", gw.Name, bin)
	}
	return argv[1:], nil
}
