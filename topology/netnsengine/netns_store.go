//go:build linux

package topology

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/internal/valkeyproc"
)

// storeGroup is the netns engine's replicated store group (see store.go): each node a real
// valkey-server in its own namespace, so a partition between any two of them is real.
type storeGroup struct {
	mu sync.Mutex
	r  *valkeyproc.Replicated
}

// storeNodeOptions are the options of one group node on host.
func (t *netnsTopo) storeNodeOptions(host string, port int) valkeyproc.Options {
	return valkeyproc.Options{
		Host: t.hostAddr(host), Port: port,
		Dir:      filepath.Join(t.spec.WorkDir, "store", host),
		LogFile:  t.logPath(host),
		Password: t.spec.Deployment.ValkeyPassword,
		// As for the single Valkey: `env` marks the process with the run id for `quotaqual down`.
		Wrap:        append([]string{"env", EnvRunID + "=" + t.spec.RunID}, t.wrap(host)...),
		SysProcAttr: componentAttr(),
	}
}

// startStore starts the group: valkey-1 primary, valkey-2 and valkey-3 its replicas, three
// Sentinels with quorum 2 that deem a node down after 1 s. It does not wait for the Sentinels
// to find each other (WaitStoreReady does, where a scenario needs it).
func (t *netnsTopo) startStore(ctx context.Context) error {
	sentinels := make([]valkeyproc.Options, len(StoreSentinels))
	for i, h := range StoreSentinels {
		sentinels[i] = t.storeNodeOptions(h, SentinelPort)
		sentinels[i].Password = "" // the policy guards the Sentinels; they hold auth-pass for the nodes
	}
	r, err := valkeyproc.StartReplicated(ctx, valkeyproc.ReplicatedOptions{
		MasterName:   StoreMasterName,
		Primary:      t.storeNodeOptions(HostStore1, netnsPorts.Valkey),
		Replica:      t.storeNodeOptions(HostStore2, netnsPorts.Valkey),
		MoreReplicas: []valkeyproc.Options{t.storeNodeOptions(HostStore3, netnsPorts.Valkey)},
		Sentinels:    sentinels,
		DownAfter:    time.Second,
		// failover-timeout also spaces a second failover attempt; 3 s keeps a stuck one short.
		FailoverTimeout: 3 * time.Second,
	})
	if err != nil {
		return err
	}
	t.store.mu.Lock()
	t.store.r = r
	t.store.mu.Unlock()
	return nil
}

// stopStore kills the group's processes and records them.
func (t *netnsTopo) stopStore(td *Teardown) {
	t.store.mu.Lock()
	r := t.store.r
	t.store.mu.Unlock()
	if r == nil {
		return
	}
	for i, s := range append(r.Nodes(), r.Sentinels...) {
		if pid := s.PID(); pid != 0 && s.Running() {
			_ = s.Resume()
			_ = s.Kill()
			td.Removed = append(td.Removed, fmt.Sprintf("process %s pid %d", StoreHosts[i], pid))
		}
	}
}

// storeSentinelAddrs are the Sentinels as the gateways reach them.
func StoreSentinelAddrs(addr func(string) string) []string {
	out := make([]string, len(StoreSentinels))
	for i, s := range StoreSentinels {
		out[i] = net.JoinHostPort(addr(s), strconv.Itoa(SentinelPort))
	}
	return out
}

// storeGatewayConfig renders the gateway's launch on the group (<gateway>-store) beside its
// usual one, when the gateway under test can be put on the group.
func (t *netnsTopo) storeGatewayConfig(gateway string, a deployment.Addresses) error {
	if t.StoreGroupReason() != "" || !t.gatewayUnderTest().Caps.StoreGroup {
		return nil
	}
	a.Store = &deployment.StoreAddrs{MasterName: StoreMasterName, Sentinels: StoreSentinelAddrs(t.hostAddr),
		Replication: t.spec.StoreReplication}
	_, err := t.launchGateway(gateway, gateway+"-store", a, t.spec.Deployment.Profile, t.wrap(gateway))
	return err
}

func (t *netnsTopo) StoreGroupReason() string {
	if t.spec.Deployment.Backend == deployment.BackendMemory {
		return "the gateways run the memory backend: they use no store"
	}
	return ""
}

func (t *netnsTopo) replicated() (*valkeyproc.Replicated, error) {
	t.store.mu.Lock()
	defer t.store.mu.Unlock()
	if t.store.r == nil {
		return nil, errors.New("the replicated store group is not running: bring the topology up first")
	}
	return t.store.r, nil
}

func (t *netnsTopo) WaitStoreReady(ctx context.Context) error {
	r, err := t.replicated()
	if err != nil {
		return err
	}
	return r.WaitSentinelsReady(ctx, 15*time.Second)
}

func (t *netnsTopo) StorePrimary(ctx context.Context) (string, error) {
	r, err := t.replicated()
	if err != nil {
		return "", err
	}
	return StorePrimary(ctx, r)
}

func (t *netnsTopo) StoreNode(ctx context.Context, host string) (StoreNodeState, error) {
	r, err := t.replicated()
	if err != nil {
		return StoreNodeState{Host: host}, err
	}
	return ReadStoreNodeState(ctx, r, host)
}

func (t *netnsTopo) StoreEvents() ([]StoreEvent, error) { return ReadStoreEvents(t.logPath) }

func (t *netnsTopo) UseReplicatedStore(ctx context.Context, gateway string, on bool) error {
	stem := gateway
	if on {
		stem = gateway + "-store"
	}
	if err := t.relaunchAs(gateway, stem); err != nil {
		return err
	}
	return t.RestartGateway(ctx, gateway)
}

func (t *netnsTopo) storeFacts() map[string]any {
	addrs := map[string]string{}
	for _, h := range StoreHosts {
		addrs[h] = t.hostAddr(h)
	}
	return StoreGroupFacts(addrs, t.spec.StoreReplication)
}

var _ StoreGroup = (*netnsTopo)(nil)
