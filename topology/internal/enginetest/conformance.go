package enginetest

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/topology"
)

// The conformance suite, in the manner of ledgertest.Run: one Run per engine, over every
// combination of store shape and gateway count the engine claims, so that a combination
// nobody runs by hand (four gateways on a cluster store, say) fails a test, not a user's run.

// Store shapes a combination names. The replicated store group runs beside the single Valkey
// (its own hosts), so StoreReplicated is a single-store run with the group started.
const (
	StoreSingle     = topology.StoreSingle
	StoreReplicated = "replicated"
	StoreCluster    = topology.StoreCluster
)

// Combination is one shape of a run: how the store runs and how many gateways share it.
type Combination struct {
	Store    string
	Gateways int
}

func (c Combination) String() string { return fmt.Sprintf("%s/%d-gateways", c.Store, c.Gateways) }

// Gateway counts the suite runs each store shape with: the default and more than two (the
// policy rules and partitions are per gateway, and a hand-wired list of two is the bug class).
var Gateways = []int{topology.DefaultGateways, 4}

// Claims lists every combination engine claims: the single store always; the cluster when the
// engine registers it (topology.Engine.Cluster); the replicated store group when a topology of
// the engine, as newSpec describes it, runs the group (StoreGroup with no reason against it) —
// each with every count in gateways (nil: Gateways).
func Claims(t *testing.T, engine string, newSpec func(t *testing.T) topology.Spec, gateways []int) []Combination {
	t.Helper()
	if gateways == nil {
		gateways = Gateways
	}
	shapes := []string{StoreSingle}
	topo, err := topology.New(engine, newSpec(t))
	if err != nil {
		t.Fatalf("building a %s topology to read its claims: %v", engine, err)
	}
	if sg, ok := topo.(topology.StoreGroup); ok && sg.StoreGroupReason() == "" {
		shapes = append(shapes, StoreReplicated)
	}
	if topology.CheckStore(engine, topology.StoreCluster) == nil {
		shapes = append(shapes, StoreCluster)
	}
	var out []Combination
	for _, s := range shapes {
		for _, n := range gateways {
			out = append(out, Combination{Store: s, Gateways: n})
		}
	}
	return out
}

// Run brings engine up once per combination (newSpec gives a fresh Spec: run id, work dir,
// binary, deployment and the engine's own options; Run sets the store and the gateway count)
// and checks on each: the run has exactly the gateways asked for; every gateway reaches every
// store endpoint (topology.StoreEndpoints) by Probe, and the engine's policy admits it; where
// the engine enforces a network policy, the client and the providers are refused there; and
// one chat through each gateway is decided by the store (200 or 429, never a 503 of a gateway
// that cannot reach it).
func Run(t *testing.T, engine string, newSpec func(t *testing.T) topology.Spec, combos []Combination) {
	if len(combos) == 0 {
		t.Fatalf("no combination of the %s topology to run", engine)
	}
	for _, c := range combos {
		t.Run(c.String(), func(t *testing.T) {
			spec := newSpec(t)
			spec.Gateways = c.Gateways
			spec.Store = StoreSingle
			if c.Store == StoreCluster {
				spec.Store = StoreCluster
			}
			spec.WithoutStoreGroup = c.Store != StoreReplicated
			topo, upTime := UpTopology(t, engine, spec)
			t.Logf("%s %s up in %s", engine, c, upTime.Round(time.Millisecond))
			checkCombination(t, topo, spec, c)
		})
	}
}

func checkCombination(t *testing.T, topo topology.Topology, spec topology.Spec, c Combination) {
	ctx := context.Background()
	gateways := topology.GatewayNames(c.Gateways)
	if got := topo.Gateways(); !slices.Equal(got, gateways) {
		t.Fatalf("Gateways() = %v, want %v", got, gateways)
	}
	if c.Store == StoreReplicated {
		sg, ok := topo.(topology.StoreGroup)
		if !ok {
			t.Fatalf("the replicated store group was asked for and the %s topology has none", topo.Engine())
		}
		if reason := sg.StoreGroupReason(); reason != "" {
			t.Fatalf("the replicated store group was asked for and does not run: %s", reason)
		}
		if err := sg.WaitStoreReady(ctx); err != nil {
			t.Fatalf("the store group never became ready: %v", err)
		}
	}
	eps, err := topology.StoreEndpoints(topo)
	if err != nil {
		t.Fatal(err)
	}
	if c.Store == StoreCluster && len(eps) != topology.ClusterPrimaries {
		t.Fatalf("store endpoints %v: want one per cluster node (%d)", eps, topology.ClusterPrimaries)
	}
	var policy *topology.Policy
	if p, ok := topo.(interface{ Policy() topology.Policy }); ok {
		pol := p.Policy()
		policy = &pol
	}
	enforced := topo.Capabilities().NetworkPolicy
	var probes, reached int
	for _, ep := range eps {
		for _, g := range gateways {
			if policy != nil && targets(*policy, ep) && !policy.Allows(g, ep.Host, ep.Port) {
				t.Errorf("the policy does not admit %s to store endpoint %s", g, ep)
			}
			r := topo.Probe(ctx, g, ep.Host, ep.Port)
			if !r.Supported {
				continue // the chats below are this engine's reachability check
			}
			probes++
			if !r.Reached {
				t.Errorf("%s does not reach store endpoint %s: %s", g, ep, r.Error)
				continue
			}
			reached++
		}
		if !enforced {
			continue
		}
		// The refusals: nothing but the gateways (and the store's own peers and the observer,
		// which these are not) may reach the store.
		for _, from := range append([]string{topology.HostClient}, topology.Providers...) {
			r := topo.Probe(ctx, from, ep.Host, ep.Port)
			if !r.Supported {
				continue
			}
			probes++
			if r.Reached {
				t.Errorf("%s reaches store endpoint %s, which the policy refuses it", from, ep)
			}
			if policy != nil && policy.Allows(from, ep.Host, ep.Port) {
				t.Errorf("the policy admits %s to store endpoint %s", from, ep)
			}
		}
	}
	t.Logf("%d store endpoints %v: %d probes, %d gateway probes reached", len(eps), eps, probes, reached)
	for _, g := range gateways {
		code, _ := Chat(t, topo, g, spec.Deployment)
		if code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Errorf("chat via %s: %d, want 200 or 429 (a decision of the store)", g, code)
		}
	}
}

// targets reports whether any rule of p is about ep (an engine that enforces part of its policy
// by network membership lists no rule for the hosts it places by membership).
func targets(p topology.Policy, ep topology.Endpoint) bool {
	return slices.ContainsFunc(p.Rules, func(r topology.PolicyRule) bool { return r.Host == ep.Host && r.Port == ep.Port })
}

// CheckAvailable checks each existing lever's (and the network policy's) Available on topo:
// available unless no names it, and then unavailable with a reason containing no's text.
func CheckAvailable(t *testing.T, topo topology.Topology, no map[string]string) {
	t.Helper()
	caps := []topology.Capability{topology.NetworkPolicy}
	for _, l := range topology.ExistingLevers {
		caps = append(caps, l)
	}
	for _, c := range caps {
		ok, reason := c.Available(topo)
		want, unavailable := no[c.Name()]
		switch {
		case unavailable && ok:
			t.Errorf("%s: available, want unavailable (%s)", c.Name(), want)
		case unavailable && !strings.Contains(reason, want):
			t.Errorf("%s: unavailable because %q, want a reason with %q", c.Name(), reason, want)
		case !unavailable && !ok:
			t.Errorf("%s: unavailable (%s), want available", c.Name(), reason)
		}
	}
}
