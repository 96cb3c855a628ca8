package evidence

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

const (
	secA   = "s3cr3t-Pa55w0rd-ABCxyz" // alphanumeric plus '-'
	secSym = `p@ss/w0rd+&=?#%"\<>: é` // every character an encoding treats specially
)

func TestRedactorRedacts(t *testing.T) {
	r := NewRedactor([]string{secA, secSym})
	cases := []struct {
		name, in, want string
	}{
		// credential headers, HTTP dump form
		{"authorization basic header", "Authorization: Basic YWxhZGRpbjpvcGVuc2VzYW1l", "Authorization: [REDACTED]"},
		{"authorization bearer header", "authorization: Bearer eyJhbGciOi.eyJzdWIi.sig", "authorization: [REDACTED]"},
		{"proxy-authorization header", "Proxy-Authorization: Basic Zm9vOmJhcg==", "Proxy-Authorization: [REDACTED]"},
		{"cookie header", "Cookie: session=abc123; theme=dark", "Cookie: [REDACTED]"},
		{"set-cookie header", "Set-Cookie: sid=xyz; HttpOnly", "Set-Cookie: [REDACTED]"},
		{"x-api-key header", "X-Api-Key: sk-live-1234", "X-Api-Key: [REDACTED]"},
		{"api-key header", "api-key: 0123456789abcdef", "api-key: [REDACTED]"},
		// credential headers as JSON keys
		{"json header map", `{"Authorization":"Basic Zm9vOmJhcg==","Accept":"*/*"}`, `{"Authorization":"[REDACTED]","Accept":"*/*"}`},
		{"json header array value", `{"X-Api-Key":"k-1","Cookie":"a=b"}`, `{"X-Api-Key":"[REDACTED]","Cookie":"[REDACTED]"}`},
		// URL userinfo
		{"redis empty user", "connecting to redis://:hunter22@valkey:6379/0", "connecting to redis://[REDACTED]@valkey:6379/0"},
		{"rediss user and password", "url=rediss://user:pa55@valkey.local:6380/0 ok", "url=rediss://[REDACTED]@valkey.local:6380/0 ok"},
		{"http userinfo", "GET http://u:p@h/path", "GET http://[REDACTED]@h/path"},
		{"userinfo inside json", `{"addr":"redis://:pw@10.0.0.1:6379"}`, `{"addr":"redis://[REDACTED]@10.0.0.1:6379"}`},
		// JSON secret fields
		{"json password", `{"user":"application-a","password":"hunter2"}`, `{"user":"application-a","password":"[REDACTED]"}`},
		{"json nested", `{"store":{"auth":{"Password":"x1","token":"t"}},"n":1}`, `{"store":{"auth":{"Password":"[REDACTED]","token":"[REDACTED]"}},"n":1}`},
		{"json suffix and case", `{"valkeyPassword":"a","CLIENT_SECRET":"b","api_key":"c","apikey":"d","access_token":"e","private_key":"f","passwd":"g","secret":"h"}`,
			`{"valkeyPassword":"[REDACTED]","CLIENT_SECRET":"[REDACTED]","api_key":"[REDACTED]","apikey":"[REDACTED]","access_token":"[REDACTED]","private_key":"[REDACTED]","passwd":"[REDACTED]","secret":"[REDACTED]"}`},
		{"json numeric password", `{"password": 123456}`, `{"password": "[REDACTED]"}`},
		{"json password_sha256", `{"password_sha256":"9f86d081884c7d65"}`, `{"password_sha256":"[REDACTED]"}`},
		{"json password_env kept", `{"password_env":"QQ_PASSWORD_1"}`, `{"password_env":"QQ_PASSWORD_1"}`},
		{"json labels kept", `{"credential":"wrong-password","subject":"application-a","max_tokens":64}`, `{"credential":"wrong-password","subject":"application-a","max_tokens":64}`},
		{"json escaped inside string", `{"body":"{\"password\":\"hunter2\",\"n\":1}"}`, `{"body":"{\"password\":\"[REDACTED]\",\"n\":1}"}`},
		{"json escaped twice", `{"outer":"{\"inner\":\"{\\\"token\\\":\\\"abc\\\"}\"}"}`, `{"outer":"{\"inner\":\"{\\\"token\\\":\\\"[REDACTED]\\\"}\"}"}`},
		{"json fragment in text", `msg="body" body={"password":"hunter2","user":"a"} done`, `msg="body" body={"password":"[REDACTED]","user":"a"} done`},
		{"escaped json fragment in text", `body="{\"password\":\"hunter2\"}"`, `body="{\"password\":\"[REDACTED]\"}"`},
		{"pretty json line", `  "password": "hunter2",`, `  "password": "[REDACTED]",`},
		// YAML
		{"yaml password", "  password: hunter2", "  password: [REDACTED]"},
		{"yaml secret quoted", `secret: "a b c"`, `secret: "[REDACTED]"`},
		{"yaml list item", "- token: abc", "- token: [REDACTED]"},
		{"yaml password_env kept", "  password_env: QQ_PASSWORD_1", "  password_env: QQ_PASSWORD_1"},
		{"yaml password_sha256", "password_sha256: 9f86d0818", "password_sha256: [REDACTED]"},
		{"credential label kept", "wrong-password: 401 on both gateways", "wrong-password: 401 on both gateways"},
		// key=value
		{"kv password", "login password=hunter2 user=a", "login password=[REDACTED] user=a"},
		{"kv pwd", "pwd=xyz&user=a", "pwd=[REDACTED]&user=a"},
		{"kv token", "?token=abc123;", "?token=[REDACTED];"},
		{"kv secret", "secret=s", "secret=[REDACTED]"},
		{"kv api_key", "api_key=k", "api_key=[REDACTED]"},
		{"kv quoted", `password="a b"`, `password="[REDACTED]"`},
		{"requirepass", "requirepass hunter2", "requirepass [REDACTED]"},
		{"requirepass flag", "valkey-server --port 0 --requirepass hunter2 --appendonly yes", "valkey-server --port 0 --requirepass [REDACTED] --appendonly yes"},
		{"env var name kept", "password_env=QQ_PASSWORD_1", "password_env=QQ_PASSWORD_1"},
		// bearer and basic anywhere
		{"bearer prose", "sent bearer abc.def-ghi to gw", "sent bearer [REDACTED] to gw"},
		{"basic anywhere", "curl -H 'x: Basic YWxhZGRpbjpvcGVuc2VzYW1l' gw", "curl -H 'x: Basic [REDACTED]' gw"},
		{"basic prose kept", "uses basic auth for subjects", "uses basic auth for subjects"},
		// the run's own secrets in every form
		{"raw", "x " + secA + " y", "x [REDACTED] y"},
		{"raw symbols", "x " + secSym + " y", "x [REDACTED] y"},
		{"base64 std", "b=" + b64(secA) + ";", "b=[REDACTED];"},
		{"base64 url", "b " + base64.URLEncoding.EncodeToString([]byte(secSym)) + " e", "b [REDACTED] e"},
		{"base64 unpadded", "b " + base64.RawStdEncoding.EncodeToString([]byte(secSym)) + " e", "b [REDACTED] e"},
		{"query escaped", "q=" + url.QueryEscape(secSym) + "&x=1", "q=[REDACTED]&x=1"},
		{"path escaped", "/p/" + url.PathEscape(secSym) + "/x", "/p/[REDACTED]/x"},
		{"json escaped in text", "v=" + jsonEsc(secSym) + " e", "v=[REDACTED] e"},
		{"json escaped in json", `{"v":"` + jsonEsc(secSym) + `"}`, `{"v":"[REDACTED]"}`},
		{"json escaped twice", "v=" + jsonEsc(jsonEsc(secSym)) + " e", "v=[REDACTED] e"},
		{"hex", "h=" + hex.EncodeToString([]byte(secA)) + " e", "h=[REDACTED] e"},
		{"hex upper", "h=" + strings.ToUpper(hex.EncodeToString([]byte(secSym))) + " e", "h=[REDACTED] e"},
		{"secret as json key", `{"` + secA + `":1}`, `{"[REDACTED]":1}`},
		// issue 10, defect 11: the gaps a review found
		{"json array under a secret key", `{"X-Api-Key":["sk-live-1234","sk-2"],"Accept":["*/*"]}`, `{"X-Api-Key":["[REDACTED]","[REDACTED]"],"Accept":["*/*"]}`},
		{"json object under a secret key", `{"token":{"value":"abc","n":7},"n":1}`, `{"token":{"value":"[REDACTED]","n":"[REDACTED]"},"n":1}`},
		{"go map of lists", "headers=map[X-Api-Key:[sk-live-1234] Accept:[*/*]]", "headers=map[X-Api-Key:[[REDACTED]] Accept:[*/*]]"},
		{"numbered env name", "QQ_PASSWORD_1=hunter2 x=1", "QQ_PASSWORD_1=[REDACTED] x=1"},
		{"numbered yaml key", "  api_key_2: k-abc", "  api_key_2: [REDACTED]"},
		{"numbered json key", `{"QQ_PASSWORD_12":"hunter2"}`, `{"QQ_PASSWORD_12":"[REDACTED]"}`},
		{"numbered env name as a value kept", "password_env: QQ_PASSWORD_1", "password_env: QQ_PASSWORD_1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := r.String(c.in)
			if got != c.want {
				t.Errorf("\n in:   %s\n got:  %s\n want: %s", c.in, got, c.want)
			}
			if again := r.String(got); again != got {
				t.Errorf("not idempotent:\n once:  %s\n twice: %s", got, again)
			}
			if json.Valid([]byte(c.in)) && !json.Valid([]byte(got)) {
				t.Errorf("valid JSON became invalid: %s", got)
			}
		})
	}
}

// TestRedactorRemovesBase64AtEveryAlignment plants a secret inside a longer base64 stream (as in
// a Basic credential "user:secret", or a base64 blob) at each of the three byte alignments.
func TestRedactorRemovesBase64AtEveryAlignment(t *testing.T) {
	r := NewRedactor([]string{secA, secSym})
	for _, sec := range []string{secA, secSym} {
		for k := 0; k < 3; k++ {
			for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding, base64.RawStdEncoding, base64.RawURLEncoding} {
				for tail := 0; tail < 3; tail++ {
					plain := strings.Repeat("u", 4+k) + ":" + sec + strings.Repeat("z", tail)
					in := "blob " + enc.EncodeToString([]byte(plain)) + " end"
					got := r.String(in)
					if leaks(got, sec) {
						t.Errorf("offset %d tail %d: secret left in %q -> %q", k, tail, in, got)
					}
				}
			}
		}
	}
}

func TestRedactorKeepsJSONLinesValid(t *testing.T) {
	r := NewRedactor([]string{secA, secSym})
	lines := []string{
		`{"time":"2026-09-01T12:00:00Z","msg":"auth failed for ` + jsonEsc(secSym) + `","n":3}`,
		`{"headers":{"Authorization":["Basic ` + b64("app:"+secA) + `"]},"body":"{\"password\":\"` + jsonEsc(jsonEsc(secSym)) + `\"}"}`,
		`["redis://:` + secA + `@h:6379", {"token": null}, {"password": ""}, {"password": {"nested": "v ` + secA + `"}}]`,
		`{"a":"` + secA + secA + `","b":"x` + secA + `y"}`,
	}
	for _, l := range lines {
		got := r.String(l)
		if !json.Valid([]byte(got)) {
			t.Errorf("redacting %s\n gave invalid JSON: %s", l, got)
		}
		if leaks(got, secA) || leaks(got, secSym) {
			t.Errorf("secret left in %s", got)
		}
	}
}

func TestRedactorIsIdempotentOnMultilineDocuments(t *testing.T) {
	r := NewRedactor([]string{secA})
	in := "store:\n  url: redis://:" + secA + "@v:6379\n  password: " + secA + "\nAuthorization: Bearer x\n{\"token\":\"t\"}\n"
	once := r.String(in)
	if twice := r.String(once); twice != once {
		t.Errorf("once:\n%s\ntwice:\n%s", once, twice)
	}
	if strings.Count(once, "\n") != strings.Count(in, "\n") {
		t.Errorf("line count changed:\n%s", once)
	}
}

func TestRedactorWithoutSecretsStillRedactsPatterns(t *testing.T) {
	r := NewRedactor(nil)
	if got := r.String("redis://:pw@h"); got != "redis://[REDACTED]@h" {
		t.Errorf("got %q", got)
	}
}

// leaks reports whether s holds sec in any form a test can compute independently of SecretForms:
// raw, JSON-escaped, query/path-escaped, hex and the aligned base64 cores.
func leaks(s, sec string) bool {
	cands := []string{sec, jsonEsc(sec), url.QueryEscape(sec), url.PathEscape(sec), hex.EncodeToString([]byte(sec))}
	for k := 0; k < 3; k++ {
		for _, enc := range []*base64.Encoding{base64.RawStdEncoding, base64.RawURLEncoding} {
			// Encode the secret behind k filler bytes and keep only characters whose bits come
			// wholly from the secret.
			full := enc.EncodeToString(append(make([]byte, k), sec...))
			from := (8*k + 5) / 6
			to := 8 * (k + len(sec)) / 6
			if to-from >= minCoreLen {
				cands = append(cands, full[from:to])
			}
		}
	}
	for _, c := range cands {
		if c != "" && strings.Contains(s, c) {
			return true
		}
	}
	return false
}

// TestRedactorRemovesWrappedBase64: base64 wrapped at 64 or 76 columns (PEM, MIME) splits a
// secret's base64 form across a line break; the block holding it is removed whole.
func TestRedactorRemovesWrappedBase64(t *testing.T) {
	r := NewRedactor([]string{secA})
	for _, width := range []int{64, 76} {
		for _, nl := range []string{"\n", "\r\n"} {
			for k := 0; k < 3; k++ {
				blob := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("u", 40+k) + secA + strings.Repeat("v", 200)))
				var lines []string
				for len(blob) > width {
					lines = append(lines, "  "+blob[:width])
					blob = blob[width:]
				}
				lines = append(lines, "  "+blob)
				in := "-----BEGIN DATA-----" + nl + strings.Join(lines, nl) + nl + "-----END DATA-----" + nl
				if !strings.Contains(strings.ReplaceAll(strings.ReplaceAll(in, nl+"  ", ""), "\r", ""), b64core(secA, 40+k)) {
					t.Fatalf("width %d offset %d: the test does not hold the secret's base64 form", width, k)
				}
				got := r.String(in)
				joined := strings.NewReplacer("\r", "", "\n", "", " ", "").Replace(got)
				if strings.Contains(joined, b64core(secA, 40+k)) || !strings.Contains(got, "  [REDACTED]"+nl) {
					t.Errorf("width %d %q offset %d: the wrapped secret survived:\n%s", width, nl, k, got)
				}
				if again := r.String(got); again != got {
					t.Errorf("not idempotent:\n%s\n%s", got, again)
				}
			}
		}
	}
}

// b64core is the part of base64(filler + secret + …) that encodes only secret bytes.
func b64core(secret string, k int) string {
	return base64Core(base64.StdEncoding, []byte(secret), k%3)
}
