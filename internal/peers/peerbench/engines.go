package peerbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/quotaqual/quotaqual/internal/peers"
	"github.com/quotaqual/quotaqual/internal/peers/gubershim"
	"github.com/quotaqual/quotaqual/internal/peers/rls"
	"github.com/quotaqual/quotaqual/ledger"
	"github.com/quotaqual/quotaqual/undertest"
)

// engine is one admission engine under measurement: decide makes caller's next decision and
// returns how long the decision took (what a gateway waits for before it forwards).
type engine struct {
	name, perDecision string
	decide            func(ctx context.Context, caller int) (time.Duration, error)
	pids              []int // the engine's own processes (their CPU is reported apart)
	close             func()
}

// The store password every engine uses (a throwaway of this run's own server).
const storePasswordEnv = "QQ_PEERBENCH_STORE_PASSWORD"

// capacity is a budget no benchmark exhausts, so every engine measures its admit path. envoy
// ratelimit's requests_per_unit is a uint32.
const capacity = 4_000_000_000

func subject(caller int) string { return "subject-" + strconv.Itoa(caller) }

// quotaqualEngine is quotaqual's own admission: ledger.Reserve (one EVALSHA of the reserve
// script: every window of the rule, the reservation held under a lease), then the Settle of
// its usage, untimed — as a gateway settles after its response — but counted in the store's
// CPU per decision.
func quotaqualEngine(url string) (*engine, error) {
	v, err := ledger.NewValkey(ledger.ValkeyOptions{URL: url, Namespace: "peerbench-qq", Timeout: 2 * time.Second})
	if err != nil {
		return nil, err
	}
	q := &ledger.Quota{Rule: "bench", Budgets: []ledger.Budget{{Window: time.Minute, Capacity: capacity}}, Lease: time.Minute}
	return &engine{
		name:        "quotaqual",
		perDecision: "1 EVALSHA reserve (sliding multi-window budget, reservation under a lease; store clock) + 1 EVALSHA settle after it (outside the decision's latency, inside decisions/s and store CPU)",
		decide: func(ctx context.Context, caller int) (time.Duration, error) {
			t0 := time.Now()
			d, err := v.Reserve(ctx, q, subject(caller), 10)
			took := time.Since(t0)
			if err != nil || !d.Admitted {
				return took, fmt.Errorf("quotaqual reserve: %+v, %v", d.Denial, err)
			}
			_, err = v.Settle(ctx, d.Reservation, ledger.Usage{Tokens: 7, Known: true})
			return took, err
		},
		close: func() { _ = v.Close() },
	}, nil
}

// service is one running replica of a peer's service.
type service struct {
	cmd *exec.Cmd
	at  map[string]string // port name → host:port
}

// startService renders replica i of the shipped profile's first service — the same argv,
// environment and files the qualification runs it with (undertest.Service.RenderService) —
// on its own loopback address, starts it and waits for its readiness probe.
func startService(ctx context.Context, profile string, e peers.Engine, storeAddr, password string, ips []string, i int, dir string) (*service, error) {
	gw, err := undertest.Shipped(profile)
	if err != nil {
		return nil, err
	}
	s := gw.Services[0]
	bin, err := e.Path()
	if err != nil {
		return nil, err
	}
	var reps []undertest.ServiceReplica
	for j, h := range s.ReplicaHosts() {
		reps = append(reps, undertest.ServiceReplica{Service: s.Name, Host: h, Index: j + 1, IP: ips[j], Ports: s.Ports})
	}
	r := reps[i]
	facts := undertest.ServiceFacts{Engine: bin, Dir: filepath.Join(dir, r.Host), Replica: r, Replicas: reps}
	facts.Store = undertest.Store{Backend: "valkey", Addr: storeAddr, PasswordEnv: storePasswordEnv, Namespace: "peerbench", Timeout: time.Second}
	facts.Budget = undertest.Budget{Rule: undertest.RuleName, Window: time.Minute, Capacity: capacity, Estimate: 1, Lease: time.Minute}
	facts.Services = map[string][]undertest.ServiceReplica{s.Name: reps}
	argv, env, files, err := s.RenderService(facts, []string{storePasswordEnv + "=" + password})
	if err != nil {
		return nil, err
	}
	for rel, b := range files {
		p := filepath.Join(facts.Dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(p, b, 0o600); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(facts.Dir, 0o700); err != nil {
		return nil, err
	}
	if s.OwnHostname {
		// memberlist names a node by its host name: a UTS namespace of its own, as the
		// topology runs it (topology.LaunchServices).
		argv = append([]string{"unshare", "--uts", "--", "sh", "-c", `hostname "$0" && exec "$@"`, r.Host}, argv...)
	}
	log, err := os.Create(filepath.Join(dir, r.Host+".log"))
	if err != nil {
		return nil, err
	}
	defer log.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", r.Host, err)
	}
	svc := &service{cmd: cmd, at: map[string]string{}}
	for name := range s.Ports {
		svc.at[name] = r.At(name)
	}
	probe := "http://" + r.At(s.Readiness.Port) + s.Readiness.Path
	deadline := time.Now().Add(60 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, probe, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return svc, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			svc.stop()
			return nil, fmt.Errorf("%s not ready at %s within 60 s (log: %s)", r.Host, probe, log.Name())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *service) stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
}

// loopbackIPs are n addresses of one random /24 in 127/8: services of parallel runs (and the
// profiles' fixed ports) do not collide.
func loopbackIPs(n int) []string {
	a, b := 64+rand.IntN(128), 1+rand.IntN(250)
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("127.%d.%d.%d", a, b, 10+i)
	}
	return out
}

// envoyEngine is envoy ratelimit's service as the envoy-ai-gateway profile runs it (its
// config: one descriptor under the route, a per-minute limit), asked ShouldRateLimit with
// hits_addend 1 for the caller's subject over one gRPC connection (rls.Client, as the shims).
func envoyEngine(ctx context.Context, storeAddr, password, dir string) (*engine, error) {
	svc, err := startService(ctx, "envoy-ai-gateway", peers.EnvoyRatelimit, storeAddr, password, loopbackIPs(1), 0, dir)
	if err != nil {
		return nil, err
	}
	c, err := rls.Dial(svc.at["grpc"])
	if err != nil {
		svc.stop()
		return nil, err
	}
	const route = "httproute/quotaqual/llm/rule/0"
	return &engine{
		name:        peers.EnvoyRatelimit.Name,
		perDecision: "gRPC ShouldRateLimit, 1 descriptor, hits_addend 1: the service's pipeline INCRBY + EXPIRE of a fixed epoch window (no reservation, no settle)",
		decide: func(ctx context.Context, caller int) (time.Duration, error) {
			t0 := time.Now()
			st, err := c.Should(ctx, "quotaqual/gateway/http", []rls.Entry{{Key: route, Value: route}, {Key: "rule-0-match-0", Value: subject(caller)}}, 1, 2*time.Second)
			took := time.Since(t0)
			if err == nil && (st.OverLimit || st.Limit == 0) {
				err = fmt.Errorf("envoy ratelimit: over limit %v, limit %d (no limit matched?)", st.OverLimit, st.Limit)
			}
			return took, err
		},
		pids:  []int{svc.cmd.Process.Pid},
		close: func() { _ = c.Close(); svc.stop() },
	}, nil
}

// gubernatorCluster is the gubernator profile's three nodes, each on its own loopback address
// and host name.
type gubernatorCluster struct {
	nodes []*service
}

func startGubernator(ctx context.Context, dir string) (*gubernatorCluster, error) {
	ips := loopbackIPs(3)
	g := &gubernatorCluster{}
	for i := range ips {
		s, err := startService(ctx, "gubernator", peers.Gubernator, "", "", ips, i, dir)
		if err != nil {
			g.stop()
			return nil, err
		}
		g.nodes = append(g.nodes, s)
	}
	// Decide only once every node knows the other two (the shim's own readiness).
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 128}}
	deadline := time.Now().Add(60 * time.Second)
	for _, n := range g.nodes {
		for {
			l := gubershim.NewLimiter(gubershim.Limit{Node: n.at["http"], Name: "ready", Capacity: capacity, Estimate: 1, DurationMS: 60000, Behavior: "BATCHING", TimeoutMS: 1000}, client, slog.New(slog.DiscardHandler))
			if _, err := l.Hit(ctx, "probe", 0); err == nil && healthy(ctx, client, n.at["http"]) {
				break
			}
			if time.Now().After(deadline) {
				g.stop()
				return nil, errors.New("gubernator: the three nodes did not form a cluster within 60 s")
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	return g, nil
}

func healthy(ctx context.Context, c *http.Client, node string) bool {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+node+"/v1/HealthCheck", nil)
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return strings.Contains(string(b), `"peer_count":3`)
}

func (g *gubernatorCluster) stop() {
	for _, n := range g.nodes {
		n.stop()
	}
}

func (g *gubernatorCluster) pids() []int {
	var out []int
	for _, n := range g.nodes {
		out = append(out, n.cmd.Process.Pid)
	}
	return out
}

// engine asks the cluster with behaviour (BATCHING: the node forwards to the key's owner,
// which decides; GLOBAL: the node answers from its copy and sends the hits to the owner
// asynchronously), callers spread over the nodes, over HTTP as the gubernator shim does.
func (g *gubernatorCluster) engine(behavior, what string) *engine {
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 128}}
	var lims []*gubershim.Limiter
	for _, n := range g.nodes {
		lims = append(lims, gubershim.NewLimiter(gubershim.Limit{Node: n.at["http"], Name: "peerbench-" + strings.ToLower(behavior),
			Capacity: capacity, Estimate: 1, DurationMS: 60000, Behavior: behavior, TimeoutMS: 2000}, client, slog.New(slog.DiscardHandler)))
	}
	name := "gubernator (owner)"
	if behavior == "GLOBAL" {
		name = "gubernator (GLOBAL)"
	}
	return &engine{
		name: name, perDecision: what,
		decide: func(ctx context.Context, caller int) (time.Duration, error) {
			t0 := time.Now()
			under, err := lims[caller%len(lims)].Hit(ctx, subject(caller), 1)
			took := time.Since(t0)
			if err == nil && !under {
				err = errors.New("gubernator: over the limit")
			}
			return took, err
		},
		pids:  g.pids(),
		close: client.CloseIdleConnections,
	}
}
