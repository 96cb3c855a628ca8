package topology

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"net"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/internal/valkeyproc"
)

// The replicated store group: a primary, two replicas and three Sentinels (quorum 2), beside
// the single Valkey the other scenarios use. It is a group of its own so that every upstream
// scenario keeps its meaning (valkey-outage is the whole store gone, valkey-partition a gateway
// cut off from it, and neither has to reason about which node is primary), and because a
// failover changes the group for good: the node that was primary is a replica afterwards. The
// failover scenarios restart the gateways on the group and back.
//
// Two replicas, not one: with one replica, acknowledged mode (WAIT 1) cannot acknowledge any
// write after the primary is lost until the old primary rejoins as a replica — which Sentinel
// does only after the old primary has reported itself as master for 8 s and on its 10 s INFO
// period (both fixed in Sentinel), so 10-20 s without admission. With a second replica, the
// promoted primary has a replica at once.

// Hosts of the replicated store group.
const (
	HostStore1    = "valkey-1" // the primary at the start
	HostStore2    = "valkey-2"
	HostStore3    = "valkey-3"
	HostSentinel1 = "sentinel-1"
	HostSentinel2 = "sentinel-2"
	HostSentinel3 = "sentinel-3"
)

// StoreMasterName is the name the Sentinels monitor the group's primary by.
const StoreMasterName = "quotaqual"

// SentinelPort is the Sentinels' port on every engine.
const SentinelPort = 26379

var (
	// StoreNodes are the group's data nodes; StoreSentinels its Sentinels; StoreHosts both.
	StoreNodes     = []string{HostStore1, HostStore2, HostStore3}
	StoreSentinels = []string{HostSentinel1, HostSentinel2, HostSentinel3}
	StoreHosts     = append(append([]string(nil), StoreNodes...), StoreSentinels...)
)

// StoreGroup is implemented by engines that run the replicated store group. The levers that
// cut nodes off are the topology's Partition and Heal, with store hosts as either side.
type StoreGroup interface {
	// StoreGroupReason is empty when the group runs here, or says why not.
	StoreGroupReason() string
	// WaitStoreReady waits until the Sentinels know each other and every replica (they find
	// each other by hello messages every 2 s): before that a failover can find no quorum.
	WaitStoreReady(ctx context.Context) error
	// StorePrimary asks the Sentinels which node is primary (a majority must agree).
	StorePrimary(ctx context.Context) (string, error)
	// StoreNode reports one data node's replication role and offset, asked from the observer.
	StoreNode(ctx context.Context, host string) (StoreNodeState, error)
	// StoreEvents reads the Sentinels' logged events (+sdown, +odown, +switch-master, ...).
	StoreEvents() ([]StoreEvent, error)
	// UseReplicatedStore restarts a gateway on the group (on) or back on the single Valkey.
	UseReplicatedStore(ctx context.Context, gateway string, on bool) error
}

// StoreNodeState is one data node's view of replication.
type StoreNodeState struct {
	Host   string `json:"host"`
	Role   string `json:"role"` // master or slave
	Offset int64  `json:"offset"`
	Link   string `json:"link,omitempty"` // a replica's master_link_status
	Error  string `json:"error,omitempty"`
}

// StoreEvent is one line a Sentinel logged about the group.
type StoreEvent struct {
	At       time.Time `json:"at"`
	Sentinel string    `json:"sentinel"`
	Event    string    `json:"event"` // +sdown, +odown, +switch-master, ...
	Detail   string    `json:"detail"`
}

// storePolicy is the group's network policy: data nodes reach each other (replication in any
// direction after a failover), Sentinels reach the data nodes and each other, the gateways reach
// both, and the observer (the harness) both, to ask who is primary and read offsets.
func storePolicy(valkeyPort int, gateways []string) []PolicyRule {
	var rules []PolicyRule
	for _, n := range StoreNodes {
		from := append(append(slices.Clone(gateways), HostObserver), StoreSentinels...)
		for _, o := range StoreNodes {
			if o != n {
				from = append(from, o)
			}
		}
		rules = append(rules, PolicyRule{Name: n + "-from-gateways-nodes-sentinels", Host: n, Port: valkeyPort, From: from})
	}
	for _, s := range StoreSentinels {
		from := append(slices.Clone(gateways), HostObserver)
		for _, o := range StoreSentinels {
			if o != s {
				from = append(from, o)
			}
		}
		rules = append(rules, PolicyRule{Name: s + "-from-gateways-sentinels", Host: s, Port: SentinelPort, From: from})
	}
	return rules
}

func IsStoreHost(h string) bool { return slices.Contains(StoreHosts, h) }

// sentinelEventRE matches a Sentinel log line: "<pid>:X 30 Nov 2026 14:52:52.960 # +sdown ...".
var sentinelEventRE = regexp.MustCompile(`^\d+:X (\d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2}\.\d{3}) [#*.-] ([+-][a-z-]+)\s*(.*)$`)

// sentinelEvents parses the events of one Sentinel's log.
func sentinelEvents(path, sentinel string) ([]StoreEvent, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []StoreEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		m := sentinelEventRE.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		at, err := time.ParseInLocation("02 Jan 2006 15:04:05.000", m[1], time.Local)
		if err != nil {
			continue
		}
		out = append(out, StoreEvent{At: at, Sentinel: sentinel, Event: m[2], Detail: strings.TrimSpace(m[3])})
	}
	return out, sc.Err()
}

// readStoreEvents merges the events of every Sentinel's log in logDir, in time order.
func ReadStoreEvents(logPath func(string) string) ([]StoreEvent, error) {
	var all []StoreEvent
	for _, s := range StoreSentinels {
		ev, err := sentinelEvents(logPath(s), s)
		if err != nil {
			return nil, fmt.Errorf("reading the log of %s: %w", s, err)
		}
		all = append(all, ev...)
	}
	slices.SortStableFunc(all, func(a, b StoreEvent) int { return a.At.Compare(b.At) })
	return all, nil
}

// WithStorePolicy adds the group's rules to a policy: the policy every engine runs the group under.
func WithStorePolicy(p Policy, valkeyPort int, gateways []string) Policy {
	p.Rules = append(append([]PolicyRule(nil), p.Rules...), storePolicy(valkeyPort, gateways)...)
	return p
}

// storePrimary asks the group's Sentinels which node is primary and names it.
func StorePrimary(ctx context.Context, r *valkeyproc.Replicated) (string, error) {
	addr, err := r.PrimaryAddr(ctx)
	if err != nil {
		return "", err
	}
	for i, n := range r.Nodes() {
		if n.Addr() == addr {
			return StoreNodes[i], nil
		}
	}
	return "", fmt.Errorf("the Sentinels name %s, which is no node of the group", addr)
}

// storeNodeState reads one data node's replication role and offset (INFO replication).
func ReadStoreNodeState(ctx context.Context, r *valkeyproc.Replicated, host string) (StoreNodeState, error) {
	st := StoreNodeState{Host: host}
	i := slices.Index(StoreNodes, host)
	if i < 0 {
		return st, fmt.Errorf("no store node %q: use one of %v", host, StoreNodes)
	}
	n := r.Nodes()[i]
	info, err := valkeyproc.InfoVia(ctx, r.Dial, n.Addr(), n.Password(), "replication")
	if err != nil {
		st.Error = err.Error()
		return st, err
	}
	st.Role, st.Link = info["role"], info["master_link_status"]
	st.Offset, _ = strconv.ParseInt(info["master_repl_offset"], 10, 64)
	return st, nil
}

// NoStoreGroupSelected is why a run started without the replicated store group
// (Spec.WithoutStoreGroup): none of its scenarios uses it.
const NoStoreGroupSelected = "none of the run's scenarios uses the replicated store group, so it was not started (valkey-failover or replica-loss starts it when selected)"

// storeGroupFacts describes the group for the evidence manifest.
func StoreGroupFacts(addrs map[string]string, replication string) map[string]any {
	return map[string]any{
		"nodes": StoreNodes, "sentinels": StoreSentinels, "master_name": StoreMasterName,
		"addresses": maps.Clone(addrs), "quorum": 2, "down_after_ms": 1000, "failover_timeout_ms": 3000,
		"replication": replication,
	}
}

// StoreSentinelAddrs are the Sentinels as the gateways reach them.
func StoreSentinelAddrs(addr func(string) string) []string {
	out := make([]string, len(StoreSentinels))
	for i, s := range StoreSentinels {
		out[i] = net.JoinHostPort(addr(s), strconv.Itoa(SentinelPort))
	}
	return out
}
