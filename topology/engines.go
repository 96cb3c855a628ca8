package topology

import (
	"fmt"

	"github.com/quotaqual/quotaqual/undertest"
)

// engines registers every engine by name: the one place a new engine is added (its package
// of files, its name constant and one line here). New, IsEngine and the flag checks of
// qualify and the commands read it.
var engines = map[string]func(Spec) (Topology, error){
	EngineNetns:   newNetns,
	EngineDocker:  func(s Spec) (Topology, error) { return newDocker(s) },
	EngineProcess: func(s Spec) (Topology, error) { return newProcess(s), nil },
	EngineKind:    func(s Spec) (Topology, error) { return newKind(s) },
}

// IsEngine reports whether name is a registered engine (EngineAuto is not one: it picks one).
func IsEngine(name string) bool {
	_, ok := engines[name]
	return ok
}

// New returns a topology of the named engine: "auto" or "" (DetectAuto's choice: netns when
// this host can build namespaces, else docker when a Docker engine answers, else process), or
// a registered engine's name. The netns engine must run inside the run's own namespaces: call
// ReexecIntoNamespace at the start of the command first (see reexec_linux.go).
func New(engine string, spec Spec) (Topology, error) {
	if err := spec.validate(); err != nil {
		return nil, err
	}
	if engine == "" || engine == EngineAuto {
		engine, _ = DetectAuto()
	}
	newEngine, ok := engines[engine]
	if !ok {
		return nil, fmt.Errorf("topology %q is unknown: use auto, netns, docker, process or kind", engine)
	}
	if g := spec.Gateway; g != nil && g.Name != undertest.DefaultName && (engine == EngineDocker || engine == EngineKind) {
		// These engines launch only quotaqual's own gateway so far (issue 12).
		return nil, fmt.Errorf("gateway profile %s: the %s engine launches only quotaqual's own gateway so far: use --topology netns or process", g.Name, engine)
	}
	return newEngine(spec)
}
