package ledger_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/valkeytest"
	"github.com/quotaqual/quotaqual/ledger"
)

// slowReplies relays TCP to a real Valkey and, while delay is set, holds every reply from
// Valkey back for that long: the command runs in Valkey, the client times out. That is the
// ambiguous reserve a loaded store produces.
type slowReplies struct {
	ln    net.Listener
	to    string
	delay atomic.Int64 // nanoseconds
}

func newSlowReplies(t *testing.T, to string) *slowReplies {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowReplies{ln: ln, to: to}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.relay(c)
		}
	}()
	return p
}

func (p *slowReplies) relay(client net.Conn) {
	server, err := net.Dial("tcp", p.to)
	if err != nil {
		client.Close()
		return
	}
	go func() { _, _ = io.Copy(server, client); server.Close() }()
	buf := make([]byte, 64<<10)
	for {
		n, err := server.Read(buf)
		if n > 0 {
			if d := time.Duration(p.delay.Load()); d > 0 {
				time.Sleep(d)
			}
			if _, werr := client.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	client.Close()
}

func TestAmbiguousReserveIsReleasedNotHeldUntilTheLeaseExpires(t *testing.T) {
	srv := valkeytest.Start(t)
	relay := newSlowReplies(t, srv.Addr())
	l, err := ledger.NewValkey(ledger.ValkeyOptions{
		URL: "redis://" + relay.ln.Addr().String(), Namespace: "qq-release", Timeout: 150 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	q := &ledger.Quota{Rule: "r", Budgets: []ledger.Budget{{Window: time.Minute, Capacity: 60}}, Lease: 30 * time.Second}
	ctx := context.Background()
	// Warm the connection and the script cache (a cold EVALSHA would come back NOSCRIPT and
	// not run at all — a different, unambiguous case).
	warm, err := l.Reserve(ctx, q, "warm", 1)
	if err != nil || !warm.Admitted {
		t.Fatalf("warm-up reserve: %v", err)
	}
	if _, err := l.Settle(ctx, warm.Reservation, ledger.Usage{}); err != nil {
		t.Fatal(err)
	}

	relay.delay.Store(int64(400 * time.Millisecond))
	_, err = l.Reserve(ctx, q, "k", 15)
	if !errors.Is(err, ledger.ErrStore) {
		t.Fatalf("reserve through a store that answers late: %v, want a store error", err)
	}
	relay.delay.Store(0)

	// The script ran in Valkey: it holds 15 tokens. The ledger must release them (settle at
	// zero) long before the 30 s lease would expire.
	deadline := time.Now().Add(5 * time.Second)
	var st ledger.KeyState
	for {
		st, err = l.Inspect(ctx, q, "k")
		if err == nil && st.ReservedTokens == 0 && st.ActiveReservations == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("5 s after an ambiguous reserve the key still holds %d tokens in %d reservations (err %v): the hold waits for its 30 s lease",
				st.ReservedTokens, st.ActiveReservations, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := st.Windows[0].Settled; got != 0 {
		t.Errorf("released at %d settled tokens, want 0: the request never reached a provider", got)
	}
	// Exactly one release ran and succeeded. Usually it finds the hold (the script ran in
	// Valkey) and settles it; on a heavily loaded machine the client can give up before the
	// command is even written, and then the release finds nothing (noop). Without the release,
	// either the hold above stays for the whole lease or these stats stay zero.
	for rs := l.Releases(); rs.Released+rs.Noop == 0 && time.Now().Before(deadline); rs = l.Releases() {
		time.Sleep(10 * time.Millisecond)
	}
	rs := l.Releases()
	if rs.Released+rs.Noop != 1 || rs.Failed != 0 || rs.Dropped != 0 {
		t.Errorf("release stats %+v, want exactly one release, succeeded", rs)
	}
	t.Logf("release stats %+v", rs)
	// The full capacity is available again.
	d, err := l.Reserve(ctx, q, "k", 60)
	if err != nil || !d.Admitted {
		t.Errorf("reserve of the whole capacity after the release: admitted=%v err=%v", d.Admitted, err)
	}
}

func TestReserveWithoutAConnectionReleasesNothing(t *testing.T) {
	// Nothing listens here: no script can have run, so no release is attempted.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	l, err := ledger.NewValkey(ledger.ValkeyOptions{URL: "redis://" + addr, Namespace: "qq-release", Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	q := &ledger.Quota{Rule: "r", Budgets: []ledger.Budget{{Window: time.Minute, Capacity: 60}}, Lease: 30 * time.Second}
	if _, err := l.Reserve(context.Background(), q, "k", 15); !errors.Is(err, ledger.ErrStore) {
		t.Fatalf("reserve with Valkey down: %v, want a store error", err)
	}
	l.Close()
	if rs := l.Releases(); rs != (ledger.ReleaseStats{}) {
		t.Errorf("release stats %+v after a reserve that never reached the store, want none", rs)
	}
}
