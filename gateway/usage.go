package gateway

import (
	"bytes"
	"encoding/json"

	"github.com/quotaqual/quotaqual/internal/mutant"
	"github.com/quotaqual/quotaqual/ledger"
)

// maxUsageTokens bounds a usage figure the gateway accepts: 2^53, the largest capacity a budget
// may have. Anything larger is treated as garbled (and the request is charged its estimate).
const maxUsageTokens = 1 << 53

// usageJSON is OpenAI's usage object: chat's (prompt_tokens, completion_tokens) or the
// Responses API's (input_tokens, output_tokens); endpoint.usage reads the endpoint's own.
type usageJSON struct {
	PromptTokens     *int64 `json:"prompt_tokens"`
	CompletionTokens *int64 `json:"completion_tokens"`
	TotalTokens      *int64 `json:"total_tokens"`
	InputTokens      *int64 `json:"input_tokens"`
	OutputTokens     *int64 `json:"output_tokens"`
}

// tokens returns the tokens to charge: max(total_tokens, prompt_tokens + completion_tokens).
// prompt_tokens and completion_tokens are required; negative or absurd figures are garbled.
func (u *usageJSON) tokens() (int64, bool) {
	if n, ok, mutated := mutateUsageTokens(u); mutated {
		return n, ok
	}
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

// completion is completion_tokens, 0 when absent.
func (u *usageJSON) completion() int64 {
	if u == nil || u.CompletionTokens == nil {
		return 0
	}
	return *u.CompletionTokens
}

// metered is what the gateway saw of an admitted request's consumption; charge turns it into
// what the request is settled at.
type metered struct {
	notSent      bool  // the request never reached the provider: nothing was consumed
	status       int   // the provider's status; 0 when no response header arrived
	finished     bool  // the response was relayed to its end
	usage        int64 // the largest valid usage figure the provider reported
	usageSeen    bool
	usageGarbled bool  // a usage object could not be read
	relayed      int64 // output tokens seen relayed (SSE content chunks; a 2xx body's bytes / 4)
	fromTail     bool  // the body was too large to buffer; usage came from its tail
}

// reported says whether the settlement is the usage the provider reported.
func (m metered) reported() bool {
	if !m.usageSeen || m.usageGarbled || m.notSent || m.status == 0 {
		return false
	}
	return m.finished || m.status/100 != 2
}

// charge is what the request is settled at. "Usage unknown" never charges less than what was
// seen: a response cut short (client gone, provider or read error, timeout), one whose usage
// could not be read, and one too large to buffer are charged the largest of the estimate, the
// last usage seen, and the output tokens relayed plus the input estimate. A provider's non-2xx
// answer is charged the usage it reports, else the output it relayed (usually none): nothing
// may have been generated. A request that never reached the provider costs nothing; one that
// reached it but got no answer costs its estimate (Known false).
func (m metered) charge(estimate, input int64) ledger.Usage {
	switch {
	case m.notSent:
		return ledger.Usage{Tokens: 0, Known: true}
	case m.status == 0:
		return ledger.Usage{}
	case m.reported():
		return ledger.Usage{Tokens: m.usage, Known: true}
	case m.status/100 != 2:
		return ledger.Usage{Tokens: min(m.relayed, maxUsageTokens), Known: true}
	}
	t := max(estimate, min(m.relayed+input, maxUsageTokens))
	if m.usageSeen {
		t = max(t, m.usage)
	}
	return ledger.Usage{Tokens: t, Known: true}
}

// jsonUsageReader keeps what a non-streaming response needs to read its usage: the whole body
// up to maxJSONUsageBuffer, beyond that only its last usageTailBytes.
type jsonUsageReader struct {
	ep     *endpoint // nil: chat
	buf    []byte
	tooBig bool
	bytes  int64
}

func (j *jsonUsageReader) feed(p []byte) {
	j.bytes += int64(len(p))
	j.buf = append(j.buf, p...)
	if !j.tooBig && len(j.buf) > maxJSONUsageBuffer {
		j.tooBig = true
	}
	if j.tooBig && len(j.buf) > 2*usageTailBytes {
		n := copy(j.buf, j.buf[len(j.buf)-usageTailBytes:])
		j.buf = j.buf[:n]
	}
}

// result is the usage of the body: parsed whole, or read from the tail of a large body. A body
// kept whole whose usage reports fewer completion tokens than the words its choices carry
// understates what was generated: its usage is unknown (a body too large to keep whole is
// trusted, its text being gone).
func (j *jsonUsageReader) result() (int64, bool) {
	ep := j.ep
	if ep == nil {
		ep = chatEndpoint
	}
	if j.tooBig {
		return usageFromTail(j.buf, ep)
	}
	u := readUsageJSON(j.buf)
	n, ok := ep.usage(u)
	if ok && ep.completion(u) < ep.bodyWords(j.buf) && !mutant.Is(mutant.UsageUnderstatedTrusted) {
		return 0, false
	}
	return n, ok
}

// relayedTokens is the body's bytes / 4: a pessimistic count of what a 2xx body whose usage
// cannot be read may hold.
func (j *jsonUsageReader) relayedTokens() int64 {
	return (j.bytes + 3) / 4
}

// usageFromTail reads the last top-level-looking "usage" member of a JSON body's tail (the
// start of the body is gone). A "usage" inside a string is escaped (\"usage\") and skipped.
func usageFromTail(tail []byte, ep *endpoint) (int64, bool) {
	key := []byte(`"usage"`)
	for end := len(tail); end > 0; {
		i := bytes.LastIndex(tail[:end], key)
		if i < 0 {
			return 0, false
		}
		end = i
		if i > 0 && tail[i-1] == '\\' {
			continue
		}
		rest := bytes.TrimLeft(tail[i+len(key):], " \t\r\n")
		if len(rest) == 0 || rest[0] != ':' {
			continue
		}
		var u *usageJSON
		if err := json.NewDecoder(bytes.NewReader(rest[1:])).Decode(&u); err != nil {
			continue
		}
		if n, ok := ep.usage(u); ok {
			return n, true
		}
	}
	return 0, false
}

// The usage members, matched case-insensitively as encoding/json matches them.
var (
	usageKey            = []byte("usage")
	promptTokensKey     = []byte("prompt_tokens")
	completionTokensKey = []byte("completion_tokens")
	totalTokensKey      = []byte("total_tokens")
	inputTokensKey      = []byte("input_tokens")
	outputTokensKey     = []byte("output_tokens")
)

// parseUsageJSON reads the usage of a non-streaming chat completion response body. Missing or
// garbled usage reports ok false: the request is then charged its estimate.
//
// It reads as json.Unmarshal into struct{ Usage *usageJSON } reads (FuzzParseUsageJSON holds
// it to that): an invalid body or one that is not an object has no usage; a "usage" member
// matches case-insensitively, and a repeated one is decoded into the same object; a member that
// does not decode garbles the usage. Only the usage members are decoded.
func parseUsageJSON(body []byte) (tokens int64, ok bool) {
	return readUsageJSON(body).tokens()
}

// readUsageJSON is the usage object parseUsageJSON reads; nil when there is none to read.
func readUsageJSON(body []byte) *usageJSON {
	if !json.Valid(body) {
		return nil
	}
	var u *usageJSON
	isObject, err := walkObject(body, func(key []byte, raw json.RawMessage) error {
		if !bytes.EqualFold(key, usageKey) {
			return nil
		}
		return decodeUsage(raw, &u)
	})
	if !isObject || err != nil {
		return nil
	}
	return u
}

// bodyWords counts the words of a chat completion body's output: the text of every choice, as
// countWords counts them; 0 for a body it cannot read so.
func bodyWords(body []byte) int64 {
	var n int64
	for _, c := range choiceOutputs(body) {
		n += c.words()
	}
	return n
}

// choiceOutput is the generated text of one choice: of a chat completion (message), of a
// stream's chunk (delta), or legacy text.
type choiceOutput struct {
	Text    string      `json:"text"`
	Message outputTexts `json:"message"`
	Delta   outputTexts `json:"delta"`
}

func (c *choiceOutput) bytes() int   { return len(c.Text) + c.Message.bytes() + c.Delta.bytes() }
func (c *choiceOutput) words() int64 { return countWords(c.Text) + c.Message.words() + c.Delta.words() }

// choiceOutputs reads the choices of a chat completion or of one chunk's data; none when it
// has no "choices" it can read.
func choiceOutputs(data []byte) []choiceOutput {
	if !bytes.Contains(data, []byte(`"choices"`)) {
		return nil
	}
	var v struct {
		Choices []choiceOutput `json:"choices"`
	}
	if json.Unmarshal(data, &v) != nil {
		return nil
	}
	return v.Choices
}

// outputTexts are the fields of a message, or a stream's delta, that carry generated text:
// content, reasoning, refusal and tool-call arguments.
type outputTexts struct {
	Content          string `json:"content"`
	ReasoningContent string `json:"reasoning_content"`
	Refusal          string `json:"refusal"`
	ToolCalls        []struct {
		Function struct {
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// bytes is the length of the text.
func (o *outputTexts) bytes() int {
	b := len(o.Content) + len(o.ReasoningContent) + len(o.Refusal)
	for _, tc := range o.ToolCalls {
		b += len(tc.Function.Arguments)
	}
	return b
}

// words counts the words of the text (countWords).
func (o *outputTexts) words() int64 {
	n := countWords(o.Content) + countWords(o.ReasoningContent) + countWords(o.Refusal)
	for _, tc := range o.ToolCalls {
		n += countWords(tc.Function.Arguments)
	}
	return n
}

// countWords counts the runs of non-whitespace in s: a floor of the tokens that produced s,
// since tokenizers split text at whitespace (a token never spans a word break) and a provider
// sends whole tokens. A usage reporting fewer completion tokens than the words relayed
// understates what was generated.
func countWords(s string) int64 {
	var n int64
	in := false
	for i := 0; i < len(s); i++ {
		space := s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'
		if !space && !in {
			n++
		}
		in = !space
	}
	return n
}

// decodeUsage is json.Unmarshal(raw, u) for a valid JSON value, an object read member by
// member: its fields matched case-insensitively, a repeated one decoded again (the last wins),
// others skipped.
func decodeUsage(raw json.RawMessage, u **usageJSON) error {
	if len(raw) == 0 || raw[0] != '{' {
		return json.Unmarshal(raw, u) // null, or the error of any other value
	}
	if *u == nil {
		*u = &usageJSON{}
	}
	_, err := walkObject(raw, func(key []byte, v json.RawMessage) error {
		switch {
		case bytes.EqualFold(key, promptTokensKey):
			return decodeValue(v, &(*u).PromptTokens)
		case bytes.EqualFold(key, completionTokensKey):
			return decodeValue(v, &(*u).CompletionTokens)
		case bytes.EqualFold(key, totalTokensKey):
			return decodeValue(v, &(*u).TotalTokens)
		case bytes.EqualFold(key, inputTokensKey):
			return decodeValue(v, &(*u).InputTokens)
		case bytes.EqualFold(key, outputTokensKey):
			return decodeValue(v, &(*u).OutputTokens)
		}
		return nil
	})
	return err
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
	ep             *endpoint // nil: chat

	pending []byte // bytes of an incomplete event
	raw     bool   // an event exceeded maxSSEEvent: pass everything through, usage unknown

	usage      int64
	completion int64 // the largest completion_tokens of a valid usage object
	seen       bool  // a valid usage object was read
	garbled    bool  // a usage object could not be read
	relayed    int64 // output tokens in the content chunks read (relayedOutput)
	words      int64 // words in the content chunks read (relayedOutput)
	ended      bool  // the terminal event was read: data [DONE], or a Responses stream's final response event
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

// result reports the usage read from the stream: unknown when garbled or understated.
func (f *sseFilter) result() (int64, bool) {
	if f.garbled || !f.seen || f.understated() {
		return 0, false
	}
	return f.usage, true
}

// understated reports a stream whose usage counts fewer completion tokens than the words its
// content chunks carried (countWords): it understates what was generated.
func (f *sseFilter) understated() bool {
	return f.seen && f.completion < f.words && !mutant.Is(mutant.UsageUnderstatedTrusted)
}

// keep reads one complete event and reports whether it goes to the client.
func (f *sseFilter) keep(ev []byte) bool {
	data := sseData(ev)
	if bytes.Equal(data, []byte("[DONE]")) {
		f.ended = true
	}
	if f.ep != nil && f.ep.responses {
		f.keepResponses(data)
		return true
	}
	tokens, words := relayedOutput(data)
	f.relayed += tokens
	f.words += words
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
	f.readUsage(chatEndpoint, chunk.Usage)
	return !(f.dropUsageChunk && len(chunk.Choices) == 0)
}

// readUsage takes one usage object of the stream under ep's rules.
func (f *sseFilter) readUsage(ep *endpoint, u *usageJSON) {
	if n, ok := ep.usage(u); ok {
		// Running totals: keep the largest seen.
		prev := f.usage
		if !f.seen || n > f.usage {
			f.usage = n
		}
		f.usage = mutateRunningUsage(f.seen, prev, n, f.usage)
		f.completion = max(f.completion, ep.completion(u))
		f.seen = true
	} else {
		f.garbled = true
	}
}

// keepResponses reads one event of a Responses API stream: its delta's output, and the usage
// of the response object (response.completed, response.incomplete; null on the earlier
// lifecycle events). Every event goes to the client: the gateway asked for nothing extra.
func (f *sseFilter) keepResponses(data []byte) {
	if data == nil || !bytes.Contains(data, []byte(`"type"`)) {
		return
	}
	var ev responsesEvent
	if json.Unmarshal(data, &ev) != nil {
		if bytes.Contains(data, []byte(`"usage"`)) {
			f.garbled = true // a usage-bearing event that cannot be read
		}
		return
	}
	tokens, words := relayedResponsesOutput(&ev)
	f.relayed += tokens
	f.words += words
	if ev.Response != nil && ev.Response.Usage != nil {
		f.readUsage(responsesEndpoint, ev.Response.Usage)
	}
	switch ev.Type {
	case "response.completed", "response.incomplete", "response.failed":
		f.ended = true
	}
}

// relayedOutput counts the output of one chunk's data. tokens: per choice with any text (delta
// content, reasoning, refusal, tool-call arguments, or legacy text), ceil(text bytes / 4) and at
// least one — one token per chunk as providers stream, and no undercount when they batch.
// words: the words of that text (countWords), a floor of its tokens.
func relayedOutput(data []byte) (tokens, words int64) {
	for _, c := range choiceOutputs(data) {
		if b := c.bytes(); b > 0 {
			tokens += max(1, int64(b+3)/4)
		}
		words += c.words()
	}
	return tokens, words
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
