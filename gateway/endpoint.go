package gateway

import (
	"bytes"
	"encoding/json"

	"github.com/quotaqual/quotaqual/internal/mutant"
)

// endpoint is what differs between the metered endpoints; everything else — authentication,
// admission against the one budget per key, forwarding, relaying, settlement — is the shared
// path (serveChat, forward), so every endpoint keeps the same 401/429/503 contract and the
// same truthful-metering rules.
type endpoint struct {
	path string // as the client sends it, and as it is forwarded
	// inputOnly: the endpoint generates no output (embeddings). There is no output bound to
	// read or clamp — the rule's fallback stands for it in the estimate — and usage is
	// prompt_tokens (completion_tokens absent counts as none).
	inputOnly bool
	// responses: the Responses API. Its output bound is max_output_tokens (one output, no n),
	// its usage input_tokens/output_tokens, and a stream is response.* events that carry their
	// usage in the response object of response.completed (or response.incomplete); the
	// gateway asks for no stream_options, which the API does not take.
	responses bool
	// legacy: the legacy completions API, whose only output bound is max_tokens (a clamp must
	// not add max_completion_tokens, which it does not know). Usage and choices are chat's.
	legacy bool
}

var (
	chatEndpoint        = &endpoint{path: "/v1/chat/completions"}
	embeddingsEndpoint  = &endpoint{path: "/v1/embeddings", inputOnly: true}
	responsesEndpoint   = &endpoint{path: "/v1/responses", responses: true}
	completionsEndpoint = &endpoint{path: "/v1/completions", legacy: true}

	// meteredEndpoints are routed by exact path (dataHandler).
	meteredEndpoints = map[string]*endpoint{
		chatEndpoint.path: chatEndpoint, embeddingsEndpoint.path: embeddingsEndpoint,
		responsesEndpoint.path: responsesEndpoint, completionsEndpoint.path: completionsEndpoint,
	}
)

// read narrows a parsed body to what the endpoint decides on: an input-only endpoint has no
// output bound, choices or stream, whatever chat fields the body carries; the Responses API's
// bound is max_output_tokens alone, legacy completions' max_tokens alone.
func (ep *endpoint) read(cr chatRequest) chatRequest {
	switch {
	case ep.inputOnly:
		return chatRequest{Model: cr.Model}
	case ep.responses:
		return chatRequest{Model: cr.Model, MaxCompletionTokens: cr.MaxOutputTokens, Stream: cr.Stream,
			clampField: "max_output_tokens", noStreamUsage: true}
	case ep.legacy:
		cr.MaxCompletionTokens, cr.MaxOutputTokens = nil, nil
		cr.clampField = "max_tokens"
		if mutant.Is(mutant.LegacyClampWrongField) {
			cr.clampField = "" // chat's clamp: max_completion_tokens, max_tokens only when sent
		}
		return cr
	}
	cr.MaxOutputTokens = nil
	return cr
}

// usage returns the tokens to charge for a usage object under the endpoint's rules.
func (ep *endpoint) usage(u *usageJSON) (int64, bool) {
	switch {
	case u == nil:
		return u.tokens()
	case ep.responses:
		return (&usageJSON{PromptTokens: u.InputTokens, CompletionTokens: u.OutputTokens, TotalTokens: u.TotalTokens}).tokens()
	case ep.inputOnly && u.CompletionTokens == nil && u.PromptTokens != nil:
		v, none := *u, int64(0)
		v.CompletionTokens = &none
		return v.tokens()
	}
	return u.tokens()
}

// completion is the output tokens a usage object reports, 0 when absent.
func (ep *endpoint) completion(u *usageJSON) int64 {
	if ep.responses {
		if u == nil || u.OutputTokens == nil {
			return 0
		}
		return *u.OutputTokens
	}
	return u.completion()
}

// bodyWords counts the words of a whole non-streaming body's output (countWords): chat's and
// legacy choices, or the Responses API's output items.
func (ep *endpoint) bodyWords(body []byte) int64 {
	if !ep.responses {
		return bodyWords(body)
	}
	if !bytes.Contains(body, []byte(`"output"`)) {
		return 0
	}
	var v struct {
		Output []struct {
			Arguments string `json:"arguments"` // function calls
			Content   []struct {
				Text    string `json:"text"`
				Refusal string `json:"refusal"`
			} `json:"content"`
		} `json:"output"`
	}
	if json.Unmarshal(body, &v) != nil {
		return 0
	}
	var n int64
	for _, o := range v.Output {
		n += countWords(o.Arguments)
		for _, c := range o.Content {
			n += countWords(c.Text) + countWords(c.Refusal)
		}
	}
	return n
}

// responsesEvent is the part of a Responses API stream event the gateway reads: the text of a
// delta event, and the usage of the response object the lifecycle events carry.
type responsesEvent struct {
	Type     string `json:"type"`
	Delta    string `json:"delta"`
	Response *struct {
		Usage *usageJSON `json:"usage"`
	} `json:"response"`
}

// relayedResponsesOutput counts the output of one Responses stream event as relayedOutput
// counts a chat chunk: a delta of generated text (output text, refusal, reasoning, function
// call arguments) is ceil(bytes / 4) tokens and at least one.
func relayedResponsesOutput(ev *responsesEvent) (tokens, words int64) {
	if ev.Delta == "" || !bytes.HasSuffix([]byte(ev.Type), []byte(".delta")) {
		return 0, 0
	}
	return max(1, int64(len(ev.Delta)+3)/4), countWords(ev.Delta)
}
