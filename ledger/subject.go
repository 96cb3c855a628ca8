package ledger

import (
	"crypto/sha256"
	"encoding/base64"
)

// subjectKeyPrefix versions the key shape: changing how subjects are hashed must change the
// prefix so that old and new keys never collide.
const subjectKeyPrefix = "subject:v1:"

// SubjectKey is the quota key of an authenticated subject: "subject:v1:" followed by the
// base64url (no padding) SHA-256 of the subject, 43 characters. Raw subjects never reach the
// store, logs or metrics; this hash is what they see.
func SubjectKey(subject string) string {
	return subjectKeyPrefix + hash43(subject)
}

// hash43 is base64url-no-pad(SHA-256(s)), always 43 characters.
func hash43(s string) string {
	sum := sha256.Sum256([]byte(s))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// Key lengths, so that Compile can check them against limits.max_key_length.
const (
	subjectKeyLen         = len(subjectKeyPrefix) + 43
	subjectAndModelKeyLen = subjectKeyLen + len(":model:") + 43
)

// Key is the quota key of a request under this rule. Keyed by subject and model, the model is
// hashed too, so a client-chosen model string cannot inject separators into the key.
func (r *CompiledRule) Key(subject, model string) string {
	if r.KeyMode == KeySubjectAndModel {
		return SubjectKey(subject) + ":model:" + hash43(model)
	}
	return SubjectKey(subject)
}
