package topology

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/internal/valkeyproc"
)

// processReason is why the process engine has no network levers.
const processReason = "process topology runs every component on loopback: no network isolation"

// startAttempts bounds retries when a picked free port is taken before the component binds it.
const startAttempts = 4

// processTopo runs every component as a plain process on 127.0.0.1 with free ports: for hosts
// without user namespaces. Partition and Probe are unsupported.
type processTopo struct {
	base
}

func newProcess(spec Spec) *processTopo {
	t := &processTopo{base: newBase(spec, EngineProcess)}
	t.observer = &http.Client{Transport: NewTransport(nil)}
	return t
}

func (t *processTopo) Engine() string { return EngineProcess }

// Client is a plain loopback client: on this engine the client host is the harness's host.
func (t *processTopo) Client() *http.Client { return t.observer }

func (t *processTopo) Up(ctx context.Context) (err error) {
	start := time.Now()
	if err := t.mkdirs(); err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_, _ = t.Down(context.Background())
		}
	}()
	if err := t.startValkey(ctx, valkeyproc.Options{Host: "127.0.0.1"}); err != nil {
		return fmt.Errorf("starting valkey: %w", err)
	}
	t.mu.Lock()
	t.valkeyAt = t.valkey.Addr()
	t.ports.Valkey = t.valkey.Port()
	t.mu.Unlock()
	t.spec.Progress("valkey ready on %s", t.valkeyAt)

	// Providers, then gateways: each group in parallel, each member retried with fresh ports
	// if another process took a picked port before it could bind it.
	var provAddrs []deployment.ProviderAddr
	errs := make([]error, len(Providers))
	done := make(chan int, len(Providers))
	for i, host := range Providers {
		go func() {
			errs[i] = t.startWithFreePorts(ctx, host, func(data, admin int) (*component, error) {
				site := SiteOf(host)
				argv := append([]string{t.spec.Binary}, t.spec.Deployment.ProviderArgs(site, loop(data), loop(admin))...)
				return &component{
					host: host, argv: argv, env: componentEnv(t.spec.RunID),
					logPath: t.logPath(host), readyURL: "http://" + loop(admin) + "/healthz",
				}, nil
			}, func(data, admin int) {
				t.mu.Lock()
				t.providers[host] = ProviderEndpoint{Name: host, Site: SiteOf(host),
					DataURL: "http://" + loop(data), AdminURL: "http://" + loop(admin)}
				if host == Providers[0] {
					t.ports.ProviderData, t.ports.ProviderAdmin = data, admin
				}
				t.mu.Unlock()
			})
			done <- i
		}()
	}
	for range Providers {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, host := range Providers {
		p := t.Provider(host)
		provAddrs = append(provAddrs, deployment.ProviderAddr{Site: p.Site, URL: p.DataURL})
	}
	t.spec.Progress("providers ready")

	errs = make([]error, len(Gateways))
	done = make(chan int, len(Gateways))
	for i, host := range Gateways {
		go func() {
			errs[i] = t.startWithFreePorts(ctx, host, func(data, admin int) (*component, error) {
				l, err := t.launchGateway(host, host, deployment.Addresses{
					DataListen: loop(data), AdminListen: loop(admin),
					ValkeyAddr: t.valkeyAt, Providers: provAddrs,
				}, t.spec.Deployment.Profile, nil)
				if err != nil {
					return nil, err
				}
				return &component{host: host, argv: l.argv, env: l.env, logPath: t.logPath(host),
					readyURL: t.gatewayReadyURL("http://"+loop(data), "http://"+loop(admin))}, nil
			}, func(data, admin int) {
				t.mu.Lock()
				t.gateways[host] = GatewayEndpoint{Name: host,
					DataURL: "http://" + loop(data), AdminURL: "http://" + loop(admin)}
				if host == Gateways[0] {
					t.ports.GatewayData, t.ports.GatewayAdmin = data, admin
				}
				t.mu.Unlock()
			})
			done <- i
		}()
	}
	for range Gateways {
		<-done
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	t.mu.Lock()
	t.up = true
	t.mu.Unlock()
	t.spec.Progress("gateways ready (process topology up in %s)", ElapsedSince(start))
	return nil
}

// startWithFreePorts picks two free loopback ports, builds the component with mk, starts it and
// waits until it is ready; if it exits during start-up (a port race) it retries with new ports.
func (t *processTopo) startWithFreePorts(ctx context.Context, host string, mk func(data, admin int) (*component, error), ok func(data, admin int)) error {
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
		last = t.startAndWait(ctx, []*component{c})
		if last == nil {
			ok(ports[0], ports[1])
			return nil
		}
		_, _ = c.stop(ctx) // not ready: make sure it is gone before trying again
		var early *exitedEarlyError
		if !errors.As(last, &early) || ctx.Err() != nil {
			return last
		}
	}
	return last
}

func (t *processTopo) Down(ctx context.Context) (Teardown, error) {
	return t.down.Do(func(td *Teardown) {
		t.stopAll(ctx, td)
		t.mu.Lock()
		t.up = false
		t.mu.Unlock()
	})
}

func (t *processTopo) Partition(ctx context.Context, host, peer string) error {
	return fmt.Errorf("partition %s from %s: %w: %s", host, peer, ErrUnsupported, processReason)
}

func (t *processTopo) Heal(ctx context.Context, host, peer string) error {
	return fmt.Errorf("heal %s from %s: %w: %s", host, peer, ErrUnsupported, processReason)
}

func (t *processTopo) Probe(ctx context.Context, from, to string, port int) ProbeResult {
	return ProbeResult{From: from, To: to, Port: port, Supported: false, Error: processReason}
}

func (t *processTopo) Capabilities() Capabilities {
	return Capabilities{
		NetworkPolicy: false, NetworkPolicyReason: processReason,
		Partition: false, PartitionReason: processReason,
	}
}

func (t *processTopo) Facts() map[string]any {
	f := t.baseFacts()
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

// newTransport is an HTTP transport with explicit timeouts; dial, when set, creates the
// connections (the netns engine dials from inside a namespace).
func NewTransport(dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
	if dial == nil {
		d := &net.Dialer{Timeout: 2 * time.Second, KeepAlive: 15 * time.Second}
		dial = d.DialContext
	}
	return &http.Transport{
		Proxy:                 nil, // never route the qualification through a proxy from the environment
		DialContext:           dial,
		MaxIdleConns:          256,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       30 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		ForceAttemptHTTP2:     false,
	}
}
