package shim

import (
	"bytes"
	"encoding/json"
)

// usageMeter finds the usage in a provider's answer as it passes: for an SSE stream, every
// complete "data:" line is decoded and the last usage kept; for a JSON body, the body is
// decoded at the end (up to maxBody bytes).
type usageMeter struct {
	sse     bool
	pending []byte // an SSE line not ended yet, or the JSON body so far
	last    *usageJSON
	over    bool // the JSON body outgrew maxBody
}

const maxBody = 4 << 20

type usageJSON struct {
	TotalTokens *int64 `json:"total_tokens"`
}

func (m *usageMeter) write(p []byte) {
	if !m.sse {
		if len(m.pending)+len(p) > maxBody {
			m.over = true
			return
		}
		m.pending = append(m.pending, p...)
		return
	}
	m.pending = append(m.pending, p...)
	for {
		i := bytes.IndexByte(m.pending, '\n')
		if i < 0 {
			return
		}
		line := bytes.TrimSpace(m.pending[:i])
		m.pending = m.pending[i+1:]
		if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			m.take(bytes.TrimSpace(data))
		}
	}
}

func (m *usageMeter) take(doc []byte) {
	var v struct {
		Usage *usageJSON `json:"usage"`
	}
	if json.Unmarshal(doc, &v) == nil && v.Usage != nil && v.Usage.TotalTokens != nil {
		m.last = v.Usage
	}
}

// usage is the last usage seen.
func (m *usageMeter) usage() Usage {
	if !m.sse && !m.over {
		m.take(m.pending)
	}
	if m.last == nil {
		return Usage{}
	}
	return Usage{Known: true, TotalTokens: *m.last.TotalTokens}
}
