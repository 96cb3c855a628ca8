package scenarios

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
)

// What valkey-failover and replica-loss share: both run the failover pair (failoverPair) on
// the replicated store group (topology/store.go says why the group is apart from the run's
// single Valkey) and put it back afterwards.

// storeGroup is the topology's replicated store group once its Sentinels know each other and
// every replica, or why the scenario is skipped (skip) or cannot go on (err).
func (env *Env) storeGroup(ctx context.Context) (sg topology.StoreGroup, skip string, err error) {
	sg, ok := env.Topo.(topology.StoreGroup)
	if !ok {
		return nil, "the " + env.Topo.Engine() + " topology runs no replicated store group (primary, replicas, Sentinels); it runs on " +
			topology.EngineNetns + " and " + topology.EngineDocker, nil
	}
	if reason := sg.StoreGroupReason(); reason != "" {
		return nil, reason, nil
	}
	return sg, "", sg.WaitStoreReady(ctx)
}

// moveToStoreGroup restarts the failover pair on the replicated store group, both at once.
func (env *Env) moveToStoreGroup(ctx context.Context, sg topology.StoreGroup) error {
	var errs [2]error
	allGateways(failoverPair, func(gw string) {
		if err := sg.UseReplicatedStore(ctx, gw, true); err != nil {
			errs[slices.Index(failoverPair, gw)] = fmt.Errorf("restarting %s on the replicated store: %w", gw, err)
		}
	})
	return errors.Join(errs[:]...)
}

// moveBackFromStoreGroup restarts the failover pair on the run's single Valkey for the
// scenarios after this one, also after a failed step and once ctx has ended; an error is the
// result's. Call it once nothing the pair admitted is in flight (a gateway drains its
// requests on SIGTERM).
func (env *Env) moveBackFromStoreGroup(ctx context.Context, r *Result, sg topology.StoreGroup) {
	c, cancel := context.WithTimeout(context.WithoutCancel(ctx), env.Profile.RecoveryMax)
	defer cancel()
	var mu sync.Mutex
	allGateways(failoverPair, func(gw string) {
		if err := sg.UseReplicatedStore(c, gw, false); err != nil {
			mu.Lock()
			r.Error(fmt.Errorf("restarting %s back on the single valkey: %w", gw, err))
			mu.Unlock()
		}
	})
}

// storeReplication is how the run's gateways write to the replicated store group, as the
// topology's facts state it (deployment.ReplicationAcknowledged when they do not say).
func (env *Env) storeReplication() string {
	if f, ok := env.Topo.Facts()["store_group"].(map[string]any); ok {
		if mode, ok := f["replication"].(string); ok && mode != "" {
			return mode
		}
	}
	return deployment.ReplicationAcknowledged
}
