package topology

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
)

// The levers every engine has had from the start, as Lever values (lever.go): each written
// once against the engines' primitives (Levers, StoreGroup, PolicyRollout), and each with one
// Available that answers "can this topology do it" — where that answer used to be spread over
// Capabilities, ErrUnsupported, type assertions and StoreGroupReason.
var (
	// RestartGateway stops Target.Host (a gateway) and starts it again with the same config;
	// there is nothing to undo.
	RestartGateway Lever = lever{name: "restart-gateway",
		inject: func(ctx context.Context, t Topology, target Target) (Undo, error) {
			return noUndo, t.RestartGateway(ctx, target.Host)
		}}
	// CrashGateway kills Target.Host (a gateway) at once and starts it again.
	CrashGateway Lever = lever{name: "crash-gateway",
		inject: func(ctx context.Context, t Topology, target Target) (Undo, error) {
			return noUndo, t.CrashGateway(ctx, target.Host)
		}}
	// StopValkey stops the run's store (every node of a cluster); Undo starts it again and
	// waits until it answers.
	StopValkey Lever = lever{name: "stop-valkey",
		inject: func(ctx context.Context, t Topology, _ Target) (Undo, error) {
			if err := t.StopValkey(ctx); err != nil {
				return nil, err
			}
			return once(t.StartValkey), nil
		}}
	// Partition cuts Target.Host off from Target.Peer, both ways; Undo heals the pair.
	Partition Lever = lever{name: "partition",
		available: func(t Topology) (bool, string) {
			c := t.Capabilities()
			return c.Partition, c.PartitionReason
		},
		inject: func(ctx context.Context, t Topology, target Target) (Undo, error) {
			if err := t.Partition(ctx, target.Host, target.Peer); err != nil {
				return nil, err
			}
			return once(func(ctx context.Context) error { return t.Heal(ctx, target.Host, target.Peer) }), nil
		}}
	// UseStoreGroup restarts Target.Host (a gateway) on the replicated store group; Undo puts
	// it back on the single Valkey. The failover itself is the Partition lever with store
	// hosts as either side.
	UseStoreGroup Lever = lever{name: "use-store-group", available: storeGroupAvailable,
		inject: func(ctx context.Context, t Topology, target Target) (Undo, error) {
			sg := t.(StoreGroup)
			if err := sg.UseReplicatedStore(ctx, target.Host, true); err != nil {
				return nil, err
			}
			return once(func(ctx context.Context) error { return sg.UseReplicatedStore(ctx, target.Host, false) }), nil
		}}
	// StoreFailover fails the replicated store group's primary over: the node the Sentinels
	// name as primary is cut off from the other data nodes, the Sentinels and every gateway,
	// and Inject returns once the Sentinels name another node (a replica promoted) — or, when
	// none is promoted within failoverWait, heals and fails. Undo heals every cut; Sentinel
	// then turns the old primary into a replica of the new one. The target is whichever node
	// is primary when the lever is pulled (Target.Host is not read: StorePrimaryHost by
	// convention). Unlike valkey-failover's split brain, no gateway keeps the old primary, so
	// what a failover can lose is only what the primary had not replicated when it was cut.
	StoreFailover Lever = lever{name: "store-failover", available: failoverAvailable, inject: injectFailover}
	// RolloutPolicy is the policy rollout lever for the run's own policy (see
	// RolloutPolicyOf): its Available is the engine's answer for any profile.
	RolloutPolicy = RolloutPolicyOf(nil)
)

// NetworkPolicy is no fault but the capability the policy scenarios need: the engine
// enforces the network policy, so that a probe the policy denies is refused. It answers like a
// lever (Name, Available), so a scenario asks it the same way.
var NetworkPolicy Capability = lever{name: "network-policy",
	available: func(t Topology) (bool, string) {
		c := t.Capabilities()
		return c.NetworkPolicy, c.NetworkPolicyReason
	}}

// Capability is the question half of a Lever: its name, and whether a topology has it.
type Capability interface {
	Name() string
	Available(t Topology) (ok bool, reason string)
}

// ExistingLevers are the levers above, in a stable order (for listings and tests).
var ExistingLevers = []Lever{RestartGateway, CrashGateway, StopValkey, Partition, UseStoreGroup, RolloutPolicy}

// StorePrimaryHost names the store group's primary, whichever node it is, as a target.
const StorePrimaryHost = "store-primary"

// failoverWait bounds how long StoreFailover waits for the Sentinels to promote a replica
// (measured 2.6–3.3 s, valkey-failover).
const failoverWait = 30 * time.Second

// failoverAvailable: the store group runs here and the engine can cut its nodes off.
func failoverAvailable(t Topology) (bool, string) {
	if ok, why := storeGroupAvailable(t); !ok {
		return false, why
	}
	return Partition.Available(t)
}

func injectFailover(ctx context.Context, t Topology, _ Target) (Undo, error) {
	sg := t.(StoreGroup)
	old, err := sg.StorePrimary(ctx)
	if err != nil {
		return nil, fmt.Errorf("asking the Sentinels for the primary: %w", err)
	}
	var cut []string
	for _, h := range append(append(slices.Clone(StoreNodes), StoreSentinels...), t.Gateways()...) {
		if h != old {
			cut = append(cut, h)
		}
	}
	var done []string
	heal := func(ctx context.Context) error {
		var errs []error
		for _, h := range done {
			if err := t.Heal(ctx, old, h); err != nil {
				errs = append(errs, err)
			}
		}
		return errors.Join(errs...)
	}
	for _, h := range cut {
		if err := t.Partition(ctx, old, h); err != nil {
			return nil, errors.Join(fmt.Errorf("cutting the primary %s off from %s: %w", old, h, err), heal(context.WithoutCancel(ctx)))
		}
		done = append(done, h)
	}
	deadline := time.Now().Add(failoverWait)
	for {
		if h, err := sg.StorePrimary(ctx); err == nil && h != old {
			return once(heal), nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return nil, errors.Join(fmt.Errorf("the Sentinels promoted no replica within %s of cutting the primary %s off", failoverWait, old),
				heal(context.WithoutCancel(ctx)))
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// RolloutPolicyOf restarts Target.Host (a gateway) on the rule policy of p; Undo restarts it
// on the run's own. Engines that cannot restart a gateway on another policy have no
// PolicyRollout.
func RolloutPolicyOf(p *deployment.Profile) Lever {
	return lever{name: "policy-rollout",
		available: func(t Topology) (bool, string) {
			if _, ok := t.(PolicyRollout); !ok {
				return false, "the " + t.Engine() + " topology cannot restart a gateway on another rule policy"
			}
			return true, ""
		},
		inject: func(ctx context.Context, t Topology, target Target) (Undo, error) {
			pr := t.(PolicyRollout)
			if err := pr.RestartGatewayWithPolicy(ctx, target.Host, p); err != nil {
				return nil, err
			}
			return once(func(ctx context.Context) error { return pr.RestartGatewayWithPolicy(ctx, target.Host, nil) }), nil
		}}
}

// storeGroupAvailable: the engine runs the replicated store group, and this run started it.
func storeGroupAvailable(t Topology) (bool, string) {
	return offers[StoreGroup](t, "the %s topology runs no replicated store group (primary, replicas, Sentinels)", StoreGroup.StoreGroupReason)
}

// offers is the Available of a lever built on the optional interface I: false, with missing
// (a format naming the engine at %s) when t does not implement I; false, with the reason, when
// t also implements R and its why (a method of R, the engine saying why it cannot use I in
// this run) returns one; else true.
func offers[I, R any](t Topology, missing string, why func(R) string) (bool, string) {
	if _, ok := t.(I); !ok {
		return false, fmt.Sprintf(missing, t.Engine())
	}
	if r, ok := t.(R); ok {
		if reason := why(r); reason != "" {
			return false, reason
		}
	}
	return true, ""
}

// lever is a Lever (and a Capability) made of functions; available nil means every topology.
type lever struct {
	name      string
	available func(Topology) (bool, string)
	inject    func(context.Context, Topology, Target) (Undo, error)
}

func (l lever) Name() string { return l.name }

func (l lever) Available(t Topology) (bool, string) {
	if l.available == nil {
		return true, ""
	}
	return l.available(t)
}

// Inject refuses an unavailable lever with its reason (wrapping ErrUnsupported) before it
// touches anything.
func (l lever) Inject(ctx context.Context, t Topology, target Target) (Undo, error) {
	if ok, reason := l.Available(t); !ok {
		return nil, fmt.Errorf("%s: %w: %s", l.name, ErrUnsupported, reason)
	}
	if l.inject == nil {
		return nil, errors.New(l.name + " is a capability, not a fault: there is nothing to inject")
	}
	undo, err := l.inject(ctx, t, target)
	if err != nil {
		return nil, err
	}
	return undo, nil
}

func noUndo(context.Context) error { return nil }

// once makes an Undo safe to call more than once: after one call that succeeded, the next do
// nothing; after a failed one, the next tries again.
func once(f func(context.Context) error) Undo {
	var mu sync.Mutex
	done := false
	return func(ctx context.Context) error {
		mu.Lock()
		defer mu.Unlock()
		if done {
			return nil
		}
		err := f(ctx)
		done = err == nil
		return err
	}
}
