package topology

import (
	"context"
	"net/http"
	"time"

	"github.com/quotaqual/quotaqual/internal/httpget"
)

// getOK sends one GET with its own timeout and reports whether it answered 200, or what it
// answered instead (a status line or the transport error) — the step every readiness poll of
// every engine repeats until its deadline.
func getOK(ctx context.Context, client *http.Client, url string, timeout time.Duration) (ok bool, last string) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	a, err := httpget.Get(rctx, client, url, 4096)
	if a.StatusCode == 0 {
		return false, err.Error()
	}
	return a.StatusCode == http.StatusOK, a.Status
}
