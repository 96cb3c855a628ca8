package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/quotaqual/quotaqual/ledger"
)

// decidingFields are the body fields the gateway decides on (rule, allowed model, estimate,
// streaming). It must read them exactly as the provider will, or a client could show the
// gateway one value and the provider another.
var decidingFields = []string{"model", "max_tokens", "max_completion_tokens", "max_output_tokens", "n", "stream", "stream_options"}

// parseChatRequest reads the fields the gateway decides on from a chat completion body.
//
// encoding/json matches object keys case-insensitively and lets a repeated key win, while
// providers read keys exactly: {"model":"expensive","MODEL":"cheap"} would be matched by the
// gateway as "cheap" and served by the provider as "expensive" (likewise max_tokens, which
// sets the estimate). So the top-level keys are scanned first, and a deciding field that
// appears twice, or under another spelling of its case, is refused; values are then read
// from the exact keys only.
func parseChatRequest(body []byte) (chatRequest, error) {
	var cr chatRequest
	if len(bytes.TrimSpace(body)) == 0 {
		return cr, nil
	}
	fields, err := topLevelFields(body)
	if err != nil {
		return cr, err
	}
	read := func(name string, v any) error {
		raw, ok := fields[name]
		if !ok {
			return nil
		}
		if err := decodeValue(raw, v); err != nil {
			return namedFieldError(name, err)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    any
	}{
		{"model", &cr.Model}, {"max_tokens", &cr.MaxTokens}, {"max_completion_tokens", &cr.MaxCompletionTokens},
		{"max_output_tokens", &cr.MaxOutputTokens},
		{"n", &cr.N}, {"stream", &cr.Stream},
	} {
		if err := read(f.name, f.v); err != nil {
			return cr, err
		}
	}
	if raw, ok := fields["stream_options"]; ok && !bytes.Equal(bytes.TrimSpace(raw), []byte("null")) {
		opts, err := topLevelFields(raw)
		if err != nil {
			return cr, fmt.Errorf("field \"stream_options\": %w", err)
		}
		if err := checkSpelling(opts, []string{"include_usage"}); err != nil {
			return cr, fmt.Errorf("field \"stream_options\": %w", err)
		}
		cr.StreamOptions = &struct {
			IncludeUsage *bool `json:"include_usage"`
		}{}
		if v, ok := opts["include_usage"]; ok {
			if err := decodeValue(v, &cr.StreamOptions.IncludeUsage); err != nil {
				return cr, namedFieldError("stream_options.include_usage", err)
			}
		}
	}
	return cr, nil
}

// namedFieldError wraps a field's decoding error with its name. A value decoded on its own
// leaves a type error's Field empty (a number out of range read `field "" must be a whole
// number`): the name is filled in.
func namedFieldError(name string, err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field == "" {
		te.Field = name
	}
	return fmt.Errorf("field %q: %w", name, err)
}

// checkEstimable refuses what cannot be estimated: a number of choices outside 1..128 (the
// estimate is per choice, times n). It names the field.
func (cr *chatRequest) checkEstimable() error {
	if cr.N != nil && (*cr.N < 1 || *cr.N > ledger.MaxChoices) {
		return fmt.Errorf("field \"n\" is %d; ask for 1 to %d choices", *cr.N, ledger.MaxChoices)
	}
	return nil
}

// topLevelFields returns an object's members by exact key, refusing a JSON value that is not
// an object and any deciding field that is repeated or spelt in another case.
//
// A valid object (nearly every request) is walked by hand: one validating pass, one walk, the
// values left in place. Anything else goes through encoding/json's decoder, which words the
// error (with its byte offset) and finds a repeated deciding field before the syntax error that
// follows it, as it always has.
func topLevelFields(doc []byte) (map[string]json.RawMessage, error) {
	if !json.Valid(doc) {
		return decodeTopLevelFields(doc)
	}
	fields := make(map[string]json.RawMessage, 8)
	isObject, err := walkObject(doc, func(key []byte, raw json.RawMessage) error { return addField(fields, string(key), raw) })
	if !isObject {
		return decodeTopLevelFields(doc) // words the refusal as it always has ("1E700" is out of range)
	}
	if err != nil {
		return nil, err
	}
	if err := checkSpelling(fields, decidingFields); err != nil {
		return nil, err
	}
	return fields, nil
}

// walkObject calls fn with each member of doc, in order, until fn fails; doc must be valid
// JSON (json.Valid). It reports whether doc is an object at all. A key is passed as the text
// jsonKey reads, in place in doc when it is plain (no copy: a response's usage is found
// without a string per member); fn must not keep it.
func walkObject(doc []byte, fn func(key []byte, raw json.RawMessage) error) (isObject bool, err error) {
	i := skipSpace(doc, 0)
	if doc[i] != '{' {
		return false, nil
	}
	for i++; ; {
		i = skipSpace(doc, i)
		switch doc[i] {
		case '}':
			return true, nil
		case ',':
			i = skipSpace(doc, i+1)
		}
		end := skipValue(doc, i) // the key, a string
		key, err := jsonKey(doc[i:end])
		if err != nil {
			return true, err
		}
		i = skipSpace(doc, skipSpace(doc, end)+1) // past the ':'
		end = skipValue(doc, i)
		if err := fn(key, doc[i:end]); err != nil {
			return true, err
		}
		i = end
	}
}

var errNotObject = errors.New("the body must be a JSON object")

// addField records one member, refusing a deciding field seen before.
func addField(fields map[string]json.RawMessage, key string, raw json.RawMessage) error {
	if _, dup := fields[key]; dup && slices.Contains(decidingFields, key) {
		return fmt.Errorf("field %q appears more than once; send it once", key)
	}
	fields[key] = raw
	return nil
}

// jsonKey is the text of a valid JSON string: its bytes between the quotes when they are plain
// ASCII, else as encoding/json reads it ("mod\u0065l" is "model", and so must be for the
// gateway; invalid UTF-8 becomes U+FFFD).
func jsonKey(quoted []byte) ([]byte, error) {
	if plainASCII(quoted) {
		return quoted[1 : len(quoted)-1], nil
	}
	var key string
	err := json.Unmarshal(quoted, &key)
	return []byte(key), err
}

// plainASCII: b has no escape and no byte outside ASCII, so a JSON string of it reads as it is.
func plainASCII(b []byte) bool {
	for _, c := range b {
		if c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

// decodeValue is json.Unmarshal of one member's valid JSON value into v, with the plain cases
// of the deciding fields read directly: a string without escapes, a whole number, a boolean.
// Anything else, and whatever the direct reading refuses, takes encoding/json, which also
// words the errors.
func decodeValue(raw json.RawMessage, v any) error {
	switch p := v.(type) {
	case **string:
		if n := len(raw); n >= 2 && raw[0] == '"' && raw[n-1] == '"' && bytes.IndexByte(raw[1:n-1], '"') < 0 && plainASCII(raw) {
			s := string(raw[1 : n-1])
			*p = &s
			return nil
		}
	case **int64:
		if len(raw) > 0 && raw[0] != '+' {
			if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
				*p = &n
				return nil
			}
		}
	case **bool:
		if s := string(raw); s == "true" || s == "false" {
			b := s == "true"
			*p = &b
			return nil
		}
	}
	return json.Unmarshal(raw, v)
}

func skipSpace(doc []byte, i int) int {
	for i < len(doc) && (doc[i] == ' ' || doc[i] == '\t' || doc[i] == '\n' || doc[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the end of the value starting at doc[i] in a valid JSON document.
func skipValue(doc []byte, i int) int {
	depth := 0
	for ; i < len(doc); i++ {
		switch doc[i] {
		case '"':
			for i++; doc[i] != '"'; i++ {
				if doc[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of a number or literal at the end of its object
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				return i
			}
		}
	}
	return i
}

// decodeTopLevelFields is topLevelFields by encoding/json's decoder.
func decodeTopLevelFields(doc []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errNotObject
	}
	fields := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		if err := addField(fields, key, raw); err != nil {
			return nil, err
		}
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if dec.More() {
		return nil, errors.New("unexpected data after the JSON object")
	}
	if err := checkSpelling(fields, decidingFields); err != nil {
		return nil, err
	}
	return fields, nil
}

// checkSpelling refuses a key that equals a known field only when case is ignored.
func checkSpelling(fields map[string]json.RawMessage, known []string) error {
	for key := range fields {
		for _, f := range known {
			if key != f && strings.EqualFold(key, f) {
				return fmt.Errorf("field %q: write it as %q (keys are read exactly, as providers read them)", key, f)
			}
		}
	}
	return nil
}
