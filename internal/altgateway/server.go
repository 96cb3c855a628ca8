package altgateway

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"sync/atomic"
	"time"
)

// Headers the gateway answers with.
const (
	HeaderLimit     = "X-Allowance-Limit"
	HeaderRemaining = "X-Allowance-Remaining"
)

// Problems: the gateway's error bodies are {"problem": <one of these>}.
const (
	ProblemWhoAreYou      = "who_are_you"
	ProblemAllowanceSpent = "allowance_spent"
	ProblemCounterOffline = "counter_offline"
	ProblemBackendFailed  = "backend_failed"
	ProblemNotHere        = "not_here"
)

type server struct {
	s      *Settings
	count  counter
	next   atomic.Uint64 // round-robin over backends
	last   atomic.Value  // string: the caller admitted last (ProbeCharge)
	client *http.Client
	log    *slog.Logger
}

// Run serves until ctx ends, then shuts both listeners down.
func Run(ctx context.Context, s *Settings, log *slog.Logger) error {
	srv := &server{s: s, count: counter{s: s}, log: log,
		client: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64}}}
	data := &http.Server{Addr: s.Bind, Handler: http.HandlerFunc(srv.chat), ReadHeaderTimeout: 5 * time.Second}
	health := &http.Server{Addr: s.HealthBind, Handler: http.HandlerFunc(srv.health), ReadHeaderTimeout: 5 * time.Second}
	errc := make(chan error, 2)
	for _, h := range []*http.Server{data, health} {
		l, err := net.Listen("tcp", h.Addr)
		if err != nil {
			return err
		}
		go func() { errc <- h.Serve(l) }()
	}
	log.Info("altgateway listening", "bind", s.Bind, "health_bind", s.HealthBind)
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(data.Shutdown(sctx), health.Shutdown(sctx))
}

func (srv *server) health(w http.ResponseWriter, r *http.Request) {
	srv.probeCharge(r)
	switch r.URL.Path {
	case "/live":
		w.WriteHeader(http.StatusOK)
	case "/ready":
		if err := srv.count.ping(r.Context()); err != nil {
			problem(w, http.StatusServiceUnavailable, ProblemCounterOffline)
			return
		}
		w.WriteHeader(http.StatusOK)
	default:
		problem(w, http.StatusNotFound, ProblemNotHere)
	}
}

// probeCharge is the ProbeCharge defect: a probe charges the caller admitted last.
func (srv *server) probeCharge(r *http.Request) {
	last, _ := srv.last.Load().(string)
	if srv.s.ProbeCharge <= 0 || last == "" {
		return
	}
	window, _ := srv.count.window(time.Now())
	if _, err := srv.count.charge(r.Context(), last, window, srv.s.ProbeCharge); err != nil {
		srv.log.Warn("probe charge failed", "caller", last, "error", err.Error())
	}
}

func problem(w http.ResponseWriter, status int, what string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]string{"problem": what})
}

// caller authenticates the request's Basic credentials.
func (srv *server) caller(r *http.Request) (string, bool) {
	id, secret, ok := r.BasicAuth()
	if !ok {
		return "", false
	}
	want, known := srv.s.secrets[id]
	if !known {
		want = "\x00never"
	}
	return id, subtle.ConstantTimeCompare([]byte(secret), []byte(want)) == 1 && known
}

func (srv *server) chat(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		problem(w, http.StatusNotFound, ProblemNotHere)
		return
	}
	id, ok := srv.caller(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Basic realm="altgateway"`)
		problem(w, http.StatusUnauthorized, ProblemWhoAreYou)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
	if err != nil {
		return
	}
	a := srv.s.Allowance
	window, left := srv.count.window(time.Now())
	used, err := srv.count.charge(r.Context(), id, window, a.ChargePerCall)
	if err != nil {
		srv.log.Warn("counter unreachable", "caller", id, "error", err.Error())
		problem(w, http.StatusServiceUnavailable, ProblemCounterOffline)
		return
	}
	w.Header().Set(HeaderLimit, strconv.FormatInt(a.Tokens, 10))
	if used > a.Tokens {
		// Give the charge back: a refused call costs nothing.
		_, _ = srv.count.charge(context.WithoutCancel(r.Context()), id, window, -a.ChargePerCall)
		w.Header().Set(HeaderRemaining, strconv.FormatInt(max(0, a.Tokens-used+a.ChargePerCall), 10))
		w.Header().Set("Retry-After", strconv.FormatInt(int64((left+time.Second-1)/time.Second), 10))
		problem(w, http.StatusTooManyRequests, ProblemAllowanceSpent)
		return
	}
	w.Header().Set(HeaderRemaining, strconv.FormatInt(a.Tokens-used, 10))
	srv.last.Store(id)
	total := srv.forward(w, r, body)
	if total > 0 && total != a.ChargePerCall {
		_, err := srv.count.charge(context.WithoutCancel(r.Context()), id, window, total-a.ChargePerCall)
		if err != nil {
			srv.log.Warn("correcting the charge failed", "caller", id, "error", err.Error())
		}
	}
}

// forward relays the body to the next backend and the answer back, returning the usage total
// the answer reported (0 when none).
func (srv *server) forward(w http.ResponseWriter, r *http.Request, body []byte) int64 {
	backend := srv.s.Backends[srv.next.Add(1)%uint64(len(srv.s.Backends))]
	req, err := http.NewRequestWithContext(r.Context(), http.MethodPost, backend+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		problem(w, http.StatusBadGateway, ProblemBackendFailed)
		return 0
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := srv.client.Do(req)
	if err != nil {
		problem(w, http.StatusBadGateway, ProblemBackendFailed)
		return 0
	}
	defer resp.Body.Close()
	w.Header().Set("Content-Type", resp.Header.Get("Content-Type"))
	w.WriteHeader(resp.StatusCode)
	tail := &tailBuffer{max: 64 << 10}
	fl, _ := w.(http.Flusher)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			tail.Write(buf[:n])
			if _, werr := w.Write(buf[:n]); werr != nil {
				break
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err != nil {
			break
		}
	}
	return lastTotal(tail.b)
}

// tailBuffer keeps the last max bytes written to it: the usage comes last in a response.
type tailBuffer struct {
	b   []byte
	max int
}

func (t *tailBuffer) Write(p []byte) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
}

var totalTokens = regexp.MustCompile(`"total_tokens"\s*:\s*(\d+)`)

// lastTotal is the last "total_tokens" in b.
func lastTotal(b []byte) int64 {
	m := totalTokens.FindAllSubmatch(b, -1)
	if len(m) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(string(m[len(m)-1][1]), 10, 64)
	return n
}
