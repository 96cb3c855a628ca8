package topology

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/undertest"
)

// Engines New accepts besides "auto".
const (
	EngineAuto    = "auto"
	EngineNetns   = "netns"
	EngineProcess = "process"
)

// Store shapes (Spec.Store, --store).
const (
	StoreSingle  = "single"  // one Valkey (with AOF) that every gateway shares
	StoreCluster = "cluster" // a Valkey Cluster: the subjects' keys spread over its shards
)

// ClusterPrimaries is how many primaries a --store cluster run starts (no replicas: failover
// is the Sentinel store group's scenario, valkey-failover; the cluster is here for scale, and
// a replica would only add a second copy the levers must stop too).
const ClusterPrimaries = 3

// EnvRunID is set in the environment of every process a run starts (the re-executed harness
// inside the namespace, gateways, providers, Valkey), so `quotaqual down --run-id` can find
// exactly that run's leftovers and nothing else.
const EnvRunID = "QUOTAQUAL_RUN_ID"

// Spec is what a topology needs to come up.
type Spec struct {
	RunID      string
	WorkDir    string // the run's private directory: configs, logs, valkey data
	Binary     string // the quotaqual binary to run for gateways and providers (os.Executable())
	Deployment *deployment.Deployment
	// Gateway is the gateway under test; nil means quotaqual's own (undertest.Default).
	Gateway  *undertest.Profile
	DenyMode string    // DenyReject (default) or DenyDrop
	Stdout   io.Writer // optional progress lines
	// Gateways is how many gateway replicas run (gateway-a, gateway-b, …): 0 means
	// DefaultGateways; MinGateways..MaxGateways accepted (--gateways).
	Gateways int
	// AdjustPolicy, when set, changes the network policy before the netns engine enforces
	// it. Production never sets it; tests use it to prove that the network-policy scenario
	// fails when the enforced policy is not the intended one (a missing or an extra rule).
	AdjustPolicy func(Policy) Policy

	// StoreReplication is how the gateways write to the replicated store group when a
	// failover scenario puts them on it: deployment.ReplicationAcknowledged (default) or
	// deployment.ReplicationAsync (to see the double spend it allows).
	StoreReplication string

	// WithoutStoreGroup leaves the replicated store group out where an engine would run it
	// beside the single Valkey (netns): none of the run's scenarios puts a gateway on it, so
	// its six processes (and their namespaces) would only cost start-up and teardown time.
	// The zero value runs it (`quotaqual up`, tests, engines that always do).
	WithoutStoreGroup bool

	// Store is the shape of the store the gateways share: StoreSingle (default, one Valkey) or
	// StoreCluster (a Valkey Cluster of ClusterPrimaries primaries, on engines that run one).
	Store string

	// Docker engine only: images to run instead of the ones it builds when missing (see
	// package topology/images), e.g. ValkeyImage "valkey/valkey:8" where a registry is available.
	ValkeyImage    string
	QuotaqualImage string
	// GatewayImage, docker and kind: the gateway under test's image, instead of its profile's
	// launch.image. It must be present locally (docker load): nothing is pulled.
	GatewayImage string

	// Kind engine only: cluster, node image, existing kubeconfig/context, keep (kind_options.go).
	Kind KindOptions
}

func (s *Spec) validate() error {
	if err := ValidateRunID(s.RunID); err != nil {
		return err
	}
	if s.WorkDir == "" {
		return errors.New("topology: Spec.WorkDir is required: give the run a private directory")
	}
	if s.Binary == "" {
		return errors.New("topology: Spec.Binary is required: pass the quotaqual binary (os.Executable())")
	}
	if s.Deployment == nil {
		return errors.New("topology: Spec.Deployment is required: build one with deployment.NewDeployment")
	}
	n, err := ValidateGateways(s.Gateways)
	if err != nil {
		return err
	}
	s.Gateways = n
	if s.StoreReplication, err = StoreReplication(s.StoreReplication); err != nil {
		return err
	}
	switch s.Store {
	case "":
		s.Store = StoreSingle
	case StoreSingle, StoreCluster:
	default:
		return fmt.Errorf("store %q is unknown: use %q (one Valkey) or %q (a Valkey Cluster of %d primaries)", s.Store, StoreSingle, StoreCluster, ClusterPrimaries)
	}
	if s.Store == StoreCluster {
		if gw := GatewayProfile(*s); !gw.Caps.StoreCluster {
			return fmt.Errorf("store %s: gateway profile %s does not declare capabilities.store_cluster (its config takes one store address, not a cluster's nodes): use store %s for it", s.Store, gw.Name, StoreSingle)
		}
		if s.Deployment.Backend == deployment.BackendMemory {
			return fmt.Errorf("store %s: the deployment's gateways run the memory backend, which uses no store: use store %s", s.Store, StoreSingle)
		}
	}
	if gw := GatewayProfile(*s); !gw.ExpressesWindow(s.Deployment.Profile.Window) {
		return WindowError(gw, s.Deployment.Profile)
	}
	mode, err := denyMode(s.DenyMode)
	if err != nil {
		return err
	}
	s.DenyMode = mode
	return nil
}

// GatewayHosts are the run's gateway hosts: gateway-a, gateway-b, … (Gateways of them; two when
// Gateways is 0).
func (s Spec) GatewayHosts() []string {
	if s.Gateways == 0 {
		return GatewayNames(DefaultGateways)
	}
	return GatewayNames(s.Gateways)
}

func (s *Spec) Progress(format string, args ...any) {
	if s.Stdout != nil {
		fmt.Fprintf(s.Stdout, format+"\n", args...)
	}
}

var runIDPattern = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,23}$`)

// ValidateRunID checks a run id: 1-24 characters of a-z, 0-9 and '-', not starting with '-'.
func ValidateRunID(id string) error {
	if !runIDPattern.MatchString(id) {
		return fmt.Errorf("run id %q is not usable: use 1-24 characters of a-z, 0-9 and '-', starting with a letter or digit", id)
	}
	return nil
}

// NewRunID returns a fresh run id: "q", the UTC time to the second, and four random
// characters, e.g. q20261129-153148-k3v9 (21 characters).
func NewRunID() string {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		// crypto/rand does not fail on Linux; fall back to the clock's nanoseconds.
		n := time.Now().UnixNano()
		for i := range b {
			b[i] = byte(n >> (8 * i))
		}
	}
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return "q" + time.Now().UTC().Format("20060102-150405") + "-" + string(b)
}

// PolicyProfile is the profile a gateway restarted on rule policy p runs (PolicyRollout): p, or
// the run's own when p is nil.
func (s Spec) PolicyProfile(p *deployment.Profile) deployment.Profile {
	if p != nil {
		return *p
	}
	return s.Deployment.Profile
}

// WindowError says a gateway profile's engine cannot express the run's window, and which of the
// qualification's profiles it can run.
func WindowError(gw *undertest.Profile, p deployment.Profile) error {
	var fit []string
	for _, n := range deployment.ProfileNames() {
		if q, err := deployment.ProfileByName(n); err == nil && gw.ExpressesWindow(q.Window) {
			fit = append(fit, fmt.Sprintf("--profile %s (a %s window)", n, q.Window))
		}
	}
	fix := "no qualification profile has such a window"
	if len(fit) > 0 {
		fix = "run it with " + strings.Join(fit, " or ")
	}
	return fmt.Errorf("gateway profile %s: its engine expresses only windows of %s (expect.admission.windows), and profile %s's rule has a %s window: %s",
		gw.Name, strings.Join(gw.Expect.Admission.Windows, ", "), p.Name, p.Window, fix)
}

// StoreReplication checks a store replication mode, "" meaning acknowledged, and returns it.
func StoreReplication(mode string) (string, error) {
	switch mode {
	case "":
		return deployment.ReplicationAcknowledged, nil
	case deployment.ReplicationAcknowledged, deployment.ReplicationAsync:
		return mode, nil
	}
	return "", fmt.Errorf("store replication %q is unknown: use %q or %q", mode, deployment.ReplicationAcknowledged, deployment.ReplicationAsync)
}

// ownTopologySep joins a run id and the suffix of one of its own topologies (a lever
// scenario's, qualify's own topologies): a double dash, which NewRunID never makes, so
// `quotaqual down --run-id` can tell a run's own topologies from another run's id.
const ownTopologySep = "--"

// OwnTopologyRunID is the run id of runID's i-th own topology (i from 0 to 35): runID, "--",
// and one character. ok is false when the result would not be a run id (runID longer than
// 21 characters, as a generated one is).
func OwnTopologyRunID(runID string, i int) (id string, ok bool) {
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789"
	if i < 0 || i >= len(alphabet) {
		return "", false
	}
	id = runID + ownTopologySep + alphabet[i:i+1]
	return id, ValidateRunID(id) == nil
}

// OfRun reports whether id is runID or the id of one of runID's own topologies.
func OfRun(id, runID string) bool {
	if id == runID {
		return true
	}
	rest, ok := strings.CutPrefix(id, runID+ownTopologySep)
	return ok && len(rest) == 1
}
