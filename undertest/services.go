package undertest

import (
	"fmt"
	"net"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"

	"github.com/quotaqual/quotaqual/internal/strictyaml"
)

// Service is a process of the gateway's own that the topology runs beside the gateways, like
// any component: a rate-limit engine the gateway asks (envoyproxy/ratelimit; gubernator's
// nodes). Each replica is a host of the topology (its own address and, with own_hostname, its
// own host name), started after the store and before the gateways, waited on until ready, its
// output collected into the run's logs, stopped after the gateways. The levers reach it as they
// reach any host: a partition cuts it off, a store outage stops what it depends on.
type Service struct {
	// Name is the host name (with replicas > 1: <name>-1, <name>-2, …).
	Name string `yaml:"name"`
	// Engine names the third-party engine it runs (internal/peers: envoy-ratelimit,
	// gubernator); {{.Engine}} in argv is the path of its built binary.
	Engine   string            `yaml:"engine"`
	Replicas int               `yaml:"replicas"` // 0 means 1
	Argv     []string          `yaml:"argv"`     // templates over ServiceFacts
	Env      map[string]string `yaml:"env"`      // templates over ServiceFacts; $NAME copies a run variable
	Files    []ServiceFile     `yaml:"files"`    // written into the replica's directory before it starts
	// Ports are the replica's listening ports by name; every replica has its own address, so
	// all use the same numbers.
	Ports     map[string]int `yaml:"ports"`
	Readiness ServiceProbe   `yaml:"readiness"`
	Reach     Reach          `yaml:"reach"`
	// OwnHostname runs each replica in a UTS namespace of its own with its host name set to
	// the replica's (gubernator's memberlist names a node by its host name).
	OwnHostname bool `yaml:"own_hostname"`

	argv  []*template.Template
	env   map[string]*template.Template
	files []*template.Template
}

// ServiceFile is one file of a service replica: Path relative to its directory, rendered from
// Template over ServiceFacts.
type ServiceFile struct {
	Path     string `yaml:"path"`
	Template string `yaml:"template"`
}

// ServiceProbe is where a replica reports ready: GET http://<its address>:<Ports[Port]><Path>
// answers 200.
type ServiceProbe struct {
	Port string `yaml:"port"`
	Path string `yaml:"path"`
}

// Reach is who may open connections to a service under the run's network policy (everything
// else is denied, as for every host).
type Reach struct {
	// FromGateways are the ports (by name) the gateways reach.
	FromGateways []string `yaml:"from_gateways"`
	// BetweenReplicas are the ports the replicas reach each other on, TCP and UDP (a
	// membership protocol's gossip).
	BetweenReplicas []string `yaml:"between_replicas"`
	// Store: the replicas reach the run's Valkey (the engine keeps its counters there).
	Store bool `yaml:"store"`
}

// ReplicaHosts are the service's host names: Name, or Name-1 … Name-N.
func (s Service) ReplicaHosts() []string {
	n := max(1, s.Replicas)
	if n == 1 {
		return []string{s.Name}
	}
	out := make([]string, n)
	for i := range out {
		out[i] = s.Name + "-" + strconv.Itoa(i+1)
	}
	return out
}

// ServiceReplica is one running replica as the templates (and the gateways' config) see it.
type ServiceReplica struct {
	Service string
	Host    string // its host name
	Index   int    // 1-based
	IP      string // its address as the gateways reach it
	Ports   map[string]int
}

// At is the replica's host:port of the named port ("" when it has no such port).
func (r ServiceReplica) At(port string) string {
	p, ok := r.Ports[port]
	if !ok {
		return ""
	}
	return net.JoinHostPort(r.IP, strconv.Itoa(p))
}

// ServiceFacts are what a service replica's argv, environment and files are rendered from:
// the run's facts (as the gateways get them: store, budget, users, namespace), the engine's
// binary, the replica's directory, the replica and all replicas of its service.
type ServiceFacts struct {
	Facts
	Engine   string
	Dir      string
	Replica  ServiceReplica
	Replicas []ServiceReplica
}

// validateServices checks the services section and parses its templates.
func (p *Profile) validateServices(bad func(path, format string, args ...any)) {
	seen := map[string]bool{}
	for i := range p.Services {
		s := &p.Services[i]
		at := fmt.Sprintf("services[%d]", i)
		if !serviceName.MatchString(s.Name) {
			bad(at+".name", "%q is not a host name: use 1-20 characters of a-z, 0-9 and '-', starting with a letter", s.Name)
		} else if reservedHost(s.Name) {
			bad(at+".name", "%q is a host the topology already has: choose another name", s.Name)
		} else if seen[s.Name] {
			bad(at+".name", "%q names two services", s.Name)
		}
		seen[s.Name] = true
		if s.Engine == "" {
			bad(at+".engine", "missing: name the peer engine it runs (quotaqual peers list)")
		}
		if s.Replicas < 0 || s.Replicas > MaxServiceReplicas {
			bad(at+".replicas", "%d is out of range: use 1 to %d", s.Replicas, MaxServiceReplicas)
		}
		if len(s.Argv) == 0 {
			bad(at+".argv", "missing: give the command line, e.g. [\"{{.Engine}}\"]")
		}
		s.argv = nil
		for j, a := range s.Argv {
			t, err := parseTemplate(a)
			if err != nil {
				bad(fmt.Sprintf("%s.argv[%d]", at, j), "%v", err)
				continue
			}
			s.argv = append(s.argv, t)
		}
		s.env = map[string]*template.Template{}
		for _, k := range sortedKeys(s.Env) {
			ep := strictyaml.JoinPath(at+".env", strictyaml.KeySegment(k))
			if !envName.MatchString(k) {
				bad(ep, "%q is not an environment variable name: use A-Z, 0-9 and '_', starting with a letter", k)
				continue
			}
			t, err := parseTemplate(s.Env[k])
			if err != nil {
				bad(ep, "%v", err)
				continue
			}
			s.env[k] = t
		}
		s.files = nil
		for j, f := range s.Files {
			fp := fmt.Sprintf("%s.files[%d]", at, j)
			if clean := path.Clean(f.Path); f.Path == "" || clean != f.Path || path.IsAbs(f.Path) || strings.HasPrefix(clean, "..") {
				bad(fp+".path", "%q is not a relative path inside the replica's directory: give one like config/limits.yaml", f.Path)
			}
			t, err := parseTemplate(f.Template)
			if err != nil {
				bad(fp+".template", "%v", err)
				continue
			}
			s.files = append(s.files, t)
		}
		if len(s.Ports) == 0 {
			bad(at+".ports", "missing: name the ports it listens on, e.g. {grpc: 8081, http: 8080}")
		}
		for _, name := range sortedKeys(portsAsStrings(s.Ports)) {
			if n := s.Ports[name]; n < 1 || n > 65535 {
				bad(strictyaml.JoinPath(at+".ports", strictyaml.KeySegment(name)), "%d is not a port: use 1-65535", n)
			}
		}
		checkPort := func(path, name string) {
			if _, ok := s.Ports[name]; !ok {
				bad(path, "%q is not one of its ports (%s)", name, strings.Join(sortedKeys(portsAsStrings(s.Ports)), ", "))
			}
		}
		checkPort(at+".readiness.port", s.Readiness.Port)
		if !strings.HasPrefix(s.Readiness.Path, "/") {
			bad(at+".readiness.path", "%q is not an absolute path: give one like /healthcheck", s.Readiness.Path)
		}
		for j, name := range s.Reach.FromGateways {
			checkPort(fmt.Sprintf("%s.reach.from_gateways[%d]", at, j), name)
		}
		for j, name := range s.Reach.BetweenReplicas {
			checkPort(fmt.Sprintf("%s.reach.between_replicas[%d]", at, j), name)
		}
		if len(s.Reach.FromGateways) == 0 {
			bad(at+".reach.from_gateways", "missing: a service no gateway may reach is of no use to it")
		}
	}
	hosts := p.ServiceHosts()
	for i, h := range p.Caps.StoreHosts {
		if h != "valkey" && !slices.Contains(hosts, h) {
			bad(fmt.Sprintf("capabilities.store_hosts[%d]", i), "%q is neither valkey nor one of the profile's service hosts (%s)", h, strings.Join(hosts, ", "))
		}
	}
}

// MaxServiceReplicas bounds a service's replicas (each is a host of the topology).
const MaxServiceReplicas = 5

// ServiceHosts lists every service replica's host name, in profile order.
func (p *Profile) ServiceHosts() []string {
	var out []string
	for _, s := range p.Services {
		out = append(out, s.ReplicaHosts()...)
	}
	return out
}

// StoreHosts are the hosts a gateway reaches its quota state through: the hosts valkey-partition
// cuts a gateway off from. The run's Valkey unless the profile names its own (a rate-limit
// service the gateway asks, which keeps its counters in Valkey behind it).
func (p *Profile) StoreHosts() []string {
	if len(p.Caps.StoreHosts) == 0 {
		return []string{"valkey"}
	}
	return slices.Clone(p.Caps.StoreHosts)
}

// RenderService renders one replica: its argv, its own environment variables (name order,
// $NAME references resolved from secrets, the run's NAME=value list) and its files (path →
// content). Secret: never log the environment.
func (s Service) RenderService(f ServiceFacts, secrets []string) (argv, env []string, files map[string][]byte, err error) {
	for i, t := range s.argv {
		var b strings.Builder
		if err := t.Execute(&b, f); err != nil {
			return nil, nil, nil, fmt.Errorf("rendering services.%s.argv[%d]: %w", s.Name, i, err)
		}
		argv = append(argv, b.String())
	}
	lookup := map[string]string{}
	for _, kv := range secrets {
		k, v, _ := strings.Cut(kv, "=")
		lookup[k] = v
	}
	for _, k := range sortedKeys(s.Env) {
		var b strings.Builder
		if err := s.env[k].Execute(&b, f); err != nil {
			return nil, nil, nil, fmt.Errorf("rendering services.%s.env.%s: %w", s.Name, k, err)
		}
		var missing string
		v := expandKnown(b.String(), lookup, &missing)
		if missing != "" {
			return nil, nil, nil, fmt.Errorf("services.%s.env.%s copies $%s, which the run does not set: use one of the run's variables", s.Name, k, missing)
		}
		env = append(env, k+"="+v)
	}
	files = map[string][]byte{}
	for i, t := range s.files {
		var b strings.Builder
		if err := t.Execute(&b, f); err != nil {
			return nil, nil, nil, fmt.Errorf("rendering services.%s.files[%d]: %w", s.Name, i, err)
		}
		files[s.Files[i].Path] = []byte(b.String())
	}
	return argv, env, files, nil
}

// expandKnown replaces each $NAME of s with lookup[NAME], noting the first unknown name.
func expandKnown(s string, lookup map[string]string, missing *string) string {
	return envRef.ReplaceAllStringFunc(s, func(m string) string {
		name := strings.TrimPrefix(m, "$")
		v, ok := lookup[name]
		if !ok && *missing == "" {
			*missing = name
		}
		return v
	})
}

var (
	serviceName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,19}$`)
	envRef      = regexp.MustCompile(`\$[A-Z][A-Z0-9_]*`)
)

// reservedHost reports whether h is (or looks like) one of the topology's own hosts.
func reservedHost(h string) bool {
	switch {
	case h == "client", h == "observer", h == "valkey", strings.HasPrefix(h, "gateway-"),
		strings.HasPrefix(h, "provider-"), strings.HasPrefix(h, "valkey-"), strings.HasPrefix(h, "sentinel-"):
		return true
	}
	return false
}

func portsAsStrings(m map[string]int) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = strconv.Itoa(v)
	}
	return out
}
