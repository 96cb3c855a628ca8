package evidence

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"encoding/xml"
	"net/url"
	"sort"
	"strings"
)

// Marker replaces every redacted value.
const Marker = "[REDACTED]"

// minSecretLen is the shortest secret the redactor derives encoded forms for; shorter strings
// (which no generated credential is) are redacted in raw form only, because their encodings would
// match ordinary text.
const minSecretLen = 6

// minCoreLen is the shortest base64 alignment core kept as a form: a core is the run of base64
// characters fully determined by the secret's bytes when it sits at some offset inside a longer
// base64 stream (a Basic credential "user:secret", for instance).
const minCoreLen = 6

// Form is one encoding of a secret, named for findings ("base64-std-offset1"); the value never
// leaves the process except as a salted hash in canaries.json.
type Form struct {
	Name  string
	Value string
}

// SecretForms returns every form of secret the redactor removes and the canary scan looks for:
// raw; base64 (std and url alphabets, padded and unpadded, and the fully-determined core at each
// of the three byte alignments); URL query- and path-escaped (upper and lower hex); JSON-escaped
// (with and without HTML escaping, and escaped twice, as inside an escaped JSON document);
// XML-escaped; hex (lower and upper). Duplicate values are dropped, longest first.
func SecretForms(secret string) []Form {
	if secret == "" {
		return nil
	}
	var out []Form
	seen := map[string]bool{}
	add := func(name, v string) {
		if v == "" || seen[v] || strings.Contains(Marker, v) {
			return
		}
		seen[v] = true
		out = append(out, Form{Name: name, Value: v})
	}
	add("raw", secret)
	if len(secret) < minSecretLen {
		return out
	}
	// JSON-escaped, as json.Marshal writes it (HTML-escaped) and as an encoder with
	// SetEscapeHTML(false) writes it; and the JSON escape of that, for escaped JSON in a string.
	j1 := jsonEscape(secret, true)
	j2 := jsonEscape(secret, false)
	add("json-escaped", j1)
	add("json-escaped", j2)
	add("json-escaped-twice", jsonEscape(j1, true))
	add("json-escaped-twice", jsonEscape(j2, false))
	var xb bytes.Buffer
	_ = xml.EscapeText(&xb, []byte(secret))
	add("xml-escaped", xb.String())
	q := url.QueryEscape(secret)
	add("query-escaped", q)
	add("query-escaped", lowerPercent(q))
	add("query-escaped", strings.ReplaceAll(q, "+", "%20"))
	p := url.PathEscape(secret)
	add("path-escaped", p)
	add("path-escaped", lowerPercent(p))
	add("hex", hex.EncodeToString([]byte(secret)))
	add("hex", strings.ToUpper(hex.EncodeToString([]byte(secret))))
	for _, e := range []struct {
		name string
		enc  *base64.Encoding
	}{{"base64-std", base64.StdEncoding}, {"base64-url", base64.URLEncoding}} {
		add(e.name, e.enc.EncodeToString([]byte(secret)))
		raw := e.enc.WithPadding(base64.NoPadding)
		add(e.name+"-unpadded", raw.EncodeToString([]byte(secret)))
		for k := 0; k < 3; k++ {
			add(e.name+"-offset"+string(rune('0'+k)), base64Core(raw, []byte(secret), k))
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return len(out[a].Value) > len(out[b].Value) })
	return out
}

// base64Core returns the base64 characters that depend only on secret's bytes when the secret
// starts k bytes (mod 3) into a base64-encoded stream, or "" when that run is too short to be
// distinctive.
func base64Core(enc *base64.Encoding, secret []byte, k int) string {
	buf := make([]byte, k+len(secret))
	copy(buf[k:], secret)
	s := enc.EncodeToString(buf)
	start := (8*k + 5) / 6           // first character whose 6 bits all come from the secret
	end := 8 * (k + len(secret)) / 6 // one past the last such character
	if end > len(s) {
		end = len(s)
	}
	if end-start < minCoreLen {
		return ""
	}
	return s[start:end]
}

func jsonEscape(s string, html bool) string {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(html)
	_ = enc.Encode(s)
	out := strings.TrimSuffix(b.String(), "\n")
	return out[1 : len(out)-1]
}

func lowerPercent(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			for j := i + 1; j <= i+2; j++ {
				if b[j] >= 'A' && b[j] <= 'F' {
					b[j] += 'a' - 'A'
				}
			}
		}
	}
	return string(b)
}

// litMatcher finds the leftmost-longest occurrence of any of a set of byte patterns. Patterns are
// bucketed by their first two bytes, so a scan costs one table probe per input byte plus a
// prefix compare at the rare candidate positions.
type litMatcher struct {
	two     [1 << 16 / 64]uint64 // bitset over the first two bytes of every pattern
	buckets map[uint16][]int     // first two bytes -> pattern indexes, longest first
	one     [256]bool            // first byte of one-byte patterns (not used by SecretForms)
	pats    []Form
}

func newLitMatcher(forms []Form) *litMatcher {
	m := &litMatcher{buckets: map[uint16][]int{}}
	sorted := append([]Form(nil), forms...)
	sort.SliceStable(sorted, func(a, b int) bool { return len(sorted[a].Value) > len(sorted[b].Value) })
	seen := map[string]bool{}
	for _, f := range sorted {
		if f.Value == "" || seen[f.Value] {
			continue
		}
		seen[f.Value] = true
		m.pats = append(m.pats, f)
		i := len(m.pats) - 1
		if len(f.Value) == 1 {
			m.one[f.Value[0]] = true
			continue
		}
		k := uint16(f.Value[0])<<8 | uint16(f.Value[1])
		m.two[k/64] |= 1 << (k % 64)
		m.buckets[k] = append(m.buckets[k], i)
	}
	return m
}

func (m *litMatcher) empty() bool { return m == nil || len(m.pats) == 0 }

// next returns the first match at or after from: its start, end and pattern index, or -1.
func (m *litMatcher) next(b []byte, from int) (start, end, pat int) {
	if m.empty() {
		return -1, -1, -1
	}
	for i := from; i < len(b); i++ {
		if i+1 < len(b) {
			k := uint16(b[i])<<8 | uint16(b[i+1])
			if m.two[k/64]&(1<<(k%64)) != 0 {
				for _, p := range m.buckets[k] {
					v := m.pats[p].Value
					if len(b)-i >= len(v) && string(b[i:i+len(v)]) == v {
						return i, i + len(v), p
					}
				}
			}
		}
		if m.one[b[i]] {
			for p, f := range m.pats {
				if f.Value == string(b[i]) {
					return i, i + 1, p
				}
			}
		}
	}
	return -1, -1, -1
}

// replace returns b with every match replaced by Marker (b itself when nothing matched).
func (m *litMatcher) replace(b []byte) []byte {
	s, e, _ := m.next(b, 0)
	if s < 0 {
		return b
	}
	out := make([]byte, 0, len(b))
	last := 0
	for s >= 0 {
		out = append(out, b[last:s]...)
		out = append(out, Marker...)
		last = e
		s, e, _ = m.next(b, e)
	}
	return append(out, b[last:]...)
}
