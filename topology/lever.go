package topology

import (
	"context"
	"time"
)

// A Lever is one fault as a value, in the manner of etcd's robustness failpoints: a scenario
// or a chaos schedule asks a lever whether it is Available on a topology — one answer to "can
// this engine do X", with the reason when it cannot — and Injects it on a Target; the Undo it
// returns heals the fault. Levers are engine-neutral: each is written once, here or beside the
// scenarios, against the host-level primitives engines provide (the small interfaces below and
// Levers), so adding a fault does not mean one implementation per engine.
type Lever interface {
	// Name is the lever's stable name, used in schedules, evidence and skip reasons
	// ("pause", "store-stall", "partition", …).
	Name() string
	// Available reports whether the lever works on t, and why not when it does not. A
	// scenario that needs an unavailable lever reports skipped with that reason.
	Available(t Topology) (ok bool, reason string)
	// Inject pulls the lever on target and returns how to undo it. On error nothing is left
	// injected.
	Inject(ctx context.Context, t Topology, target Target) (Undo, error)
}

// Target is what a lever acts on. Which fields a lever reads is its own documentation: a
// host-level fault reads Host, a pair fault Host and Peer, a degraded link its rates.
type Target struct {
	// Host is the component the fault acts on (a gateway, a provider, HostValkey, …).
	Host string
	// Peer is the other end of a pair fault (partition, loss, latency).
	Peer string
	// Percent is a rate in percent, for faults that drop a share of something (packet loss).
	Percent int
	// Duration is how long a self-healing fault lasts (a store stall); zero means until Undo.
	Duration time.Duration
	// Latency is the delay a latency fault adds.
	Latency time.Duration
	// Jitter spreads a latency fault's delay over Latency ± Jitter, per chunk of data.
	Jitter time.Duration
}

// Undo heals an injected fault. It is safe to call more than once.
type Undo func(ctx context.Context) error

// Pauser is the primitive behind the pause lever: freeze a component's processes (SIGSTOP, a
// cgroup freeze, docker pause) so that it neither answers nor dies — its sockets stay open and
// its peers see silence, not a refused connection — and thaw it again.
type Pauser interface {
	PauseHost(ctx context.Context, host string) error
	ResumeHost(ctx context.Context, host string) error
}

// StoreAdmin is the primitive behind the store's own levers (a stall with CLIENT PAUSE, memory
// pressure with CONFIG SET maxmemory): run one Valkey command against the run's store with its
// credentials, from a place that can reach it, and return the reply as text. The credentials
// never leave the engine.
type StoreAdmin interface {
	StoreCommand(ctx context.Context, args ...string) (string, error)
}
