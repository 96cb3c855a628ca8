package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/wire"
)

// openFDs counts this process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd on this system: file descriptors cannot be counted")
	}
	return len(ents)
}

// rawExchange sends raw on a fresh connection and reads until the server closes it or limit
// passes. It returns what was read, whether the server closed the connection, and how long
// the first byte and the close took.
func rawExchange(addr, raw string, limit time.Duration) (got string, closed bool, firstByte, took time.Duration) {
	start := time.Now()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return err.Error(), false, 0, 0
	}
	defer c.Close()
	_ = c.SetDeadline(start.Add(limit))
	if _, err := io.WriteString(c, raw); err != nil {
		return err.Error(), false, 0, time.Since(start)
	}
	var b []byte
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		if n > 0 && len(b) == 0 {
			firstByte = time.Since(start)
		}
		b = append(b, buf[:n]...)
		if err != nil {
			return string(b), err == io.EOF, firstByte, time.Since(start)
		}
	}
}

// TestStalledClientsAreBoundedAndLeaveNothingBehind is issue 10's items 4 and 14 with raw
// sockets: a POST announcing a body it never sends is answered and closed in bounded time,
// unauthenticated (401) or not (400 after request_read_timeout, or 429 past the per-subject
// bound); a client that stops reading a stream is cut off after write_timeout and its
// reservation settles; afterwards goroutines and file descriptors return to their baseline.
func TestStalledClientsAreBoundedAndLeaveNothingBehind(t *testing.T) {
	prov := providerstub.NewProvider(providerstub.ProviderConfig{Site: "inproc", CompletionTokens: 4})
	srv := httptest.NewServer(prov.DataHandler())
	t.Cleanup(srv.Close)
	s, url := inProcessGatewayWith(t, srv.URL, `
server:
  request_read_timeout: 1s
  write_timeout: 1s
  max_header_bytes: 4096
  max_in_flight_per_subject: 2
`, meterPolicy, nil)
	addr := s.DataAddr()
	admin := "http://" + s.AdminAddr()
	auth := basicAuth("alice", "pw")
	// Warm up (transport connections, timers), then take the baseline.
	if r := chat(url, chatOpts{auth: auth, body: `{"model":"m","messages":[{"role":"user","content":"x"}]}`}); r.status != 200 {
		t.Fatalf("warm-up: %d %s", r.status, r.body)
	}
	testHTTP.CloseIdleConnections()
	settledAfterIdle(t, admin, "mt")
	time.Sleep(100 * time.Millisecond) // let warm-up goroutines finish before the baseline
	baseG, baseFD := runtime.NumGoroutine(), openFDs(t)

	const stalled = "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n%s\r\n"
	t.Run("an unauthenticated POST with no body gets its 401 at once and is closed", func(t *testing.T) {
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, closed, first, took := rawExchange(addr, fmt.Sprintf(stalled, ""), 3*time.Second)
				// The answer comes at once; the close at the latest when the read deadline
				// stops net/http waiting for the announced body.
				if !strings.HasPrefix(got, "HTTP/1.1 401") || first > 500*time.Millisecond || !closed || took > 2*time.Second {
					t.Errorf("connection %d: answered after %s, closed=%v after %s: %.80q", i, first, closed, took, got)
				}
			}()
		}
		wg.Wait()
	})
	t.Run("an authenticated POST with no body: 400 after the read timeout, and 429 past the per-subject bound", func(t *testing.T) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		codes := map[string]int{}
		for range 5 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				got, closed, _, took := rawExchange(addr, fmt.Sprintf(stalled, "Authorization: "+auth+"\r\n"), 4*time.Second)
				status := strings.SplitN(got, " ", 3)
				mu.Lock()
				defer mu.Unlock()
				if len(status) < 2 || !closed || took > 3*time.Second {
					t.Errorf("after %s closed=%v: %.80q", took, closed, got)
					return
				}
				if status[1] == "429" && !strings.Contains(got, wire.CodeSubjectInFlight) {
					t.Errorf("429 without the %s code: %q", wire.CodeSubjectInFlight, got)
				}
				codes[status[1]]++
			}()
		}
		wg.Wait()
		if codes["400"] != 2 || codes["429"] != 3 {
			t.Errorf("statuses %v, want 2 × 400 (read timeout) and 3 × 429 (max_in_flight_per_subject 2)", codes)
		}
	})
	t.Run("headers beyond max_header_bytes get 431", func(t *testing.T) {
		got, _, _, _ := rawExchange(addr, fmt.Sprintf(stalled, "X-Pad: "+strings.Repeat("a", 8192)+"\r\n"), 3*time.Second)
		if !strings.HasPrefix(got, "HTTP/1.1 431") {
			t.Errorf("got %.80q", got)
		}
	})
	t.Run("a client that stops reading a stream is cut off and its reservation settles", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"x"}],"metadata":{"quotaqual_tokens":"4000000"}}`
		fmt.Fprintf(c, "POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nAuthorization: %s\r\nContent-Length: %d\r\n\r\n%s", auth, len(body), body)
		line, err := bufio.NewReader(c).ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 200") {
			t.Fatalf("%q %v", line, err)
		}
		// Read nothing more; the socket buffers fill, the gateway's write times out.
		start := time.Now()
		var qs wire.QuotaState
		eventually(t, 10*time.Second, func() string {
			getJSON(t, admin+"/admin/quota?rule=mt&subject=alice", &qs)
			if qs.ActiveReservations != 0 {
				return "the stalled stream still holds its reservation"
			}
			return ""
		})
		t.Logf("the stalled stream settled %s after its client stopped reading", time.Since(start).Round(10*time.Millisecond))
	})
	testHTTP.CloseIdleConnections()
	eventually(t, 10*time.Second, func() string {
		g, fd := runtime.NumGoroutine(), openFDs(t)
		if g > baseG+2 || fd > baseFD+1 {
			return fmt.Sprintf("goroutines %d (baseline %d), file descriptors %d (baseline %d)", g, baseG, fd, baseFD)
		}
		return ""
	})
	_ = http.StatusOK
}
