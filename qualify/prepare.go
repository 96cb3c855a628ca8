package qualify

import (
	"os"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/scenarios"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
)

// Plan is a run's options checked once and resolved: the one prepare step `quotaqual run` and
// `quotaqual up` share. Prepare builds it before anything starts; Enter moves the process to
// where the engine builds its topology; Spec is what the topology is built from.
type Plan struct {
	Options // validated, defaults filled in, Topology resolved to Engine

	// Engine is the engine the run uses: the one --topology names, auto's choice (EngineWhy
	// says why), or the one whose Enter started this process.
	Engine string
	// Entered reports that this process is the one an engine's Enter started (netns: inside
	// the run's namespaces); the outer process already reported what it resolved.
	Entered bool

	params   deployment.Profile   // the profile Options.Profile names
	selected []scenarios.Scenario // the scenarios the run runs, in the catalogue's order
}

// envEngineWhy carries auto's reason into the process an engine's Enter starts.
const envEngineWhy = "QUOTAQUAL_ENGINE_WHY"

// Prepare validates o (Validate: every error names the flag and the fix, as a UsageError),
// resolves "auto" to an engine, and takes the engine and run id of the outer process when
// this process is the one an engine's Enter started.
func Prepare(o Options) (*Plan, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	p := &Plan{Options: o}
	if engine, runID, ok := topology.EnteredEngine(); ok {
		p.Engine, p.RunID, p.Entered = engine, runID, true
		p.EngineWhy = os.Getenv(envEngineWhy)
	} else if o.Topology == "" || o.Topology == topology.EngineAuto {
		p.Engine, p.EngineWhy = topology.DetectAuto()
	} else {
		p.Engine = o.Topology
	}
	if p.RunID == "" {
		p.RunID = topology.NewRunID()
	}
	p.params = p.Options.params                                  // Validate resolved it
	p.selected, _ = scenarios.ForProfile(p.Profile, p.Scenarios) // and checked this
	return p, nil
}

// Params is the profile's parameters: window, budgets, timeouts.
func (p *Plan) Params() deployment.Profile { return p.params }

// Gateway is the gateway profile under test (--gateway), loaded and checked by Prepare; nil:
// quotaqual's own gateway.
func (p *Plan) Gateway() *undertest.Profile { return p.gateway }

// Selected is the scenarios the run runs, in the catalogue's order.
func (p *Plan) Selected() []scenarios.Scenario { return p.selected }

// NeedsEntering reports whether the process must Enter the engine before it builds the
// topology.
func (p *Plan) NeedsEntering() bool { return !p.Entered && topology.NeedsEntering(p.Engine) }

// Enter moves the run to where its engine builds the topology (topology.Enter: netns
// re-executes the command inside the run's own user, network, mount and pid namespaces, so the
// run builds its private network without privileges and everything it creates dies with it),
// passing files as fds 3, 4, … In the outer process it returns parentDone with the exit code of
// the command's run in there; where the engine builds (or needs no entering) it returns
// parentDone false.
func (p *Plan) Enter(files []*os.File) (parentDone bool, code int, err error) {
	if p.Entered || topology.NeedsEntering(p.Engine) {
		if !p.Entered && p.EngineWhy != "" {
			os.Setenv(envEngineWhy, p.EngineWhy) // the child reports why auto chose its engine
		}
		entered, code, err := topology.Enter(p.Engine, p.RunID, files)
		if err != nil || entered {
			return false, 0, err
		}
		return true, code, nil
	}
	return false, 0, nil
}

// Spec is the topology's specification for a run in workDir, running binary as gateway and
// provider, deploying d.
func (p *Plan) Spec(workDir, binary string, d *deployment.Deployment) topology.Spec {
	return topology.Spec{
		RunID:            p.RunID,
		WorkDir:          workDir,
		Binary:           binary,
		Deployment:       d,
		Gateway:          p.gateway,
		DenyMode:         p.DenyMode,
		Gateways:         p.Gateways,
		StoreReplication: p.StoreReplication,
		Store:            p.Store,
		// The store group starts only for a scenario that puts gateways on it.
		WithoutStoreGroup: !scenarios.UseStoreGroup(p.selected),
		ValkeyImage:       p.ValkeyImage,
		QuotaqualImage:    p.Image,
		GatewayImage:      p.GatewayImage,
		Kind:              p.Kind,
	}
}
