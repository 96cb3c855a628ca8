package topology

import (
	"context"
	"fmt"
)

// Latency and lost replies on a gateway's link to the store. The kernel here has no tc netem,
// so these faults live in user space: the engine routes the gateway's connections to the
// store through a TCP proxy that carries Toxiproxy's toxics (topology/linkproxy), only while
// the lever is held. Loss (nftables, levers_nemesis.go) stays in the kernel and composes with
// them: the proxy's upstream leg still runs over the gateway's own link.

// LinkToxic is one Toxiproxy toxic as the proxy applies it to every connection on the link:
// Type is Toxiproxy's ("latency", "timeout", "reset_peer", "limit_data", …), Stream
// "upstream" (host to peer) or "downstream" (peer to host, the replies), Attributes the
// toxic's own (milliseconds, bytes).
type LinkToxic struct {
	Name       string
	Type       string
	Stream     string
	Attributes map[string]int64
}

// LinkProxier is the primitive behind the link levers: route host's connections to peer
// through a proxy with these toxics until the returned Undo, which removes the route and
// closes every connection through the proxy (the host reconnects directly). Routing the
// link resets host's live connections to peer once, so that they come back through the
// proxy: a store client sees one reset connection when the lever is pulled and one closed
// connection when it is undone.
type LinkProxier interface {
	ProxyLink(ctx context.Context, host, peer string, toxics []LinkToxic) (Undo, error)
}

// StoreLatency delays every reply from the store to Target.Host by Target.Latency
// (± Target.Jitter), until Undo. The commands reach the store on time; their answers come
// late, so with a latency near the store timeout some calls succeed and some time out after
// the store applied them.
var StoreLatency Lever = linkLever{name: "store-latency", toxics: func(target Target) ([]LinkToxic, error) {
	if target.Latency <= 0 {
		return nil, fmt.Errorf("store-latency: Target.Latency is %s: give the delay to add", target.Latency)
	}
	if target.Jitter < 0 || target.Jitter > target.Latency {
		return nil, fmt.Errorf("store-latency: Target.Jitter %s must lie between 0 and Target.Latency %s", target.Jitter, target.Latency)
	}
	return []LinkToxic{{Name: "store-latency", Type: "latency", Stream: "downstream",
		Attributes: map[string]int64{"latency": target.Latency.Milliseconds(), "jitter": target.Jitter.Milliseconds()}}}, nil
}}

// StoreLostReplies swallows every reply from the store to Target.Host, until Undo: each
// command the gateway sends reaches the store and is applied there (a reservation taken, a
// settlement charged, a release), and its answer never arrives — the connection stays open
// and silent until the client gives up on it. This is the ambiguous failure a store client
// must survive: it cannot tell a write that was applied from one that was not. (Toxiproxy's
// timeout toxic with no timeout, on the downstream.)
var StoreLostReplies Lever = linkLever{name: "store-lost-replies", toxics: func(Target) ([]LinkToxic, error) {
	return []LinkToxic{{Name: "store-lost-replies", Type: "timeout", Stream: "downstream",
		Attributes: map[string]int64{"timeout": 0}}}, nil
}}

// LinkLevers lists the levers of this file, for schedules and documentation.
func LinkLevers() []Lever { return []Lever{StoreLatency, StoreLostReplies} }

// linkLever is a fault on Target.Host's link to the store (Target.Peer, HostValkey when
// empty) made of the toxics its function returns.
type linkLever struct {
	name   string
	toxics func(Target) ([]LinkToxic, error)
}

func (l linkLever) Name() string { return l.name }

// linkProxyReasoner is an engine that can say why it cannot proxy a store link in this run.
type linkProxyReasoner interface{ LinkProxyReason() string }

func (linkLever) Available(t Topology) (bool, string) {
	return offers[LinkProxier](t, "the %s engine cannot put a proxy on a gateway's store link (no LinkProxier: it needs a namespace per host to route one gateway's store connections through the proxy)",
		linkProxyReasoner.LinkProxyReason)
}

func (l linkLever) Inject(ctx context.Context, t Topology, target Target) (Undo, error) {
	if ok, why := l.Available(t); !ok {
		return nil, fmt.Errorf("%s %s: %s: %w", l.name, target.Host, why, ErrUnsupported)
	}
	if target.Peer == "" {
		target.Peer = HostValkey
	}
	if !IsGateway(target.Host) || target.Peer != HostValkey {
		return nil, fmt.Errorf("%s: Target.Host %q and Target.Peer %q: name a gateway and %s (the lever acts on a gateway's store link)", l.name, target.Host, target.Peer, HostValkey)
	}
	toxics, err := l.toxics(target)
	if err != nil {
		return nil, err
	}
	undo, err := t.(LinkProxier).ProxyLink(ctx, target.Host, target.Peer, toxics)
	if err != nil {
		return nil, fmt.Errorf("%s %s↔%s: %w", l.name, target.Host, target.Peer, err)
	}
	return once(func(ctx context.Context) error {
		if err := undo(ctx); err != nil {
			return fmt.Errorf("%s: %w", l.name, err)
		}
		return nil
	}), nil
}
