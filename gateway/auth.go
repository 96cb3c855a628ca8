package gateway

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strings"
)

// maxAuthorizationLen bounds the Authorization header the gateway is willing to decode. Real
// credentials are far shorter; anything longer is malformed.
const maxAuthorizationLen = 4096

// authenticator verifies HTTP Basic credentials against configured users and bearer API keys
// against configured keys. It stores only SHA-256 digests of the secrets, compares them in
// constant time, and performs a dummy comparison for unknown users so that the time taken does
// not reveal which usernames exist.
type authenticator struct {
	realm     string
	challenge string // WWW-Authenticate value
	users     map[string][sha256.Size]byte
	keys      map[[sha256.Size]byte]string // key digest → subject
	dummy     [sha256.Size]byte
}

type apiKey struct {
	subject string
	digest  [sha256.Size]byte
}

func newAuthenticator(realm string, users map[string][sha256.Size]byte, keys []apiKey) *authenticator {
	byDigest := make(map[[sha256.Size]byte]string, len(keys))
	for _, k := range keys {
		byDigest[k.digest] = k.subject
	}
	return &authenticator{
		realm:     realm,
		challenge: `Basic realm="` + realm + `"`,
		users:     users,
		keys:      byDigest,
		dummy:     sha256.Sum256([]byte("quotaqual: no such user")),
	}
}

// authenticate returns the authenticated subject of r, or ok false. It never looks at any
// header other than Authorization, so nothing else the client sends can choose the subject.
func (a *authenticator) authenticate(r *http.Request) (subject string, ok bool) {
	vals := r.Header.Values("Authorization")
	if len(vals) != 1 {
		return "", false // missing, or ambiguous
	}
	h := vals[0]
	if len(h) > maxAuthorizationLen {
		return "", false
	}
	if user, pass, ok := parseBasic(h); ok {
		return a.checkBasic(user, pass)
	}
	if token, ok := parseBearer(h); ok {
		return a.checkKey(token)
	}
	return "", false
}

func (a *authenticator) checkBasic(user, pass string) (string, bool) {
	got := sha256.Sum256([]byte(pass))
	want, known := a.users[user]
	if !known {
		// Same work as for a known user, so timing does not reveal which users exist.
		subtle.ConstantTimeCompare(got[:], a.dummy[:])
		return "", false
	}
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		return "", false
	}
	return user, true
}

// checkKey looks the token's SHA-256 digest up, in time independent of the number of keys.
// The lookup's timing can depend only on the digest, which reveals nothing usable about any
// key (finding a token with a chosen digest prefix is a preimage search).
func (a *authenticator) checkKey(token string) (string, bool) {
	got := sha256.Sum256([]byte(token))
	subject, found := a.keys[got]
	return subject, found
}

// parseBasic parses an Authorization header value of the Basic scheme: the scheme name is
// case-insensitive, the credentials are standard (padded) base64 of "user:password", split at
// the first ':'. The username must be non-empty. Malformed values (other schemes, bad base64,
// no colon, control characters in the username) report ok false.
func parseBasic(h string) (user, pass string, ok bool) {
	const scheme = "basic "
	if len(h) < len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", "", false
	}
	enc := strings.TrimLeft(h[len(scheme):], " ")
	enc = strings.TrimRight(enc, " ")
	if enc == "" {
		return "", "", false
	}
	raw, err := base64.StdEncoding.Strict().DecodeString(enc)
	if err != nil {
		return "", "", false
	}
	s := string(raw)
	i := strings.IndexByte(s, ':')
	if i <= 0 {
		return "", "", false
	}
	user, pass = s[:i], s[i+1:]
	for j := 0; j < len(user); j++ {
		if user[j] < 0x20 || user[j] == 0x7f {
			return "", "", false
		}
	}
	return user, pass, true
}

// parseBearer parses "Bearer <token>" (scheme case-insensitive).
func parseBearer(h string) (string, bool) {
	const scheme = "bearer "
	if len(h) < len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return "", false
	}
	tok := strings.TrimSpace(h[len(scheme):])
	if tok == "" || strings.ContainsAny(tok, " \t") {
		return "", false
	}
	return tok, true
}
