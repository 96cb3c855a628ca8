package topology

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"regexp"
	"time"

	"github.com/quotaqual/quotaqual/fixtures"
	"github.com/quotaqual/quotaqual/undertest"
)

// Engines New accepts besides "auto".
const (
	EngineAuto    = "auto"
	EngineNetns   = "netns"
	EngineProcess = "process"
)

// EnvRunID is set in the environment of every process a run starts (the re-executed harness
// inside the namespace, gateways, providers, Valkey), so `quotaqual down --run-id` can find
// exactly that run's leftovers and nothing else.
const EnvRunID = "QUOTAQUAL_RUN_ID"

// Spec is what a topology needs to come up.
type Spec struct {
	RunID      string
	WorkDir    string // the run's private directory: configs, logs, valkey data
	Binary     string // the quotaqual binary to run for gateways and providers (os.Executable())
	Deployment *fixtures.Deployment
	// Gateway is the gateway under test; nil means quotaqual's own (undertest.Default).
	Gateway  *undertest.Profile
	DenyMode string    // DenyReject (default) or DenyDrop
	Stdout   io.Writer // optional progress lines
	// AdjustPolicy, when set, changes the network policy before the netns engine enforces
	// it. Production never sets it; tests use it to prove that the network-policy scenario
	// fails when the enforced policy is not the intended one (a missing or an extra rule).
	AdjustPolicy func(Policy) Policy

	// StoreReplication is how the gateways write to the replicated store group when a
	// failover scenario puts them on it: fixtures.ReplicationAcknowledged (default) or
	// fixtures.ReplicationAsync (to see the double spend it allows).
	StoreReplication string

	// Docker engine only: images to run instead of the ones it builds when missing (see
	// docker_image.go), e.g. ValkeyImage "valkey/valkey:8" where a registry is available.
	ValkeyImage    string
	QuotaqualImage string

	// Kind engine only: cluster, node image, existing kubeconfig/context, keep (kind.go).
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
		return errors.New("topology: Spec.Deployment is required: build one with fixtures.NewDeployment")
	}
	switch s.StoreReplication {
	case "":
		s.StoreReplication = fixtures.ReplicationAcknowledged
	case fixtures.ReplicationAcknowledged, fixtures.ReplicationAsync:
	default:
		return fmt.Errorf("store replication %q is unknown: use %q or %q", s.StoreReplication, fixtures.ReplicationAcknowledged, fixtures.ReplicationAsync)
	}
	switch s.DenyMode {
	case "":
		s.DenyMode = DenyReject
	case DenyReject, DenyDrop:
	default:
		return fmt.Errorf("deny mode %q is unknown: use %q or %q", s.DenyMode, DenyReject, DenyDrop)
	}
	return nil
}

func (s *Spec) progress(format string, args ...any) {
	if s.Stdout != nil {
		fmt.Fprintf(s.Stdout, format+"\n", args...)
	}
}

// New returns a topology of the named engine: "auto" (netns when Detect says it can, process
// otherwise), "netns" or "process". The netns engine must run inside the run's own namespaces:
// call ReexecIntoNamespace at the start of the command first (see reexec_linux.go).
func New(engine string, spec Spec) (Topology, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if engine == "" || engine == EngineAuto {
		engine, _ = Detect()
		if engine == EngineProcess && DockerAvailable() {
			engine = EngineDocker
		}
	}
	if g := spec.Gateway; g != nil && g.Name != undertest.DefaultName && (engine == EngineDocker || engine == EngineKind) {
		// These engines still render quotaqual's gateway config themselves (issue 12).
		return nil, fmt.Errorf("gateway profile %s: the %s engine launches only quotaqual's own gateway so far: use --topology netns or process", g.Name, engine)
	}
	switch engine {
	case EngineDocker:
		return newDocker(spec)
	case EngineProcess:
		return newProcess(spec), nil
	case EngineNetns:
		return newNetns(spec)
	case EngineKind:
		return newKind(spec)
	default:
		return nil, fmt.Errorf("topology %q is unknown: use auto, netns, docker, process or kind", engine)
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
