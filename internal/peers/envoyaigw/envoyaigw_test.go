package envoyaigw

import (
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/peers/rls"
)

// TestRateLimitHeaders checks Envoy's DRAFT_VERSION_03 headers: the limit with its quota
// policy (w= the window in seconds), the remaining and the seconds to reset; none without a
// matched limit.
func TestRateLimitHeaders(t *testing.T) {
	h := RateLimitHeaders(rls.Status{Limit: 60, Window: time.Minute, Remaining: 20, Reset: 41 * time.Second})
	for k, want := range map[string]string{"x-ratelimit-limit": "60, 60;w=60", "x-ratelimit-remaining": "20", "x-ratelimit-reset": "41"} {
		if got := h.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if h := RateLimitHeaders(rls.Status{}); len(h) != 0 {
		t.Errorf("no limit matched: headers %v, want none", h)
	}
}
