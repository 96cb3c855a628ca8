package topology

import (
	"context"
	"io"
	"net/http"
	"time"
)

// getOK sends one GET with its own timeout and reports whether it answered 200, or what it
// answered instead (a status line or the transport error) — the step every readiness poll of
// every engine repeats until its deadline.
func getOK(ctx context.Context, client *http.Client, url string, timeout time.Duration) (ok bool, last string) {
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := client.Do(req)
	if err != nil {
		return false, err.Error()
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK, resp.Status
}
