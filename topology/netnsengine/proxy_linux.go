//go:build linux

package netnsengine

import (
	"context"
	"fmt"

	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/topology/linkproxy"
)

// LinkProxyReason is empty when ProxyLink can put a proxy on a gateway's store link, or says
// why not: a Valkey Cluster's gateways talk to every node, not to one address.
func (t *netnsTopo) LinkProxyReason() string {
	if t.ClusterAddrs() != nil {
		return "the run's store is a Valkey Cluster: a proxy on one address would carry one node's traffic, not the store's (run with --store single)"
	}
	return ""
}

// ProxyLink implements topology.LinkProxier. The proxy runs in the harness, with both its
// ends in host's namespace (linkproxy.Route: a listener on 127.0.0.1 there, a marked dial of
// peer from there, an nftables redirect of host's new connections to peer's store port and a
// reset of its live direct ones), so the gateway's store client reconnects through the proxy
// without a restart. Undo removes the redirect and closes the proxy (linkproxy.Route: in an
// order that ends the client's proxied connections for the client too) and it reconnects
// directly.
func (t *netnsTopo) ProxyLink(ctx context.Context, host, peer string, toxics []topology.LinkToxic) (topology.Undo, error) {
	if err := topology.CheckPair(host, peer, t.hosts()); err != nil {
		return nil, err
	}
	if peer != topology.HostValkey {
		return nil, fmt.Errorf("proxy on %s→%s: only the link to %s (its store port) can be proxied", host, peer, topology.HostValkey)
	}
	if why := t.LinkProxyReason(); why != "" {
		return nil, fmt.Errorf("proxy on %s→%s: %s: %w", host, peer, why, topology.ErrUnsupported)
	}
	ns := linkproxy.Namespace{
		In: func(f func() error) error { return t.onThreadIn(host, f) },
		NFT: func(ctx context.Context, script string) error {
			return run(ctx, script, append(t.wrap(host), "nft", "-f", "-")...)
		},
	}
	return t.proxies.Route(ctx, host, peer, ns, t.hostAddr(peer), netnsPorts.Valkey, toxics)
}
