package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
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

	mu    sync.Mutex
	conns []net.Conn // the clients' connections, for reset
}

// reset closes every client connection the relay carries, as a link that resets them does:
// the client must connect again, through the relay (and its delay).
func (p *slowReplies) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
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
			p.mu.Lock()
			p.conns = append(p.conns, c)
			p.mu.Unlock()
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
		// 500 ms: long enough that even a loaded machine writes the reserve before the client
		// gives up, so the script certainly runs in Valkey; the reply comes back far later.
		URL: "redis://" + relay.ln.Addr().String(), Namespace: "qq-release", Timeout: 500 * time.Millisecond,
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

	// Whether a command whose caller has given up still goes out is up to the client library
	// (here about 7 in 10 do), so the ambiguous reserve is repeated, on a fresh key each time,
	// until one certainly ran in Valkey. Every attempt must end with nothing held and exactly
	// one successful release; at least one must have released a real hold.
	const attempts = 8
	for i := 1; i <= attempts; i++ {
		key := fmt.Sprintf("k%d", i)
		before := l.Releases()
		relay.delay.Store(int64(1500 * time.Millisecond))
		_, err = l.Reserve(ctx, q, key, 15)
		relay.delay.Store(0)
		if !errors.Is(err, ledger.ErrStore) {
			t.Fatalf("reserve through a store that answers late: %v, want a store error", err)
		}

		// If the script ran in Valkey it holds 15 tokens: the ledger must release them (settle
		// at zero) long before the 30 s lease would expire.
		deadline := time.Now().Add(5 * time.Second)
		var st ledger.KeyState
		for {
			st, err = l.Inspect(ctx, q, key)
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
		var rs ledger.ReleaseStats
		for {
			rs = l.Releases()
			if rs.Released+rs.Noop > before.Released+before.Noop || time.Now().After(deadline) {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if rs.Released+rs.Noop != before.Released+before.Noop+1 || rs.Failed != 0 || rs.Dropped != 0 {
			t.Fatalf("attempt %d: release stats %+v after %+v, want exactly one more successful release", i, rs, before)
		}
		if rs.Released > before.Released {
			// The release found the hold (the script had run in Valkey) and settled it; the
			// full capacity is available again.
			// A store error here is not a denial: the pipelined connection may still be
			// delivering replies the relay held back (a call that timed out behind them is
			// retried, for at most 2 s); a denial, or no answer by then, fails.
			var d ledger.Decision
			storeErrors := 0
			for retryUntil := time.Now().Add(2 * time.Second); ; storeErrors++ {
				d, err = l.Reserve(ctx, q, key, 60)
				if !errors.Is(err, ledger.ErrStore) || time.Now().After(retryUntil) {
					break
				}
			}
			if err != nil || !d.Admitted {
				t.Errorf("reserve of the whole capacity after the release: admitted=%v err=%v (after %d store errors)", d.Admitted, err, storeErrors)
			}
			if storeErrors > 0 {
				t.Logf("the reserve after the release met %d store errors before it was answered", storeErrors)
			}
			t.Logf("attempt %d released a real hold; release stats %+v", i, rs)
			return
		}
		t.Logf("attempt %d: the reserve never reached Valkey (nothing to release); again", i)
	}
	t.Fatalf("in %d ambiguous reserves none reached Valkey, so no release of a real hold was shown", attempts)
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

// TestReleaseOvertakingItsReserveLeavesNothingHeld is issue 10's defect 7: valkey-go spreads
// commands over several connections, so a reserve that timed out in the client can still be
// executed after the background release that settles its id at zero. The release must leave a
// tombstone the late reserve respects: refused, nothing held. The calls are issued directly in
// that order against a real Valkey.
func TestReleaseOvertakingItsReserveLeavesNothingHeld(t *testing.T) {
	srv := valkeytest.Start(t)
	v, _ := newValkeyLedger(t, srv.URL(), ledger.Limits{}, 2*time.Second)
	ctx := context.Background()
	q := &ledger.Quota{Rule: "overtaken", Lease: 30 * time.Second, Budgets: []ledger.Budget{{Window: time.Minute, Capacity: 100}}}
	const id = "0123456789abcdef0123456789abcdef"

	// A reserve and settle before: the key's totals are current, so the late reserve below meets
	// the store's fast path, which must check the tombstone too.
	d, err := v.Reserve(ctx, q, "k", 10)
	if err != nil || !d.Admitted {
		t.Fatalf("first reserve: %+v, %v", d, err)
	}
	if _, err := v.Settle(ctx, d.Reservation, ledger.Usage{Tokens: 10, Known: true}); err != nil {
		t.Fatal(err)
	}

	// The release first: the reserve has not run yet, so nothing is settled.
	st, err := v.Settle(ctx, ledger.Reservation{ID: id, Key: "k", Quota: q, Estimate: 60}, ledger.Usage{Tokens: 0, Known: true})
	if err != nil || st.Applied {
		t.Fatalf("release before its reserve = %+v, %v; want a no-op", st, err)
	}
	// Then the late reserve, on another connection.
	out, err := v.ReserveWithID(ctx, q, "k", 60, id)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 1 || out[0] != -1 {
		t.Errorf("late reserve after its release replied %v; want [-1] (refused: the id was released)", out)
	}
	ks, err := v.Inspect(ctx, q, "k")
	if err != nil {
		t.Fatal(err)
	}
	if ks.ActiveReservations != 0 || ks.ReservedTokens != 0 {
		t.Fatalf("after a release and its late reserve: %d reservations hold %d tokens; want none (the hold would last the 30 s lease)",
			ks.ActiveReservations, ks.ReservedTokens)
	}
	// The capacity is whole but the 10 settled first: a fresh reserve of all the rest is admitted.
	if d, err := v.Reserve(ctx, q, "k", 90); err != nil || !d.Admitted {
		t.Fatalf("reserve of the rest of the capacity after the release: %+v, %v", d, err)
	}
}
