package kindengine

// The harness's way in: Client() and Observer() connections are port-forwards to a ready pod
// of the Service a URL names (one SPDY stream pair per connection), and exec in a pod.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"

	"github.com/quotaqual/quotaqual/topology"
)

// dialService opens a connection to <host>.<ns>.svc.<domain>:port through a port-forward to
// a ready pod of host.
func (t *kindTopo) dialService(ctx context.Context, addr string) (net.Conn, error) {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return nil, err
	}
	host, ok := strings.CutSuffix(h, "."+t.ns+".svc."+kindClusterDomain)
	if !ok || strings.Contains(host, ".") {
		return nil, fmt.Errorf("dial %s: not a Service of namespace %s", addr, t.ns)
	}
	pod, err := t.readyPod(ctx, host)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: err}
	}
	return t.portForward(ctx, pod.Name, port)
}

// pfConnection returns the (cached) port-forward connection to pod.
func (t *kindTopo) pfConnection(ctx context.Context, pod string) (httpstream.Connection, error) {
	t.mu.Lock()
	if c := t.pf[pod]; c != nil {
		select {
		case <-c.CloseChan():
			delete(t.pf, pod)
		default:
			t.mu.Unlock()
			return c, nil
		}
	}
	t.mu.Unlock()
	u := t.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(t.ns).Name(pod).SubResource("portforward").URL()
	tr, upgrader, err := spdy.RoundTripperFor(t.rest)
	if err != nil {
		return nil, err
	}
	var dialer httpstream.Dialer = spdy.NewDialer(upgrader, &http.Client{Transport: tr}, http.MethodPost, u)
	if ws, err := portforward.NewSPDYOverWebsocketDialer(u, t.rest); err == nil {
		// As kubectl does: websockets first, SPDY when the server does not upgrade.
		dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
	type result struct {
		c   httpstream.Connection
		err error
	}
	ch := make(chan result, 1)
	go func() {
		c, _, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
		ch <- result{c, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return nil, fmt.Errorf("port-forward to pod %s: %w", pod, r.err)
		}
		t.mu.Lock()
		if old := t.pf[pod]; old != nil {
			t.mu.Unlock()
			r.c.Close()
			return old, nil
		}
		t.pf[pod] = r.c
		t.mu.Unlock()
		return r.c, nil
	case <-ctx.Done():
		go func() {
			if r := <-ch; r.c != nil {
				r.c.Close()
			}
		}()
		return nil, fmt.Errorf("port-forward to pod %s: %w", pod, ctx.Err())
	}
}

// portForward opens one forwarded TCP connection to pod:port (an error and a data stream, as
// kubectl port-forward does per accepted connection).
func (t *kindTopo) portForward(ctx context.Context, pod string, port int) (net.Conn, error) {
	c, err := t.portForwardOnce(ctx, pod, port)
	if err != nil && ctx.Err() == nil {
		// A cached connection may have gone stale (the kubelet's stream timed out): the
		// failed one was dropped, so this dials afresh.
		c, err = t.portForwardOnce(ctx, pod, port)
	}
	return c, err
}

func (t *kindTopo) portForwardOnce(ctx context.Context, pod string, port int) (net.Conn, error) {
	conn, err := t.pfConnection(ctx, pod)
	if err != nil {
		return nil, err
	}
	id := strconv.FormatInt(t.reqID.Add(1), 10)
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(port))
	h.Set(corev1.PortForwardRequestIDHeader, id)
	errStream, err := conn.CreateStream(h)
	if err != nil {
		t.dropPF(pod, conn)
		return nil, fmt.Errorf("port-forward to %s:%d: error stream: %w", pod, port, err)
	}
	errStream.Close() // nothing is sent on it
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := conn.CreateStream(h)
	if err != nil {
		conn.RemoveStreams(errStream)
		t.dropPF(pod, conn)
		return nil, fmt.Errorf("port-forward to %s:%d: data stream: %w", pod, port, err)
	}
	c := &pfConn{stream: data, errStream: errStream, conn: conn, addr: pfAddr(pod + ":" + strconv.Itoa(port)), errc: make(chan struct{})}
	go func() {
		msg, _ := io.ReadAll(errStream)
		if len(msg) > 0 {
			c.mu.Lock()
			c.remoteErr = errors.New(strings.TrimSpace(string(msg)))
			c.mu.Unlock()
			data.Reset()
		}
		close(c.errc)
	}()
	return c, nil
}

func (t *kindTopo) dropPF(pod string, c httpstream.Connection) {
	t.mu.Lock()
	if t.pf[pod] == c {
		delete(t.pf, pod)
	}
	t.mu.Unlock()
	c.Close()
}

type pfAddr string

func (a pfAddr) Network() string { return "portforward" }
func (a pfAddr) String() string  { return string(a) }

// pfConn is one forwarded connection as a net.Conn. Deadlines are not supported (the HTTP
// transport uses timers, not deadlines); closing resets the stream.
type pfConn struct {
	stream    httpstream.Stream
	errStream httpstream.Stream
	conn      httpstream.Connection
	addr      pfAddr
	errc      chan struct{}

	mu        sync.Mutex
	remoteErr error
	closeOnce sync.Once
}

func (c *pfConn) Read(p []byte) (int, error) {
	n, err := c.stream.Read(p)
	if err != nil {
		c.mu.Lock()
		re := c.remoteErr
		c.mu.Unlock()
		if re != nil {
			return n, fmt.Errorf("port-forward: %w", re)
		}
	}
	return n, err
}

func (c *pfConn) Write(p []byte) (int, error) { return c.stream.Write(p) }

func (c *pfConn) Close() error {
	c.closeOnce.Do(func() {
		_ = c.stream.Reset()
		c.conn.RemoveStreams(c.stream, c.errStream)
	})
	return nil
}

func (c *pfConn) LocalAddr() net.Addr              { return pfAddr("harness") }
func (c *pfConn) RemoteAddr() net.Addr             { return c.addr }
func (c *pfConn) SetDeadline(time.Time) error      { return nil }
func (c *pfConn) SetReadDeadline(time.Time) error  { return nil }
func (c *pfConn) SetWriteDeadline(time.Time) error { return nil }

// waitHTTP polls url through the observer until it answers 200.
func (t *kindTopo) waitHTTP(ctx context.Context, url string, within time.Duration) error {
	return topology.ReadyPoll{Client: t.observer, URL: url, Within: within, Every: kindPoll, Try: 5 * time.Second}.Wait(ctx)
}

// exec runs argv in pod's first container and returns its stdout; a non-zero exit is an
// error that still carries the output.
func (t *kindTopo) exec(ctx context.Context, pod string, argv []string) ([]byte, error) {
	req := t.cs.CoreV1().RESTClient().Post().Resource("pods").Namespace(t.ns).Name(pod).SubResource("exec").
		VersionedParams(&corev1.PodExecOptions{Command: argv, Stdout: true, Stderr: true}, scheme.ParameterCodec)
	sp, err := remotecommand.NewSPDYExecutor(t.rest, http.MethodPost, req.URL())
	if err != nil {
		return nil, err
	}
	var ex remotecommand.Executor = sp
	if ws, err := remotecommand.NewWebSocketExecutor(t.rest, http.MethodGet, req.URL().String()); err == nil {
		if fb, err := remotecommand.NewFallbackExecutor(ws, sp, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		}); err == nil {
			ex = fb
		}
	}
	var stdout, stderr bytes.Buffer
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: &stdout, Stderr: &stderr})
	if err != nil && stdout.Len() == 0 {
		return nil, fmt.Errorf("exec in pod %s: %w: %s", pod, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}
