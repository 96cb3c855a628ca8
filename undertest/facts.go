package undertest

import (
	"fmt"
	"net/url"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/internal/hostport"
	"github.com/quotaqual/quotaqual/providerstub"
)

// Facts are what a run knows about one gateway it launches: the values a profile's config
// template, argv and environment are rendered from. They hold no secret: passwords and the
// store URL are named by the environment variables that carry them.
type Facts struct {
	Name    string // the gateway's host, e.g. gateway-a
	RunID   string
	Profile string // the qualification profile, e.g. quick

	Binary     string // the harness's quotaqual binary (as the gateway's host sees it)
	ConfigPath string // the rendered config file (as the gateway sees it)

	DataListen, AdminListen string // host:port to listen on

	UpstreamTimeout, ShutdownTimeout time.Duration

	Users     []User
	Providers []deployment.ProviderAddr
	Store     Store
	Budget    Budget
	// ScenarioRules are the scenarios' own rules, rendered ahead of the qualification's rule;
	// a template is handed only those its profile's capabilities.rules can express (Render).
	ScenarioRules []deployment.ScenarioRule
	// Services are the profile's service replicas by service name (services.go), set by the
	// topology that runs them; empty for a profile without services.
	Services map[string][]ServiceReplica
}

// ServiceAt is the host:port of port on the first replica of service ("" when there is none):
// {{.ServiceAt "ratelimit" "grpc"}} in a template.
func (f Facts) ServiceAt(service, port string) string {
	if rs := f.Services[service]; len(rs) > 0 {
		return rs[0].At(port)
	}
	return ""
}

// ServiceAddrs is the host:port of port on every replica of service, in order.
func (f Facts) ServiceAddrs(service, port string) []string {
	var out []string
	for _, r := range f.Services[service] {
		out = append(out, r.At(port))
	}
	return out
}

// User is one Basic-Auth principal; its password is in the environment variable PasswordEnv.
type User struct {
	Username    string
	PasswordEnv string
}

// Store is the quota store as the gateway reaches it.
type Store struct {
	// Backend is the store kind quotaqual's gateway renders: valkey, or memory (tests only).
	Backend     string
	Addr        string // host:port of the run's Valkey
	URLEnv      string // environment variable with redis://:password@Addr
	PasswordEnv string // environment variable with the Valkey password alone
	Namespace   string // the prefix of every key this run writes
	Timeout     time.Duration
	// Group, when set, is the replicated store group the gateway is to use instead of Addr.
	Group *Group
	// Cluster, when set, lists the nodes (host:port) of the Valkey Cluster the gateway is to
	// use instead of Addr; the password is in PasswordEnv, as for every node.
	Cluster []string
}

// Group is the replicated store group (through its Sentinels).
type Group struct {
	MasterName  string
	Sentinels   []string
	Replication string // acknowledged or async
	AckTimeout  time.Duration
}

// Budget is the qualification's rule: one window, a capacity, a per-request estimate and a
// reservation lease.
type Budget struct {
	Rule     string // the rule's name
	Window   time.Duration
	Capacity int64
	Estimate int64
	Lease    time.Duration
}

// RuleName is the qualification's one quota rule as quotaqual's gateway names it.
const RuleName = "per-application-budget"

// FactsFor gathers gateway name's facts from the run's deployment, the addresses of this
// topology, and the qualification profile p (the deployment's own, or another for a policy
// change). Addresses are checked here, so every profile gets the same errors.
func FactsFor(d *deployment.Deployment, name string, a deployment.Addresses, p deployment.Profile) (Facts, error) {
	backend := d.Backend
	if backend == "" {
		backend = deployment.BackendValkey
	}
	if backend != deployment.BackendValkey && backend != deployment.BackendMemory {
		return Facts{}, fmt.Errorf("deployment backend %q is unknown: use %q or %q", backend, deployment.BackendValkey, deployment.BackendMemory)
	}
	fail := func(err error) (Facts, error) {
		return Facts{}, fmt.Errorf("rendering the config of %s: %w", name, err)
	}
	if err := hostport.Check("data listen address", a.DataListen); err != nil {
		return fail(err)
	}
	if err := hostport.Check("admin listen address", a.AdminListen); err != nil {
		return fail(err)
	}
	if len(a.Providers) == 0 {
		return fail(fmt.Errorf("no providers given: pass at least one provider address"))
	}
	for _, pa := range a.Providers {
		if !providerstub.ValidSite(pa.Site) {
			return fail(fmt.Errorf("provider site %q is not a valid site name (1-32 of a-z, 0-9, '-')", pa.Site))
		}
		u, err := url.Parse(pa.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil {
			return fail(fmt.Errorf("provider %s URL %q must be http(s)://host:port without credentials", pa.Site, pa.URL))
		}
	}
	if len(d.Credentials) == 0 {
		return fail(fmt.Errorf("the deployment has no users: build it with NewDeployment"))
	}
	f := Facts{
		Name: name, RunID: d.RunID, Profile: p.Name,
		DataListen: a.DataListen, AdminListen: a.AdminListen,
		UpstreamTimeout: deployment.GatewayUpstreamTimeout, ShutdownTimeout: deployment.GatewayShutdownTimeout,
		Providers: a.Providers,
		Store: Store{Backend: backend, Addr: a.ValkeyAddr, URLEnv: deployment.ValkeyURLEnv,
			PasswordEnv: deployment.ValkeyPasswordEnv, Namespace: d.Namespace, Timeout: p.StoreTimeout},
		Budget:        Budget{Rule: RuleName, Window: p.Window, Capacity: p.Capacity, Estimate: p.Estimate, Lease: p.Lease},
		ScenarioRules: d.ScenarioRules(),
	}
	for _, c := range d.Credentials {
		f.Users = append(f.Users, User{Username: c.Username, PasswordEnv: c.EnvVar})
	}
	if a.Store != nil {
		if backend != deployment.BackendValkey {
			return fail(fmt.Errorf("the replicated store needs the valkey backend"))
		}
		g := Group{MasterName: a.Store.MasterName, Sentinels: a.Store.Sentinels,
			Replication: a.Store.Replication, AckTimeout: deployment.StoreAckTimeout}
		switch g.Replication {
		case "":
			g.Replication = deployment.ReplicationAcknowledged
		case deployment.ReplicationAcknowledged, deployment.ReplicationAsync:
		default:
			return fail(fmt.Errorf("store replication %q is unknown: use %s or %s", g.Replication, deployment.ReplicationAcknowledged, deployment.ReplicationAsync))
		}
		for _, s := range g.Sentinels {
			if err := hostport.Check("sentinel address", s); err != nil {
				return fail(err)
			}
		}
		f.Store.Group = &g
	}
	if len(a.Cluster) > 0 {
		if backend != deployment.BackendValkey {
			return fail(fmt.Errorf("the Valkey Cluster needs the valkey backend"))
		}
		if a.Store != nil {
			return fail(fmt.Errorf("a gateway uses either the replicated store group or the Valkey Cluster, not both"))
		}
		for _, n := range a.Cluster {
			if err := hostport.Check("cluster node address", n); err != nil {
				return fail(err)
			}
		}
		f.Store.Cluster = append([]string(nil), a.Cluster...)
	}
	return f, nil
}

// RenderFor renders gateway name's config for the run's deployment d on addresses a under
// qualification profile qp: FactsFor, then Render. For engines that place the file
// themselves (a container's file, a ConfigMap).
func (p *Profile) RenderFor(d *deployment.Deployment, name string, a deployment.Addresses, qp deployment.Profile) ([]byte, error) {
	f, err := FactsFor(d, name, a, qp)
	if err != nil {
		return nil, err
	}
	return p.Render(f)
}

// ServiceFor is the host:port of port on the replica of service that this gateway asks:
// gateway-a the first replica, gateway-b the second, … round the replicas (a sidecar-like
// placement; "" when the service has no replica).
func (f Facts) ServiceFor(service, port string) string {
	rs := f.Services[service]
	if len(rs) == 0 {
		return ""
	}
	i := 0
	if n := len(f.Name); n > 0 && f.Name[n-1] >= 'a' && f.Name[n-1] <= 'z' {
		i = int(f.Name[n-1] - 'a')
	}
	return rs[i%len(rs)].At(port)
}
