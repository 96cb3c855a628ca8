package enginetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/topology"
)

// DialStore opens a TCP connection from host to the run's Valkey the way host's own store
// client connects (through whatever route a lever put on host's link).
type DialStore func(ctx context.Context, host string) (net.Conn, error)

// CheckStoreLinkLevers pulls the store-latency and store-lost-replies levers on gateway-a's
// store link of a running topology. Latency is measured where the gateway sits (a Valkey
// connection from gateway-a, dialled as its store client dials, through the same route) and
// on the gateway's own answers; lost replies leave a client timing out while Valkey, read
// through StoreAdmin, holds what it wrote; each Undo brings the direct path back. left, when
// not nil, returns what of the proxy's route is still in place after an Undo ("" for
// nothing).
func CheckStoreLinkLevers(t *testing.T, topo topology.Topology, d *deployment.Deployment, dial DialStore, left func() string) {
	t.Helper()
	ctx := context.Background()
	gwA, gwB := topology.HostGatewayA, topology.HostGatewayB
	for _, l := range topology.LinkLevers() {
		if ok, why := l.Available(topo); !ok {
			t.Fatalf("%s on %s: %s", l.Name(), topo.Engine(), why)
		}
	}
	timeout := d.Profile.StoreTimeout

	base := pingRTT(t, dial, gwA, d.ValkeyPassword, 9)
	const added = 200 * time.Millisecond
	undo, err := topology.StoreLatency.Inject(ctx, topo, topology.Target{Host: gwA, Latency: added})
	if err != nil {
		t.Fatal(err)
	}
	slow := pingRTT(t, dial, gwA, d.ValkeyPassword, 9)
	fromB := pingRTT(t, dial, gwB, d.ValkeyPassword, 5)
	t.Logf("PING round trip from %s: %s direct, %s with +%s latency (from %s meanwhile: %s)", gwA, base, slow, added, gwB, fromB)
	if slow-base < added-10*time.Millisecond || slow-base > added+150*time.Millisecond {
		t.Errorf("latency added on %s↔valkey: %s (median %s → %s), want %s", gwA, slow-base, base, slow, added)
	}
	if fromB > base+100*time.Millisecond {
		t.Errorf("%s's store link slowed too: %s", gwB, fromB)
	}
	// The gateway's own answer: its reservation waits for the delayed reply. The first
	// request may meet the reset of the direct connection; a decision must come soon after.
	WaitStoreBack(t, topo, gwA, d, 5*time.Second)
	var chatA []time.Duration
	for range 3 {
		start := time.Now()
		code, _ := Chat(t, topo, gwA, d)
		chatA = append(chatA, time.Since(start))
		if code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Errorf("chat via %s with +%s store latency (below the %s store timeout): %d, want a decision", gwA, added, timeout, code)
		}
	}
	slices.Sort(chatA)
	t.Logf("chat via %s with +%s store latency: %v", gwA, added, chatA)
	if chatA[0] < added {
		t.Errorf("chat via %s took %s with +%s on every store reply: the reservation did not go through the proxy", gwA, chatA[0], added)
	}
	through := dialThrough(t, dial, gwA)
	if err := undo(ctx); err != nil {
		t.Fatal(err)
	}
	checkEnded(t, through, "store-latency")
	if err := undo(ctx); err != nil {
		t.Errorf("a second undo: %v", err)
	}
	WaitStoreBack(t, topo, gwA, d, 5*time.Second)
	after := pingRTT(t, dial, gwA, d.ValkeyPassword, 9)
	t.Logf("PING round trip from %s after undo: %s", gwA, after)
	if after > base+50*time.Millisecond {
		t.Errorf("after undo the link is still slow: %s (was %s)", after, base)
	}
	if left != nil {
		if out := left(); out != "" {
			t.Errorf("after undo %s still has the proxy's route: %s", gwA, out)
		}
	}

	undo, err = topology.StoreLostReplies.Inject(ctx, topo, topology.Target{Host: gwA, Peer: topology.HostValkey})
	if err != nil {
		t.Fatal(err)
	}
	key := fmt.Sprintf("qq-lost-reply-%d", time.Now().UnixNano())
	if reply, err := pipelined(dial, gwA, 1500*time.Millisecond, "AUTH", d.ValkeyPassword, "SET", key, "applied"); err == nil {
		t.Errorf("a SET through %s's link losing every reply was answered: %q", gwA, reply)
	}
	admin := topo.(topology.StoreAdmin)
	if got, err := admin.StoreCommand(ctx, "GET", key); err != nil || got != "applied" {
		t.Errorf("Valkey after the unanswered SET: %q, %v; want the write applied (\"applied\")", got, err)
	}
	start := time.Now()
	code, _ := Chat(t, topo, gwA, d)
	took := time.Since(start)
	t.Logf("chat via %s losing every store reply: %d after %s (store timeout %s)", gwA, code, took, timeout)
	if code != http.StatusServiceUnavailable || took > timeout+d.Profile.OutageSLO {
		t.Errorf("chat via %s losing every store reply: %d after %s, want 503 within %s", gwA, code, took, timeout+d.Profile.OutageSLO)
	}
	if code, _ := Chat(t, topo, gwB, d); code != http.StatusOK && code != http.StatusTooManyRequests {
		t.Errorf("chat via %s meanwhile: %d, want a decision", gwB, code)
	}
	through = dialThrough(t, dial, gwA)
	if err := undo(ctx); err != nil {
		t.Fatal(err)
	}
	checkEnded(t, through, "store-lost-replies")
	WaitStoreBack(t, topo, gwA, d, 10*time.Second)
	if _, err := pipelined(dial, gwA, time.Second, "AUTH", d.ValkeyPassword, "GET", key); err != nil {
		t.Errorf("after undo a GET from %s: %v", gwA, err)
	}
}

// dialThrough opens a connection from host to the store while a lever's proxy is on its link
// (so through the proxy), for checkEnded after the lever's Undo.
func dialThrough(t *testing.T, dial DialStore, host string) net.Conn {
	t.Helper()
	conn, err := dial(context.Background(), host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// endedWithin bounds how soon after a lever's Undo a connection made through its proxy must
// end for its client: the proxy closes it at once, so this is only scheduling slack.
const endedWithin = time.Second

// checkEnded checks that conn, made through a lever's proxy, ended for its client (EOF or a
// reset) within endedWithin of the Undo: a healed link must not leave the client a half-open
// connection whose calls go unanswered until its own liveness probe gives up (seen: the
// redirect's table deleted before the proxy closed took the NAT that carries the proxy's FIN
// back to the client; gateway-a's store client then failed its calls for 2-3 s after the heal).
func checkEnded(t *testing.T, conn net.Conn, lever string) {
	t.Helper()
	start := time.Now()
	_ = conn.SetReadDeadline(start.Add(endedWithin))
	buf := make([]byte, 512)
	var err error
	for err == nil {
		_, err = conn.Read(buf) // a lost reply the proxy held back may still come first
	}
	if ne := net.Error(nil); errors.As(err, &ne) && ne.Timeout() {
		t.Errorf("%s: a connection made through the proxy was still open for its client %s after Undo (half-open: no FIN, no reset)", lever, endedWithin)
		return
	}
	t.Logf("%s: a connection made through the proxy ended for its client %s after Undo (%v)", lever, time.Since(start).Round(time.Millisecond), err)
}

// pingRTT is the median round trip of n PINGs on one authenticated connection from host's
// namespace to the run's Valkey (through whatever route host's own connections take).
func pingRTT(t *testing.T, dial DialStore, host, password string, n int) time.Duration {
	t.Helper()
	conn, r := authed(t, dial, host, password)
	defer conn.Close()
	var rtts []time.Duration
	for range n {
		start := time.Now()
		if _, err := conn.Write(resp("PING")); err != nil {
			t.Fatal(err)
		}
		if line, err := r.ReadString('\n'); err != nil || line != "+PONG\r\n" {
			t.Fatalf("PING from %s: %q %v", host, line, err)
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	return rtts[n/2]
}

func authed(t *testing.T, dial DialStore, host, password string) (net.Conn, *bufio.Reader) {
	t.Helper()
	conn, err := dial(context.Background(), host)
	if err != nil {
		t.Fatal(err)
	}
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	r := bufio.NewReader(conn)
	if _, err := conn.Write(resp("AUTH", password)); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "+OK\r\n" {
		conn.Close()
		t.Fatalf("AUTH from %s: %v (reply %d bytes)", host, err, len(line))
	}
	return conn, r
}

// pipelined sends two commands at once (so that the second is sent whatever becomes of the
// first's answer) from host's namespace and reads both replies within d.
func pipelined(dial DialStore, host string, d time.Duration, a1, a2, b1, b2 string, b3 ...string) (string, error) {
	conn, err := dial(context.Background(), host)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(d))
	if _, err := conn.Write(append(resp(a1, a2), resp(append([]string{b1, b2}, b3...)...)...)); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	var got []string
	for range 2 {
		line, err := r.ReadString('\n')
		if err != nil {
			return strings.Join(got, ""), err
		}
		got = append(got, line)
		if strings.HasPrefix(line, "$") && line != "$-1\r\n" {
			body, err := r.ReadString('\n')
			if err != nil {
				return strings.Join(got, ""), err
			}
			got = append(got, body)
		}
	}
	return strings.Join(got, ""), nil
}

func resp(args ...string) []byte {
	s := fmt.Sprintf("*%d\r\n", len(args))
	for _, a := range args {
		s += fmt.Sprintf("$%d\r\n%s\r\n", len(a), a)
	}
	return []byte(s)
}
