// Package processengine is the process topology engine: every component a plain process on
// 127.0.0.1 with free ports, for hosts without user namespaces (no network levers). It
// registers itself as topology.EngineProcess; import topology/engines rather than this
// package to build every engine in.
package processengine

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/internal/valkeyproc"
	"github.com/quotaqual/quotaqual/topology"
)

func init() {
	topology.Register(topology.EngineProcess, topology.Engine{
		New:     func(s topology.Spec) (topology.Topology, error) { return newProcess(s), nil },
		Cluster: true,
	})
}

// processReason is why the process engine has no network levers.
const processReason = "process topology runs every component on loopback: no network isolation"

// startAttempts bounds retries when a picked free port is taken before the component binds it.
const startAttempts = 4

// processTopo runs every component as a plain process on 127.0.0.1 with free ports: for hosts
// without user namespaces. Partition and Probe are unsupported.
type processTopo struct {
	topology.Base
}

func newProcess(spec topology.Spec) *processTopo {
	t := &processTopo{Base: topology.NewBase(spec, topology.EngineProcess)}
	t.ObserverClient = &http.Client{Transport: topology.NewTransport(nil)}
	return t
}

func (t *processTopo) Engine() string { return topology.EngineProcess }

// Client is a plain loopback client: on this engine the client host is the harness's host.
func (t *processTopo) Client() *http.Client { return t.ObserverClient }

func (t *processTopo) Up(ctx context.Context) (err error) {
	start := time.Now()
	if err := t.MakeWorkDirs(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_, _ = t.Down(context.Background())
		}
	}()
	if err := t.launchValkey(ctx); err != nil {
		return err
	}

	// Providers, then gateways: each group in parallel, each member retried with fresh ports
	// if another process took a picked port before it could bind it.
	var provAddrs []deployment.ProviderAddr
	if err := eachAtOnce(topology.Providers, func(host string) error {
		return t.startWithFreePorts(ctx, host, func(data, admin int) (*topology.Component, error) {
			site := topology.SiteOf(host)
			argv := append([]string{t.Spec.Binary}, t.Spec.Deployment.ProviderArgs(site, loop(data), loop(admin))...)
			return topology.NewComponent(host, argv, topology.ComponentEnv(t.Spec.RunID),
				t.LogPath(host), "http://"+loop(admin)+"/healthz"), nil
		}, func(data, admin int) {
			t.Mu.Lock()
			t.ProviderEndpoints[host] = topology.ProviderEndpoint{Name: host, Site: topology.SiteOf(host),
				DataURL: "http://" + loop(data), AdminURL: "http://" + loop(admin)}
			if host == topology.Providers[0] {
				t.PortNumbers.ProviderData, t.PortNumbers.ProviderAdmin = data, admin
			}
			t.Mu.Unlock()
		})
	}); err != nil {
		return err
	}
	for _, host := range topology.Providers {
		p := t.Provider(host)
		provAddrs = append(provAddrs, deployment.ProviderAddr{Site: p.Site, URL: p.DataURL})
	}
	t.Spec.Progress("providers ready")

	if err := eachAtOnce(t.Gateways(), func(host string) error {
		return t.startWithFreePorts(ctx, host, func(data, admin int) (*topology.Component, error) {
			l, err := t.LaunchGateway(host, host, deployment.Addresses{
				DataListen: loop(data), AdminListen: loop(admin),
				ValkeyAddr: t.ValkeyAt, Cluster: t.ClusterAddrs(), Providers: provAddrs,
			}, t.Spec.Deployment.Profile, nil)
			if err != nil {
				return nil, err
			}
			return topology.NewComponent(host, l.Argv, l.Env, t.LogPath(host),
				t.GatewayReadyURL("http://"+loop(data), "http://"+loop(admin))), nil
		}, func(data, admin int) {
			t.Mu.Lock()
			t.GatewayEndpoints[host] = topology.GatewayEndpoint{Name: host,
				DataURL: "http://" + loop(data), AdminURL: "http://" + loop(admin)}
			if host == t.Gateways()[0] {
				t.PortNumbers.GatewayData, t.PortNumbers.GatewayAdmin = data, admin
			}
			t.Mu.Unlock()
		})
	}); err != nil {
		return err
	}
	t.Mu.Lock()
	t.IsUp = true
	t.Mu.Unlock()
	t.Spec.Progress("gateways ready (process topology up in %s)", topology.ElapsedSince(start))
	return nil
}

// startWithFreePorts picks two free loopback ports, builds the component with mk, starts it and
// waits until it is ready; if it exits during start-up (a port race) it retries with new ports.
func (t *processTopo) startWithFreePorts(ctx context.Context, host string, mk func(data, admin int) (*topology.Component, error), ok func(data, admin int)) error {
	var last error
	for range startAttempts {
		ports, err := freePorts(2)
		if err != nil {
			return err
		}
		c, err := mk(ports[0], ports[1])
		if err != nil {
			return err
		}
		last = t.StartAndWait(ctx, []*topology.Component{c})
		if last == nil {
			ok(ports[0], ports[1])
			return nil
		}
		_, _ = c.Stop(ctx) // not ready: make sure it is gone before trying again
		var early *topology.ExitedEarlyError
		if !errors.As(last, &early) || ctx.Err() != nil {
			return last
		}
	}
	return last
}

func (t *processTopo) Down(ctx context.Context) (topology.Teardown, error) {
	return t.DownOnce.Do(func(td *topology.Teardown) {
		t.StopAll(ctx, td)
		t.Mu.Lock()
		t.IsUp = false
		t.Mu.Unlock()
	})
}

func (t *processTopo) Partition(ctx context.Context, host, peer string) error {
	return fmt.Errorf("partition %s from %s: %w: %s", host, peer, topology.ErrUnsupported, processReason)
}

func (t *processTopo) Heal(ctx context.Context, host, peer string) error {
	return fmt.Errorf("heal %s from %s: %w: %s", host, peer, topology.ErrUnsupported, processReason)
}

func (t *processTopo) Probe(ctx context.Context, from, to string, port int) topology.ProbeResult {
	return topology.ProbeResult{From: from, To: to, Port: port, Supported: false, Error: processReason}
}

func (t *processTopo) Capabilities() topology.Capabilities {
	return topology.Capabilities{
		NetworkPolicy: false, NetworkPolicyReason: processReason,
		Partition: false, PartitionReason: processReason,
	}
}

func (t *processTopo) Facts() map[string]any {
	f := t.BaseFacts()
	f["network_isolation"] = false
	f["network_isolation_reason"] = processReason
	f["ports_note"] = "each process listens on its own free loopback port; ports lists gateway-a's and provider-west's"
	return f
}

func loop(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }

// freePorts picks n distinct free TCP ports on 127.0.0.1, holding all listeners until every
// port is chosen so they differ. Components start concurrently and each picks its own ports
// before binding them, so a port handed out a moment ago is free again until its component
// binds it: recently handed-out ports are skipped, or two components could race for one port
// (the loser exits, and its readiness poll would be answered by the winner). Another process
// can still take a port before the component binds it; startWithFreePorts retries then.
func freePorts(n int) ([]int, error) {
	handedOut.Lock()
	defer handedOut.Unlock()
	now := time.Now()
	for p, at := range handedOut.at {
		if now.Sub(at) > handedOutFor {
			delete(handedOut.at, p)
		}
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	var out []int
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("picking a free port on 127.0.0.1: %w", err)
		}
		ls = append(ls, l) // held open, so the next Listen gets another port either way
		p := l.Addr().(*net.TCPAddr).Port
		if _, recent := handedOut.at[p]; recent {
			continue
		}
		out = append(out, p)
	}
	for _, p := range out {
		handedOut.at[p] = now
	}
	return out, nil
}

// handedOut remembers the ports freePorts returned recently (see there).
var handedOut = struct {
	sync.Mutex
	at map[int]time.Time
}{at: map[int]time.Time{}}

// handedOutFor is how long a returned port is not returned again: far longer than a component
// takes to bind it.
const handedOutFor = time.Minute

// eachAtOnce runs start for every host at the same time and joins their errors once all have
// returned.
func eachAtOnce(hosts []string, start func(host string) error) error {
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for i, host := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = start(host)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// launchValkey starts the run's store on loopback: the single Valkey, or (--store cluster) a
// Valkey Cluster whose nodes each take a free port pair (client port, cluster bus).
func (t *processTopo) launchValkey(ctx context.Context) error {
	if t.Spec.Store == topology.StoreCluster {
		nodes := make([]valkeyproc.Options, topology.ClusterPrimaries)
		for i := range nodes {
			nodes[i] = valkeyproc.Options{Host: "127.0.0.1", Dir: filepath.Join(t.Spec.WorkDir, "valkey", topology.ClusterNodeName(i))}
		}
		if err := t.LaunchCluster(ctx, nodes, nil); err != nil {
			return fmt.Errorf("starting the valkey cluster: %w", err)
		}
		t.Mu.Lock()
		_, port, _ := net.SplitHostPort(t.ValkeyAt)
		t.PortNumbers.Valkey, _ = strconv.Atoi(port)
		t.Mu.Unlock()
		t.Spec.Progress("valkey cluster ready on %s", strings.Join(t.ClusterAddrs(), ", "))
		return nil
	}
	if err := t.LaunchValkey(ctx, valkeyproc.Options{Host: "127.0.0.1"}); err != nil {
		return fmt.Errorf("starting valkey: %w", err)
	}
	t.Mu.Lock()
	t.ValkeyAt = t.ValkeyServer.Addr()
	t.PortNumbers.Valkey = t.ValkeyServer.Port()
	t.Mu.Unlock()
	t.Spec.Progress("valkey ready on %s", t.ValkeyAt)
	return nil
}
