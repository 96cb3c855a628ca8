package gateway

import "sync"

// subjectLimiter bounds one subject's concurrent requests on this gateway
// (server.max_in_flight_per_subject), so one tenant cannot hold every connection, goroutine
// and body buffer. Only subjects with requests in flight take memory.
type subjectLimiter struct {
	max int
	mu  sync.Mutex
	n   map[string]int
}

func newSubjectLimiter(max int) *subjectLimiter {
	return &subjectLimiter{max: max, n: map[string]int{}}
}

// acquire counts one more request of subject, or reports false when it already has max in
// flight. release(subject) must be called exactly once after a true.
func (l *subjectLimiter) acquire(subject string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[subject] >= l.max {
		return false
	}
	l.n[subject]++
	return true
}

// release ends one request of subject that acquire counted.
func (l *subjectLimiter) release(subject string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n[subject] <= 1 {
		delete(l.n, subject)
	} else {
		l.n[subject]--
	}
}
