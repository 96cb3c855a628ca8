// Package httpget sends one GET and reads its answer: the step the harness repeats for every
// admin read, readiness poll and bundle fetch, written once.
package httpget

import (
	"context"
	"io"
	"net/http"
)

// Answer is a GET's status and its body, read up to the caller's limit.
type Answer struct {
	StatusCode int
	Status     string // the status line, e.g. "503 Service Unavailable"
	Body       []byte
}

// Get sends one GET to url with client and reads at most limit bytes of the body. A transport
// error leaves the answer empty; a body that fails part way returns what was read, the status
// and the error.
func Get(ctx context.Context, client *http.Client, url string, limit int64) (Answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Answer{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return Answer{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	return Answer{StatusCode: resp.StatusCode, Status: resp.Status, Body: body}, err
}
