package evidence

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"regexp"
	"sort"
	"strings"
	"unicode/utf8"
)

// Redactor removes credentials from everything written to the bundle. It knows two kinds of
// credential: the run's own secrets (every generated password, the Valkey password…), removed in
// each form SecretForms lists wherever they appear, and credential-shaped text of any origin:
// credential headers, URL userinfo, secret-named fields in JSON, YAML and key=value text, bearer
// and basic tokens. Every removed value becomes Marker.
//
// Redaction is idempotent (redacting its own output changes nothing) and keeps JSON valid: in a
// JSON document or JSONL line, only the content of string literals changes.
//
// A Redactor is safe for concurrent use.
type Redactor struct {
	lit *litMatcher
}

// NewRedactor returns a redactor for the run's secrets; empty strings are ignored.
func NewRedactor(secrets []string) *Redactor {
	var forms []Form
	for _, s := range secrets {
		forms = append(forms, SecretForms(s)...)
	}
	return &Redactor{lit: newLitMatcher(forms)}
}

// maxPasses bounds the fixpoint loop in Bytes; one pass removes everything in practice, a second
// confirms it.
const maxPasses = 8

// Bytes returns b redacted. A document that is JSON as a whole is redacted as JSON; anything else
// line by line, each JSON line as JSON and every other line as text.
func (r *Redactor) Bytes(b []byte) []byte {
	for i := 0; i < maxPasses; i++ {
		nb := r.pass(b)
		if bytes.Equal(nb, b) {
			return nb
		}
		b = nb
	}
	return b
}

// String returns s redacted.
func (r *Redactor) String(s string) string { return string(r.Bytes([]byte(s))) }

func (r *Redactor) pass(b []byte) []byte {
	if looksJSON(b) {
		if out, ok := r.jsonDoc(b); ok {
			return out
		}
	}
	// Known secrets first over the whole input, so one holding a newline is found too; and in
	// base64 wrapped across lines.
	b = r.lit.replace(r.redactWrappedBase64(b))
	var out []byte
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		line := b
		if i >= 0 {
			line = b[:i]
		}
		out = append(out, r.line(line)...)
		if i < 0 {
			break
		}
		out = append(out, '\n')
		b = b[i+1:]
	}
	return out
}

// line redacts one line (no '\n').
func (r *Redactor) line(l []byte) []byte {
	if looksJSON(l) {
		if out, ok := r.jsonDoc(l); ok {
			return out
		}
	}
	return r.text(r.lit.replace(l))
}

// jsonDoc redacts b if it is a JSON document. Literal secret forms are replaced in the raw bytes
// first (a secret never straddles a string boundary unnoticed); if that left the document valid —
// always, for secrets that sit inside strings — the string literals are then redacted one by one.
// If it did not, the structure-preserving path runs on the original and the raw forms are removed
// afterwards regardless: no leak outranks valid JSON.
func (r *Redactor) jsonDoc(b []byte) ([]byte, bool) {
	if !json.Valid(b) {
		return nil, false
	}
	lit := r.lit.replace(b)
	if unchanged := len(lit) == len(b) && &lit[0] == &b[0]; unchanged || json.Valid(lit) {
		return r.jsonValue(lit), true
	}
	return r.lit.replace(r.jsonValue(b)), true
}

func looksJSON(b []byte) bool {
	t := bytes.TrimSpace(b)
	if len(t) < 2 {
		return false
	}
	return (t[0] == '{' && t[len(t)-1] == '}') || (t[0] == '[' && t[len(t)-1] == ']')
}

// jsonValue walks valid JSON b and redacts string literals in place: the value of a secret-named
// key becomes Marker (a number there becomes the string Marker), every other string is decoded,
// redacted as text (or as JSON, when it holds an escaped JSON document) and re-encoded if it
// changed. Structure, key order and whitespace are kept.
func (r *Redactor) jsonValue(b []byte) []byte {
	out := make([]byte, 0, len(b))
	secretValue := false // the next value belongs to a secret-named key
	// A secret key's array or object value ({"X-Api-Key":["sk-…"]}, Go's http.Header as
	// JSON): every value inside it is secret. secretFrom is the nesting depth it opened at.
	depth, secretFrom := 0, 0
	i := 0
	for i < len(b) {
		c := b[i]
		inSecret := secretFrom > 0 && depth >= secretFrom
		switch {
		case c == '"':
			end := stringEnd(b, i)
			lit := b[i:end]
			j := end
			for j < len(b) && isJSONSpace(b[j]) {
				j++
			}
			isKey := j < len(b) && b[j] == ':'
			s, err := decodeJSONString(lit)
			if err != nil {
				out = append(out, lit...)
				i = end
				continue
			}
			switch {
			case isKey:
				rs := r.stringContent(s)
				out = appendJSONString(out, lit, s, rs)
				secretValue = isSecretKey(s) || inSecret
			case (secretValue || inSecret) && s != "":
				out = appendJSONString(out, lit, s, Marker)
				secretValue = false
			default:
				out = appendJSONString(out, lit, s, r.stringContent(s))
				secretValue = false
			}
			i = end
		case c == '-' || (c >= '0' && c <= '9'):
			j := i
			for j < len(b) && strings.IndexByte("+-.eE0123456789", b[j]) >= 0 {
				j++
			}
			num := b[i:j]
			if secretValue || inSecret || len(r.lit.replace(num)) != len(num) || !bytes.Equal(r.lit.replace(num), num) {
				// A secret-named number, or a number holding a secret (its digits, its hex):
				// the string Marker keeps the document valid.
				out = append(out, `"`+Marker+`"`...)
			} else {
				out = append(out, b[i:j]...)
			}
			secretValue = false
			i = j
		case c == ':' || isJSONSpace(c):
			out = append(out, c)
			i++
		default:
			// '{', '[', ',', a literal.
			switch c {
			case '{', '[':
				depth++
				if secretValue && secretFrom == 0 {
					secretFrom = depth
				}
			case '}', ']':
				if depth == secretFrom {
					secretFrom = 0
				}
				depth--
			}
			secretValue = false
			out = append(out, c)
			i++
		}
	}
	return out
}

// decodeJSONString decodes a JSON string literal; one without escapes is its own content.
func decodeJSONString(lit []byte) (string, error) {
	if len(lit) >= 2 && bytes.IndexByte(lit, '\\') < 0 && utf8.Valid(lit) {
		return string(lit[1 : len(lit)-1]), nil
	}
	var s string
	err := json.Unmarshal(lit, &s)
	return s, err
}

func appendJSONString(out, orig []byte, before, after string) []byte {
	if before == after {
		return append(out, orig...)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(after)
	return append(out, bytes.TrimSuffix(buf.Bytes(), []byte("\n"))...)
}

// stringEnd returns the index one past the closing quote of the JSON string starting at b[i].
func stringEnd(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

func isJSONSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// stringContent redacts the decoded content of a JSON string: escaped JSON is redacted as JSON,
// anything else as text, line by line.
func (r *Redactor) stringContent(s string) string {
	return string(r.pass([]byte(s)))
}

var (
	// URL userinfo: scheme://userinfo@ — the whole userinfo goes, scheme and host stay.
	reUserinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://)([^\s/?#@"'<>\\]+)@`)
	// Options whose value follows a space: requirepass x, --password x.
	reSpaceOpt = regexp.MustCompile(`(?i)(?:^|[\s"'])(?:-{0,2}(?:requirepass|masterauth)|--(?:password|passwd|pass|token|secret|api-key|apikey))[ \t]+`)
	// Bearer and Basic credentials anywhere.
	reScheme = regexp.MustCompile(`(?i)\b(bearer|basic)([ \t]+)([A-Za-z0-9\-._~+/]+=*)`)
)

// text redacts one line of non-JSON text for credential-shaped content. Each rule runs only when
// a cheap keyword test says it can apply, so plain log lines cost a lowercase copy and a few
// substring searches.
func (r *Redactor) text(l []byte) []byte {
	lower := asciiLower(nil, l)
	if bytes.Contains(l, []byte("://")) && bytes.IndexByte(l, '@') >= 0 {
		if nl := reUserinfo.ReplaceAll(l, []byte("${1}"+Marker+"@")); !bytes.Equal(nl, l) {
			l, lower = nl, asciiLower(lower, nl)
		}
	}
	if nl := redactKeyValues(l, lower); len(nl) != len(l) || !bytes.Equal(nl, l) {
		l, lower = nl, asciiLower(lower, nl)
	}
	if bytes.Contains(lower, []byte("requirepass")) || bytes.Contains(lower, []byte("masterauth")) || bytes.Contains(lower, []byte("--")) {
		if nl := redactSpaceOptions(l); !bytes.Equal(nl, l) {
			l, lower = nl, asciiLower(lower, nl)
		}
	}
	if bytes.Contains(lower, []byte("bearer")) || bytes.Contains(lower, []byte("basic")) {
		l = redactSchemes(l)
	}
	return l
}

// asciiLower lowercases ASCII letters only, so byte offsets in the result match the input.
func asciiLower(dst, b []byte) []byte {
	dst = append(dst[:0], b...)
	for i, c := range dst {
		if c >= 'A' && c <= 'Z' {
			dst[i] = c + 'a' - 'A'
		}
	}
	return dst
}

// keyWords are lowercase substrings one of which every secret key holds (see secretKeySuffixes);
// they anchor the search for `key: value` pairs.
var keyWords = [][]byte{[]byte("pass"), []byte("pwd"), []byte("secret"), []byte("token"), []byte("key"),
	[]byte("authorization"), []byte("cookie"), []byte("masterauth")}

// secretKeySuffixes are matched against a key lowercased with '-', '_' and '.' removed, after an
// optional trailing "sha256"/"hash"/"digest": "password", "ValkeyPassword", "password_sha256",
// "x-api-key" and "Proxy-Authorization" are secret keys; "password_env" (an environment variable's
// name), "max_tokens" and "credential" (a label) are not.
var secretKeySuffixes = []string{
	"password", "passwd", "pwd", "secret", "token", "apikey", "privatekey", "secretkey",
	"authorization", "cookie", "requirepass", "masterauth", "passphrase",
}

// labelKeys are normalized names that end like a secret key but are labels: the fixtures'
// credential kinds ("wrong-password: 401 on both gateways" is a fact, not a password).
var labelKeys = map[string]bool{"wrongpassword": true, "missingpassword": true, "emptypassword": true}

func isSecretKey(k string) bool {
	if len(k) > 128 {
		return false
	}
	var buf [128]byte
	nb := buf[:0]
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c == '-' || c == '_' || c == '.':
			continue
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		}
		nb = append(nb, c)
	}
	n := string(nb) // does not escape: the compiler keeps it on the stack
	if labelKeys[n] {
		return false
	}
	if secretName(n) {
		return true
	}
	// A numbered name (QQ_PASSWORD_1, token2) is secret like the name.
	t := strings.TrimRight(n, "0123456789")
	return t != n && t != "" && !labelKeys[t] && secretName(t)
}

// secretName reports whether a normalized key name ends like a secret, after an optional
// trailing "sha256"/"hash"/"digest".
func secretName(n string) bool {
	for _, suf := range []string{"sha256", "hash", "digest"} {
		if t := strings.TrimSuffix(n, suf); t != n && t != "" {
			n = t
			break
		}
	}
	for _, s := range secretKeySuffixes {
		if strings.HasSuffix(n, s) {
			return true
		}
	}
	return false
}

func isIdentByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
}

// keyValue is a secret key and its value found in a line.
type keyValue struct {
	keyStart, keyEnd int // the identifier
	quoted           bool
	quoteLen         int // backslashes + quote before the value (quoted values only)
	valStart, valEnd int // the value, quotes included
	delim            byte
}

// findKeyValues returns the secret-named `key: value` / `key=value` / `"key": "value"` pairs of
// l in order (lower is l lowercased by asciiLower). Each keyword occurrence anchors one candidate
// identifier; an identifier counts when it is a secret key followed by ':' or '=' (optionally
// closing a quote, possibly escaped) and a value.
func findKeyValues(l, lower []byte) []keyValue {
	var starts []int
	for _, w := range keyWords {
		for off := 0; ; {
			i := bytes.Index(lower[off:], w)
			if i < 0 {
				break
			}
			p := off + i
			s := p
			for s > 0 && isIdentByte(l[s-1]) {
				s--
			}
			starts = append(starts, s)
			off = p + len(w)
		}
	}
	if len(starts) == 0 {
		return nil
	}
	sort.Ints(starts)
	var out []keyValue
	last := -1
	for _, s := range starts {
		if s == last {
			continue
		}
		last = s
		e := s
		for e < len(l) && isIdentByte(l[e]) {
			e++
		}
		if !isSecretKey(string(l[s:e])) {
			continue
		}
		j := e
		// optional closing quote of the key, possibly escaped
		k := j
		for k < len(l) && l[k] == '\\' {
			k++
		}
		if k < len(l) && (l[k] == '"' || l[k] == '\'') {
			j = k + 1
		} else if k != j {
			continue
		}
		for j < len(l) && (l[j] == ' ' || l[j] == '\t') {
			j++
		}
		if j >= len(l) || (l[j] != ':' && l[j] != '=') {
			continue
		}
		delim := l[j]
		j++
		for j < len(l) && (l[j] == ' ' || l[j] == '\t') {
			j++
		}
		ve := valueEnd(l, j, delim)
		if ve < 0 {
			continue
		}
		kv := keyValue{keyStart: s, keyEnd: e, valStart: j, valEnd: ve, delim: delim}
		n := 0
		for j+n < len(l) && l[j+n] == '\\' {
			n++
		}
		if j+n < len(l) && (l[j+n] == '"' || l[j+n] == '\'') {
			kv.quoted = true
			kv.quoteLen = n + 1
		} else if l[j] == '[' && !bytes.HasPrefix(l[j:], []byte(Marker)) {
			kv.quoted, kv.quoteLen = true, 1 // a Go list: the brackets stay, like quotes
		}
		out = append(out, kv)
	}
	return out
}

// redactKeyValues handles `key: value`, `key=value`, `"key": "value"` and their escaped-JSON
// forms for secret keys. A quoted value loses its content (quotes stay); an unquoted value after
// ':' loses the rest of the line (YAML, HTTP headers), after '=' up to the next separator.
func redactKeyValues(l, lower []byte) []byte {
	kvs := findKeyValues(l, lower)
	if kvs == nil {
		return l
	}
	var out []byte
	last := 0
	for _, kv := range kvs {
		if kv.keyStart < last {
			continue
		}
		qs, qe := kv.valStart, kv.valEnd
		if kv.quoted {
			qs += kv.quoteLen
			if qe-kv.quoteLen >= qs && qe == len(l) && !endsWithQuote(l[qs:qe], kv.quoteLen) {
				// unterminated quote: the rest of the line
			} else {
				qe -= kv.quoteLen
			}
		}
		if qe <= qs || string(l[qs:qe]) == Marker {
			continue
		}
		out = append(out, l[last:qs]...)
		out = append(out, Marker...)
		last = qe
	}
	if out == nil {
		return l
	}
	return append(out, l[last:]...)
}

func endsWithQuote(v []byte, quoteLen int) bool {
	if len(v) < quoteLen {
		return false
	}
	c := v[len(v)-1]
	return c == '"' || c == '\''
}

// valueEnd returns the end of the value starting at vs (quoted values include the closing quote),
// or -1 when there is no value to redact.
func valueEnd(l []byte, vs int, delim byte) int {
	if vs >= len(l) {
		return -1
	}
	// Quoted, possibly with escaped quotes (escaped JSON inside a string): the closing quote is
	// the first one preceded by exactly as many backslashes as the opening one.
	n := 0
	for vs+n < len(l) && l[vs+n] == '\\' {
		n++
	}
	if vs+n < len(l) && (l[vs+n] == '"' || l[vs+n] == '\'') {
		q := l[vs+n]
		for j := vs + n + 1; j < len(l); j++ {
			if l[j] != q {
				continue
			}
			k := 0
			for j-k-1 >= vs+n+1 && l[j-k-1] == '\\' {
				k++
			}
			if k == n {
				return j + 1
			}
		}
		return len(l) // unterminated: the rest of the line
	}
	if n > 0 {
		return -1
	}
	switch {
	case l[vs] == '[' && vs+1 < len(l) && l[vs+1] != '"' && l[vs+1] != '{' && l[vs+1] != '[' && l[vs+1] != ']' &&
		!bytes.HasPrefix(l[vs:], []byte(Marker)):
		// Go's formatting of a map of lists (http.Header: map[X-Api-Key:[sk-…]]): the list's
		// content up to its closing bracket.
		if k := bytes.IndexByte(l[vs:], ']'); k > 0 {
			return vs + k + 1
		}
		return -1
	case l[vs] == '{' || l[vs] == '[':
		return -1 // a structured value: its own fields are redacted on their own
	}
	if delim == ':' {
		end := len(l)
		for end > vs && (l[end-1] == '\r') {
			end--
		}
		if end == vs {
			return -1
		}
		return end
	}
	j := vs
	for j < len(l) && !bytes.ContainsRune([]byte(" \t\r&;,\"'<>(){}[]"), rune(l[j])) {
		j++
	}
	if strings.HasPrefix(string(l[vs:]), Marker) {
		j = vs + len(Marker)
	}
	if j == vs {
		return -1
	}
	return j
}

// redactSpaceOptions handles `requirepass x` and `--password x`.
func redactSpaceOptions(l []byte) []byte {
	ms := reSpaceOpt.FindAllIndex(l, -1)
	if ms == nil {
		return l
	}
	var out []byte
	last := 0
	for _, m := range ms {
		vs := m[1]
		if vs < last || vs >= len(l) {
			continue
		}
		ve := vs
		if strings.HasPrefix(string(l[vs:]), Marker) {
			continue
		}
		for ve < len(l) && l[ve] != ' ' && l[ve] != '\t' && l[ve] != '\r' && l[ve] != '"' && l[ve] != '\'' {
			ve++
		}
		if ve == vs {
			continue
		}
		out = append(out, l[last:vs]...)
		out = append(out, Marker...)
		last = ve
	}
	if out == nil {
		return l
	}
	return append(out, l[last:]...)
}

// redactSchemes replaces the credential after "Bearer" and "Basic". A Basic value is redacted when
// it decodes to "user:password" or looks like a token (long, or with digits or base64 symbols),
// so prose such as "basic auth" survives.
func redactSchemes(l []byte) []byte {
	return reScheme.ReplaceAllFunc(l, func(m []byte) []byte {
		sm := reScheme.FindSubmatch(m)
		scheme, sp, val := sm[1], sm[2], sm[3]
		if strings.EqualFold(string(scheme), "basic") && !basicLike(string(val)) {
			return m
		}
		return append(append(append([]byte{}, scheme...), sp...), Marker...)
	})
}

func basicLike(v string) bool {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if d, err := enc.DecodeString(v); err == nil && bytes.IndexByte(d, ':') >= 0 {
			return true
		}
	}
	return len(v) >= 16 || strings.ContainsAny(v, "0123456789+/=")
}
