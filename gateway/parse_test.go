package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/wire"
)

func TestParseBasic(t *testing.T) {
	enc := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	tests := []struct {
		name, header, user, pass string
		ok                       bool
	}{
		{"plain", "Basic " + enc("alice:pw"), "alice", "pw", true},
		{"scheme case-insensitive", "bAsIc " + enc("alice:pw"), "alice", "pw", true},
		{"split at first colon", "Basic " + enc("alice:p:w:"), "alice", "p:w:", true},
		{"empty password", "Basic " + enc("alice:"), "alice", "", true},
		{"no colon", "Basic " + enc("alice"), "", "", false},
		{"empty user", "Basic " + enc(":pw"), "", "", false},
		{"bad base64", "Basic !!!", "", "", false},
		{"url-safe base64 refused", "Basic " + base64.URLEncoding.EncodeToString([]byte("a?>:~~~")), "", "", false},
		{"unpadded refused", "Basic " + strings.TrimRight(enc("alice:p"), "="), "", "", false},
		{"wrong scheme", "Bearer " + enc("alice:pw"), "", "", false},
		{"scheme only", "Basic ", "", "", false},
		{"no space", "Basic" + enc("alice:pw"), "", "", false},
		{"control char in user", "Basic " + enc("al\nice:pw"), "", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			u, p, ok := parseBasic(tc.header)
			if ok != tc.ok || u != tc.user || p != tc.pass {
				t.Fatalf("parseBasic(%q) = %q, %q, %v; want %q, %q, %v", tc.header, u, p, ok, tc.user, tc.pass, tc.ok)
			}
		})
	}
}

func TestAuthenticate(t *testing.T) {
	a := newAuthenticator("r", map[string][sha256.Size]byte{"alice": sha256.Sum256([]byte("pw"))},
		[]apiKey{{subject: "batch", digest: sha256.Sum256([]byte("sk-1"))}})
	req := func(h ...string) *http.Request {
		r, _ := http.NewRequest("POST", "/", nil)
		for _, v := range h {
			r.Header.Add("Authorization", v)
		}
		// Headers a client might try to choose its subject with are ignored.
		r.Header.Set("x-user", "batch")
		r.Header.Set("x-quotaqual-subject", "batch")
		return r
	}
	b := func(u, p string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p)) }
	for _, tc := range []struct {
		name    string
		r       *http.Request
		subject string
		ok      bool
	}{
		{"basic ok", req(b("alice", "pw")), "alice", true},
		{"basic wrong", req(b("alice", "nope")), "", false},
		{"basic unknown", req(b("bob", "pw")), "", false},
		{"bearer ok", req("Bearer sk-1"), "batch", true},
		{"bearer lower-case", req("bearer sk-1"), "batch", true},
		{"bearer wrong", req("Bearer sk-2"), "", false},
		{"missing", req(), "", false},
		{"two headers", req(b("alice", "pw"), b("alice", "pw")), "", false},
		{"too long", req("Basic " + strings.Repeat("A", maxAuthorizationLen)), "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ok := a.authenticate(tc.r)
			if s != tc.subject || ok != tc.ok {
				t.Fatalf("got %q %v, want %q %v", s, ok, tc.subject, tc.ok)
			}
		})
	}
}

// FuzzParseBasic: the parser never panics; whatever it accepts is a non-empty username
// without ':' or control characters, and encoding it again parses back to the same pair.
func FuzzParseBasic(f *testing.F) {
	for _, s := range []string{"Basic YWxpY2U6cHc=", "basic Og==", "Basic ", "Basic YTpi", "BASIC  YTpi  ",
		"Bearer x", "Basic ====", "Basic YQ", "Basic \x00", "Basic " + strings.Repeat("QUFB", 100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		u, p, ok := parseBasic(h)
		if !ok {
			if u != "" || p != "" {
				t.Fatalf("rejected but returned %q %q", u, p)
			}
			return
		}
		if u == "" || strings.ContainsRune(u, ':') {
			t.Fatalf("accepted a bad username %q", u)
		}
		for _, c := range []byte(u) {
			if c < 0x20 || c == 0x7f {
				t.Fatalf("accepted a control character in %q", u)
			}
		}
		u2, p2, ok2 := parseBasic("Basic " + base64.StdEncoding.EncodeToString([]byte(u+":"+p)))
		if !ok2 || u2 != u || p2 != p {
			t.Fatalf("round trip of %q %q gave %q %q %v", u, p, u2, p2, ok2)
		}
	})
}

func TestParseUsageJSON(t *testing.T) {
	for _, tc := range []struct {
		body string
		n    int64
		ok   bool
	}{
		{`{"usage":{"prompt_tokens":8,"completion_tokens":8,"total_tokens":16}}`, 16, true},
		{`{"usage":{"prompt_tokens":8,"completion_tokens":8}}`, 16, true},
		{`{"usage":{"prompt_tokens":8,"completion_tokens":8,"total_tokens":20}}`, 20, true},
		{`{"usage":{"prompt_tokens":8,"completion_tokens":8,"total_tokens":3}}`, 16, true},
		{`{"usage":{"prompt_tokens":8}}`, 0, false},
		{`{"usage":{"prompt_tokens":-1,"completion_tokens":8}}`, 0, false},
		{`{"usage":{"prompt_tokens":1.5,"completion_tokens":8}}`, 0, false},
		{`{"usage":{"prompt_tokens":"8","completion_tokens":8}}`, 0, false},
		{`{"usage":{"prompt_tokens":9007199254740993,"completion_tokens":8}}`, 0, false},
		{`{"usage":null}`, 0, false},
		{`{}`, 0, false},
		{`not json`, 0, false},
		{`{"usage":{"prompt_tokens":8,"completion_tokens":8}`, 0, false},
	} {
		n, ok := parseUsageJSON([]byte(tc.body))
		if n != tc.n || ok != tc.ok {
			t.Errorf("%s: got %d %v, want %d %v", tc.body, n, ok, tc.n, tc.ok)
		}
	}
}

func FuzzParseUsageJSON(f *testing.F) {
	for _, s := range []string{`{"usage":{"prompt_tokens":8,"completion_tokens":8,"total_tokens":16}}`,
		`{"usage":{"prompt_tokens":0,"completion_tokens":0}}`, `{"usage":null}`, `[]`, `{"usage":{"prompt_tokens":1e3,"completion_tokens":1}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ok := parseUsageJSON(b)
		if ok && (n < 0 || n > maxUsageTokens) {
			t.Fatalf("usage %d out of range", n)
		}
		if !ok && n != 0 {
			t.Fatalf("unknown usage reported %d", n)
		}
	})
}

const sampleStream = "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n" +
	"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n" +
	"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":2,\"total_tokens\":7}}\n\n" +
	"data: [DONE]\n\n"

func runFilter(drop bool, parts ...[]byte) ([]byte, int64, bool) {
	f := &sseFilter{dropUsageChunk: drop}
	var out []byte
	for _, p := range parts {
		out = f.feed(p, out)
	}
	out = f.finish(out)
	n, ok := f.result()
	return out, n, ok
}

func TestSSEFilter(t *testing.T) {
	out, n, ok := runFilter(false, []byte(sampleStream))
	if string(out) != sampleStream || n != 7 || !ok {
		t.Fatalf("pass-through: %q %d %v", out, n, ok)
	}
	out, n, ok = runFilter(true, []byte(sampleStream))
	if strings.Contains(string(out), `"usage":{`) || !strings.Contains(string(out), "[DONE]") || n != 7 || !ok {
		t.Fatalf("drop: %q %d %v", out, n, ok)
	}
	// Byte by byte gives the same.
	var parts [][]byte
	for i := range len(sampleStream) {
		parts = append(parts, []byte{sampleStream[i]})
	}
	out2, n2, ok2 := runFilter(true, parts...)
	if !bytes.Equal(out, out2) || n2 != n || ok2 != ok {
		t.Fatalf("byte-by-byte differs: %q", out2)
	}
	// CRLF line endings, multi-line data, no final blank line.
	crlf := strings.ReplaceAll(sampleStream, "\n", "\r\n")
	if out, n, ok := runFilter(false, []byte(crlf)); string(out) != crlf || n != 7 || !ok {
		t.Fatalf("crlf: %q %d %v", out, n, ok)
	}
	if _, n, ok := runFilter(false, []byte("data: {\"choices\":[],\ndata: \"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1}}")); n != 2 || !ok {
		t.Fatalf("multi-line data without final blank line: %d %v", n, ok)
	}
	// Missing or garbled usage is unknown.
	if _, _, ok := runFilter(false, []byte("data: {\"choices\":[]}\n\ndata: [DONE]\n\n")); ok {
		t.Fatal("no usage chunk: usage reported known")
	}
	if _, _, ok := runFilter(false, []byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":-4,\"completion_tokens\":1}}\n\n")); ok {
		t.Fatal("garbled usage reported known")
	}
}

// FuzzSSEFilter: never panics; without dropping, the output is exactly the input; the result
// does not depend on how the stream is split into reads; known usage is in range.
func FuzzSSEFilter(f *testing.F) {
	f.Add([]byte(sampleStream), uint16(7), false)
	f.Add([]byte(sampleStream), uint16(100), true)
	f.Add([]byte(strings.ReplaceAll(sampleStream, "\n", "\r\n")), uint16(3), true)
	f.Add([]byte("data: {\"usage\":{\"prompt_tokens\":1,\"completion_tokens\":1},\"choices\":[]}"), uint16(0), true)
	f.Add([]byte("event: x\ndata:{}\n\n\n\n:comment\n\n"), uint16(5), false)
	f.Fuzz(func(t *testing.T, in []byte, split uint16, drop bool) {
		whole, n1, ok1 := runFilter(drop, in)
		k := int(split)
		if k > len(in) {
			k = len(in)
		}
		parts, n2, ok2 := runFilter(drop, in[:k], in[k:])
		if !bytes.Equal(whole, parts) || n1 != n2 || ok1 != ok2 {
			t.Fatalf("split at %d changes the result: %q/%d/%v vs %q/%d/%v", k, whole, n1, ok1, parts, n2, ok2)
		}
		if !drop && !bytes.Equal(whole, in) {
			t.Fatalf("pass-through changed the stream: %q → %q", in, whole)
		}
		if drop && len(whole) > len(in) {
			t.Fatalf("output longer than input")
		}
		if ok1 && (n1 < 0 || n1 > maxUsageTokens) {
			t.Fatalf("usage %d out of range", n1)
		}
	})
}

func TestUpstreamBodyAddsIncludeUsage(t *testing.T) {
	body := []byte(`{"model":"m","stream":true,"stream_options":{"foo":1},"messages":[]}`)
	cr := chatRequest{}
	tr := true
	cr.Stream = &tr
	out, added := upstreamBody(body, &cr)
	if !added || !bytes.Contains(out, []byte(`"include_usage":true`)) || !bytes.Contains(out, []byte(`"foo":1`)) {
		t.Fatalf("%s %v", out, added)
	}
	fl := false
	cr.Stream = &fl
	if out, added := upstreamBody(body, &cr); added || !bytes.Equal(out, body) {
		t.Fatal("non-streaming body changed")
	}
}

func TestUpstreamHeadersStripCredentials(t *testing.T) {
	in := http.Header{}
	for _, h := range []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key", "Api-Key", "Connection", "Keep-Alive", "Te", "Upgrade", "X-Hop", "Accept-Encoding"} {
		in.Set(h, "v")
	}
	in.Set("Connection", "X-Hop")
	in.Set("X-Keep", "1")
	out := upstreamHeaders(in, "rid")
	for _, h := range []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Api-Key", "Api-Key", "Connection", "Keep-Alive", "Te", "Upgrade", "X-Hop", "Accept-Encoding"} {
		if out.Get(h) != "" {
			t.Errorf("%s forwarded", h)
		}
	}
	if out.Get("X-Keep") != "1" || out.Get(wire.RequestIDHeader) != "rid" {
		t.Errorf("headers: %v", out)
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	for in, want := range map[float64]int64{0: 1, 0.2: 1, 1: 1, 1.001: 2, 59.5: 60} {
		if got := retryAfterSeconds(durationSeconds(in)); got != want {
			t.Errorf("%v: %d want %d", in, got, want)
		}
	}
}

func durationSeconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
