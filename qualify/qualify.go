// Package qualify runs one qualification end to end: it generates the run's identity and
// credentials, brings the topology up, runs the selected scenarios, collects metrics, configs
// and logs, tears down what the run created, and writes the evidence bundle. It is the wiring
// behind `quotaqual run`; the logic of each step lives in topology, scenarios and evidence.
package qualify

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/httpget"
	"github.com/quotaqual/quotaqual/internal/valkeyproc"
	"github.com/quotaqual/quotaqual/internal/version"
	"github.com/quotaqual/quotaqual/scenarios"
	"github.com/quotaqual/quotaqual/topology"
	_ "github.com/quotaqual/quotaqual/topology/engines" // builds in every engine New and IsEngine know
	"github.com/quotaqual/quotaqual/undertest"
	"github.com/quotaqual/quotaqual/wire"
)

// Options are what `quotaqual run` takes.
type Options struct {
	Topology    string   // auto (the default) or a registered engine (topology.EngineNames)
	Profile     string   // quick, reference
	Scenarios   []string // empty: all, in order
	EvidenceDir string   // default ./quotaqual-evidence
	Bundle      string   // "" or "tar.gz"
	Keep        bool     // leave the topology up (until the process exits)
	RunID       string   // empty: generated
	DenyMode    string   // reject (default) or drop
	Gateways    int      // gateway replicas, 2 to 16 (--gateways); 0: topology.DefaultGateways
	// StoreReplication: how the gateways write to the replicated store group in the failover
	// scenarios: acknowledged (default) or async (shows the double spend it allows).
	StoreReplication string
	// Store is the store's shape: single (default, one Valkey) or cluster (a Valkey Cluster).
	Store        string
	Binary       string               // the quotaqual binary to run as gateway and provider; default os.Executable
	EngineWhy    string               // why auto chose the engine, for the manifest and progress
	ValkeyImage  string               // docker: the Valkey image (default: built locally from the host's valkey-server)
	Image        string               // docker, kind: the quotaqual image (default: built from the running binary)
	GatewayImage string               // docker, kind: the gateway under test's image (default: its profile's launch.image, else Image)
	Kind         topology.KindOptions // kind: node image, or an existing cluster by kubeconfig/context
	Reporter     Reporter             // progress; nil: silent
	// Gateway is the gateway profile to qualify (--gateway): a profile file, or the name of a
	// shipped one (undertest.ShippedNames); empty: quotaqual's own gateway.
	Gateway string
	// Require lists the scenarios whose skip fails the run with wire.ExitPartial (--require,
	// repeatable, each a comma list): "all" (the default: every selected scenario), "none"
	// (a partial qualification is accepted), or scenario names.
	Require []string
	// Rule, when set, gives the rule the run's subjects share from the gateway under test (nil:
	// quotaqual's own), instead of Profile's: a command with a rule of its own (chaos, whose
	// window must outlast the run) still loads and checks the gateway here, against that rule.
	Rule func(gw *undertest.Profile) (deployment.Profile, error)

	gateway *undertest.Profile // Gateway, loaded by Validate
	params  deployment.Profile // the rule: Rule's, else Profile's, set by Validate
	require requirement        // Require, parsed by Validate
}

// Reporter receives progress. The ui package implements it for terminals and plain logs.
type Reporter interface {
	Step(name string)
	Done(verdict, detail string)
	Note(format string, args ...any)
	// Finished reports one of several things running at once (a scenario) as finished, with
	// its own elapsed time, without ending the current step.
	Finished(name, verdict string, elapsed time.Duration, detail string)
}

// Outcome is what a run produced.
type Outcome struct {
	RunID     string
	Engine    string
	BundleDir string
	BundleTar string
	Results   []evidence.ScenarioResult
	// Qualification is what the run qualified: its level, and each skipped scenario with
	// what it lacked and whether the run required it.
	Qualification evidence.Qualification
	Code          int   // process exit code: 0 passed, 1 failed, 2 usage, 3 topology, 4 a required scenario skipped
	Err           error // why the run did not pass, when it did not
}

// UsageError marks bad options (exit code 2).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Validate checks options before anything is started, naming the flag and the fix.
func (o *Options) Validate() error {
	if o.Topology != "" && o.Topology != topology.EngineAuto && !topology.IsEngine(o.Topology) {
		return &UsageError{fmt.Errorf("--topology %q is not a topology; use %s", o.Topology, topology.EngineChoices())}
	}
	if (o.Kind.Kubeconfig != "" || o.Kind.Context != "" || o.Kind.NodeImage != "") && o.Topology != topology.EngineKind {
		return &UsageError{fmt.Errorf("--kubeconfig, --context and --kind-node-image apply to --topology %s only", topology.EngineKind)}
	}
	if o.Profile == "" {
		o.Profile = "quick"
	}
	var err error
	if o.params, err = deployment.ProfileByName(o.Profile); err != nil {
		return &UsageError{fmt.Errorf("--profile: %w", err)}
	}
	selected, err := scenarios.ForProfile(o.Profile, o.Scenarios)
	if err != nil {
		return &UsageError{fmt.Errorf("--scenario: %w", err)}
	}
	if o.require, err = parseRequire(o.Require, selected); err != nil {
		return &UsageError{err}
	}
	switch o.Bundle {
	case "", "dir", "tar.gz":
	default:
		return &UsageError{fmt.Errorf("--bundle %q is not a bundle format; use tar.gz (the directory is always written)", o.Bundle)}
	}
	switch o.StoreReplication {
	case "", deployment.ReplicationAcknowledged, deployment.ReplicationAsync:
	default:
		return &UsageError{fmt.Errorf("--store-replication %q is not a mode; use acknowledged (writes confirmed by a replica) or async (Valkey's default, which a failover can make spend a budget twice)", o.StoreReplication)}
	}
	if _, err := topology.ValidateGateways(o.Gateways); err != nil {
		return &UsageError{err}
	}
	switch o.Store {
	case "":
		o.Store = topology.StoreSingle
	case topology.StoreSingle, topology.StoreCluster:
	default:
		return &UsageError{fmt.Errorf("--store %q is not a store shape; use %s (one Valkey) or %s (a Valkey Cluster of %d primaries)", o.Store, topology.StoreSingle, topology.StoreCluster, topology.ClusterPrimaries)}
	}
	if o.Topology != "" && o.Topology != topology.EngineAuto {
		if err := topology.CheckStore(o.Topology, o.Store); err != nil {
			return &UsageError{err}
		}
	}
	if o.DenyMode != "" && !topology.ValidDenyMode(o.DenyMode) {
		return &UsageError{fmt.Errorf("--deny-mode %q is not a mode; use reject (fast) or drop (as most CNIs do)", o.DenyMode)}
	}
	if o.RunID != "" {
		if err := topology.ValidateRunID(o.RunID); err != nil {
			return &UsageError{fmt.Errorf("--run-id: %w", err)}
		}
	}
	if o.EvidenceDir == "" {
		o.EvidenceDir = "quotaqual-evidence"
	}
	if o.Gateway != "" {
		gw, err := LoadGateway(o.Gateway)
		if err != nil {
			return &UsageError{fmt.Errorf("--gateway: %w", err)}
		}
		o.gateway = gw
	}
	if o.Rule != nil {
		if o.params, err = o.Rule(o.gateway); err != nil {
			return &UsageError{fmt.Errorf("--gateway %s: %w", o.gatewayName(), err)}
		}
	}
	if gw := o.gateway; gw != nil {
		if !gw.ExpressesWindow(o.params.Window) {
			return &UsageError{fmt.Errorf("--gateway %s: %w", gw.Name, topology.WindowError(gw, o.params))}
		}
		if len(gw.Services) > 0 {
			engine := o.Topology
			if engine == "" || engine == topology.EngineAuto {
				engine, _ = topology.DetectAuto()
			}
			if err := topology.CheckServicesOf(engine, gw); err != nil {
				return &UsageError{fmt.Errorf("--gateway %s: %w", gw.Name, err)}
			}
		}
		if o.Store == topology.StoreCluster && !gw.Caps.StoreCluster {
			return &UsageError{fmt.Errorf("--gateway %s with --store cluster: the profile does not declare capabilities.store_cluster (its config takes one store address, not a cluster's nodes): use --store single", gw.Name)}
		}
	}
	if o.GatewayImage != "" && (o.Topology == topology.EngineNetns || o.Topology == topology.EngineProcess) {
		return &UsageError{fmt.Errorf("--gateway-image %s: the %s topology runs the gateway's argv on this host, not an image: use --topology docker or kind", o.GatewayImage, o.Topology)}
	}
	return nil
}

// gatewayName names the gateway under test for errors.
func (o *Options) gatewayName() string {
	if o.gateway == nil {
		return "quotaqual (the default)"
	}
	return o.gateway.Name
}

// LoadGateway reads a gateway profile file or, when no such file exists and the name is one,
// a shipped profile (--gateway of run and render).
func LoadGateway(s string) (*undertest.Profile, error) {
	if _, err := os.Stat(s); err != nil && slices.Contains(undertest.ShippedNames(), s) {
		return undertest.Shipped(s)
	}
	return undertest.Load(s)
}

// Run performs one qualification of a prepared plan (Prepare). It always tries to write the
// evidence bundle, even when the topology cannot come up or ctx is cancelled (Ctrl-C), and
// always tears down what it started unless Keep is set.
func Run(ctx context.Context, p *Plan) Outcome {
	r := newRun(p)
	defer r.removeWorkDir()
	if err := r.open(); err != nil {
		return r.fail(err)
	}
	if err := r.up(ctx); err != nil {
		return r.topologyFailed(err)
	}
	results := r.runScenarios(ctx)
	placementFailed := recordPlacement(ctx, r.rep, r.watch, r.deployment, r.writer, &r.manifest)
	r.collectAndTearDown()
	r.conclude(ctx, results, placementFailed)
	if r.Keep && ctx.Err() == nil {
		<-ctx.Done()
		_, _ = r.topo.Down(context.Background()) // the bundle is already written
	}
	return r.out
}

// run is one qualification's state as Run's steps build it up.
type run struct {
	*Plan
	rep     Reporter
	out     Outcome
	started time.Time

	workDir    *topology.WorkDir
	deployment *deployment.Deployment
	writer     *evidence.Writer
	manifest   evidence.Manifest
	topo       topology.Topology
	watch      *clusterWatch

	// ownWhyNot says why the lever scenarios run on this run's topology one after another
	// rather than each on its own (own_topologies.go); "" when they get their own.
	ownWhyNot string
	ownMu     sync.Mutex // guards ownNext and the manifest's RanOn and OwnTopologies
	ownNext   int        // the index of the next own topology's run id
}

// stepError is an error of a step before the scenarios, with the exit code it ends the run with.
type stepError struct {
	code int
	err  error
}

func (e *stepError) Error() string { return e.err.Error() }

func newRun(p *Plan) *run {
	rep := p.Reporter
	if rep == nil {
		rep = silent{}
	}
	return &run{Plan: p, rep: rep, out: Outcome{RunID: p.RunID}, started: time.Now()}
}

// fail ends the run before its scenarios with err's exit code.
func (r *run) fail(err error) Outcome {
	r.out.Code, r.out.Err = wire.ExitTopology, err
	if se, ok := err.(*stepError); ok {
		r.out.Code, r.out.Err = se.code, se.err
	}
	return r.out
}

// removeWorkDir removes the work directory open made, if it made one.
func (r *run) removeWorkDir() {
	if r.workDir != nil {
		r.workDir.Remove()
	}
}

// open prepares what the run writes to: the binary it runs, a fresh work directory (after
// removing dead runs' leftovers), the run's credentials and the evidence writer.
func (r *run) open() error {
	if r.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find the quotaqual binary to run as gateway and provider: %w", err)
		}
		r.Binary = exe
	}
	// A dead run (kill -9, a hang-up) left its work directory: remove it, and say so.
	removed, errs := topology.RemoveDeadWorkDirs("")
	for _, d := range removed {
		r.rep.Note("removed a dead run's leftover: %s", d)
	}
	for _, e := range errs {
		r.rep.Note("%s", e)
	}
	wd, err := topology.NewWorkDir("quotaqual-", r.RunID)
	if err != nil {
		return err
	}
	r.workDir = wd
	if r.deployment, err = scenarios.NewDeployment(r.RunID, r.params, r.selected); err != nil {
		return fmt.Errorf("generate the run's credentials: %w", err)
	}
	if r.writer, err = evidence.NewWriter(r.EvidenceDir, r.RunID, r.deployment.Secrets()); err != nil {
		return &stepError{wire.ExitUsage, fmt.Errorf("--evidence-dir: %w", err)}
	}
	r.out.BundleDir = r.writer.Dir()
	r.manifest = evidence.Manifest{
		SchemaVersion:    wire.BundleSchemaVersion,
		RunID:            r.RunID,
		QuotaqualVersion: version.String(),
		ValkeyVersion:    valkeyproc.Version(""),
		Profile:          r.params.Name,
		Started:          r.started,
		ConfigDigests:    map[string]string{},
		Verdicts:         map[string]evidence.Status{},
	}
	return nil
}

// up builds the topology and brings it up, and records its facts in the manifest.
func (r *run) up(ctx context.Context) error {
	if gw := r.gateway; gw != nil {
		r.rep.Note("gateway under test: profile %s (%s): %s", gw.Name, gw.Status, gw.Description)
	}
	r.rep.Step("topology up (" + r.Engine + ")")
	spec := r.Spec(r.workDir.Path, r.Binary, r.deployment)
	if r.ownWhyNot = ownTopologiesWhyNot(r.Plan); r.ownWhyNot == "" {
		// The lever scenarios bring their own (own_topologies.go): this one needs the store
		// group only for a scenario that runs on it.
		spec.WithoutStoreGroup = !scenarios.UseStoreGroup(onRunTopology(r.selected))
	}
	topo, err := topology.New(r.Engine, spec)
	if err != nil {
		return err
	}
	r.topo = topo
	r.out.Engine = topo.Engine()
	r.manifest.Topology = topo.Engine()
	if r.EngineWhy != "" {
		r.rep.Note("auto: %s", r.EngineWhy)
	}
	if err := topo.Up(ctx); err != nil {
		return err
	}
	r.rep.Done("ok", fmt.Sprintf("engine %s, run %s, %d gateways", topo.Engine(), r.RunID, len(topo.Gateways())))
	facts := topo.Facts()
	// The replicas every scenario spreads over: each engine's facts describe each of them.
	facts["gateway_replicas"] = topo.Gateways()
	if gw := r.gateway; gw != nil {
		facts["gateway_profile"] = map[string]string{"name": gw.Name, "status": string(gw.Status), "description": gw.Description}
	}
	if r.EngineWhy != "" {
		facts["engine_choice"] = r.EngineWhy
	}
	if r.ownWhyNot == "" && scenarios.UseStoreGroup(r.selected) && !scenarios.UseStoreGroup(onRunTopology(r.selected)) {
		// The store group's own reason says no scenario of the run uses it: not so, they ran elsewhere.
		facts["store_group_elsewhere"] = "the scenarios that use the replicated store group ran on topologies of their own, each with its group (own_topologies)"
	}
	r.manifest.TopologyFacts = facts
	return nil
}

// topologyFailed ends a run whose topology did not come up: what it started is torn down and
// its logs kept, every scenario is skipped with the reason, and the bundle is written.
func (r *run) topologyFailed(err error) Outcome {
	r.rep.Done("failed", err.Error())
	r.manifest.Topology = r.Engine
	r.manifest.Outcome = "topology-error"
	if r.topo != nil {
		r.manifest.TopologyFacts = r.topo.Facts()
		td, _ := r.topo.Down(context.Background())
		r.manifest.Teardown = td
		collectLogs(r.topo, r.writer, r.workDir.Path, "")
	}
	results := skippedAll(r.selected, "topology could not be brought up: "+err.Error())
	r.out.Results = results
	r.out.Qualification = r.require.assess(results)
	r.manifest.Qualification = &r.out.Qualification
	finish(r.writer, &r.manifest, results, r.Bundle, &r.out)
	return r.fail(fmt.Errorf("bring the %s topology up: %w", r.Engine, err))
}

// runScenarios runs the selected scenarios: those that pull no lever side by side, the others
// alone; each is reported as it finishes, and the results come back in the scenarios' order.
// scenarios.Run turns a cancelled ctx into "interrupted" skips for whatever has not started.
func (r *run) runScenarios(ctx context.Context) []evidence.ScenarioResult {
	env := &scenarios.Env{
		Topo:       r.topo,
		Deployment: r.deployment,
		Profile:    r.params,
		Gateway:    r.gateway,
		WorkDir:    r.workDir.Path,
		Record:     r.writer.Request,
		Progress:   func(s string) { r.rep.Note("%s", s) },
		Finished: func(res evidence.ScenarioResult) {
			r.rep.Finished(res.Name, string(res.Status), res.Elapsed, keyDetail(res))
		},
	}
	if r.Store == topology.StoreCluster {
		r.watch = watchCluster(ctx, r.topo, r.deployment) // where the keys lie (cluster_evidence.go)
	}
	if r.ownWhyNot == "" {
		env.OwnTopology, env.OwnTopologies = r.openOwnTopology, ownTopologiesAtOnce
	} else if hasLevers(r.selected) {
		r.rep.Note("the lever scenarios run one after another on the run's topology: %s", r.ownWhyNot)
	}
	r.rep.Step(fmt.Sprintf("%d scenarios", len(r.selected)))
	results, ran := scenarios.RunScheduled(ctx, env, r.selected)
	r.recordRanOn(results)
	r.out.Results = results
	r.out.Qualification = r.require.assess(results)
	r.manifest.Qualification = &r.out.Qualification
	r.rep.Done(string(r.out.Qualification.Level), ran.String()+": "+r.out.Qualification.Counts())
	return results
}

// collectAndTearDown collects what the bundle needs while the components are still up, then
// tears the topology down, unless it is kept.
func (r *run) collectAndTearDown() {
	r.rep.Step("collect metrics, configs and logs")
	collectMetrics(r.topo, r.writer, "")
	collectConfigs(r.workDir.Path, r.writer, r.manifest.ConfigDigests, "")
	if r.Keep {
		collectLogs(r.topo, r.writer, r.workDir.Path, "")
		r.rep.Done("ok", "topology kept up: stop this process (Ctrl-C) to tear it down")
		describeKept(r.rep, r.topo)
		return
	}
	td, err := r.topo.Down(context.Background())
	r.manifest.Teardown = td
	collectLogs(r.topo, r.writer, r.workDir.Path, "")
	if err != nil {
		r.rep.Done("failed", "teardown: "+err.Error())
	} else {
		r.rep.Done("ok", fmt.Sprintf("torn down (%d removed)", len(td.Removed)))
	}
}

// conclude decides the run's outcome and exit code from the results, the placement check and
// ctx, and writes the bundle's closing files.
func (r *run) conclude(ctx context.Context, results []evidence.ScenarioResult, placementFailed error) {
	out, manifest := &r.out, &r.manifest
	manifest.Outcome = "passed"
	code := wire.ExitOK
	if rs := out.Qualification.RequiredSkipped(); len(rs) > 0 {
		// A skip the run required is not a pass; a failure below still decides exit 1.
		manifest.Outcome, code = "required-skipped", wire.ExitPartial
		out.Err = partialError(out.Qualification)
	}
	for _, res := range results {
		if res.Status == evidence.Failed {
			manifest.Outcome, code, out.Err = "failed", wire.ExitFailed, nil
		}
	}
	if placementFailed != nil {
		manifest.Outcome, code = "failed", wire.ExitFailed
		out.Err = placementFailed
	}
	if ctx.Err() != nil {
		manifest.Outcome, code = "interrupted", wire.ExitFailed
		out.Err = errors.New("interrupted: the partial bundle was written")
	}
	if err := finish(r.writer, manifest, results, r.Bundle, out); err != nil {
		manifest.Outcome, code = "failed", wire.ExitFailed
		out.Err = err
	}
	if code == wire.ExitFailed && out.Err == nil {
		out.Err = fmt.Errorf("one or more scenarios failed; see %s", filepath.Join(out.BundleDir, "summary.md"))
	}
	out.Code = code
}

// describeKept tells where a kept topology's gateways answer. On netns they live inside the
// run's namespaces, which nothing outside this process can reach: `quotaqual up` forwards
// ports for that.
func describeKept(rep Reporter, topo topology.Topology) {
	if topo.Engine() == topology.EngineNetns {
		rep.Note("the gateways live inside this run's namespaces; for a walkthrough from your shell use `quotaqual up`")
		return
	}
	for _, g := range topo.Gateways() {
		ep := topo.Gateway(g)
		rep.Note("%s: data %s, admin %s", g, ep.DataURL, ep.AdminURL)
	}
}

// finish writes the bundle's closing files and packs it when asked.
func finish(w *evidence.Writer, m *evidence.Manifest, results []evidence.ScenarioResult, bundle string, out *Outcome) error {
	m.Ended = time.Now()
	for _, r := range results {
		m.Verdicts[r.Name] = r.Status
	}
	if _, err := w.Finish(*m, results); err != nil {
		return fmt.Errorf("evidence: %w", err)
	}
	if bundle == "tar.gz" {
		tar, err := w.Pack()
		if err != nil {
			return fmt.Errorf("evidence: pack: %w", err)
		}
		out.BundleTar = tar
	}
	return nil
}

func skippedAll(list []scenarios.Scenario, reason string) []evidence.ScenarioResult {
	res := make([]evidence.ScenarioResult, len(list))
	for i, s := range list {
		res[i] = evidence.ScenarioResult{Name: s.Name, Summary: s.Summary, Invariant: s.Invariant,
			Status: evidence.Skipped, Reason: reason, KeyFact: "not run"}
	}
	return res
}

func keyDetail(r evidence.ScenarioResult) string {
	if r.Status == evidence.Passed {
		return r.KeyFact
	}
	if r.Reason != "" {
		return r.Reason
	}
	return r.KeyFact
}

// collectMetrics scrapes each gateway's /metrics once, at the end of the run (of the scenario,
// for a scenario's own topology), into dir ("" for the run's topology, else "topologies/<scenario>/").
func collectMetrics(topo topology.Topology, w *evidence.Writer, dir string) {
	client := topo.Observer()
	for _, g := range topo.Gateways() {
		ep := topo.Gateway(g)
		body, err := get(client, ep.AdminURL+"/metrics")
		if err != nil {
			body = []byte("# scrape failed: " + err.Error() + "\n")
		}
		_ = w.AddFile(dir+"metrics/"+g+".prom", body)
	}
}

// collectConfigs copies the effective gateway configs (secrets are env references there, and
// the writer redacts anyway) into dir and records their digests in digests.
func collectConfigs(workDir string, w *evidence.Writer, digests map[string]string, dir string) {
	files, _ := filepath.Glob(filepath.Join(workDir, "config", "*"))
	sort.Strings(files)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		sum := sha256.Sum256(b)
		digests[filepath.Base(f)] = hex.EncodeToString(sum[:])
		_ = w.AddFile(dir+"config/"+filepath.Base(f), b)
	}
}

// collectLogs copies every component log into the bundle's dir, redacted line by line.
func collectLogs(topo topology.Topology, w *evidence.Writer, workDir, dir string) {
	logDir := filepath.Join(workDir, "collected-logs")
	if err := os.MkdirAll(logDir, 0o700); err != nil {
		return
	}
	if err := topo.CollectLogs(logDir); err != nil {
		_ = w.AddFile(dir+"logs/collect-error.txt", []byte(err.Error()+"\n"))
	}
	files, _ := filepath.Glob(filepath.Join(logDir, "*"))
	sort.Strings(files)
	for _, f := range files {
		_ = w.AddFileFrom(dir+"logs/"+filepath.Base(f), f)
	}
}

func get(c *http.Client, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := httpget.Get(ctx, c, url, 16<<20)
	if err != nil {
		return nil, err
	}
	if a.StatusCode != http.StatusOK {
		return a.Body, fmt.Errorf("GET %s: %s", url, a.Status)
	}
	return a.Body, nil
}

type silent struct{}

func (silent) Step(string)                                    {}
func (silent) Done(string, string)                            {}
func (silent) Note(string, ...any)                            {}
func (silent) Finished(string, string, time.Duration, string) {}
