package providerstub

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/quotaqual/quotaqual/wire"
)

// The endpoints the stub serves besides chat. Each is counted and logged like chat (Calls,
// ScenarioCalls, CallRecord with its Endpoint), generates deterministically (the same
// metadata: TokensMetadata, HoldMetadata, …) and reports usage in its own API's fields.
const (
	EndpointChat        = "/v1/chat/completions"
	EndpointResponses   = "/v1/responses"
	EndpointEmbeddings  = "/v1/embeddings"
	EndpointCompletions = "/v1/completions" // legacy
	EmbeddingDimensions = 8
)

// responsesRequest is the part of a Responses API request the stub reads. input is a string
// or a list of messages whose content is a string or a list of parts.
type responsesRequest struct {
	Model           string            `json:"model"`
	Input           json.RawMessage   `json:"input"`
	MaxOutputTokens *int64            `json:"max_output_tokens"`
	Stream          bool              `json:"stream"`
	Metadata        map[string]string `json:"metadata"`
}

// ResponsesUsage is the Responses API's usage object.
type ResponsesUsage struct {
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	TotalTokens  int64 `json:"total_tokens"`
}

// inputLens reads a Responses or embeddings input: a string, a list of strings, or a list of
// messages ({"role", "content"}); each item's text length, as chat's messages are counted.
func inputLens(raw json.RawMessage) ([]int, error) {
	if len(raw) == 0 {
		return nil, errors.New("input is required")
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return []int{len(s)}, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, errors.New("input must be a string or a list")
	}
	lens := make([]int, len(items))
	for i, it := range items {
		if err := json.Unmarshal(it, &s); err == nil {
			lens[i] = len(s)
			continue
		}
		var m struct {
			Content json.RawMessage `json:"content"`
		}
		if err := json.Unmarshal(it, &m); err != nil {
			return nil, fmt.Errorf("input[%d] must be a string or a message", i)
		}
		n, err := contentLen(m.Content)
		if err != nil {
			return nil, fmt.Errorf("input[%d].content: %w", i, err)
		}
		lens[i] = n
	}
	if len(lens) == 0 {
		return nil, errors.New("input must not be empty")
	}
	return lens, nil
}

// begin counts and logs one request of endpoint and reads its body; ok false when it has
// answered already (method, size).
func (p *Provider) begin(w http.ResponseWriter, r *http.Request, endpoint string) (rec *CallRecord, body []byte, finish func(), ok bool) {
	start := time.Now()
	scenario := sanitize(r.Header.Get(ScenarioHeader))
	done := p.arrive(scenario)
	rec = &CallRecord{Time: start.UTC(), Endpoint: endpoint, RequestID: sanitize(r.Header.Get(wire.RequestIDHeader)),
		Scenario: scenario, AuthorizationPresent: len(r.Header.Values("Authorization")) > 0}
	finish = func() {
		rec.DurationMS = float64(time.Since(start).Microseconds()) / 1000
		p.record(*rec)
		done()
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		rec.Status = http.StatusMethodNotAllowed
		writeError(w, rec.Status, wire.TypeInvalidRequest, "", wire.CodeMethod, "use POST for "+endpoint)
		finish()
		return nil, nil, nil, false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxRequestBody))
	if err != nil {
		rec.Status = http.StatusRequestEntityTooLarge
		writeError(w, rec.Status, wire.TypeInvalidRequest, "", wire.CodeBodyTooLarge, "the request body could not be read whole")
		finish()
		return nil, nil, nil, false
	}
	return rec, body, finish, true
}

// embeddings serves POST /v1/embeddings: one vector per input, usage in input tokens only.
func (p *Provider) embeddings(w http.ResponseWriter, r *http.Request) {
	rec, body, finish, ok := p.begin(w, r, EndpointEmbeddings)
	if !ok {
		return
	}
	defer finish()
	var req struct {
		Model    string            `json:"model"`
		Input    json.RawMessage   `json:"input"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		rec.Status = http.StatusBadRequest
		writeError(w, rec.Status, wire.TypeInvalidRequest, "", wire.CodeInvalidJSON, "request body is not valid JSON")
		return
	}
	rec.Model = sanitize(req.Model)
	lens, err := inputLens(req.Input)
	if err != nil {
		rec.Status = http.StatusBadRequest
		writeError(w, rec.Status, wire.TypeInvalidRequest, "input", wire.CodeInvalidValue, err.Error())
		return
	}
	hold, err := requestHold(r, req.Metadata)
	if err != nil {
		rec.Status = http.StatusBadRequest
		writeError(w, rec.Status, wire.TypeInvalidRequest, "metadata."+HoldMetadata, wire.CodeInvalidValue, err.Error())
		return
	}
	if !sleep(r.Context(), p.cfg.TTFT+hold) {
		rec.Status, rec.ClientGone = 499, true
		return
	}
	prompt := PromptTokens(lens)
	rec.PromptTokens, rec.Status = prompt, http.StatusOK
	data := make([]map[string]any, len(lens))
	for i := range data {
		vec := make([]float64, EmbeddingDimensions)
		for j := range vec {
			vec[j] = float64((i+1)*(j+1)%7) / 7
		}
		data[i] = map[string]any{"object": "embedding", "index": i, "embedding": vec}
	}
	model := req.Model
	if model == "" {
		model = p.cfg.Model
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data, "model": model,
		"usage": map[string]int64{"prompt_tokens": prompt, "total_tokens": prompt}})
}

// responses serves POST /v1/responses, streamed (response.* events, usage on
// response.completed) and not; max_output_tokens bounds the output.
func (p *Provider) responses(w http.ResponseWriter, r *http.Request) {
	rec, body, finish, ok := p.begin(w, r, EndpointResponses)
	if !ok {
		return
	}
	defer finish()
	fail := func(status int, param, code, msg string) {
		rec.Status = status
		writeError(w, status, wire.TypeInvalidRequest, param, code, msg)
	}
	var req responsesRequest
	if err := json.Unmarshal(body, &req); err != nil {
		fail(http.StatusBadRequest, "", wire.CodeInvalidJSON, "request body is not valid JSON")
		return
	}
	rec.Model, rec.Stream = sanitize(req.Model), req.Stream
	lens, err := inputLens(req.Input)
	if err != nil {
		fail(http.StatusBadRequest, "input", wire.CodeInvalidValue, err.Error())
		return
	}
	if req.MaxOutputTokens != nil {
		rec.MaxTokens, rec.BoundField = req.MaxOutputTokens, "max_output_tokens"
		if *req.MaxOutputTokens < 1 {
			fail(http.StatusBadRequest, "max_output_tokens", wire.CodeInvalidValue, "max_output_tokens must be at least 1")
			return
		}
	}
	hold, err := requestHold(r, req.Metadata)
	if err != nil {
		fail(http.StatusBadRequest, "metadata."+HoldMetadata, wire.CodeInvalidValue, err.Error())
		return
	}
	gen, err := requestGeneration(req.Metadata, p.cfg)
	if err != nil {
		fail(http.StatusBadRequest, "metadata", wire.CodeInvalidValue, err.Error())
		return
	}
	var lim int64
	if req.MaxOutputTokens != nil {
		lim = *req.MaxOutputTokens
	}
	n, capped := CompletionTokens(lim, gen.tokens)
	usage := ResponsesUsage{InputTokens: PromptTokens(lens), OutputTokens: n}
	usage.TotalTokens = usage.InputTokens + usage.OutputTokens
	rec.Choices, rec.PromptTokens, rec.CompletionTokens = 1, usage.InputTokens, usage.OutputTokens
	model := req.Model
	if model == "" {
		model = p.cfg.Model
	}
	seq := p.seq.Add(1)
	id, msgID := fmt.Sprintf("resp_%s_%d", p.cfg.Site, seq), fmt.Sprintf("msg_%s_%d", p.cfg.Site, seq)
	status, incomplete := "completed", any(nil)
	if capped {
		status, incomplete = "incomplete", map[string]string{"reason": "max_output_tokens"}
	}
	response := func(state string, text string, u *ResponsesUsage) map[string]any {
		out := []any{}
		if state != "in_progress" {
			out = append(out, map[string]any{"type": "message", "id": msgID, "status": state, "role": "assistant",
				"content": []any{map[string]any{"type": "output_text", "text": text, "annotations": []any{}}}})
		}
		resp := map[string]any{"id": id, "object": "response", "created_at": rec.Time.Unix(), "status": state,
			"model": model, "output": out, "max_output_tokens": req.MaxOutputTokens, "usage": nil, "incomplete_details": nil}
		if u != nil {
			resp["usage"] = map[string]any{"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens, "total_tokens": u.TotalTokens,
				"input_tokens_details": map[string]int{"cached_tokens": 0}, "output_tokens_details": map[string]int{"reasoning_tokens": 0}}
		}
		if state == "incomplete" {
			resp["incomplete_details"] = incomplete
		}
		return resp
	}
	text := completionText(n)
	if !req.Stream {
		if !sleep(r.Context(), p.cfg.TTFT+hold+time.Duration(n)*gen.interToken) {
			rec.Status, rec.ClientGone = 499, true
			return
		}
		rec.Status, rec.GeneratedTokens = http.StatusOK, n
		writeJSON(w, http.StatusOK, response(status, text, &usage))
		return
	}

	flusher, _ := w.(http.Flusher)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	rec.Status = http.StatusOK
	var seqNo int
	send := func(typ string, fields map[string]any) bool {
		fields["type"], fields["sequence_number"] = typ, seqNo
		seqNo++
		b, _ := json.Marshal(fields)
		if _, err := fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b); err != nil {
			rec.ClientGone = true
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	part := map[string]any{"type": "output_text", "text": "", "annotations": []any{}}
	item := map[string]any{"type": "message", "id": msgID, "status": "in_progress", "role": "assistant", "content": []any{}}
	if !send("response.created", map[string]any{"response": response("in_progress", "", nil)}) ||
		!send("response.in_progress", map[string]any{"response": response("in_progress", "", nil)}) {
		return
	}
	if !sleep(r.Context(), p.cfg.TTFT+hold) {
		rec.ClientGone = true
		return
	}
	if !send("response.output_item.added", map[string]any{"output_index": 0, "item": item}) ||
		!send("response.content_part.added", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "part": part}) {
		return
	}
	for i := range n {
		delta := " tok"
		if i == 0 {
			delta = "tok"
		}
		if !send("response.output_text.delta", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "delta": delta}) {
			return
		}
		rec.GeneratedTokens++
		if !sleep(r.Context(), gen.interToken) {
			rec.ClientGone = true
			return
		}
	}
	donePart := map[string]any{"type": "output_text", "text": text, "annotations": []any{}}
	doneItem := map[string]any{"type": "message", "id": msgID, "status": status, "role": "assistant", "content": []any{donePart}}
	final := "response.completed"
	if capped {
		final = "response.incomplete"
	}
	_ = send("response.output_text.done", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "text": text}) &&
		send("response.content_part.done", map[string]any{"item_id": msgID, "output_index": 0, "content_index": 0, "part": donePart}) &&
		send("response.output_item.done", map[string]any{"output_index": 0, "item": doneItem}) &&
		send(final, map[string]any{"response": response(status, text, &usage)})
}
