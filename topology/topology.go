// Package topology is the engine contract and what the engines share. An engine brings a
// qualification topology up and down, gives the harness its vantage points (clients, probes,
// endpoints, logs) and the host-level primitives the levers act through (Topology and the
// optional interfaces beside it: StoreGroup, PolicyRollout, Pauser, StoreAdmin, Lossy, …).
// Each engine lives in a package of its own (netnsengine, processengine, dockerengine,
// kindengine) and registers itself under its name (engines.go: Register; EngineNames and
// EngineChoices are what flags, docs and errors name). This package holds what engines share:
// Base and the process supervision of the process-based engines (netns, process), the network
// policy and partition checks, readiness polling, facts, the work directory, gateway launch,
// the store's shapes (the replicated store group, the Valkey Cluster), and the faults as Lever
// values (lever.go; the levers in levers.go, levers_link.go, levers_nemesis.go) that scenarios
// and chaos pull. Scenario logic lives in package scenarios, never here.
package topology

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
)

// Host names, the same on every engine.
const (
	HostClient          = "client"
	HostGatewayA        = "gateway-a"
	HostGatewayB        = "gateway-b"
	HostProviderWest    = "provider-west"
	HostProviderCentral = "provider-central"
	HostProviderEast    = "provider-east"
	HostValkey          = "valkey"
)

// Providers lists the provider hosts in a stable order. The gateways are the run's own list
// (Spec.Gateways, GatewayNames, VantagePoints.Gateways): there is no global list of them, so no
// code can assume two.
var Providers = []string{HostProviderWest, HostProviderCentral, HostProviderEast}

// The number of gateway replicas a run may have (Spec.Gateways, --gateways): production runs
// more than two (the upstream concurrency check used eight pods); sixteen keeps the names one
// letter (gateway-a … gateway-p) and the netns addresses in their block.
const (
	DefaultGateways = 2
	MinGateways     = 2
	MaxGateways     = 16
)

// GatewayNames returns the hosts of n gateways: gateway-a, gateway-b, … in order. n is clamped
// to MinGateways..MaxGateways (validation happens in Spec.validate and ValidateGateways).
func GatewayNames(n int) []string {
	n = max(MinGateways, min(n, MaxGateways))
	out := make([]string, n)
	for i := range out {
		out[i] = "gateway-" + string(rune('a'+i))
	}
	return out
}

// GatewayIndex is the position of a gateway host in GatewayNames (gateway-a is 0), or -1 when h
// is no gateway name.
func GatewayIndex(h string) int {
	if len(h) != len("gateway-a") || h[:len("gateway-")] != "gateway-" {
		return -1
	}
	i := int(h[len(h)-1] - 'a')
	if i < 0 || i >= MaxGateways {
		return -1
	}
	return i
}

// IsGateway reports whether h names a gateway (of any run size).
func IsGateway(h string) bool { return GatewayIndex(h) >= 0 }

// ValidateGateways returns the number of gateways a run asked for: 0 means DefaultGateways.
func ValidateGateways(n int) (int, error) {
	if n == 0 {
		return DefaultGateways, nil
	}
	if n < MinGateways || n > MaxGateways {
		return 0, fmt.Errorf("--gateways %d is out of range: use %d to %d (gateway-a … gateway-%c)", n, MinGateways, MaxGateways, 'a'+MaxGateways-1)
	}
	return n, nil
}

// ComponentHosts lists every component host of a run with the given gateways, in a stable
// order: the client, the gateways, the providers, valkey.
func ComponentHosts(gateways []string) []string {
	out := append([]string{HostClient}, gateways...)
	out = append(out, Providers...)
	return append(out, HostValkey)
}

// ErrUnsupported is returned (wrapped, with the reason) by a lever an engine does not have.
// Scenarios that need it report skipped with that reason.
var ErrUnsupported = errors.New("not supported by this topology")

// Topology is one running (or ready to run) set of components: its lifecycle, the vantage
// points the harness sees it from, and the levers scenarios pull. A function that needs only
// one part asks for that interface; the replicated store group (StoreGroup) and rolling policy
// changes (PolicyRollout) are separate, as not every engine has them.
type Topology interface {
	Lifecycle
	VantagePoints
	Levers
}

// Lifecycle brings a topology up and down and describes it for the evidence.
type Lifecycle interface {
	// Engine names the implementation: the name its package registered it under (Register;
	// EngineNames lists them).
	Engine() string
	// Up brings every component up and waits until each is ready. On error, whatever was
	// started has been torn down again.
	Up(ctx context.Context) error
	// Down stops everything this run created and reports what it removed. It is safe to call
	// more than once and after a failed Up.
	Down(ctx context.Context) (Teardown, error)
	// CollectLogs copies each component's log into dir as <host>.log (unredacted: the
	// evidence package redacts what it writes).
	CollectLogs(dir string) error
	// Facts describes the topology for the evidence manifest: engine, addresses, versions,
	// deny mode, run id.
	Facts() map[string]any
}

// VantagePoints are where the harness reaches the components from, and where they listen.
type VantagePoints interface {
	// Client is an HTTP client whose connections originate from the client host: the vantage
	// point of an application calling the gateways.
	Client() *http.Client
	// Observer is an HTTP client for the admin ports (metrics, health, provider call logs):
	// the harness's own vantage point, which the network policy allows to reach admin ports
	// only.
	Observer() *http.Client
	// Gateways lists the run's gateway hosts in order (gateway-a, gateway-b, …; Spec.Gateways).
	Gateways() []string
	// Gateway returns the endpoints of one of Gateways.
	Gateway(name string) GatewayEndpoint
	// Provider returns the endpoints of a provider host.
	Provider(name string) ProviderEndpoint
	// Valkey returns Valkey's address as the gateways see it (no credentials).
	ValkeyAddr() string
	// Probe tries a TCP connection from one host to another host's port, with a timeout.
	Probe(ctx context.Context, from, to string, port int) ProbeResult
	// Ports lists the ports the components listen on, by role.
	Ports() Ports
}

// Levers are the faults scenarios inject, and which of them work here.
type Levers interface {
	// RestartGateway stops a gateway process and starts a new one with the same config,
	// returning once it is ready again.
	RestartGateway(ctx context.Context, name string) error
	// CrashGateway kills a gateway process at once (SIGKILL: no drain, its in-flight requests
	// never settle), as a crash would, and starts a new one with the same config, returning
	// once it is ready again.
	CrashGateway(ctx context.Context, name string) error
	// StopValkey stops the Valkey server (its AOF keeps the state); StartValkey starts it
	// again and waits until it answers.
	StopValkey(ctx context.Context) error
	StartValkey(ctx context.Context) error
	// Partition cuts host off from peer (both directions, live connections included);
	// Heal restores it.
	Partition(ctx context.Context, host, peer string) error
	Heal(ctx context.Context, host, peer string) error
	// Capabilities says which levers work here, and why not when they do not.
	Capabilities() Capabilities
}

// PolicyRollout is implemented by engines that can restart a gateway on another rule policy
// (a rolling change of the quota policy); nil restores the run's own.
type PolicyRollout interface {
	RestartGatewayWithPolicy(ctx context.Context, gateway string, p *deployment.Profile) error
}

// GatewayEndpoint is where a gateway listens, as seen from the client and the observer.
type GatewayEndpoint struct {
	Name     string
	DataURL  string // http://host:port, reachable from Client()
	AdminURL string // http://host:port, reachable from Observer()
}

// ProviderEndpoint is where a provider stub listens.
type ProviderEndpoint struct {
	Name     string
	Site     string // west, central, east
	DataURL  string // reachable from the gateways only
	AdminURL string // reachable from Observer()
}

// Ports are the listening ports by role.
type Ports struct {
	GatewayData   int
	GatewayAdmin  int
	ProviderData  int
	ProviderAdmin int
	Valkey        int
}

// ProbeResult is the outcome of one reachability probe.
type ProbeResult struct {
	From, To  string
	Port      int
	Reached   bool
	Error     string // connect error when not reached, e.g. "connection refused", "i/o timeout"
	Elapsed   time.Duration
	Supported bool // false when this engine cannot probe from that host, or the probe did not run (Error says why)
}

// Capabilities of an engine. A lever that is missing comes with the reason.
type Capabilities struct {
	NetworkPolicy       bool
	NetworkPolicyReason string
	Partition           bool
	PartitionReason     string
}

// Teardown records what Down removed, for the evidence bundle.
type Teardown struct {
	Removed []string // e.g. "process gateway-a pid 1234", "netns qq-1a2b-client"
	Errors  []string
	Elapsed time.Duration
}
