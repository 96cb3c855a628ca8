package topology

import (
	"encoding/json"
	"errors"
	"net"
	"strings"
	"syscall"
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
func ReadProbeOutput(out []byte, res *ProbeResult) {
	line := LastLines(out, 1)
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

// LastLines returns the last n lines of b, joined with " | ": the tail of a log or command
// output, short enough for an error message.
func LastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// ConnectError reduces a dial error to its cause: "connection refused", "i/o timeout", ...
func ConnectError(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.As(err, &ne) && ne.Timeout():
		return "i/o timeout"
	}
	return err.Error()
}
