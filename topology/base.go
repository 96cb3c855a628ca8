package topology

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/internal/valkeyproc"
)

// Base holds what the process-based engines (netns, process) share: the component processes,
// the Valkey server, the endpoints, and the levers that only need processes. An engine embeds
// it, fills the endpoints and ports under Mu as its components come up, and sets IsUp.
type Base struct {
	Spec   Spec
	engine string

	Mu                sync.Mutex            // guards the fields below
	comps             map[string]*Component // gateways and providers by host
	ValkeyServer      *valkeyproc.Server    // the run's single Valkey (LaunchValkey)
	ValkeyCluster     *valkeyproc.Cluster   // or its Valkey Cluster (LaunchCluster, cluster.go)
	GatewayEndpoints  map[string]GatewayEndpoint
	ProviderEndpoints map[string]ProviderEndpoint
	ValkeyAt          string // host:port as the gateways reach it
	PortNumbers       Ports  // what Ports reports
	ObserverClient    *http.Client
	IsUp              bool
	DownOnce          DownGuard // Down's teardown runs once

	// InValkeyNet runs f where valkeyproc's readiness PING can reach the server (netns: on a
	// thread inside the valkey namespace); nil runs f directly.
	InValkeyNet func(f func() error) error

	gwRecipes map[string]*gatewayRecipe // how each gateway was launched (gateway_launch.go)
	stems     GatewayStems              // the configs each gateway was rendered for and runs
	services  serviceSet                // the gateway profile's services (services.go)
}

// NewBase is the Base of an engine named engine, with no component yet.
func NewBase(spec Spec, engine string) Base {
	return Base{
		Spec:              spec,
		engine:            engine,
		comps:             map[string]*Component{},
		GatewayEndpoints:  map[string]GatewayEndpoint{},
		ProviderEndpoints: map[string]ProviderEndpoint{},
	}
}

func (b *Base) logDir() string    { return filepath.Join(b.Spec.WorkDir, "logs") }
func (b *Base) configDir() string { return filepath.Join(b.Spec.WorkDir, "config") }

// LogPath is where host's output goes (WorkDir/logs/<host>.log).
func (b *Base) LogPath(host string) string {
	return filepath.Join(b.logDir(), host+".log")
}

// MakeWorkDirs creates the run's log, config and valkey directories under WorkDir.
func (b *Base) MakeWorkDirs() error {
	for _, d := range []string{b.logDir(), b.configDir(), filepath.Join(b.Spec.WorkDir, "valkey")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("topology: work directory: %w", err)
		}
	}
	return nil
}

func (b *Base) Observer() *http.Client { return b.ObserverClient }

func (b *Base) Gateways() []string { return b.Spec.GatewayHosts() }

func (b *Base) Gateway(name string) GatewayEndpoint {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.GatewayEndpoints[name]
}

func (b *Base) Provider(name string) ProviderEndpoint {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.ProviderEndpoints[name]
}

func (b *Base) ValkeyAddr() string {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.ValkeyAt
}

func (b *Base) Ports() Ports {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	return b.PortNumbers
}

func (b *Base) CollectLogs(dir string) error { return copyLogs(b.logDir(), dir) }

// LaunchValkey starts the run's Valkey (AOF on, data in WorkDir/valkey, log in logs/valkey.log).
func (b *Base) LaunchValkey(ctx context.Context, opts valkeyproc.Options) error {
	opts.Dir = filepath.Join(b.Spec.WorkDir, "valkey")
	opts.LogFile = b.LogPath(HostValkey)
	opts.Password = b.Spec.Deployment.ValkeyPassword
	// valkeyproc has no environment option: `env` puts the run id into the server's
	// environment (and execs, so no extra process) for `quotaqual down` to find it.
	opts.Wrap = append([]string{"env", EnvRunID + "=" + b.Spec.RunID}, opts.Wrap...)
	opts.SysProcAttr = ComponentAttr()
	run := func() error {
		s, err := valkeyproc.Start(ctx, opts)
		if err != nil {
			return err
		}
		b.Mu.Lock()
		b.ValkeyServer = s
		b.Mu.Unlock()
		return nil
	}
	if b.InValkeyNet != nil {
		return b.InValkeyNet(run)
	}
	return run()
}

func (b *Base) StopValkey(ctx context.Context) error {
	b.Mu.Lock()
	s, c := b.ValkeyServer, b.ValkeyCluster
	b.Mu.Unlock()
	if c != nil {
		return stopCluster(c)
	}
	if s == nil {
		return errors.New("valkey is not running: bring the topology up first")
	}
	return s.Stop()
}

func (b *Base) StartValkey(ctx context.Context) error {
	b.Mu.Lock()
	s, c := b.ValkeyServer, b.ValkeyCluster
	b.Mu.Unlock()
	if c != nil {
		return startCluster(ctx, c, b.InValkeyNet)
	}
	if s == nil {
		return errors.New("valkey was never started: bring the topology up first")
	}
	if b.InValkeyNet != nil {
		return b.InValkeyNet(func() error { return s.Restart(ctx) })
	}
	return s.Restart(ctx)
}

func (b *Base) RestartGateway(ctx context.Context, name string) error {
	return b.replaceGateway(ctx, name, (*Component).Stop)
}

// CrashGateway implements Topology: SIGKILL, then a new process.
func (b *Base) CrashGateway(ctx context.Context, name string) error {
	return b.replaceGateway(ctx, name, (*Component).kill)
}

// replaceGateway ends a gateway process with halt and starts a new one, ready.
func (b *Base) replaceGateway(ctx context.Context, name string, halt func(*Component, context.Context) (int, error)) error {
	b.Mu.Lock()
	c := b.comps[name]
	b.Mu.Unlock()
	if c == nil || !IsGateway(name) {
		return NoGatewayError(name, b.Spec.GatewayHosts())
	}
	if _, err := halt(c, ctx); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	if err := c.start(); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	if err := c.waitReady(ctx, b.ObserverClient); err != nil {
		return fmt.Errorf("restarting %s: %w", name, err)
	}
	return nil
}

// StartAndWait starts the components in parallel and waits until each is ready.
func (b *Base) StartAndWait(ctx context.Context, comps []*Component) error {
	errs := make([]error, len(comps))
	var wg sync.WaitGroup
	for i, c := range comps {
		b.Mu.Lock()
		b.comps[c.host] = c
		b.Mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.start(); err != nil {
				errs[i] = err
				return
			}
			errs[i] = c.waitReady(ctx, b.ObserverClient)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// StopAll stops gateways, then providers and Valkey, recording each in the teardown.
func (b *Base) StopAll(ctx context.Context, td *Teardown) {
	// A connection the harness dialled but never sent a request on counts as new, not idle,
	// to a gateway's drain, which waits up to five seconds for it (see gateway-restart):
	// close the observer's idle connections first so that the drain waits only for requests.
	// An engine whose Client is another client closes that one's before calling StopAll.
	if b.ObserverClient != nil {
		b.ObserverClient.CloseIdleConnections()
	}
	b.Mu.Lock()
	var gws, others []*Component
	for _, c := range b.comps {
		if IsGateway(c.host) {
			gws = append(gws, c)
		} else {
			others = append(others, c)
		}
	}
	s := b.ValkeyServer
	var cluster []*valkeyproc.Server
	if b.ValkeyCluster != nil {
		cluster = b.ValkeyCluster.Nodes
	}
	b.Mu.Unlock()
	var mu sync.Mutex
	stopGroup := func(cs []*Component) {
		var wg sync.WaitGroup
		for _, c := range cs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pid, err := c.Stop(ctx)
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
	for i, n := range cluster {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pid, running := n.PID(), n.Running()
			if err := n.Stop(); err != nil {
				mu.Lock()
				td.Errors = append(td.Errors, ClusterNodeName(i)+": "+err.Error())
				mu.Unlock()
			} else if running {
				mu.Lock()
				td.Removed = append(td.Removed, fmt.Sprintf("process %s pid %d", ClusterNodeName(i), pid))
				mu.Unlock()
			}
		}()
	}
	stopGroup(others)
	wg.Wait()
}

// NoGatewayError is the error of a lever asked for a gateway the run does not have.
func NoGatewayError(name string, gateways []string) error {
	return fmt.Errorf("no gateway %q: use one of %s", name, strings.Join(gateways, ", "))
}

// siteOf returns the provider site of a provider host (west, central, east).
func SiteOf(host string) string {
	for i, p := range Providers {
		if p == host && i < len(deployment.Sites) {
			return deployment.Sites[i]
		}
	}
	return ""
}

// BaseFacts are the facts every process-based engine reports; the engine adds its own.
func (b *Base) BaseFacts() map[string]any {
	b.Mu.Lock()
	defer b.Mu.Unlock()
	gws, prs := EndpointFacts(slices.Collect(maps.Values(b.GatewayEndpoints)), slices.Collect(maps.Values(b.ProviderEndpoints)))
	f := map[string]any{
		"engine":         b.engine,
		"store":          b.Spec.Store,
		"run_id":         b.Spec.RunID,
		"valkey_addr":    b.ValkeyAt,
		"valkey_version": valkeyproc.Version(""),
		"gateways":       gws,
		"providers":      prs,
		"ports":          PortFacts(b.PortNumbers),
	}
	if b.ValkeyCluster != nil {
		f["store_cluster"] = ClusterFacts(b.ValkeyCluster)
	}
	return f
}

// elapsedSince is a small helper for teardown timing.
func ElapsedSince(t time.Time) time.Duration { return time.Since(t).Round(time.Millisecond) }
