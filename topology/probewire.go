package topology

import (
	"encoding/json"
	"time"
)

// ProbeOutput is the one JSON line `quotaqual probe` prints inside a container or pod. The
// docker and kind engines run that command and read this line back, so the format lives here,
// once, next to ProbeResult.
type ProbeOutput struct {
	To        string `json:"to"`
	Reached   bool   `json:"reached"`
	Error     string `json:"error,omitempty"`
	ElapsedNS int64  `json:"elapsed_ns"`
}

// readProbeOutput fills res from the last line a probe printed. The elapsed time is the
// connect itself, as measured inside, not the exec around it.
func readProbeOutput(out []byte, res *ProbeResult) {
	line := lastLines(out, 1)
	var po ProbeOutput
	if err := json.Unmarshal([]byte(line), &po); err != nil {
		res.Error = "probe output not understood: " + line
		return
	}
	res.Reached, res.Error = po.Reached, po.Error
	if po.ElapsedNS > 0 {
		res.Elapsed = time.Duration(po.ElapsedNS)
	}
}
