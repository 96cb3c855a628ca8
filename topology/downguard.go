package topology

import (
	"errors"
	"strings"
	"sync"
	"time"
)

// DownGuard makes an engine's Down run its teardown once, as the Topology contract asks (safe
// to call more than once and after a failed Up): the first call runs it, later calls (also
// while the first still runs) return what the first one recorded so far, without an error.
// Its zero value is ready to use.
type DownGuard struct {
	mu    sync.Mutex
	begun bool
	td    Teardown
}

// Do runs teardown on the first call and records what it removed and failed to remove, with
// the time it took; the error joins the failures. Later calls return the record.
func (g *DownGuard) Do(teardown func(td *Teardown)) (Teardown, error) {
	g.mu.Lock()
	if g.begun {
		td := g.td
		g.mu.Unlock()
		return td, nil
	}
	g.begun = true
	g.mu.Unlock()
	start := time.Now()
	var td Teardown
	teardown(&td)
	td.Elapsed = ElapsedSince(start)
	g.mu.Lock()
	g.td = td
	g.mu.Unlock()
	if len(td.Errors) > 0 {
		return td, errors.New("teardown: " + strings.Join(td.Errors, "; "))
	}
	return td, nil
}
