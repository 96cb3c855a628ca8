package ledger

import (
	"context"
	"errors"
	"time"
)

// An ambiguous reserve is one whose script call failed after the script may have reached the
// store: a timeout, or a connection that broke under the call. Valkey may have admitted it, and
// the caller — which fails closed with a 503 and contacts no provider — holds no reservation to
// settle. Left alone, that hold would stay charged until its lease ran out (30 s by default),
// denying requests that should be admitted: conservative, but wrong. So the ledger releases it
// itself: it settles the reservation id at zero tokens, which is the truth (the request never
// ran), in the background with a few attempts. Settle is idempotent; for an id the store never
// admitted it charges nothing and leaves a tombstone that refuses the reserve should it still
// arrive (see ledger/scripts/common.lua), so the reserve cannot hold after its release. If every
// attempt fails, the lease expires and the estimate is charged: the conservative outcome stays
// the fallback. Releases are bounded (maxReleasesInFlight); beyond that the lease expiry covers
// them, and Close waits for the ones under way.

const (
	maxReleasesInFlight = 256
	releaseAttempts     = 3
)

// errTombstoned is the reply of a reserve whose id has a tombstone: its release (or an earlier
// end of the same id) reached the store first — valkey-go spreads commands over connections, so
// a timed-out reserve may still be executed after its release. The store held nothing; the
// caller, which already gave up on this call, fails closed as for any store error.
var errTombstoned = errors.New("reservation id already released")

// errNotSent marks a call that failed before anything reached the store (no connection).
var errNotSent = errors.New("no connection")

// releaseAmbiguous starts the background release of a reservation id whose reserve failed
// with err. Nothing is released when the call never reached the store.
func (v *Valkey) releaseAmbiguous(r Reservation, err error) {
	if errors.Is(err, errNotSent) {
		return
	}
	// Add must not race Close's Wait: once Close has begun, no release starts (its lease
	// expires at the estimate, the conservative fallback).
	v.rmu.Lock()
	if v.releasesClosed {
		v.rmu.Unlock()
		v.releasesDropped.Add(1)
		return
	}
	select {
	case v.releaseSlots <- struct{}{}:
	default:
		v.rmu.Unlock()
		v.releasesDropped.Add(1)
		return
	}
	v.releases.Add(1)
	v.rmu.Unlock()
	go func() {
		defer func() { <-v.releaseSlots; v.releases.Done() }()
		backoff := 25 * time.Millisecond
		for attempt := 1; attempt <= releaseAttempts; attempt++ {
			if st, err := v.settle(context.Background(), r, Usage{Tokens: 0, Known: true}, false); err == nil {
				if st.Applied {
					v.releasesDone.Add(1) // the reserve had run: its hold is gone
				} else {
					v.releasesNoop.Add(1) // the reserve had not run (or its lease already ended)
				}
				return
			}
			if attempt < releaseAttempts {
				time.Sleep(backoff)
				backoff *= 2
			}
		}
		v.releasesFailed.Add(1)
	}()
}

// ReleaseStats counts the background releases of ambiguous reserves.
type ReleaseStats struct {
	Released int64 // the reserve had run; its hold was settled at zero
	Noop     int64 // nothing was held: the reserve had not run
	Failed   int64 // every attempt failed: the lease expires at the estimate
	Dropped  int64 // not attempted, too many under way: the lease expires at the estimate
}

// Releases reports the background releases so far.
func (v *Valkey) Releases() ReleaseStats {
	return ReleaseStats{Released: v.releasesDone.Load(), Noop: v.releasesNoop.Load(),
		Failed: v.releasesFailed.Load(), Dropped: v.releasesDropped.Load()}
}
