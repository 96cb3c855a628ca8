package topology

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology/images"
	"github.com/quotaqual/quotaqual/undertest"
)

// The gateway under test is launched only through its profile (package undertest): the
// profile renders the config from the run's facts, and gives the argv, the environment and
// the readiness path. The engines of processes (netns, process) start every gateway through
// LaunchGateway and never render a gateway config themselves.

// GatewayUnderTest is the profile of the gateway the run qualifies.
func (b *Base) GatewayUnderTest() *undertest.Profile { return GatewayProfile(b.Spec) }

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
	f.Services = b.services.facts()
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
	b.stems.Rendered(name, stem, a)
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
	b.stems.Runs(name, stem)
	return nil
}

// RestartGatewayWithPolicy restarts a gateway on the rule's policy of p (window, capacity,
// estimate, lease), as one step of a rolling change; nil p restarts it on the run's own
// profile again. The gateway's config file is <name>-policy.<ext> while it runs p. The
// gateway stays on the store it is on: one on the replicated store group (<name>-store) is
// rolled out to <name>-store-policy and back to <name>-store.
func (b *Base) RestartGatewayWithPolicy(ctx context.Context, name string, p *deployment.Profile) error {
	r, base, addrs := b.rolloutBase(name)
	if r == nil {
		return NoGatewayError(name, b.Spec.GatewayHosts())
	}
	stem := base
	if p != nil {
		stem = base + "-policy"
		if _, err := b.LaunchGateway(name, stem, addrs, *p, r.wrap); err != nil {
			return err
		}
	}
	if err := b.RelaunchAs(name, stem); err != nil {
		return err
	}
	return b.RestartGateway(ctx, name)
}

// rolloutBase is the stem a policy rollout of gateway name starts from — the one it runs,
// without a policy — and the addresses that stem was rendered for (GatewayStems).
func (b *Base) rolloutBase(name string) (r *gatewayRecipe, base string, addrs deployment.Addresses) {
	b.Mu.Lock()
	r = b.gwRecipes[name]
	b.Mu.Unlock()
	if r == nil {
		return nil, "", addrs
	}
	base, addrs, ok := b.stems.RolloutBase(name)
	if !ok {
		addrs = r.addrs
	}
	return r, base, addrs
}

// The container engines (docker, kind) place the config themselves (a file copied into the
// container, a ConfigMap) and pass secrets their own way (container environment, Secret
// references); they take everything else from ContainerGatewayFor, so a gateway's image, its
// command, its environment and its readiness come from its profile on every engine.

// ContainerConfigDir is where the container engines put the gateway's config file.
const ContainerConfigDir = "/etc/quotaqual"

// GatewayProfile is spec's gateway under test.
func GatewayProfile(spec Spec) *undertest.Profile {
	if spec.Gateway != nil {
		return spec.Gateway
	}
	return undertest.Default()
}

// ContainerGateway is one gateway as a container engine launches it, rendered through the
// gateway's profile.
type ContainerGateway struct {
	Profile *undertest.Profile
	// Facts are what the config, argv and environment were rendered from.
	Facts undertest.Facts
	// Image is the gateway's own image (Spec.GatewayImage, else the profile's launch.image);
	// empty means the run's quotaqual image.
	Image string
	// Entrypoint, when set, replaces the image's entrypoint (a gateway image of its own runs
	// the profile's whole argv); Cmd is the container's command, after the entrypoint.
	Entrypoint, Cmd []string
	// ConfigPath is where the rendered Config goes inside the container.
	ConfigPath string
	Config     []byte
	// Env are the profile's own variables, copies of the run's secret variables kept as
	// references; the secret variables themselves (GatewaySecretEnv) are set beside them.
	Env []undertest.EnvVar
}

// GatewayImage is the image of spec's gateway under test, "" for the run's quotaqual image.
func GatewayImage(spec Spec) string {
	if spec.GatewayImage != "" {
		return spec.GatewayImage
	}
	return GatewayProfile(spec).Launch.Image
}

// GatewaySecretEnv are the run's secret variables (NAME=value) a container engine gives every
// gateway: the Valkey URL on valkeyAddr, the Basic-auth passwords, and the store's password
// alone (for a gateway put on the replicated store later, and for profiles copying it). A
// gateway profile's own variables may copy these. Secret: never log them.
func GatewaySecretEnv(spec Spec, valkeyAddr string) []string {
	return append(spec.Deployment.GatewayEnv(valkeyAddr), spec.Deployment.StoreEnv()...)
}

// ContainerGatewayFor renders gateway name for a container engine: its config on addresses a
// under qualification profile p, its image, command and environment.
func ContainerGatewayFor(spec Spec, name string, a deployment.Addresses, p deployment.Profile) (ContainerGateway, error) {
	gw := GatewayProfile(spec)
	f, err := undertest.FactsFor(spec.Deployment, name, a, p)
	if err != nil {
		return ContainerGateway{}, err
	}
	f.Binary = images.QuotaqualInContainer
	f.ConfigPath = path.Join(ContainerConfigDir, gw.Config.File)
	cfg, err := gw.Render(f)
	if err != nil {
		return ContainerGateway{}, err
	}
	argv, err := gw.Argv(f)
	if err != nil {
		return ContainerGateway{}, err
	}
	var names []string
	for _, kv := range GatewaySecretEnv(spec, a.ValkeyAddr) {
		k, _, _ := strings.Cut(kv, "=")
		names = append(names, k)
	}
	env, err := gw.EnvVars(f, names)
	if err != nil {
		return ContainerGateway{}, err
	}
	cg := ContainerGateway{Profile: gw, Facts: f, Image: GatewayImage(spec), ConfigPath: f.ConfigPath, Config: cfg, Env: env}
	switch {
	case cg.Image != "":
		// An image of its own: the profile's argv is the whole command.
		cg.Entrypoint, cg.Cmd = argv[:1], argv[1:]
	case argv[0] == f.Binary:
		// The quotaqual image: its entrypoint is the quotaqual binary.
		cg.Cmd = argv[1:]
	default:
		return ContainerGateway{}, fmt.Errorf("gateway profile %s: launch.argv starts with %q but gives no launch.image: the container engines would run it in the quotaqual image, which holds only the quotaqual binary; set launch.image (or --gateway-image) to an image that has %s, or start argv with {{.Binary}}", gw.Name, argv[0], argv[0])
	}
	return cg, nil
}

// RenderGatewayConfig renders gateway name's config on addresses a under qualification
// profile p through spec's gateway profile, as ContainerGatewayFor does.
func RenderGatewayConfig(spec Spec, name string, a deployment.Addresses, p deployment.Profile) ([]byte, error) {
	cg, err := ContainerGatewayFor(spec, name, a, p)
	if err != nil {
		return nil, err
	}
	return cg.Config, nil
}

// CheckGatewayImage stops a container run before anything starts when the gateway's own image
// (GatewayImage) is not in the local Docker engine: nothing pulls it (the project's machines
// reach no registry, and a run must qualify exactly the image named).
func CheckGatewayImage(ctx context.Context, spec Spec) error {
	img := GatewayImage(spec)
	if img == "" || images.Exists(ctx, img) {
		return nil
	}
	gw := GatewayProfile(spec)
	src := "launch.image of gateway profile " + gw.Name
	if spec.GatewayImage != "" {
		src = "--gateway-image"
	}
	return fmt.Errorf("gateway image %s (%s) is not in the local Docker engine, and quotaqual pulls no image: provide it first (docker pull %s where a registry is reachable, or docker load -i <archive>), or name one that is present with --gateway-image", img, src, img)
}
