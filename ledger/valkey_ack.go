package ledger

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/valkey-io/valkey-go"
)

// Replication acknowledgement (backend.replication.mode: acknowledged).
//
// Valkey replicates asynchronously: a primary answers a write before any replica has it. When
// the primary is lost and Sentinel promotes a replica, every write the replica had not received
// is gone — an admitted reservation among them, whose tokens the promoted primary will then hand
// out a second time. In acknowledged mode every state-changing call (Reserve, Renew, Settle) is
// followed, on the same connection, by WAIT min_replicas ack_timeout, and the call counts only
// when that many replicas confirmed they hold the write:
//
//   - Reserve: an admission whose acknowledgement falls short is no admission. Reserve returns an
//     error wrapping ErrStore and ErrNotAcknowledged (the gateway answers 503 and contacts no
//     provider), and the hold the primary took is released in the background, like an ambiguous
//     reserve (valkey_release.go). A denial needs no acknowledgement: losing it loses nothing.
//   - Renew: an unacknowledged renewal is an error; the renewer tries again next interval. A lost
//     renewal can only make a lease end early on a promoted replica, which then charges the
//     estimate (the hold is never simply freed).
//   - Settle: the settlement has been applied on the primary when its acknowledgement falls
//     short, and retrying cannot make that write more durable (a repeated settle changes
//     nothing, so its WAIT would confirm an older write). Settle therefore reports the applied
//     Settlement together with an error wrapping ErrNotAcknowledged, and the caller must not
//     retry. If the primary is then lost, the promoted replica still holds the reservation; its
//     lease runs out and charges the estimate: a refund lost is conservative (the subject is
//     charged its estimate instead of less), an overage lost is under-charging bounded by that
//     request's usage beyond its estimate. Either way no admission exceeds capacity.
//
// WAIT must run on the connection that made the write: it waits for that connection's own last
// replicated offset. valkey-go sends WAIT (a blocking command) on a dedicated connection, so
// the script and the WAIT go together in one DoMulti, which keeps them on one connection. A WAIT
// sent alone would confirm a fresh connection's empty history at once.

// ErrNotAcknowledged marks a write the primary ran but too few replicas confirmed within the
// acknowledgement timeout: it may vanish in a failover.
var ErrNotAcknowledged = errors.New("write not acknowledged by enough replicas")

// scriptText is a script's full source and SHA-1, kept for the acknowledged path, which builds
// its EVALSHA/EVAL itself to pipeline the WAIT behind it.
type scriptText struct {
	src, sha string
}

var scriptTexts sync.Map // *valkey.Lua -> scriptText

// scriptSource is the assembled source a script was registered with ("" for none).
func scriptSource(l *valkey.Lua) string {
	st, _ := scriptTexts.Load(l)
	text, _ := st.(scriptText)
	return text.src
}

func registerScriptText(l *valkey.Lua, src string) *valkey.Lua {
	sum := sha1.Sum([]byte(src))
	scriptTexts.Store(l, scriptText{src: src, sha: hex.EncodeToString(sum[:])})
	return l
}

// ackPolicy is how many replicas must confirm a write, and how long to wait for them.
type ackPolicy struct {
	minReplicas int
	timeout     time.Duration
}

func (a ackPolicy) on() bool { return a.minReplicas > 0 }

// runAcked runs a state-changing script followed by WAIT on the same connection. changed
// reports from the script's reply whether it wrote something that must be acknowledged (an
// admission, an applied settlement, a live renewal); its acknowledgement falling short is an
// error wrapping ErrStore and ErrNotAcknowledged, returned with the script's reply.
func (v *Valkey) runAcked(ctx context.Context, op string, s *valkey.Lua, keys, args []string, changed func([]int64) bool) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, v.timeout)
	defer cancel()
	c, err := v.conn(ctx)
	if err != nil {
		return nil, v.fail(op, fmt.Errorf("%w: %w", errNotSent, err))
	}
	st, _ := scriptTexts.Load(s)
	text := st.(scriptText)
	wait := func() valkey.Completed {
		return c.B().Wait().Numreplicas(int64(v.ack.minReplicas)).Timeout(v.ack.timeout.Milliseconds()).Build()
	}
	for attempt := 1; ; attempt++ {
		res := c.DoMulti(ctx,
			c.B().Evalsha().Sha1(text.sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait())
		if verr, ok := valkey.IsValkeyErr(res[0].Error()); ok && verr.IsNoScript() {
			res = c.DoMulti(ctx,
				c.B().Eval().Script(text.src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), wait())
		}
		out, err := res[0].AsIntSlice()
		if err != nil {
			// As in run: one retry on a fresh connection after a broken one; scripts are
			// idempotent by reservation id.
			if attempt == 1 && res[0].NonValkeyError() != nil && ctx.Err() == nil {
				continue
			}
			return nil, v.fail(op, err)
		}
		if !changed(out) {
			return out, nil
		}
		acked, err := res[1].AsInt64()
		if err != nil {
			return out, v.fail(op, fmt.Errorf("%w: WAIT failed: %w", ErrNotAcknowledged, err))
		}
		if acked < int64(v.ack.minReplicas) {
			return out, v.fail(op, fmt.Errorf("%w: %d of %d replicas within %v", ErrNotAcknowledged, acked, v.ack.minReplicas, v.ack.timeout))
		}
		return out, nil
	}
}

// exec runs a script, acknowledged when the backend asks for it and ack is set.
func (v *Valkey) exec(ctx context.Context, op string, s *valkey.Lua, keys, args []string, ack bool, changed func([]int64) bool) ([]int64, error) {
	if ack && v.ack.on() {
		return v.runAcked(ctx, op, s, keys, args, changed)
	}
	return v.run(ctx, op, s, keys, args)
}

// firstIsOne: the reply of reserve (admitted), renew (live) and settle (applied) starts with 1
// when the script wrote the state that matters.
func firstIsOne(out []int64) bool { return len(out) > 0 && out[0] == 1 }
