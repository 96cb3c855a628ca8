package ledger_test

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/valkeytest"
	"github.com/quotaqual/quotaqual/ledger"
)

// TestReconnectThroughSlowRepliesDecidesAgain: the store link's replies slowed to 60 % of the
// store timeout — every call still answers in time on a live connection — and the ledger's
// connections reset (as pulling a store-link lever does, or any link that drops them). A fresh
// connection costs a round trip of handshake before the call's own, and the two together pass
// the timeout. The first call may fail; the ledger must then decide the calls that follow,
// one at a time as a lone client sends them. (Seen before: valkey-go's synchronous path closes
// the connection when a lone call times out, so every call paid the handshake again and
// failed; lossy-store-link's store-latency phase decided nothing for 4-6 s, and with replies
// delayed half the timeout, never.)
func TestReconnectThroughSlowRepliesDecidesAgain(t *testing.T) {
	srv := valkeytest.Start(t)
	relay := newSlowReplies(t, srv.Addr())
	const timeout = 300 * time.Millisecond
	l, err := ledger.NewValkey(ledger.ValkeyOptions{URL: "redis://" + relay.ln.Addr().String(), Namespace: "qq-slowlink", Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	q := &ledger.Quota{Rule: "r", Budgets: []ledger.Budget{{Window: time.Minute, Capacity: 1 << 30}}, Lease: 30 * time.Second}
	ctx := context.Background()
	// Warm the connection and the script cache on the fast link (a cold script costs a second
	// round trip: NOSCRIPT, then EVAL).
	if d, err := l.Reserve(ctx, q, "warm", 1); err != nil || !d.Admitted {
		t.Fatalf("warm-up reserve: %+v %v", d, err)
	}

	relay.delay.Store(int64(timeout * 6 / 10))
	relay.reset()
	// valkey-go spreads calls at random over 2^PipelineMultiplex connections (2 on 2 cores, 4
	// from 4): the call that meets the reset may fail, and each connection re-made may fail the
	// call it was made for, plus, on a loaded machine, one more (a handshake past the timeout).
	conns := 1
	switch n := runtime.GOMAXPROCS(0); {
	case n >= 4:
		conns = 4
	case n >= 2:
		conns = 2
	}
	allowed := 1 + 2*conns
	const calls = 12
	var outcome []string
	failed := 0
	for i := range calls {
		start := time.Now()
		d, err := l.Reserve(ctx, q, fmt.Sprintf("k%d", i), 1)
		took := time.Since(start).Round(time.Millisecond)
		if err != nil || !d.Admitted {
			failed++
			outcome = append(outcome, fmt.Sprintf("failed after %s (%v)", took, err))
			continue
		}
		outcome = append(outcome, fmt.Sprintf("admitted in %s", took))
	}
	t.Logf("%d lone reserves after the reset, replies delayed %s (timeout %s): %v", calls, timeout*6/10, timeout, outcome)
	if failed > allowed {
		t.Errorf("%d of %d lone reserves failed after the reset, want at most %d (%d connections): a reconnect through a link slowed below the timeout does not settle: %v",
			failed, calls, allowed, conns, outcome)
	}
}
