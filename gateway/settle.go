package gateway

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quotaqual/quotaqual/ledger"
)

// Settlement runs off the response path: the handler hands the job over after the response is
// relayed (or abandoned) and returns. Each job settles in its own goroutine, with bounded
// retries; its store calls take one of a fixed number of slots, as many as the gateway has data
// connections (server.max_connections), so settlement may be as concurrent as admission — each
// admitted request holds one connection and made one store call to be admitted — and keeps up
// with it instead of backing up behind a few workers. A job waiting for a retry holds no slot.
// While the gateway runs no job is turned away; only a job handed over after a shutdown began
// its drain is dropped. When every attempt fails (or the job was dropped), the failure is logged
// and counted and nothing else happens: the reservation's lease then runs out and the ledger
// charges it at its estimate, which is the conservative outcome. Settlement never fails or
// delays a response.
const settleAttempts = 3

// settleBackoff is the wait before attempt i+1 (25 ms, then 50 ms).
var settleBackoff = []time.Duration{25 * time.Millisecond, 50 * time.Millisecond}

// settlementAttr is the request log line's "settlement" attribute: how the settlement ended.
func settlementAttr(result string) slog.Attr { return slog.String("settlement", result) }

type settleJob struct {
	res   ledger.Reservation
	usage ledger.Usage
	rec   *requestRecord
	// rn keeps the lease renewed until the settlement is done: stopped on hand-over, a lease
	// could run out while the job waits for a slot or retries against a slow store, and the
	// ledger would then charge the estimate and lose any overage.
	rn *renewer
	// series are the request's rule's bound series.
	series *ruleSeries
}

type settler struct {
	s *Server
	// slots bounds the settle calls in progress at the store.
	slots   chan struct{}
	pending atomic.Int64 // jobs handed over and not yet ended
	wg      sync.WaitGroup

	mu     sync.RWMutex
	closed bool
}

func newSettler(s *Server, concurrency int) *settler {
	return &settler{s: s, slots: make(chan struct{}, max(1, concurrency))}
}

// enqueue starts settling a job without ever blocking.
func (st *settler) enqueue(j settleJob) {
	st.mu.RLock()
	if !st.closed && !mutateDropSettlement(st.pending.Load()) {
		st.wg.Add(1)
		st.pending.Add(1)
		st.mu.RUnlock()
		go func() {
			defer st.wg.Done()
			defer st.pending.Add(-1)
			st.settle(j)
		}()
		return
	}
	st.mu.RUnlock()
	if j.rn != nil {
		j.rn.stop() // dropped: let the lease run out and charge the estimate
	}
	s := st.s
	s.m.settlements.WithLabelValues(j.res.Quota.Rule, "dropped").Inc()
	j.series.reservationsInFlight().Dec()
	s.log.Warn("settlement dropped: the gateway is shutting down; the lease will expire and charge the estimate",
		"request_id", j.rec.id, "rule", j.res.Quota.Rule)
	s.logRequest(j.rec, settlementAttr("dropped"))
}

// close stops accepting jobs and waits for the pending ones to end, at most until ctx ends.
func (st *settler) close(ctx context.Context) bool {
	st.mu.Lock()
	st.closed = true
	st.mu.Unlock()
	done := make(chan struct{})
	go func() { st.wg.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

func (st *settler) settle(j settleJob) {
	if j.rn != nil {
		defer j.rn.stop()
	}
	s := st.s
	rule := j.res.Quota.Rule
	var (
		out ledger.Settlement
		err error
	)
	for attempt := 0; attempt < settleAttempts; attempt++ {
		if attempt > 0 {
			time.Sleep(settleBackoff[min(attempt-1, len(settleBackoff)-1)])
		}
		st.slots <- struct{}{}
		ctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
		out, err = s.led.Settle(ctx, j.res, j.usage)
		cancel()
		<-st.slots
		if err == nil {
			break
		}
		s.m.backendErrors.WithLabelValues(s.led.Backend(), "settle").Inc()
		if errors.Is(err, ledger.ErrNotAcknowledged) {
			break // applied on the primary; a retry could not make it more durable
		}
	}
	j.series.reservationsInFlight().Dec()
	// "known": the provider's reported usage; "unknown": a floor of what was seen, or the
	// estimate (serveChat sets rec.known).
	j.series.usage(j.rec.known).Inc()
	j.rec.actual = j.usage.Tokens
	if errors.Is(err, ledger.ErrNotAcknowledged) && out.Applied {
		// Charged on the primary, not yet on enough replicas: if the primary is lost, the
		// promoted replica charges the estimate when the lease runs out (see ledger/valkey_ack.go).
		s.m.settlements.WithLabelValues(rule, "unacknowledged").Inc()
		s.log.Warn("settlement applied but not acknowledged by enough replicas; a failover now would charge the estimate instead",
			"request_id", j.rec.id, "rule", rule, "error", redactErr(err))
		s.logRequest(j.rec, settlementAttr("unacknowledged"))
		return
	}
	if err != nil {
		s.m.settlements.WithLabelValues(rule, "failed").Inc()
		s.log.Warn("settlement failed after retries; the lease will expire and charge the estimate",
			"request_id", j.rec.id, "rule", rule, "attempts", settleAttempts, "error", redactErr(err))
		s.logRequest(j.rec, settlementAttr("failed"))
		return
	}
	if !out.Applied {
		s.m.settlements.WithLabelValues(rule, "noop").Inc()
		s.logRequest(j.rec, settlementAttr("noop"))
		return
	}
	j.series.settlementsApplied().Inc()
	j.series.tokensCharged().Add(float64(out.Charged))
	if out.Refund > 0 {
		j.series.tokensRefunded().Add(float64(out.Refund))
	}
	if out.Overage > 0 {
		j.series.tokensOverage().Add(float64(out.Overage))
	}
	s.logRequest(j.rec, settlementAttr("applied"), slog.Int64("charged", out.Charged), slog.Int64("refund", out.Refund), slog.Int64("overage", out.Overage))
}

// renewer extends one reservation's lease every lease/3 while its request is in flight. It
// uses a timer rather than a goroutine, so short requests cost nothing.
type renewer struct {
	mu      sync.Mutex
	stopped bool
	t       *time.Timer
}

func (s *Server) startRenewal(res ledger.Reservation) *renewer {
	interval := res.Quota.Lease / 3
	rn := &renewer{}
	rule := res.Quota.Rule
	var fire func()
	fire = func() {
		ctx, cancel := context.WithTimeout(context.Background(), s.storeTimeout)
		live, err := s.led.Renew(ctx, res)
		cancel()
		switch {
		case err != nil:
			s.m.renewals.WithLabelValues(rule, "error").Inc()
			s.m.backendErrors.WithLabelValues(s.led.Backend(), "renew").Inc()
		case !live:
			s.m.renewals.WithLabelValues(rule, "lost").Inc()
		default:
			s.m.renewals.WithLabelValues(rule, "renewed").Inc()
		}
		rn.mu.Lock()
		defer rn.mu.Unlock()
		if rn.stopped || (err == nil && !live) || mutateRenewGivesUp(err) {
			return
		}
		if err != nil {
			// Retry sooner after a failure: the lease still has at least two thirds left.
			rn.t.Reset(min(interval/2, time.Second))
			return
		}
		rn.t.Reset(interval)
	}
	rn.mu.Lock()
	rn.t = time.AfterFunc(interval, fire)
	rn.mu.Unlock()
	return rn
}

func (rn *renewer) stop() {
	rn.mu.Lock()
	rn.stopped = true
	rn.t.Stop()
	rn.mu.Unlock()
}
