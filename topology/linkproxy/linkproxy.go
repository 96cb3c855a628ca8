// Package linkproxy is the userspace TCP proxy behind the latency and lost-replies levers:
// Toxiproxy's toxics (github.com/Shopify/toxiproxy/v2: latency, timeout, reset_peer,
// limit_data, …) on sockets the engine opens itself. Toxiproxy's own Proxy listens and dials
// with plain net.Listen and net.Dial on whatever thread runs them; an engine that keeps each
// host in a network namespace of its own must open both ends where the host is, so this
// package runs the accept loop and the upstream dial itself and hands each connection to
// Toxiproxy's ToxicCollection, which pipes it through the toxics.
package linkproxy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/stream"
	"github.com/rs/zerolog"

	"github.com/quotaqual/quotaqual/topology"
)

// Proxy forwards every connection accepted on its listener to a new upstream connection,
// through its toxics, until Close.
type Proxy struct {
	server *toxiproxy.ApiServer
	tp     *toxiproxy.Proxy
	ln     net.Listener
	dial   func(context.Context) (net.Conn, error)

	mu     sync.Mutex
	conns  []net.Conn
	closed bool
	done   chan struct{}
}

// dialTimeout bounds one upstream dial: a client whose upstream cannot be reached is closed.
const dialTimeout = 2 * time.Second

// Start proxies ln's connections to what dial opens, through toxics (applied to every
// connection, in order). The proxy owns ln from here on.
func Start(name string, ln net.Listener, dial func(context.Context) (net.Conn, error), toxics []topology.LinkToxic) (*Proxy, error) {
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	tp := toxiproxy.NewProxy(server, name, ln.Addr().String(), "")
	for _, tx := range toxics {
		body, err := toxicJSON(tx)
		if err != nil {
			return nil, err
		}
		if _, err := tp.Toxics.AddToxicJson(strings.NewReader(body)); err != nil {
			return nil, fmt.Errorf("toxic %s (%s, %s): %w", tx.Name, tx.Type, tx.Stream, err)
		}
	}
	p := &Proxy{server: server, tp: tp, ln: ln, dial: dial, done: make(chan struct{})}
	go p.accept()
	return p, nil
}

// toxicJSON renders a toxic as Toxiproxy's API takes it (toxicity 1: every connection).
func toxicJSON(tx topology.LinkToxic) (string, error) {
	if tx.Name == "" || tx.Type == "" {
		return "", fmt.Errorf("toxic %+v: Name and Type are required", tx)
	}
	if tx.Stream != "upstream" && tx.Stream != "downstream" {
		return "", fmt.Errorf("toxic %s: Stream is %q: use upstream (host to peer) or downstream (peer to host)", tx.Name, tx.Stream)
	}
	b, err := json.Marshal(map[string]any{"name": tx.Name, "type": tx.Type, "stream": tx.Stream, "toxicity": 1.0, "attributes": tx.Attributes})
	return string(b), err
}

// Addr is where the proxy listens.
func (p *Proxy) Addr() net.Addr { return p.ln.Addr() }

func (p *Proxy) accept() {
	defer close(p.done)
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		ctx, cancel := context.WithTimeout(context.Background(), dialTimeout)
		upstream, err := p.dial(ctx)
		cancel()
		if err != nil {
			client.Close()
			continue
		}
		if !p.track(client, upstream) {
			return
		}
		name := client.RemoteAddr().String()
		// Both ends are *net.TCPConn, as Toxiproxy's reset_peer toxic requires.
		p.tp.Toxics.StartLink(p.server, name+"upstream", client, upstream.(*net.TCPConn), stream.Upstream)
		p.tp.Toxics.StartLink(p.server, name+"downstream", upstream, client.(*net.TCPConn), stream.Downstream)
	}
}

// track remembers a connection pair so that Close ends it; after Close it closes them at once.
func (p *Proxy) track(conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		for _, c := range conns {
			c.Close()
		}
		return false
	}
	p.conns = append(p.conns, conns...)
	return true
}

// Close stops accepting and closes every connection through the proxy: its clients see
// their connection end and reconnect (to wherever their traffic goes then).
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	err := p.ln.Close()
	<-p.done
	for _, c := range conns {
		_ = c.Close()
	}
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

// Links are the proxies an engine has up, at most one per link (the pair of hosts, whichever
// is named first). The zero value is ready to use.
type Links struct {
	mu sync.Mutex
	m  map[[2]string]*Proxy
}

// Claim reserves the link between host and peer for a proxy, or fails when it has one. Put
// the proxy in with Set once it runs, and Release the link when the proxy is closed (or
// could not start).
func (l *Links) Claim(host, peer string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	key := topology.PairKey(host, peer)
	if _, busy := l.m[key]; busy {
		return fmt.Errorf("proxy on %s→%s: the link already has a proxy: undo that lever first", host, peer)
	}
	if l.m == nil {
		l.m = map[[2]string]*Proxy{}
	}
	l.m[key] = nil
	return nil
}

// Set records the proxy of a claimed link.
func (l *Links) Set(host, peer string, p *Proxy) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.m[topology.PairKey(host, peer)] = p
}

// Release frees the link.
func (l *Links) Release(host, peer string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, topology.PairKey(host, peer))
}

// CloseAll closes the proxies still up (levers never undone: their sockets would keep a
// host's namespace alive after the teardown) and forgets every link.
func (l *Links) CloseAll() {
	l.mu.Lock()
	ps := l.m
	l.m = nil
	l.mu.Unlock()
	for _, p := range ps {
		if p != nil {
			_ = p.Close()
		}
	}
}
