package ledger_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/valkeyproc"
	"github.com/quotaqual/quotaqual/internal/valkeytest"
	"github.com/quotaqual/quotaqual/ledger"
)

// TestAStoreThatMayEvictQuotaStateIsRefused is issue 10's defect 6: every quota key has a TTL,
// so volatile-* (and allkeys-*) eviction can drop live holds. Such a store fails every call,
// naming the policy and the fix, unless allow_eviction accepts it; a noeviction store works.
func TestAStoreThatMayEvictQuotaStateIsRefused(t *testing.T) {
	q := &ledger.Quota{Rule: "evict", Lease: 30 * time.Second, Budgets: []ledger.Budget{{Window: 10 * time.Second, Capacity: 100}}}
	for _, tc := range []struct {
		policy string
		allow  bool
		refuse bool
	}{
		{"volatile-lru", false, true},
		{"allkeys-lfu", false, true},
		{"volatile-ttl", true, false},
		{"noeviction", false, false},
	} {
		t.Run(tc.policy, func(t *testing.T) {
			srv := valkeytest.Start(t, func(o *valkeyproc.Options) {
				o.ExtraArgs = append(o.ExtraArgs, "--maxmemory", "64mb", "--maxmemory-policy", tc.policy)
			})
			v, err := ledger.NewValkey(ledger.ValkeyOptions{URL: srv.URL(), Namespace: "ev", Timeout: time.Second, AllowEviction: tc.allow})
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			_, err = v.Reserve(context.Background(), q, "k", 10)
			switch {
			case tc.refuse && (err == nil || !strings.Contains(err.Error(), tc.policy) || !strings.Contains(err.Error(), "noeviction")):
				t.Fatalf("reserve on a %s store: %v, want a refusal naming the policy and the fix", tc.policy, err)
			case !tc.refuse && err != nil:
				t.Fatalf("reserve: %v", err)
			}
		})
	}
}
