package topology

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/quotaqual/quotaqual/internal/httpget"
)

// getOK sends one GET with its own timeout and reports whether it answered 200, or what it
// answered instead (a status line or the transport error) — the step every readiness poll of
// every engine repeats until its deadline.
func GetOK(ctx context.Context, client *http.Client, url string, timeout time.Duration) (ok bool, last string) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	a, err := httpget.Get(rctx, client, url, 4096)
	if a.StatusCode == 0 {
		return false, err.Error()
	}
	return a.StatusCode == http.StatusOK, a.Status
}

// ReadyPoll is one readiness wait: GET URL through Client every Every (each try bounded by
// Try) until it answers 200, or Within has passed. Every engine waits for its components this
// way; what differs is how each learns that the component died meanwhile (Gone, Exited) and
// what it adds to the error (the caller wraps it).
type ReadyPoll struct {
	Client *http.Client
	URL    string
	Within time.Duration
	Every  time.Duration
	Try    time.Duration
	// Accept, when set, must agree to a 200 before it counts (a process that has been up long
	// enough and still runs: another process on its port may be the one answering).
	Accept func() bool
	// Gone, when set, is asked after each try that did not count: an error ends the wait with
	// it (the container exited).
	Gone func(ctx context.Context) error
	// Exited, when set, closes when the component exits: the wait ends at once with
	// ExitedErr().
	Exited    <-chan struct{}
	ExitedErr func() error
}

// NotReadyError is a ReadyPoll that ran out of time, with the last answer it got.
type NotReadyError struct {
	URL    string
	Within time.Duration
	Last   string
}

func (e *NotReadyError) Error() string {
	return fmt.Sprintf("not ready at %s within %s (last answer: %s)", e.URL, e.Within, e.Last)
}

// Wait runs the poll. It returns nil once ready, Gone's or ExitedErr's error when the
// component died, or a *NotReadyError when Within (or ctx) ran out.
func (p ReadyPoll) Wait(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, p.Within)
	defer cancel()
	tick := time.NewTicker(p.Every)
	defer tick.Stop()
	var last string
	for {
		ok, status := GetOK(ctx, p.Client, p.URL, p.Try)
		if ok && (p.Accept == nil || p.Accept()) {
			return nil
		}
		last = status
		if p.Gone != nil {
			if err := p.Gone(ctx); err != nil {
				return err
			}
		}
		select {
		case <-p.Exited:
			return p.ExitedErr()
		case <-ctx.Done():
			return &NotReadyError{URL: p.URL, Within: p.Within, Last: last}
		case <-tick.C:
		}
	}
}
