package gateway

import (
	"bytes"
	"encoding/json"
)

// maxUsageTokens bounds a usage figure the gateway accepts: 2^53, the largest capacity a budget
// may have. Anything larger is treated as garbled (and the request is charged its estimate).
const maxUsageTokens = 1 << 53

// usageJSON is OpenAI's usage object.
type usageJSON struct {
	PromptTokens     *int64 `json:"prompt_tokens"`
	CompletionTokens *int64 `json:"completion_tokens"`
	TotalTokens      *int64 `json:"total_tokens"`
}

// tokens returns the tokens to charge: max(total_tokens, prompt_tokens + completion_tokens).
// prompt_tokens and completion_tokens are required; negative or absurd figures are garbled.
func (u *usageJSON) tokens() (int64, bool) {
	if u == nil || u.PromptTokens == nil || u.CompletionTokens == nil {
		return 0, false
	}
	p, c := *u.PromptTokens, *u.CompletionTokens
	if p < 0 || c < 0 || p > maxUsageTokens || c > maxUsageTokens {
		return 0, false
	}
	sum := p + c
	if u.TotalTokens != nil {
		t := *u.TotalTokens
		if t < 0 || t > maxUsageTokens {
			return 0, false
		}
		if t > sum {
			sum = t
		}
	}
	if sum > maxUsageTokens {
		return 0, false
	}
	return sum, true
}

// parseUsageJSON reads the usage of a non-streaming chat completion response body. Missing or
// garbled usage reports ok false: the request is then charged its estimate.
func parseUsageJSON(body []byte) (tokens int64, ok bool) {
	var v struct {
		Usage *usageJSON `json:"usage"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return 0, false
	}
	return v.Usage.tokens()
}

// maxSSEEvent bounds one pending (incomplete) SSE event. A provider that sends a longer event
// switches the filter to raw pass-through and the request is charged its estimate.
const maxSSEEvent = 1 << 20

// sseFilter passes an SSE stream through event by event while reading the usage it carries.
// When dropUsageChunk is set (the gateway asked the provider for include_usage on the client's
// behalf), the usage-only final chunk (choices empty, usage set) is removed from what the
// client sees. Apart from removed events, the output is byte-for-byte the input.
type sseFilter struct {
	dropUsageChunk bool

	pending []byte // bytes of an incomplete event
	raw     bool   // an event exceeded maxSSEEvent: pass everything through, usage unknown

	usage   int64
	seen    bool // a valid usage object was read
	garbled bool // a usage object could not be read
}

// feed processes p and appends the bytes to send to the client to out.
func (f *sseFilter) feed(p, out []byte) []byte {
	if f.raw {
		return append(out, p...)
	}
	f.pending = append(f.pending, p...)
	start := 0 // start of the current event in pending
	i := 0     // start of the current line
	for {
		nl := bytes.IndexByte(f.pending[i:], '\n')
		if nl < 0 {
			break
		}
		lineEnd := i + nl // index of '\n'
		line := f.pending[i:lineEnd]
		line = bytes.TrimSuffix(line, []byte{'\r'})
		next := lineEnd + 1
		if len(line) == 0 {
			// Blank line: the event pending[start:next] is complete.
			ev := f.pending[start:next]
			if f.keep(ev) {
				out = append(out, ev...)
			}
			start = next
		}
		i = next
	}
	// Keep the incomplete tail.
	rest := len(f.pending) - start
	if rest > maxSSEEvent {
		out = append(out, f.pending[start:]...)
		f.pending = f.pending[:0]
		f.raw = true
		f.garbled = true
		return out
	}
	if start > 0 {
		copy(f.pending, f.pending[start:])
		f.pending = f.pending[:rest]
	}
	return out
}

// finish appends whatever incomplete event remains (a stream that ended without a final blank
// line) to out, after reading it for usage.
func (f *sseFilter) finish(out []byte) []byte {
	if len(f.pending) == 0 {
		return out
	}
	if f.raw || f.keep(f.pending) {
		out = append(out, f.pending...)
	}
	f.pending = f.pending[:0]
	return out
}

// result reports the usage read from the stream.
func (f *sseFilter) result() (int64, bool) {
	if f.garbled || !f.seen {
		return 0, false
	}
	return f.usage, true
}

// keep reads one complete event and reports whether it goes to the client.
func (f *sseFilter) keep(ev []byte) bool {
	data := sseData(ev)
	if data == nil || !bytes.Contains(data, []byte(`"usage"`)) {
		return true
	}
	var chunk struct {
		Choices []json.RawMessage `json:"choices"`
		Usage   *usageJSON        `json:"usage"`
	}
	if err := json.Unmarshal(data, &chunk); err != nil {
		return true // not ours to judge; pass it on
	}
	if chunk.Usage == nil {
		return true // "usage": null on ordinary chunks
	}
	if n, ok := chunk.Usage.tokens(); ok {
		// Running totals: keep the largest seen.
		if !f.seen || n > f.usage {
			f.usage = n
		}
		f.seen = true
	} else {
		f.garbled = true
	}
	return !(f.dropUsageChunk && len(chunk.Choices) == 0)
}

// sseData returns the concatenated data field of one event (lines "data:" joined by '\n'),
// or nil when the event has none.
func sseData(ev []byte) []byte {
	var data []byte
	found := false
	for len(ev) > 0 {
		var line []byte
		if j := bytes.IndexByte(ev, '\n'); j >= 0 {
			line, ev = ev[:j], ev[j+1:]
		} else {
			line, ev = ev, nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		v, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		v = bytes.TrimPrefix(v, []byte{' '})
		if found {
			data = append(data, '\n')
		}
		data = append(data, v...)
		found = true
	}
	if !found {
		return nil
	}
	return data
}
