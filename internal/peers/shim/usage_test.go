package shim

import "testing"

// TestUsageMeter checks the usage is the last total_tokens of an SSE stream's chunks, split
// anywhere, or of a JSON body, and unknown when the answer carried none.
func TestUsageMeter(t *testing.T) {
	sse := "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\"usage\":null}\n\n" +
		"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":8,\"total_tokens\":17}}\n\ndata: [DONE]\n\n"
	for _, split := range []int{1, 7, 40, len(sse)} {
		m := &usageMeter{sse: true}
		for i := 0; i < len(sse); i += split {
			m.write([]byte(sse[i:min(len(sse), i+split)]))
		}
		if u := m.usage(); !u.Known || u.TotalTokens != 17 {
			t.Errorf("split %d: %+v, want known 17", split, u)
		}
	}
	m := &usageMeter{}
	m.write([]byte(`{"id":"x","usage":{"prompt_tokens":2,"total_tokens":`))
	m.write([]byte(`10}}`))
	if u := m.usage(); !u.Known || u.TotalTokens != 10 {
		t.Errorf("json: %+v, want known 10", u)
	}
	m = &usageMeter{sse: true}
	m.write([]byte("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n"))
	if u := m.usage(); u.Known {
		t.Errorf("a stream cut before its usage chunk: %+v, want unknown", u)
	}
}
