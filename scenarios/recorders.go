package scenarios

import (
	"context"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
)

// Recorders of time-shaped facts the report draws: when a fault lever was held, and how a
// quota key's state moved. Both write ordinary facts under the names evidence defines.

// Fault records that a fault lever (kind: restart, outage, partition, failover, …) starts
// acting on target now, and returns the function that records its end. Call it right before
// pulling the lever and call the returned function once the lever is released (or defer it);
// the window lands in the scenario's facts as evidence.FaultWindowsFact, so the report shades
// it on the timeline. Calling the end function again does nothing.
func (env *Env) Fault(kind, target string) (end func()) {
	r := env.current
	if r == nil {
		return func() {}
	}
	r.faults = append(r.faults, evidence.FaultWindow{Kind: kind, Target: target, Start: time.Now().UTC()})
	i := len(r.faults) - 1
	var once sync.Once
	return func() { once.Do(func() { r.faults[i].End = time.Now().UTC() }) }
}

// ledgerTraceInterval is how often scenarios that only trace the ledger for the report (not to
// check a peak) sample it.
const ledgerTraceInterval = 50 * time.Millisecond

// ledgerSampler reads one subject's quota state in the background, alternating gateways.
type ledgerSampler struct {
	stop    context.CancelFunc
	done    chan struct{}
	samples []evidence.LedgerSample
	errs    int
	window  time.Duration // the sampled rule's, for the report
}

// sampleLedger starts sampling subject's quota under the run's rule every interval until Stop.
func (env *Env) sampleLedger(ctx context.Context, subject string, interval time.Duration) *ledgerSampler {
	return env.sampleLedgerOf(ctx, RuleName, env.Profile.Window, subject, interval)
}

// sampleLedgerOf is sampleLedger for subject's key under rule, whose window is window.
func (env *Env) sampleLedgerOf(ctx context.Context, rule string, window time.Duration, subject string, interval time.Duration) *ledgerSampler {
	sctx, stop := context.WithCancel(ctx)
	s := &ledgerSampler{stop: stop, done: make(chan struct{}), window: window}
	if !env.inspects() {
		close(s.done) // nothing to sample: the trace stays empty
		return s
	}
	go func() {
		defer close(s.done)
		for i := 0; ; i++ {
			sent := time.Now().UTC()
			q, err := env.QuotaOf(sctx, env.alternate(i), rule, subject)
			if sctx.Err() != nil {
				return
			}
			if err != nil {
				s.errs++
			} else {
				s.samples = append(s.samples, evidence.LedgerSample{Sent: sent, At: time.Now().UTC(),
					Reserved: q.ReservedTokens, Active: q.ActiveReservations, Settled: q.Settled()})
			}
			t := time.NewTimer(interval)
			select {
			case <-sctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// Stop ends sampling, records the series as evidence.LedgerSamplesFact in r and returns the
// samples and how many reads failed. A gateway without quota inspection has no series: none
// is recorded (an empty one would read as a ledger that held nothing).
func (s *ledgerSampler) Stop(env *Env, r *Result, subject string) ([]evidence.LedgerSample, int) {
	s.stop()
	<-s.done
	if !env.inspects() {
		return nil, 0
	}
	r.Fact(evidence.LedgerSamplesFact, evidence.LedgerSeries{Subject: subject, Capacity: env.Profile.Capacity,
		Estimate: env.Profile.Estimate, WindowMS: s.window.Milliseconds(),
		Samples: append([]evidence.LedgerSample{}, s.samples...)})
	return s.samples, s.errs
}
