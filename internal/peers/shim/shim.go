// Package shim is the front and the back of a peer shim (packages envoyaigw, kuadrant,
// gubershim): a thin OpenAI-compatible gateway process whose admission and settlement are the
// integration's own (a Limiter), with everything else the harness's and the same for every
// shim, so that a verdict is about the rate-limit integration and not about the plumbing:
//
//   - the front door: the run's Basic-auth users (401 with WWW-Authenticate before the body is
//     read, the connection closed), the credential never forwarded;
//   - the proxy: the request relayed unchanged to the next provider (round robin), every
//     request header but the hop-by-hop ones and Authorization passed on (as Envoy does), the
//     answer streamed back as it comes;
//   - the usage: the last usage.total_tokens the provider's answer carried (a JSON body, or an
//     SSE stream's usage chunk), unknown when it carried none or the client went away first;
//   - health on the admin listener: /healthz and /readyz answer 200 once listening (Envoy's
//     readiness does not depend on its rate-limit service).
package shim

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"time"
)

// Front is the harness-side part of every shim's config.
type Front struct {
	Listen      string   `json:"listen"`       // host:port of the chat API
	AdminListen string   `json:"admin_listen"` // host:port of /healthz and /readyz
	Users       []User   `json:"users"`
	Providers   []string `json:"providers"` // provider base URLs, used round robin
	// UpstreamTimeoutMS bounds one provider exchange.
	UpstreamTimeoutMS int `json:"upstream_timeout_ms"`
}

// User is one Basic-auth user; the password is in the environment variable PasswordEnv.
type User struct {
	Username    string `json:"username"`
	PasswordEnv string `json:"password_env"`
}

// Check checks the front's fields and resolves the passwords from getenv.
func (f Front) Check(getenv func(string) (string, bool)) (map[string]string, error) {
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for what, a := range map[string]string{"front.listen": f.Listen, "front.admin_listen": f.AdminListen} {
		if _, _, err := net.SplitHostPort(a); err != nil {
			bad("%s %q is not host:port", what, a)
		}
	}
	if len(f.Providers) == 0 {
		bad("front.providers is empty: list at least one provider URL")
	}
	for _, p := range f.Providers {
		if u, err := url.Parse(p); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			bad("front.providers: %q is not an http(s) URL", p)
		}
	}
	if f.UpstreamTimeoutMS <= 0 {
		bad("front.upstream_timeout_ms must be positive")
	}
	users := map[string]string{}
	for _, u := range f.Users {
		pw, ok := getenv(u.PasswordEnv)
		if u.Username == "" || !ok || pw == "" {
			bad("front.users: %q needs a username and a set password_env", u.Username)
			continue
		}
		users[u.Username] = pw
	}
	if len(users) == 0 && len(problems) == 0 {
		bad("front.users is empty")
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return users, nil
}

// Config is a shim's whole config: the front every shim shares and its engine's part.
type Config interface {
	FrontConfig() Front
	CheckEngine() error
}

// Load reads shim name's config at path strictly into c, checks it and resolves the users'
// passwords from getenv; every problem names the shim and the file.
func Load(name, path string, c Config, getenv func(string) (string, bool)) (map[string]string, error) {
	if err := Decode(path, c); err != nil {
		return nil, fmt.Errorf("%s shim: %w", name, err)
	}
	users, err := c.FrontConfig().Check(getenv)
	if err == nil {
		err = c.CheckEngine()
	}
	if err != nil {
		return nil, fmt.Errorf("%s shim: %s: %w", name, path, err)
	}
	return users, nil
}

// Decode reads a shim's JSON config strictly (an unknown field is an error) into v.
func Decode(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Limiter is the integration: what a shim does around its engine.
type Limiter interface {
	// Admit decides a request of subject before its body is read (Envoy's rate-limit filter
	// decides on the request headers).
	Admit(ctx context.Context, subject string) Admission
}

// Admission is a Limiter's decision.
type Admission struct {
	// Deny, when set, is the answer instead of the provider's.
	Deny *Answer
	// Header is added to the answer, the provider's or the denial.
	Header http.Header
	// Settle, when set, is called once the provider's answer has ended (or the client went
	// away), with the usage it carried. It runs on the request's goroutine after the answer
	// was sent: a shim that settles asynchronously starts its own goroutine.
	Settle func(Usage)
}

// Answer is a local reply: a status and a body (empty: none).
type Answer struct {
	Status      int
	ContentType string
	Body        []byte
}

// Usage is what a provider's answer said it used.
type Usage struct {
	Known       bool  // the answer carried a usage
	TotalTokens int64 // usage.total_tokens
	ClientGone  bool  // the client closed before the answer ended
	Streamed    bool  // the answer was an SSE stream (text/event-stream)
}

// Server is a running shim.
type Server struct {
	name    string
	front   Front
	users   map[string]string
	limiter Limiter
	log     *slog.Logger
	next    atomic.Uint64
	client  *http.Client
	ready   func(context.Context) error
	// openAIErrors: the shim's own answers are OpenAI-style JSON errors (a shim whose denials
	// are), else Envoy's plain text.
	openAIErrors bool
}

// Run serves the shim until ctx ends, then shuts both listeners down.
func Run(ctx context.Context, name string, front Front, users map[string]string, l Limiter, log *slog.Logger) error {
	return RunWithReady(ctx, name, front, users, l, nil, false, log)
}

// RunWithReady is Run with a readiness condition of the shim's own (/readyz answers 503 while
// ready fails; nil: ready once listening) and OpenAI-style JSON bodies for the shim's own 401s.
func RunWithReady(ctx context.Context, name string, front Front, users map[string]string, l Limiter, ready func(context.Context) error, openAIErrors bool, log *slog.Logger) error {
	s := &Server{name: name, front: front, users: users, limiter: l, log: log, ready: ready, openAIErrors: openAIErrors,
		client: &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 256, DisableCompression: true}}}
	data := &http.Server{Handler: http.HandlerFunc(s.chat), ReadHeaderTimeout: 10 * time.Second}
	admin := &http.Server{Handler: http.HandlerFunc(s.admin), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 2)
	for _, h := range []struct {
		srv  *http.Server
		addr string
	}{{data, front.Listen}, {admin, front.AdminListen}} {
		l, err := net.Listen("tcp", h.addr)
		if err != nil {
			return err
		}
		go func() { errc <- h.srv.Serve(l) }()
	}
	log.Info(name+" listening", "listen", front.Listen, "admin_listen", front.AdminListen)
	select {
	case <-ctx.Done():
	case err := <-errc:
		return err
	}
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return errors.Join(data.Shutdown(sctx), admin.Shutdown(sctx))
}

func (s *Server) admin(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/readyz":
		if s.ready != nil {
			if err := s.ready(r.Context()); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "ok\n")
	case "/healthz":
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "ok\n")
	default:
		http.NotFound(w, r)
	}
}

// authenticate returns the Basic-auth username when its password is right.
func (s *Server) authenticate(r *http.Request) (string, bool) {
	user, pw, ok := r.BasicAuth()
	if !ok {
		return "", false
	}
	want, known := s.users[user]
	if !known {
		want = "\x00never"
	}
	return user, subtle.ConstantTimeCompare([]byte(pw), []byte(want)) == 1 && known
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	subject, ok := s.authenticate(r)
	if !ok {
		// Before the body: a client announcing one it never sends still gets its 401.
		w.Header().Set("WWW-Authenticate", `Basic realm="`+s.name+`"`)
		w.Header().Set("Connection", "close")
		a := Answer{Status: http.StatusUnauthorized, ContentType: "text/plain", Body: []byte("User authentication failed.\n")}
		if s.openAIErrors {
			a.ContentType, a.Body = "application/json", []byte(`{"error": {"message": "User authentication failed.", "type": "authentication_error", "code": 401}}`)
		}
		writeAnswer(w, a)
		return
	}
	adm := s.limiter.Admit(r.Context(), subject)
	for k, vs := range adm.Header {
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	if adm.Deny != nil {
		w.Header().Set("Connection", "close") // the body is never read
		writeAnswer(w, *adm.Deny)
		return
	}
	u := s.forward(w, r)
	if adm.Settle != nil {
		adm.Settle(u)
	}
}

func writeAnswer(w http.ResponseWriter, a Answer) {
	if a.ContentType != "" && len(a.Body) > 0 {
		w.Header().Set("Content-Type", a.ContentType)
	}
	w.WriteHeader(a.Status)
	_, _ = w.Write(a.Body)
}

// hopHeaders are never forwarded (RFC 9110 §7.6.1), nor is the credential.
var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade", "Authorization", "Content-Length"}

// forward relays the request to the next provider and its answer back, and returns the usage
// the answer carried.
func (s *Server) forward(w http.ResponseWriter, r *http.Request) Usage {
	base := s.front.Providers[s.next.Add(1)%uint64(len(s.front.Providers))]
	ctx, cancel := context.WithTimeout(r.Context(), time.Duration(s.front.UpstreamTimeoutMS)*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimRight(base, "/")+r.URL.RequestURI(), r.Body)
	if err != nil {
		writeAnswer(w, Answer{Status: http.StatusBadGateway, ContentType: "text/plain", Body: []byte("bad upstream request\n")})
		return Usage{}
	}
	req.Header = r.Header.Clone()
	for _, h := range hopHeaders {
		req.Header.Del(h)
	}
	req.ContentLength = r.ContentLength
	resp, err := s.client.Do(req)
	if err != nil {
		// Envoy's answer when the upstream cannot be reached.
		writeAnswer(w, Answer{Status: http.StatusServiceUnavailable, ContentType: "text/plain", Body: []byte("upstream connect error or disconnect/reset before headers\n")})
		return Usage{ClientGone: r.Context().Err() != nil}
	}
	defer resp.Body.Close()
	for k, vs := range resp.Header {
		if k == "Content-Length" || k == "Connection" || k == "Transfer-Encoding" {
			continue
		}
		for _, v := range vs {
			w.Header().Add(k, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	fl, _ := w.(http.Flusher)
	meter := &usageMeter{sse: strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")}
	buf := make([]byte, 32<<10)
	gone := false
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			meter.write(buf[:n])
			if _, werr := w.Write(buf[:n]); werr != nil {
				gone = true
				break
			}
			if fl != nil {
				fl.Flush()
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				gone = gone || r.Context().Err() != nil
			}
			break
		}
	}
	u := meter.usage()
	u.ClientGone = gone || r.Context().Err() != nil
	u.Streamed = meter.sse
	return u
}
