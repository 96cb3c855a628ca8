package scenarios

import "sync"

// sharedResult lets the goroutines of one scenario, each checking a part of it, write its
// Result (which is not safe for concurrent use).
type sharedResult struct {
	mu sync.Mutex
	r  *Result
}

// do runs f on the result, one goroutine at a time.
func (s *sharedResult) do(f func(r *Result)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s.r)
}
