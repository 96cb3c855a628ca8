package gateway

import (
	"fmt"
	"strings"
	"testing"

	"github.com/quotaqual/quotaqual/providerstub"
)

// TestHostileProviderUsageIsNeverChargedBelowWhatWasGenerated runs every hostile usage mode of
// the provider stub through an in-process gateway, in the body and in the stream: the charge is
// never below what the provider generated (its call log is the truth), a usage that agrees with
// itself (the same chunk twice) is charged exactly, and the gateway answers the next request
// normally (no figure locks the subject out or overflows).
func TestHostileProviderUsageIsNeverChargedBelowWhatWasGenerated(t *testing.T) {
	url, admin, prov := meteredGateway(t, meterPolicy)
	auth := basicAuth("alice", "pw")
	settled := settledAfterIdle(t, admin, "mt")
	for _, mode := range providerstub.UsageModes {
		for _, stream := range []bool{false, true} {
			if !stream && (mode == providerstub.UsageDuplicated || mode == providerstub.UsageContradicting) {
				continue
			}
			t.Run(fmt.Sprintf("%s, stream %v", mode, stream), func(t *testing.T) {
				body := `{"model":"m","messages":[{"role":"user","content":"hello"}],"metadata":{"quotaqual_tokens":"40","quotaqual_usage":"` + mode + `"}`
				if stream {
					body += `,"stream":true,"stream_options":{"include_usage":true}`
				}
				if r := chat(url, chatOpts{auth: auth, body: body + "}"}); r.status != 200 {
					t.Fatalf("status %d: %.300s", r.status, r.body)
				}
				call := lastCall(t, prov)
				now := settledAfterIdle(t, admin, "mt")
				charged := now - settled
				settled = now
				if charged < call.GeneratedTokens {
					t.Errorf("charged %d for %d tokens generated (usage reported: %s)", charged, call.GeneratedTokens, mode)
				}
				if consumed := call.PromptTokens + call.GeneratedTokens; mode == providerstub.UsageDuplicated && charged != consumed {
					t.Errorf("charged %d for the same usage chunk twice, want what it says once: %d", charged, consumed)
				}
				next := chat(url, chatOpts{auth: auth})
				if next.status != 200 {
					t.Fatalf("the next request answered %d after a charge of %d: %.300s", next.status, charged, next.body)
				}
				settled = settledAfterIdle(t, admin, "mt")
				t.Logf("%s: charged %d (prompt %d, generated %d)", mode, charged, call.PromptTokens, call.GeneratedTokens)
			})
		}
	}
}

// TestUsageUnderstatingTheOutputIsUnknown: a usage that reports fewer completion tokens than the
// words the response relayed understates what was generated, streamed or not, and is not
// trusted (metered.charge then charges at least what was relayed); an honest one, a running
// total that only catches up at the end, and a body too large to keep whole are read as before.
func TestUsageUnderstatingTheOutputIsUnknown(t *testing.T) {
	words := strings.TrimSuffix(strings.Repeat("tok ", 40), " ")
	body := func(completion int) []byte {
		return []byte(fmt.Sprintf(`{"choices":[{"message":{"role":"assistant","content":%q}}],"usage":{"prompt_tokens":9,"completion_tokens":%d,"total_tokens":%d}}`,
			words, completion, 9+completion))
	}
	for _, tc := range []struct {
		name       string
		completion int
		ok         bool
	}{{"honest", 40, true}, {"more than the words (tokens within words)", 55, true}, {"understated", 39, false}, {"one token", 1, false}} {
		t.Run("body, "+tc.name, func(t *testing.T) {
			var j jsonUsageReader
			j.feed(body(tc.completion))
			if n, ok := j.result(); ok != tc.ok || (ok && n != int64(9+tc.completion)) {
				t.Errorf("usage %d %v, want known %v", n, ok, tc.ok)
			}
		})
	}
	stream := func(usage ...int) []byte {
		var b strings.Builder
		for i := range 40 {
			fmt.Fprintf(&b, "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":%q}}]}\n\n", map[bool]string{true: "tok", false: " tok"}[i == 0])
			if i == 19 && len(usage) > 1 {
				fmt.Fprintf(&b, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\n", usage[0], 9+usage[0])
				usage = usage[1:]
			}
		}
		fmt.Fprintf(&b, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n", usage[0], 9+usage[0])
		return []byte(b.String())
	}
	for _, tc := range []struct {
		name  string
		usage []int
		ok    bool
	}{{"honest", []int{40}, true}, {"a running total catching up", []int{20, 40}, true}, {"understated", []int{1}, false}, {"contradicted by an earlier larger one", []int{40, 1}, true}} {
		t.Run("stream, "+tc.name, func(t *testing.T) {
			_, n, ok := runFilter(false, stream(tc.usage...))
			if ok != tc.ok {
				t.Errorf("usage %d %v, want known %v", n, ok, tc.ok)
			}
		})
	}
	t.Run("a body too large to keep whole is read from its tail", func(t *testing.T) {
		var j jsonUsageReader
		j.tooBig = true
		j.feed(body(1))
		if n, ok := j.result(); !ok || n != 10 {
			t.Errorf("usage %d %v", n, ok)
		}
	})
}
