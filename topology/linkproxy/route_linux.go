//go:build linux

package linkproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"

	"github.com/quotaqual/quotaqual/topology"
)

// Mark marks the proxy's own upstream sockets (SO_MARK), so that the redirect that brings the
// host's connections to the proxy lets the proxy's own connection to the peer through — the
// way Istio's sidecar capture excludes the proxy's traffic.
const Mark = 0x5171

// Namespace is how an engine reaches one host's network namespace from the harness: In runs f
// on an OS thread switched into it (sockets f opens belong there), NFT loads an nft script
// there.
type Namespace struct {
	In  func(f func() error) error
	NFT func(ctx context.Context, script string) error
}

// Route puts a proxy with toxics on a host's connections to peerAddr:port, both of its ends
// in the host's namespace ns: it listens on 127.0.0.1 there and dials the peer from there
// (marked, so its own connection passes). An nftables table of its own in the namespace
// redirects the host's new connections to the peer's port to the proxy (nat output) and
// resets its live direct ones (filter output), so the host's client reconnects through the
// proxy without a restart. unroute undoes it all, in an order that ends the client's proxied
// connections for the client too (see unrouteNFT): the redirect's rules flushed, the proxy
// closed, the table deleted; the client reconnects directly.
func Route(ctx context.Context, name string, ns Namespace, peerAddr string, port int, toxics []topology.LinkToxic) (p *Proxy, unroute func(context.Context) error, err error) {
	var ln net.Listener
	if err := ns.In(func() error {
		var err error
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		return nil, nil, fmt.Errorf("listening in the host's namespace: %w", err)
	}
	upstream := net.JoinHostPort(peerAddr, fmt.Sprint(port))
	dial := func(ctx context.Context) (net.Conn, error) {
		var conn net.Conn
		err := ns.In(func() error {
			d := net.Dialer{Control: markSocket}
			var err error
			conn, err = d.DialContext(ctx, "tcp", upstream)
			return err
		})
		return conn, err
	}
	p, err = Start(name, ln, dial, toxics)
	if err != nil {
		ln.Close()
		return nil, nil, err
	}
	table := Table(peerAddr)
	unroute = func(ctx context.Context) error {
		flush, del := unrouteNFT(table)
		ferr := ns.NFT(ctx, flush)
		cerr := p.Close()
		return errors.Join(ferr, cerr, ns.NFT(ctx, del))
	}
	if err := ns.NFT(ctx, RedirectNFT(table, peerAddr, port, p.Addr().(*net.TCPAddr).Port)); err != nil {
		ctx := context.WithoutCancel(ctx)
		return nil, nil, fmt.Errorf("routing through it: %w", errors.Join(err, unroute(ctx)))
	}
	return p, unroute, nil
}

// unrouteNFT is the redirect's removal in two nft scripts, with the proxy closed between them.
// flush empties the table's chains: new connections go directly to the peer again. The table's
// nat chain stays registered meanwhile, and with it the kernel's NAT of the connections the
// redirect already translated: closing the proxy then sends its FIN on each of them back to the
// client as coming from the peer, and the client's connection ends. del deletes the table.
// Deleted first, the table took that NAT with it where it was the namespace's last nat chain
// (the kernel's NAT hooks go with that), as on netns: the proxy's FIN, untranslated, reached
// no socket of the client, whose connection stayed ESTABLISHED and unanswered — half-open —
// until its own liveness probe gave up (valkey-go: a PING unanswered within ConnWriteTimeout),
// and gateway-a's store calls on it failed for 2-3 s after the heal (enginetest.checkEnded
// guards this). On docker the old order did end the connections (TestDockerStoreLinkLevers
// passed on it), most likely because Docker's embedded-DNS nat rules in the container keep
// the hooks; the order here does not depend on that.
func unrouteNFT(table string) (flush, del string) {
	return fmt.Sprintf("table ip %s {}\nflush table ip %s\n", table, table),
		fmt.Sprintf("table ip %s {}\ndelete table ip %s\n", table, table)
}

// markSocket sets SO_MARK on the proxy's upstream socket before it connects.
func markSocket(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_MARK, Mark)
	}); err != nil {
		return err
	}
	return serr
}

// Table names the redirect table for a peer address.
func Table(peerAddr string) string { return "qqproxy_" + strings.ReplaceAll(peerAddr, ".", "_") }

// RedirectNFT is the nft script that routes the host's connections to peerAddr:port through
// the proxy on 127.0.0.1:proxyPort. The nat chain redirects a new connection's first packet
// (conntrack keeps the rest on the same path); the filter chain, after it, resets a live
// connection that still goes directly (its packets were never redirected), so the client
// reconnects through the proxy. The proxy's own marked upstream connection passes both.
func RedirectNFT(table, peerAddr string, port, proxyPort int) string {
	match := fmt.Sprintf("ip daddr %s tcp dport %d meta mark != 0x%x", peerAddr, port, Mark)
	return fmt.Sprintf("table ip %s {}\ndelete table ip %s\ntable ip %s {\n"+
		"\tchain to_proxy {\n\t\ttype nat hook output priority -100; policy accept;\n\t\t%s counter redirect to :%d\n\t}\n"+
		"\tchain reset_direct {\n\t\ttype filter hook output priority filter; policy accept;\n\t\t%s counter reject with tcp reset\n\t}\n}\n",
		table, table, table, match, proxyPort, match)
}

// Route claims the link between host and peer, routes host's connections to peerAddr:port
// through a proxy with toxics (the package function Route) and returns its Undo: the route
// removed, the proxy closed, the link released.
func (l *Links) Route(ctx context.Context, host, peer string, ns Namespace, peerAddr string, port int, toxics []topology.LinkToxic) (topology.Undo, error) {
	if err := l.Claim(host, peer); err != nil {
		return nil, err
	}
	p, unroute, err := Route(ctx, host+"-"+peer, ns, peerAddr, port, toxics)
	if err != nil {
		l.Release(host, peer)
		return nil, fmt.Errorf("proxy on %s→%s: %w", host, peer, err)
	}
	l.Set(host, peer, p)
	return func(ctx context.Context) error {
		if err := unroute(ctx); err != nil {
			return fmt.Errorf("removing the route through the proxy on %s→%s: %w", host, peer, err)
		}
		l.Release(host, peer)
		return nil
	}, nil
}
