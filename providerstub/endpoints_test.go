package providerstub

import (
	"context"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
)

// TestResponsesThroughTheSDK calls the stub's Responses API with openai-go's responses client,
// streamed and not: the SDK parses the answer, usage is in input_tokens/output_tokens (on
// response.completed when streamed), max_output_tokens bounds the output, and the call log
// records each call under its endpoint with the true usage.
func TestResponsesThroughTheSDK(t *testing.T) {
	s := newStub(t, ProviderConfig{CompletionTokens: 6})
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	params := responses.ResponseNewParams{
		Model:           "qwen3-0.6b",
		Input:           responses.ResponseNewParamsInputUnion{OfString: openai.String("hello world")},
		MaxOutputTokens: openai.Int(4),
	}
	res, err := c.Responses.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	want := PromptTokens([]int{len("hello world")})
	if res.Usage.InputTokens != want || res.Usage.OutputTokens != 4 || res.Usage.TotalTokens != want+4 {
		t.Errorf("usage %+v, want input %d, output 4", res.Usage, want)
	}
	if res.Status != "incomplete" || res.OutputText() != completionText(4) {
		t.Errorf("status %q, text %q", res.Status, res.OutputText())
	}

	stream := c.Responses.NewStreaming(ctx, responses.ResponseNewParams{
		Model: "qwen3-0.6b",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello world")},
	})
	var deltas int
	var completed *responses.Response
	for stream.Next() {
		ev := stream.Current()
		switch ev.Type {
		case "response.output_text.delta":
			deltas++
		case "response.completed":
			r := ev.AsResponseCompleted().Response
			completed = &r
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if completed == nil || deltas != 6 || completed.Usage.OutputTokens != 6 || completed.Usage.InputTokens != want {
		t.Fatalf("stream: %d deltas, completed %+v", deltas, completed)
	}

	log := s.calls(t)
	if log.Calls != 2 || len(log.Requests) != 2 {
		t.Fatalf("call log: %+v", log)
	}
	for i, r := range log.Requests {
		if r.Endpoint != EndpointResponses || r.Status != 200 || r.PromptTokens != want {
			t.Errorf("record %d: %+v", i, r)
		}
	}
	if r := log.Requests[0]; r.CompletionTokens != 4 || r.BoundField != "max_output_tokens" || r.GeneratedTokens != 4 {
		t.Errorf("bounded record: %+v", r)
	}
	if r := log.Requests[1]; !r.Stream || r.GeneratedTokens != 6 {
		t.Errorf("streamed record: %+v", r)
	}
}

// TestEmbeddingsThroughTheSDK: one vector per input, usage in input tokens only (no output),
// logged under its endpoint.
func TestEmbeddingsThroughTheSDK(t *testing.T) {
	s := newStub(t, ProviderConfig{})
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := c.Embeddings.New(ctx, openai.EmbeddingNewParams{
		Model: "embed",
		Input: openai.EmbeddingNewParamsInputUnion{OfArrayOfStrings: []string{"one", "two words"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := PromptTokens([]int{3, 9})
	if len(res.Data) != 2 || len(res.Data[0].Embedding) != EmbeddingDimensions ||
		res.Usage.PromptTokens != want || res.Usage.TotalTokens != want {
		t.Errorf("embeddings: %d vectors, usage %+v, want %d", len(res.Data), res.Usage, want)
	}
	log := s.calls(t)
	if len(log.Requests) != 1 || log.Requests[0].Endpoint != EndpointEmbeddings || log.Requests[0].PromptTokens != want ||
		log.Requests[0].CompletionTokens != 0 {
		t.Errorf("call log: %+v", log.Requests)
	}
}

// TestLegacyCompletionsThroughTheSDK: openai-go's legacy completions client, streamed (usage
// on the final chunk when asked for) and not; max_tokens bounds the output, choices carry
// text, usage is chat's, and the call log records the endpoint.
func TestLegacyCompletionsThroughTheSDK(t *testing.T) {
	s := newStub(t, ProviderConfig{CompletionTokens: 6})
	c := sdkClient(s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	prompt := openai.CompletionNewParamsPromptUnion{OfString: openai.String("hello world")}
	want := PromptTokens([]int{len("hello world")})
	res, err := c.Completions.New(ctx, openai.CompletionNewParams{Model: "m", Prompt: prompt, MaxTokens: openai.Int(4)})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Choices) != 1 || res.Choices[0].Text != completionText(4) || res.Choices[0].FinishReason != "length" ||
		res.Usage.PromptTokens != want || res.Usage.CompletionTokens != 4 {
		t.Errorf("completion: %+v", res)
	}
	stream := c.Completions.NewStreaming(ctx, openai.CompletionNewParams{Model: "m", Prompt: prompt,
		StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)}})
	var text string
	var usage openai.CompletionUsage
	for stream.Next() {
		ch := stream.Current()
		for _, c := range ch.Choices {
			text += c.Text
		}
		if ch.Usage.TotalTokens > 0 {
			usage = ch.Usage
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if text != completionText(6) || usage.PromptTokens != want || usage.CompletionTokens != 6 {
		t.Errorf("stream: text %q, usage %+v", text, usage)
	}
	log := s.calls(t)
	for deadline := time.Now().Add(5 * time.Second); log.InFlight > 0 && time.Now().Before(deadline); log = s.calls(t) {
		time.Sleep(10 * time.Millisecond) // the stream's record is written once its handler returns
	}
	if len(log.Requests) != 2 {
		t.Fatalf("call log: %+v", log)
	}
	for i, r := range log.Requests {
		if r.Endpoint != EndpointCompletions || r.Status != 200 || r.PromptTokens != want {
			t.Errorf("record %d: %+v", i, r)
		}
	}
	if r := log.Requests[0]; r.BoundField != "max_tokens" || r.GeneratedTokens != 4 {
		t.Errorf("bounded record: %+v", r)
	}
}
