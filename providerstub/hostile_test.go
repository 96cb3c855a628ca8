package providerstub

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// lastCall is the newest entry of the stub's call log.
func (s *stub) lastCall(t *testing.T) CallRecord {
	t.Helper()
	cl := s.calls(t)
	if len(cl.Requests) == 0 {
		t.Fatal("the call log is empty")
	}
	return cl.Requests[len(cl.Requests)-1]
}

// usageObjects reads the usage objects of a response: the body's "usage" member, or every
// usage chunk of a stream, in order. A member that is absent or null is no object.
func usageObjects(t *testing.T, resp *http.Response) []map[string]int64 {
	t.Helper()
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var datas []string
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		datas = sseEvents(t, resp.Body)
	} else {
		b, _ := io.ReadAll(resp.Body)
		datas = []string{string(b)}
	}
	var out []map[string]int64
	for _, d := range datas {
		if d == "[DONE]" {
			continue
		}
		var v struct {
			Usage map[string]int64 `json:"usage"`
		}
		if err := json.Unmarshal([]byte(d), &v); err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		if v.Usage != nil {
			out = append(out, v.Usage)
		}
	}
	return out
}

// TestStubHonoursTheBoundAsProvidersDo: max_completion_tokens before max_tokens (both present,
// disagreeing either way), n choices each generating up to the bound, streamed and not — and
// the call log names the bound honoured and counts what was generated.
func TestStubHonoursTheBoundAsProvidersDo(t *testing.T) {
	s := newStub(t, ProviderConfig{CompletionTokens: 8})
	for _, tc := range []struct {
		name      string
		fields    string
		field     string // the bound honoured
		bound     int64  // 0: none
		choices   int64
		perChoice int64
	}{
		{"max_completion_tokens only", `"max_completion_tokens":5`, "max_completion_tokens", 5, 1, 5},
		{"max_tokens only", `"max_tokens":3`, "max_tokens", 3, 1, 3},
		{"both, max_completion_tokens smaller: it decides", `"max_tokens":300,"max_completion_tokens":2`, "max_completion_tokens", 2, 1, 2},
		{"both, max_completion_tokens larger: it decides", `"max_tokens":1,"max_completion_tokens":300`, "max_completion_tokens", 300, 1, 8},
		{"neither: the configured count", ``, "", 0, 1, 8},
		{"n choices, each up to the bound", `"max_completion_tokens":4,"n":3`, "max_completion_tokens", 4, 3, 4},
		{"n choices without a bound", `"n":2`, "", 0, 2, 8},
	} {
		for _, stream := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s, stream %v", tc.name, stream), func(t *testing.T) {
				body := `{"messages":[{"role":"user","content":"hi"}]`
				if tc.fields != "" {
					body += "," + tc.fields
				}
				if stream {
					body += `,"stream":true,"stream_options":{"include_usage":true}`
				}
				got := usageObjects(t, s.post(t, body+"}"))
				want := tc.perChoice * tc.choices
				if len(got) != 1 || got[0]["completion_tokens"] != want {
					t.Errorf("usage %v, want completion_tokens %d", got, want)
				}
				rec := s.lastCall(t)
				if rec.BoundField != tc.field || (tc.bound == 0) != (rec.MaxTokens == nil) || (rec.MaxTokens != nil && *rec.MaxTokens != tc.bound) {
					t.Errorf("logged bound %s %v, want %s %d", rec.BoundField, rec.MaxTokens, tc.field, tc.bound)
				}
				if rec.Choices != tc.choices || rec.GeneratedTokens != want || rec.CompletionTokens != want {
					t.Errorf("logged %d choices, %d generated, %d completion; want %d, %d", rec.Choices, rec.GeneratedTokens, rec.CompletionTokens, tc.choices, want)
				}
			})
		}
	}
}

// TestHostileUsageModes: each mode reports its usage objects, in the body and in usage chunks,
// while the stub generates as it always does and its log keeps the truth.
func TestHostileUsageModes(t *testing.T) {
	s := newStub(t, ProviderConfig{CompletionTokens: 8})
	const p, c = 8, 40 // "hi": 3 + 1 + 4 prompt tokens; quotaqual_tokens 40
	truth := map[string]int64{"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
	under := map[string]int64{"prompt_tokens": p, "completion_tokens": 1, "total_tokens": p + 1}
	obj := func(pp, cc, tt int64) map[string]int64 {
		return map[string]int64{"prompt_tokens": pp, "completion_tokens": cc, "total_tokens": tt}
	}
	for _, tc := range []struct {
		mode     string
		want     []map[string]int64
		streamed bool // streamed only
	}{
		{"", []map[string]int64{truth}, false},
		{UsageMissing, nil, false},
		{UsagePromptOnly, []map[string]int64{{"prompt_tokens": p}}, false},
		{UsageCompletionOnly, []map[string]int64{{"completion_tokens": c}}, false},
		{UsageNegativePrompt, []map[string]int64{obj(-1000, c, c-1000)}, false},
		{UsageNegativeCompletion, []map[string]int64{obj(p, -c, p-c)}, false},
		{UsageTotalBelow, []map[string]int64{obj(p, c, 1)}, false},
		{UsageTotalAbove, []map[string]int64{obj(p, c, p+c+1000)}, false},
		{UsageHuge, []map[string]int64{obj(p, 1<<62, p+1<<62)}, false},
		{UsageOverflow, []map[string]int64{obj(1<<62, 1<<62, math.MaxInt64)}, false},
		{UsageUnderstated, []map[string]int64{under}, false},
		{UsageDuplicated, []map[string]int64{truth, truth}, true},
		{UsageContradicting, []map[string]int64{truth, under}, true},
	} {
		for _, stream := range []bool{false, true} {
			if tc.streamed && !stream {
				continue
			}
			t.Run(fmt.Sprintf("%q, stream %v", tc.mode, stream), func(t *testing.T) {
				md := `"metadata":{"quotaqual_tokens":"40"`
				if tc.mode != "" {
					md += `,"quotaqual_usage":"` + tc.mode + `"`
				}
				body := `{"messages":[{"role":"user","content":"hi"}],` + md + `}`
				if stream {
					body += `,"stream":true,"stream_options":{"include_usage":true}`
				}
				got := usageObjects(t, s.post(t, body+"}"))
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("reported %v, want %v", got, tc.want)
				}
				rec := s.lastCall(t)
				if rec.UsageMode != tc.mode || rec.PromptTokens != p || rec.CompletionTokens != c || rec.GeneratedTokens != c {
					t.Errorf("logged mode %q, prompt %d, completion %d, generated %d: the log must keep the truth (%d, %d)",
						rec.UsageMode, rec.PromptTokens, rec.CompletionTokens, rec.GeneratedTokens, p, c)
				}
			})
		}
	}
	t.Run("a provider error reports the hostile usage too", func(t *testing.T) {
		resp := s.post(t, `{"messages":[{"role":"user","content":"hi"}],"metadata":{"quotaqual_tokens":"40","quotaqual_fail_status":"500","quotaqual_usage":"negative-completion"}}`)
		defer resp.Body.Close()
		var v struct{ Usage map[string]int64 }
		if err := json.NewDecoder(resp.Body).Decode(&v); err != nil || resp.StatusCode != 500 || !reflect.DeepEqual(v.Usage, obj(p, -c, p-c)) {
			t.Errorf("status %d, usage %v (%v)", resp.StatusCode, v.Usage, err)
		}
	})
	t.Run("each failure status is shaped as a provider shapes it and reports what was generated", func(t *testing.T) {
		for _, tc := range []struct {
			status     int
			typ, code  string
			streamBody string
		}{
			{400, "invalid_request_error", "content_filter", ""},
			{400, "invalid_request_error", "content_filter", `,"stream":true`}, // refused before any chunk: a JSON error
			{429, "tokens", "rate_limit_exceeded", ""},
			{422, "invalid_request_error", "stub_failure", ""},
			{500, "server_error", "stub_failure", ""},
		} {
			resp := s.post(t, fmt.Sprintf(`{"messages":[{"role":"user","content":"hi"}],"metadata":{"quotaqual_tokens":"40","quotaqual_fail_status":"%d"}%s}`, tc.status, tc.streamBody))
			var v struct {
				Error struct{ Type, Code string }
				Usage map[string]int64
			}
			err := json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if err != nil || resp.StatusCode != tc.status || v.Error.Type != tc.typ || v.Error.Code != tc.code || !reflect.DeepEqual(v.Usage, truth) {
				t.Errorf("asked %d%s: status %d, error %+v, usage %v (%v); want %s/%s reporting %v", tc.status, tc.streamBody,
					resp.StatusCode, v.Error, v.Usage, err, tc.typ, tc.code, truth)
			}
			if rec := s.lastCall(t); rec.Status != tc.status || rec.GeneratedTokens != c {
				t.Errorf("asked %d: logged status %d, generated %d; want %d, %d", tc.status, rec.Status, rec.GeneratedTokens, tc.status, c)
			}
		}
	})
	for _, tc := range []struct{ name, md, want string }{
		{"an unknown mode names the field and the modes", `"quotaqual_usage":"lies"`, "is not a usage mode: use one of missing"},
		{"a streamed-only mode without a stream says so", `"quotaqual_usage":"duplicated"`, `needs "stream": true`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := s.post(t, `{"messages":[{"role":"user","content":"hi"}],"metadata":{`+tc.md+`}}`)
			defer resp.Body.Close()
			var e struct {
				Error struct {
					Message string `json:"message"`
					Param   string `json:"param"`
				} `json:"error"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&e)
			if resp.StatusCode != http.StatusBadRequest || e.Error.Param != "metadata."+UsageMetadata || !strings.Contains(e.Error.Message, tc.want) {
				t.Errorf("status %d, error %+v; want 400 on metadata.%s saying %q", resp.StatusCode, e.Error, UsageMetadata, tc.want)
			}
		})
	}
}
