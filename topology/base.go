package topology

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/internal/valkeyproc"
)

// base holds what both engines share: the component processes, the Valkey server, the
// endpoints, and the levers that only need processes.
type base struct {
	spec   Spec
	engine string

	mu        sync.Mutex
	comps     map[string]*component // gateways and providers by host
	valkey    *valkeyproc.Server
	gateways  map[string]GatewayEndpoint
	providers map[string]ProviderEndpoint
	valkeyAt  string // host:port as the gateways reach it
	ports     Ports
	observer  *http.Client
	up        bool
	down      DownGuard // Down's teardown runs once

	// inValkeyNet runs f where valkeyproc's readiness PING can reach the server (netns: on a
	// thread inside the valkey namespace); nil runs f directly.
	inValkeyNet func(f func() error) error

	gwRecipes map[string]*gatewayRecipe // how each gateway was launched (gateway_launch.go)
}

func newBase(spec Spec, engine string) base {
	return base{
		spec:      spec,
		engine:    engine,
		comps:     map[string]*component{},
		gateways:  map[string]GatewayEndpoint{},
		providers: map[string]ProviderEndpoint{},
	}
}

func (b *base) logDir() string    { return filepath.Join(b.spec.WorkDir, "logs") }
func (b *base) configDir() string { return filepath.Join(b.spec.WorkDir, "config") }
func (b *base) logPath(host string) string {
	return filepath.Join(b.logDir(), host+".log")
}

func (b *base) mkdirs() error {
	for _, d := range []string{b.logDir(), b.configDir(), filepath.Join(b.spec.WorkDir, "valkey")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("topology: work directory: %w", err)
		}
	}
	return nil
}

func (b *base) Observer() *http.Client { return b.observer }

func (b *base) Gateway(name string) GatewayEndpoint {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.gateways[name]
}

func (b *base) Provider(name string) ProviderEndpoint {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.providers[name]
}

func (b *base) ValkeyAddr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.valkeyAt
}

func (b *base) Ports() Ports {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.ports
}

func (b *base) CollectLogs(dir string) error { return copyLogs(b.logDir(), dir) }

// startValkey starts the run's Valkey (AOF on, data in WorkDir/valkey, log in logs/valkey.log).
func (b *base) startValkey(ctx context.Context, opts valkeyproc.Options) error {
	opts.Dir = filepath.Join(b.spec.WorkDir, "valkey")
	opts.LogFile = b.logPath(HostValkey)
	opts.Password = b.spec.Deployment.ValkeyPassword
	// valkeyproc has no environment option: `env` puts the run id into the server's
	// environment (and execs, so no extra process) for `quotaqual down` to find it.
	opts.Wrap = append([]string{"env", EnvRunID + "=" + b.spec.RunID}, opts.Wrap...)
	opts.SysProcAttr = componentAttr()
	run := func() error {
		s, err := valkeyproc.Start(ctx, opts)
		if err != nil {
			return err
		}
		b.mu.Lock()
		b.valkey = s
		b.mu.Unlock()
		return nil
	}
	if b.inValkeyNet != nil {
		return b.inValkeyNet(run)
	}
	return run()
}

func (b *base) StopValkey(ctx context.Context) error {
	b.mu.Lock()
	s := b.valkey
	b.mu.Unlock()
	if s == nil {
		return errors.New("valkey is not running: bring the topology up first")
	}
	return s.Stop()
}

func (b *base) StartValkey(ctx context.Context) error {
	b.mu.Lock()
	s := b.valkey
	b.mu.Unlock()
	if s == nil {
		return errors.New("valkey was never started: bring the topology up first")
	}
	if b.inValkeyNet != nil {
		return b.inValkeyNet(func() error { return s.Restart(ctx) })
	}
	return s.Restart(ctx)
}

func (b *base) RestartGateway(ctx context.Context, name string) error {
	return b.replaceGateway(ctx, name, (*component).stop)
}

// CrashGateway implements Topology: SIGKILL, then a new process.
func (b *base) CrashGateway(ctx context.Context, name string) error {
	return b.replaceGateway(ctx, name, (*component).kill)
}

// replaceGateway ends a gateway process with halt and starts a new one, ready.
func (b *base) replaceGateway(ctx context.Context, name string, halt func(*component, context.Context) (int, error)) error {
	b.mu.Lock()
	c := b.comps[name]
	b.mu.Unlock()
	if c == nil || !IsGateway(name) {
		return fmt.Errorf("no gateway %q: use %s or %s", name, HostGatewayA, HostGatewayB)
	}
	if _, err := halt(c, ctx); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	if err := c.start(); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	if err := c.waitReady(ctx, b.observer); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	return nil
}

// startAndWait starts the components in parallel and waits until each is ready.
func (b *base) startAndWait(ctx context.Context, comps []*component) error {
	errs := make([]error, len(comps))
	var wg sync.WaitGroup
	for i, c := range comps {
		b.mu.Lock()
		b.comps[c.host] = c
		b.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.start(); err != nil {
				errs[i] = err
				return
			}
			errs[i] = c.waitReady(ctx, b.observer)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// stopAll stops gateways, then providers and Valkey, recording each in the teardown.
func (b *base) stopAll(ctx context.Context, td *Teardown) {
	b.mu.Lock()
	var gws, others []*component
	for _, c := range b.comps {
		if IsGateway(c.host) {
			gws = append(gws, c)
		} else {
			others = append(others, c)
		}
	}
	s := b.valkey
	b.mu.Unlock()
	var mu sync.Mutex
	stopGroup := func(cs []*component) {
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pid, err := c.stop(ctx)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					td.Errors = append(td.Errors, err.Error())
				} else if pid != 0 {
					td.Removed = append(td.Removed, fmt.Sprintf("process %s pid %d", c.host, pid))
				}
			}()
		}
		wg.Wait()
	}
	stopGroup(gws)
	var wg sync.WaitGroup
	if s != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pid := s.PID()
			running := s.Running()
			if err := s.Stop(); err != nil {
				mu.Lock()
				td.Errors = append(td.Errors, "valkey: "+err.Error())
				mu.Unlock()
			} else if running {
				mu.Lock()
				td.Removed = append(td.Removed, fmt.Sprintf("process %s pid %d", HostValkey, pid))
				mu.Unlock()
			}
		}()
	}
	stopGroup(others)
	wg.Wait()
}

func IsGateway(h string) bool { return h == HostGatewayA || h == HostGatewayB }

// siteOf returns the provider site of a provider host (west, central, east).
func SiteOf(host string) string {
	for i, p := range Providers {
		if p == host && i < len(deployment.Sites) {
			return deployment.Sites[i]
		}
	}
	return ""
}

func (b *base) baseFacts() map[string]any {
	b.mu.Lock()
	defer b.mu.Unlock()
	gws := map[string]any{}
	for k, v := range b.gateways {
		gws[k] = map[string]string{"data_url": v.DataURL, "admin_url": v.AdminURL}
	}
	prs := map[string]any{}
	for k, v := range b.providers {
		prs[k] = map[string]string{"site": v.Site, "data_url": v.DataURL, "admin_url": v.AdminURL}
	}
	return map[string]any{
		"engine":         b.engine,
		"run_id":         b.spec.RunID,
		"valkey_addr":    b.valkeyAt,
		"valkey_version": valkeyproc.Version(""),
		"gateways":       gws,
		"providers":      prs,
		"ports": map[string]int{
			"gateway_data": b.ports.GatewayData, "gateway_admin": b.ports.GatewayAdmin,
			"provider_data": b.ports.ProviderData, "provider_admin": b.ports.ProviderAdmin,
			"valkey": b.ports.Valkey,
		},
	}
}

// elapsedSince is a small helper for teardown timing.
func ElapsedSince(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
