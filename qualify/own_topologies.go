package qualify

import (
	"context"
	"fmt"
	"slices"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/scenarios"
	"github.com/quotaqual/quotaqual/topology"
)

// A scenario that pulls a lever or drives a load (scenarios.Scenario.Exclusive) needs a
// topology to itself. Where the engine makes a topology cheap — netns, where one comes up and
// down in about a second — each such scenario gets a topology of its own: the run's spec under
// its own run id (topology.OwnTopologyRunID, which `quotaqual down --run-id` finds under the
// run's), host names and work directory, brought up when the scenario starts and collected
// (metrics, configs, logs under topologies/<scenario>/) and torn down when it ends. So the lever
// scenarios, which mostly wait (windows, holds, recoveries), run side by side with each other
// and with the shared block instead of one after another.

// ownTopologiesAtOnce bounds the scenarios' own topologies up (and their scenarios running) at
// once, beside the run's topology and its shared block. Measured on 2 cores
// (docs/performance.md): the run is bound by its scenarios' waits, not CPU, and each topology
// costs a few processes' start-up.
const ownTopologiesAtOnce = 6

// ownTopologiesWhyNot says why a run gives its lever scenarios no topology of their own (they
// then run one after another on the run's topology, as scenarios.RunScheduled schedules them);
// "" when it does.
func ownTopologiesWhyNot(p *Plan) string {
	switch p.Engine {
	case topology.EngineNetns:
	case topology.EngineDocker, topology.EngineKind:
		// Not cheap there: a topology is containers (on kind, a namespace's pods and their
		// rollouts) whose start-up costs more than most lever scenarios take, and a dozen of
		// them at once would not fit the machine the way a dozen sets of processes do.
		return "on " + p.Engine + " a topology is containers whose bring-up costs more than most lever scenarios take; the run keeps one"
	case topology.EngineProcess:
		// Cheap, but every topology's components share the host's loopback and port space, and
		// this engine serves hosts without user namespaces: not measured side by side, so not
		// done.
		return "on process every topology's components share the host's loopback and ports; the run keeps one"
	default:
		return "engine " + p.Engine + " gives scenarios no topology of their own"
	}
	switch {
	case p.Keep:
		return "--keep leaves one topology up to inspect, and the lever scenarios run on it"
	case p.Store == topology.StoreCluster:
		// The placement check (cluster_evidence.go) reads the run's cluster: keys on other
		// clusters would go unseen.
		return "--store cluster: the key placement check reads one cluster, the run's"
	}
	if _, ok := topology.OwnTopologyRunID(p.RunID, 0); !ok {
		return fmt.Sprintf("run id %s is too long to name a topology of its own (at most 21 characters)", p.RunID)
	}
	return ""
}

// onRunTopology is the scenarios of list that run on the run's own topology when the lever
// scenarios get topologies of their own: the shared ones, and those that need the whole machine.
func onRunTopology(list []scenarios.Scenario) []scenarios.Scenario {
	var out []scenarios.Scenario
	for _, sc := range list {
		if sc.Exclusive == "" || sc.WholeMachine {
			out = append(out, sc)
		}
	}
	return out
}

// hasLevers reports whether any scenario of list pulls a lever or drives a load.
func hasLevers(list []scenarios.Scenario) bool {
	return slices.ContainsFunc(list, func(sc scenarios.Scenario) bool { return sc.Exclusive != "" })
}

// openOwnTopology brings up a topology of its own for sc (scenarios.Env.OwnTopology). A
// topology that does not come up is torn down, its logs kept, and the error returned (sc is
// then skipped with it); done collects the topology's metrics, configs and logs into the bundle
// and tears it down.
func (r *run) openOwnTopology(ctx context.Context, sc scenarios.Scenario) (scenarios.OwnTopology, func(), error) {
	r.ownMu.Lock()
	i := r.ownNext
	r.ownNext++
	r.ownMu.Unlock()
	id, ok := topology.OwnTopologyRunID(r.RunID, i)
	rec := evidence.OwnTopology{RunID: id, Dir: "topologies/" + sc.Name + "/"}
	failed := func(err error) (scenarios.OwnTopology, func(), error) {
		rec.Error = err.Error()
		r.recordOwn(sc.Name, rec)
		return scenarios.OwnTopology{}, nil, err
	}
	if !ok {
		return failed(fmt.Errorf("no run id left for a topology of its own (the run's %d)", i+1))
	}
	wd, err := topology.NewWorkDir("quotaqual-", id)
	if err != nil {
		return failed(err)
	}
	spec := r.Spec(wd.Path, r.Binary, r.deployment)
	spec.RunID = id
	spec.WithoutStoreGroup = !scenarios.UseStoreGroup([]scenarios.Scenario{sc})
	topo, err := topology.New(r.Engine, spec)
	if err != nil {
		wd.Remove()
		return failed(err)
	}
	// Torn down and collected whether it came up or not: what it started, and why it failed.
	down := func() {
		td, err := topo.Down(context.Background())
		rec.Teardown = td
		if err != nil {
			rec.Error = "teardown: " + err.Error()
			r.rep.Note("%s: its own topology %s: %s", sc.Name, id, rec.Error)
		}
		collectLogs(topo, r.writer, wd.Path, rec.Dir)
		wd.Remove()
	}
	if err := topo.Up(ctx); err != nil {
		rec.Facts = topo.Facts()
		down()
		return failed(err)
	}
	rec.Facts = topo.Facts()
	rec.Facts["gateway_replicas"] = topo.Gateways()
	r.rep.Note("%s: runs on its own topology, run id %s", sc.Name, id)
	done := func() {
		collectMetrics(topo, r.writer, rec.Dir)
		rec.ConfigDigests = map[string]string{}
		collectConfigs(wd.Path, r.writer, rec.ConfigDigests, rec.Dir)
		down()
		r.recordOwn(sc.Name, rec)
	}
	return scenarios.OwnTopology{Topo: topo, WorkDir: wd.Path}, done, nil
}

// recordOwn puts scenario's own topology in the manifest.
func (r *run) recordOwn(scenario string, rec evidence.OwnTopology) {
	r.ownMu.Lock()
	defer r.ownMu.Unlock()
	if r.manifest.OwnTopologies == nil {
		r.manifest.OwnTopologies = map[string]evidence.OwnTopology{}
	}
	r.manifest.OwnTopologies[scenario] = rec
}

// recordRanOn names in the manifest the topology each scenario that started ran on: its own
// (when it came up) or the run's. A scenario skipped before it started ran on none.
func (r *run) recordRanOn(results []evidence.ScenarioResult) {
	r.ownMu.Lock()
	defer r.ownMu.Unlock()
	r.manifest.RanOn = map[string]string{}
	for _, res := range results {
		own, hasOwn := r.manifest.OwnTopologies[res.Name]
		switch {
		case hasOwn && res.Elapsed > 0:
			r.manifest.RanOn[res.Name] = own.RunID
		case hasOwn:
			// Its own topology did not come up: it did not start.
		case res.Elapsed > 0:
			r.manifest.RanOn[res.Name] = r.RunID
		}
	}
}
