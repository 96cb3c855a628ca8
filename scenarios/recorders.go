package scenarios

import (
	"context"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/topology"
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

// healTimeout bounds how long undoing a pulled lever may take: long enough for a loaded
// engine to thaw a process or restore a store setting, short enough not to hang a run.
const healTimeout = 10 * time.Second

// pull opens the fault window for lever on target (Fault, under the lever's name) and injects
// the lever there. The heal it returns undoes the fault and then ends the window; it does its
// work once however often it is called, so that a scenario heals at the moment it chooses and
// also defers healOnExit for every other path. The heal runs even once ctx is done. On error
// nothing is injected and the window is already closed.
func (env *Env) pull(ctx context.Context, lever topology.Lever, target topology.Target) (heal func() error, err error) {
	end := env.Fault(lever.Name(), faultTarget(target))
	undo, err := lever.Inject(ctx, env.Topo, target)
	if err != nil {
		end()
		return nil, err
	}
	return sync.OnceValue(func() error {
		defer end()
		c, cancel := context.WithTimeout(context.WithoutCancel(ctx), healTimeout)
		defer cancel()
		return undo(c)
	}), nil
}

// healOnExit is a pulled lever's heal for a defer: an error healing is the result's.
func healOnExit(r *Result, heal func() error) {
	if err := heal(); err != nil {
		r.Error(err)
	}
}

// faultTarget names a lever's target in its fault window: the host, or for a pair fault the
// two ends ("gateway-a–valkey").
func faultTarget(t topology.Target) string {
	if t.Peer == "" {
		return t.Host
	}
	return t.Host + "–" + t.Peer
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

// sampleLedger starts sampling k's quota every interval until Stop, alternating gateways;
// window is k's rule's, for the report.
func (env *Env) sampleLedger(ctx context.Context, k Key, window, interval time.Duration) *ledgerSampler {
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
			q, err := env.Quotas().Read(sctx, env.alternate(i), k)
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
