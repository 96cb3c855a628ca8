package evidence

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
)

// plant returns text holding secret in form number form (mod the number of forms), with k filler
// bytes in front of it where the form is a base64 stream.
func plant(secret string, form uint8, k int) string {
	b64s := func(enc *base64.Encoding) string {
		return enc.EncodeToString([]byte(strings.Repeat("u", k) + secret + "tail"))
	}
	forms := []func() string{
		func() string { return secret },
		func() string { return jsonEsc(secret) },
		func() string { return jsonEsc(jsonEsc(secret)) },
		func() string { return url.QueryEscape(secret) },
		func() string { return url.PathEscape(secret) },
		func() string { return hex.EncodeToString([]byte(secret)) },
		func() string { return strings.ToUpper(hex.EncodeToString([]byte(secret))) },
		func() string { return base64.StdEncoding.EncodeToString([]byte(secret)) },
		func() string { return base64.RawURLEncoding.EncodeToString([]byte(secret)) },
		func() string { return b64s(base64.StdEncoding) },
		func() string { return b64s(base64.URLEncoding) },
		func() string { return b64s(base64.RawStdEncoding) },
		func() string { return "Authorization: Basic " + b64("application-a:"+secret) },
		func() string { return "redis://:" + secret + "@valkey:6379/0" },
		func() string { return "rediss://default:" + url.QueryEscape(secret) + "@valkey:6380" },
		func() string { return `{"password":"` + jsonEsc(secret) + `","n":1}` },
		func() string { return `{"msg":"` + jsonEsc(`{"token":"`+jsonEsc(secret)+`"}`) + `"}` },
		func() string { return "password: " + secret },
		func() string { return "x token=" + url.QueryEscape(secret) + "&y=1" },
		func() string { return "Bearer " + secret },
		// issue 10, defect 11
		func() string { return "\n" + wrapped(secret, k, 64, "\n") + "\n" },
		func() string { return "\r\n" + wrapped(secret, k, 76, "\r\n") + "\r\n" },
		func() string { return `{"X-Api-Key":["` + jsonEsc(secret) + `"]}` },
		func() string { return "map[X-Api-Key:[" + secret + "]]" },
		func() string { return "QQ_PASSWORD_1=" + secret },
	}
	return forms[int(form)%len(forms)]()
}

// wrapped is base64 of filler + secret + filler wrapped at width columns, the secret's form
// straddling a line break.
func wrapped(secret string, k, width int, nl string) string {
	blob := base64.StdEncoding.EncodeToString([]byte(strings.Repeat("u", 45+k) + secret + strings.Repeat("v", 90)))
	var lines []string
	for len(blob) > width {
		lines = append(lines, blob[:width])
		blob = blob[width:]
	}
	return strings.Join(append(lines, blob), nl)
}

// FuzzRedact: whatever surrounds it, a secret planted in any form is gone after redaction, and
// redacting twice changes nothing more than redacting once.
func FuzzRedact(f *testing.F) {
	f.Add("prefix ", " suffix", "Zk3p9QzL7mWv2Rt8sYb4nXa1", uint8(0), uint8(0))
	f.Add(`{"a":"`, `"}`, `p@ss/w0rd+&=?#%"\<>: é`, uint8(9), uint8(1))
	f.Add("Authorization: Basic ", "\n", "hunter2hunter2", uint8(11), uint8(2))
	f.Add("", "", "x\x00y\xffzzzzzz", uint8(3), uint8(0))
	f.Add("{\"password\": ", "}", "0123456789", uint8(15), uint8(1))
	f.Add(`{"a":[`, `]}`, "Zk3p9QzL7mWv2Rt8sYb4nXa1", uint8(16), uint8(0))
	f.Add("-----BEGIN-----", "-----END-----", "Zk3p9QzL7mWv2Rt8sYb4nXa1", uint8(20), uint8(1))
	f.Add("x", "", "Zk3p9QzL7mWv2Rt8sYb4nXa1", uint8(21), uint8(2))
	f.Add("", "", "Zk3p9QzL7mWv2Rt8sYb4nXa1", uint8(22), uint8(0))
	f.Add("headers=", " done", "Zk3p9QzL7mWv2Rt8sYb4nXa1", uint8(23), uint8(0))
	f.Add("env ", "\n", "Zk3p9QzL7mWv2Rt8sYb4nXa1", uint8(24), uint8(0))
	f.Fuzz(func(t *testing.T, prefix, suffix, secret string, form, k uint8) {
		if len(secret) < minSecretLen || len(secret) > 64 || len(prefix)+len(suffix) > 4096 {
			t.Skip("outside the generated-credential domain: secrets of 6-64 bytes, surroundings up to 4 KiB")
		}
		if strings.ContainsAny(secret, "[]") {
			// A secret overlapping the marker itself ("REDACTED]x") cannot be told apart from
			// it; generated credentials never contain brackets.
			t.Skip("secret contains brackets, which generated credentials never do")
		}
		r := NewRedactor([]string{secret})
		in := prefix + plant(secret, form, int(k%3)) + suffix
		once := r.String(in)
		if leaks(once, secret) {
			t.Fatalf("secret survived redaction\n in:  %q\n out: %q", in, once)
		}
		if twice := r.String(once); twice != once {
			t.Fatalf("not idempotent\n once:  %q\n twice: %q", once, twice)
		}
		// With a generated (alphanumeric) secret, a JSON object or array (a JSONL line) stays valid.
		if looksJSON([]byte(in)) && json.Valid([]byte(in)) && strings.Trim(secret, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == "" && !json.Valid([]byte(once)) {
			t.Fatalf("valid JSON became invalid\n in:  %q\n out: %q", in, once)
		}
	})
}
