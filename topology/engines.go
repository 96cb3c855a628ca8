package topology

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
)

// Engines besides netns and process (spec.go names those), which like them live in packages of
// their own (topology/dockerengine, topology/kindengine) and register themselves under these
// names. The names are here because the flags, auto detection and the evidence speak them
// without importing an engine.
const (
	EngineDocker = "docker"
	EngineKind   = "kind"
)

// Engine is what an engine registers: how to build its topology and, optionally, how auto
// detection asks whether it can run here and how `quotaqual down` removes what a run of it
// left behind.
type Engine struct {
	New func(Spec) (Topology, error)
	// Answers, when set, says whether the engine's runtime answers here (a version), or why
	// not. Auto detection asks it when this host cannot build namespaces.
	Answers func(ctx context.Context) (string, error)
	// Cleanup, when set, removes every leftover of run runID (a crashed run, or --keep).
	Cleanup func(ctx context.Context, runID string) (Teardown, error)
	// Enter, when set, is what a command does before New: the place it runs in is not where
	// the engine builds its topology (netns re-executes the command inside the run's own
	// namespaces). In the outer process it returns entered=false and the exit code of the
	// command's run in there, for the caller to exit with; in the process it started (see
	// Entered) it finishes the set-up and returns entered=true. files reach that process as
	// fds 3, 4, ... (see InheritedListeners).
	Enter func(runID string, files []*os.File) (entered bool, code int, err error)
	// Entered, set with Enter, reports whether this process is one Enter started, with the
	// run id the outer process chose.
	Entered func() (runID string, ok bool)
	// Cluster reports that the engine runs the store as a Valkey Cluster on request
	// (Spec.Store == StoreCluster); NoCluster says why not when it does not.
	Cluster   bool
	NoCluster string
}

var (
	enginesMu sync.RWMutex
	// engines holds every engine by name, each registered by its package's init (see package
	// topology/engines, which imports them all).
	engines = map[string]Engine{}
)

// Register adds an engine under name: the one registration a new engine package makes, from
// its init. It panics when name is taken, as two engines under one name are a build mistake.
func Register(name string, e Engine) {
	enginesMu.Lock()
	defer enginesMu.Unlock()
	if _, ok := engines[name]; ok {
		panic("topology: engine " + name + " is registered twice")
	}
	if e.New == nil {
		panic("topology: engine " + name + " registers no New")
	}
	engines[name] = e
}

func engineNamed(name string) (Engine, bool) {
	enginesMu.RLock()
	defer enginesMu.RUnlock()
	e, ok := engines[name]
	return e, ok
}

// IsEngine reports whether name is a registered engine (EngineAuto is not one: it picks one).
func IsEngine(name string) bool {
	_, ok := engineNamed(name)
	return ok
}

// EngineNames returns the registered engines' names in order (EngineAuto is not one): what
// the docs' engine tables are held to.
func EngineNames() []string {
	enginesMu.RLock()
	defer enginesMu.RUnlock()
	return slices.Sorted(maps.Keys(engines))
}

// EngineChoices is what --topology takes, from the registry: "auto, docker, kind, netns or
// process", without the engines given in except (those a command does not serve).
func EngineChoices(except ...string) string {
	names := []string{EngineAuto}
	for _, n := range EngineNames() {
		if !slices.Contains(except, n) {
			names = append(names, n)
		}
	}
	if len(names) == 1 {
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// New returns a topology of the named engine: "auto" or "" (DetectAuto's choice: netns when
// this host can build namespaces, else docker when a Docker engine answers, else process), or
// a registered engine's name. An engine that NeedsEntering (netns: the run's own namespaces)
// must be entered at the start of the command first: see Enter.
func New(engine string, spec Spec) (Topology, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if engine == "" || engine == EngineAuto {
		engine, _ = DetectAuto()
	}
	e, ok := engineNamed(engine)
	if !ok {
		return nil, fmt.Errorf("topology %q is unknown: use %s", engine, EngineChoices())
	}
	if err := CheckStore(engine, spec.Store); err != nil {
		return nil, err
	}
	if err := CheckServices(engine, spec); err != nil {
		return nil, err
	}
	return e.New(spec)
}

// CheckStore refuses a store shape the engine does not run, saying why and where it runs.
func CheckStore(engine, store string) error {
	e, ok := engineNamed(engine)
	if !ok || store == "" || store == StoreSingle || e.Cluster {
		return nil
	}
	var have []string
	enginesMu.RLock()
	for _, n := range slices.Sorted(maps.Keys(engines)) {
		if engines[n].Cluster {
			have = append(have, n)
		}
	}
	enginesMu.RUnlock()
	why := e.NoCluster
	if why == "" {
		why = "it does not run a Valkey Cluster"
	}
	return fmt.Errorf("--store %s: the %s topology cannot run it: %s; use --topology %s", store, engine, why, strings.Join(have, " or --topology "))
}

// EngineAnswers asks the named engine's runtime whether it answers here (Engine.Answers): its
// version, or why not. An engine that is not built in, or registers no Answers, does not.
func EngineAnswers(ctx context.Context, engine string) (string, error) {
	e, ok := engineNamed(engine)
	if !ok || e.Answers == nil {
		return "", fmt.Errorf("the %s engine is not built in", engine)
	}
	return e.Answers(ctx)
}

// NeedsEntering reports whether a command must Enter engine before New builds its topology.
func NeedsEntering(engine string) bool {
	e, ok := engineNamed(engine)
	return ok && e.Enter != nil
}

// Enter runs engine's Enter (see Engine): entered=true when this process is now where the
// engine builds its topology, false with the exit code of the command's run in the outer
// process. An engine without Enter is where it builds already: entered at once.
func Enter(engine, runID string, files []*os.File) (entered bool, code int, err error) {
	e, ok := engineNamed(engine)
	if !ok || e.Enter == nil {
		return true, 0, nil
	}
	return e.Enter(runID, files)
}

// EnteredEngine reports the engine whose Enter started this process, and the run id the
// outer process chose; ok is false in a process no Enter started.
func EnteredEngine() (engine, runID string, ok bool) {
	enginesMu.RLock()
	defer enginesMu.RUnlock()
	for name, e := range engines {
		if e.Entered == nil {
			continue
		}
		if id, in := e.Entered(); in {
			return name, id, true
		}
	}
	return "", "", false
}

// DetectAuto is Detect with the docker engine in between: netns when this host can build
// namespaces, else docker when a Docker engine answers, else process — with the reason.
func DetectAuto() (engine, reason string) {
	engine, reason = Detect()
	if engine != EngineProcess {
		return engine, reason
	}
	docker, ok := engineNamed(EngineDocker)
	if !ok || docker.Answers == nil {
		return EngineProcess, reason + "; docker: the docker engine is not built in"
	}
	v, err := docker.Answers(context.Background())
	if err != nil {
		return EngineProcess, reason + "; docker: " + err.Error()
	}
	return EngineDocker, reason + "; a Docker engine answers (version " + v + "): containers on private networks"
}

// CleanupEngines runs every registered engine's Cleanup for run runID, in name order, and
// joins what they removed; an engine's error is recorded prefixed with its name.
func CleanupEngines(ctx context.Context, runID string) Teardown {
	enginesMu.RLock()
	names := slices.Sorted(maps.Keys(engines))
	enginesMu.RUnlock()
	var td Teardown
	for _, name := range names {
		e, _ := engineNamed(name)
		if e.Cleanup == nil {
			continue
		}
		etd, err := e.Cleanup(ctx, runID)
		td.Removed = append(td.Removed, etd.Removed...)
		td.Errors = append(td.Errors, etd.Errors...)
		if err != nil {
			td.Errors = append(td.Errors, name+": "+err.Error())
		}
	}
	return td
}
