package topology

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/internal/peers"
	"github.com/quotaqual/quotaqual/undertest"
)

// Service components: the processes a gateway profile runs beside its gateways
// (undertest.Service: a rate-limit engine such as envoyproxy/ratelimit, or gubernator's nodes).
// Each replica is a host of the topology like any other component: its own namespace and
// address (the engine gives them), started after the store and before the gateways in profile
// order, waited on until its readiness URL answers, its output in logs/<host>.log (collected
// into the bundle and redacted there), stopped after the gateways. The network policy lets the
// gateways reach the ports the profile names, the replicas reach each other, and, when the
// service keeps its counters there, Valkey. The levers reach a replica by its host name: a
// partition cuts it off; the gateway's quota store, for valkey-partition, is the profile's
// capabilities.store_hosts. Only the netns engine places services (CheckServices).

// ServiceEngines are the engines that run a profile's services.
var ServiceEngines = []string{EngineNetns}

// CheckServices refuses a run of spec on engine when its gateway profile has services the
// engine cannot place, or whose peer engine is not built, saying what to do.
func CheckServices(engine string, spec Spec) error {
	return CheckServicesOf(engine, GatewayProfile(spec))
}

// CheckServicesOf is CheckServices for gateway profile gw.
func CheckServicesOf(engine string, gw *undertest.Profile) error {
	if len(gw.Services) == 0 {
		return nil
	}
	if !slices.Contains(ServiceEngines, engine) {
		return fmt.Errorf("gateway profile %s runs services of its own (%s) beside the gateways, which only the %s topology places: use --topology %s",
			gw.Name, strings.Join(gw.ServiceHosts(), ", "), strings.Join(ServiceEngines, ", "), ServiceEngines[0])
	}
	for _, s := range gw.Services {
		e, err := peers.ByName(s.Engine)
		if err != nil {
			return fmt.Errorf("gateway profile %s, service %s: %w", gw.Name, s.Name, err)
		}
		if _, err := e.Path(); err != nil {
			return fmt.Errorf("gateway profile %s, service %s: %w", gw.Name, s.Name, err)
		}
	}
	return nil
}

// WithServicePolicy adds the gateway profile's services to pol: each replica's from_gateways
// ports from every gateway, its between_replicas ports (TCP and UDP) from the other replicas,
// and Valkey from every replica of a service that keeps its state there.
func WithServicePolicy(pol Policy, gw *undertest.Profile, gateways []string, valkeyPort int) Policy {
	for _, s := range gw.Services {
		hosts := s.ReplicaHosts()
		pol.ServiceHosts = append(pol.ServiceHosts, hosts...)
		for _, h := range hosts {
			// The observer polls readiness, as it does every component's.
			pol.Rules = append(pol.Rules, PolicyRule{Name: h + "-ready-from-observer", Host: h, Port: s.Ports[s.Readiness.Port], From: []string{HostObserver}})
			for _, name := range s.Reach.FromGateways {
				pol.Rules = append(pol.Rules, PolicyRule{Name: h + "-" + name + "-from-gateways", Host: h, Port: s.Ports[name], From: slices.Clone(gateways)})
			}
			var others []string
			for _, o := range hosts {
				if o != h {
					others = append(others, o)
				}
			}
			if len(others) > 0 {
				for _, name := range s.Reach.BetweenReplicas {
					pol.Rules = append(pol.Rules, PolicyRule{Name: h + "-" + name + "-from-replicas", Host: h, Port: s.Ports[name], From: others, UDP: true})
				}
			}
			if s.Reach.Store {
				pol.Rules = append(pol.Rules, PolicyRule{Name: "valkey-from-" + h, Host: HostValkey, Port: valkeyPort, From: []string{h}})
			}
		}
	}
	return pol
}

// serviceSet is what LaunchServices started: the replicas as the gateways' configs see them.
type serviceSet struct {
	mu       sync.Mutex
	replicas map[string][]undertest.ServiceReplica // by service name
}

func (s *serviceSet) facts() map[string][]undertest.ServiceReplica {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.replicas) == 0 {
		return nil
	}
	out := make(map[string][]undertest.ServiceReplica, len(s.replicas))
	for k, v := range s.replicas {
		out[k] = slices.Clone(v)
	}
	return out
}

// ServiceHost places one replica: its address as the gateways reach it and the argv prefix
// that runs a command on its host (a namespace entry).
type ServiceHost struct {
	IP   string
	Wrap []string
}

// LaunchServices starts the gateway profile's services, each service's replicas together and
// the services one after another in profile order, and waits until every replica is ready.
// place gives each replica host its address and wrapper; a = the first gateway's addresses
// (the store the services use).
func (b *Base) LaunchServices(ctx context.Context, a deployment.Addresses, place func(host string) ServiceHost) error {
	gw := b.GatewayUnderTest()
	if len(gw.Services) == 0 {
		return nil
	}
	start := time.Now()
	base, err := undertest.FactsFor(b.Spec.Deployment, "services", a, b.Spec.Deployment.Profile)
	if err != nil {
		return err
	}
	base.Binary = b.Spec.Binary
	secrets := GatewaySecretEnv(b.Spec, a.ValkeyAddr)
	for _, s := range gw.Services {
		e, err := peers.ByName(s.Engine)
		if err != nil {
			return err
		}
		bin, err := e.Path()
		if err != nil {
			return err
		}
		var reps []undertest.ServiceReplica
		for i, h := range s.ReplicaHosts() {
			reps = append(reps, undertest.ServiceReplica{Service: s.Name, Host: h, Index: i + 1, IP: place(h).IP, Ports: s.Ports})
		}
		b.services.mu.Lock()
		if b.services.replicas == nil {
			b.services.replicas = map[string][]undertest.ServiceReplica{}
		}
		b.services.replicas[s.Name] = reps
		b.services.mu.Unlock()
		base.Services = b.services.facts()
		var comps []*Component
		for _, r := range reps {
			dir := filepath.Join(b.Spec.WorkDir, "services", r.Host)
			f := undertest.ServiceFacts{Facts: base, Engine: bin, Dir: dir, Replica: r, Replicas: reps}
			argv, env, files, err := s.RenderService(f, secrets)
			if err != nil {
				return fmt.Errorf("gateway profile %s: %w", gw.Name, err)
			}
			if err := writeServiceFiles(dir, files); err != nil {
				return fmt.Errorf("service %s: %w", r.Host, err)
			}
			if s.OwnHostname {
				// A UTS namespace of its own, named after the replica (memberlist names a node
				// by its host name), then the command itself.
				argv = append([]string{"unshare", "--uts", "--", "sh", "-c", `hostname "$0" && exec "$@"`, r.Host}, argv...)
			}
			ph := place(r.Host)
			c := NewComponent(r.Host, append(slices.Clone(ph.Wrap), argv...), ComponentEnv(b.Spec.RunID, append(slices.Clone(secrets), env...)...),
				b.LogPath(r.Host), "http://"+r.At(s.Readiness.Port)+s.Readiness.Path)
			c.dir = dir
			comps = append(comps, c)
		}
		if err := b.StartAndWait(ctx, comps); err != nil {
			return fmt.Errorf("starting service %s (%s %s): %w", s.Name, e.Name, e.Version, err)
		}
		b.Spec.Progress("service %s up: %d replica(s) of %s %s", s.Name, len(reps), e.Name, e.Version)
	}
	b.Spec.Progress("services up in %s", ElapsedSince(start))
	return nil
}

// writeServiceFiles writes a replica's rendered files under dir.
func writeServiceFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var errs []error
	for rel, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			errs = append(errs, err)
			continue
		}
		errs = append(errs, os.WriteFile(p, b, 0o600))
	}
	return errors.Join(errs...)
}

// ServiceFacts describe the running service replicas for the evidence manifest.
func (b *Base) ServiceFacts() map[string]any {
	gw := b.GatewayUnderTest()
	reps := b.services.facts()
	if len(reps) == 0 {
		return nil
	}
	out := map[string]any{}
	for _, s := range gw.Services {
		e, _ := peers.ByName(s.Engine)
		var hosts []map[string]any
		for _, r := range reps[s.Name] {
			hosts = append(hosts, map[string]any{"host": r.Host, "ip": r.IP, "ports": r.Ports})
		}
		out[s.Name] = map[string]any{"engine": e.Name, "module": e.Module, "version": e.Version, "replicas": hosts}
	}
	return out
}
