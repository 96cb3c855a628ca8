package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/quotaqual/quotaqual/ledger"
)

// decidingFields are the body fields the gateway decides on (rule, allowed model, estimate,
// streaming). It must read them exactly as the provider will, or a client could show the
// gateway one value and the provider another.
var decidingFields = []string{"model", "max_tokens", "max_completion_tokens", "n", "stream", "stream_options"}

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
		if err := json.Unmarshal(raw, v); err != nil {
			return namedFieldError(name, err)
		}
		return nil
	}
	for _, f := range []struct {
		name string
		v    any
	}{
		{"model", &cr.Model}, {"max_tokens", &cr.MaxTokens}, {"max_completion_tokens", &cr.MaxCompletionTokens},
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
			if err := json.Unmarshal(v, &cr.StreamOptions.IncludeUsage); err != nil {
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
func topLevelFields(doc []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("the body must be a JSON object")
	}
	fields := map[string]json.RawMessage{}
	var order []string
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
		if _, dup := fields[key]; dup {
			for _, f := range decidingFields {
				if key == f {
					return nil, fmt.Errorf("field %q appears more than once; send it once", key)
				}
			}
		}
		fields[key] = raw
		order = append(order, key)
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
