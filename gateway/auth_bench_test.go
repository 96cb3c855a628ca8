package gateway

import (
	"crypto/sha256"
	"fmt"
	"testing"
)

// BenchmarkBearerLookup measures one bearer-key check with 1 and with 100,000 configured keys.
// The ratio of the two is what issue 10's defect 10 is about: a check that walks every key
// costs O(keys) per attempt (≈ 10^5 × at 100k keys); a lookup by digest costs the same
// whatever the number of keys (≈ 1 ×).
func BenchmarkBearerLookup(b *testing.B) {
	for _, n := range []int{1, 100_000} {
		keys := make([]apiKey, n)
		for i := range keys {
			keys[i] = apiKey{subject: fmt.Sprintf("s%d", i), digest: sha256.Sum256(fmt.Appendf(nil, "sk-%d", i))}
		}
		a := newAuthenticator("r", nil, keys)
		token := fmt.Sprintf("sk-%d", n-1)
		b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, ok := a.checkKey(token); !ok {
					b.Fatal("the last key was not found")
				}
			}
		})
	}
}

func TestBearerLookupFindsEveryKeyAndNoOther(t *testing.T) {
	keys := make([]apiKey, 1000)
	for i := range keys {
		keys[i] = apiKey{subject: fmt.Sprintf("s%d", i), digest: sha256.Sum256(fmt.Appendf(nil, "sk-%d", i))}
	}
	a := newAuthenticator("r", nil, keys)
	for _, i := range []int{0, 1, 499, 999} {
		if s, ok := a.checkKey(fmt.Sprintf("sk-%d", i)); !ok || s != fmt.Sprintf("s%d", i) {
			t.Errorf("key %d: subject %q, %v", i, s, ok)
		}
	}
	for _, bad := range []string{"sk-1000", "", "sk-"} {
		if s, ok := a.checkKey(bad); ok {
			t.Errorf("%q authenticated as %q", bad, s)
		}
	}
}
