// Package gateway is quotaqual's consumer gateway: an OpenAI-compatible
// POST /v1/chat/completions endpoint that authenticates the caller, admits the request against
// the token-quota ledger, routes it round-robin to a provider, relays the response as it
// arrives, reads the usage it reports and settles the reservation off the response path.
//
// Pipeline, in this order: request id → authenticate (401) → read the body (413) and model →
// match a rule (403) → model allowed (404) → estimate → reserve (503 store error, 429 denial,
// 400 estimate larger than a window) → route → forward (credentials stripped) → relay → read
// usage → settle (in its own goroutine, retried, never delaying or failing the response). Leases of
// in-flight requests are renewed every lease/3.
package gateway

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/quotaqual/quotaqual/ledger"
	"github.com/quotaqual/quotaqual/wire"
)

// Server is one gateway: its data and admin listeners, ledger, providers and settlement queue.
type Server struct {
	cfg          *Config
	log          *slog.Logger
	policy       *ledger.CompiledPolicy
	led          ledger.Ledger
	auth         *authenticator
	providers    []*upstream
	next         atomic.Uint64
	transport    *http.Transport
	m            *metrics
	settler      *settler
	storeTimeout time.Duration
	ruleSeries   map[string]*ruleSeries // by rule name
	// admittedSeconds is admission_seconds{backend, result="admitted"}.
	admittedSeconds bound[prometheus.Observer]
	renew           bool
	inFlight        *subjectLimiter
	idPrefix        string
	idSeq           atomic.Uint64

	ready    atomic.Bool
	draining atomic.Bool

	dataLn, adminLn   net.Listener
	dataSrv, adminSrv *http.Server
	serveErr          chan error
	handlers          sync.WaitGroup
	closeOnce         sync.Once
}

type upstream struct {
	site    string
	base    string // the provider's base URL, without a trailing slash
	chatURL string // base + /v1/chat/completions
	series  *siteSeries
}

// Options tune a Server beyond its Config; the zero value is the production setting.
type Options struct {
	// Ledger, when set, is used instead of opening the policy's backend (tests, benchmarks).
	Ledger ledger.Ledger
}

// New builds a gateway from a loaded config and opens its ledger. It does not listen yet.
func New(cfg *Config, logger *slog.Logger, opts Options) (*Server, error) {
	if cfg == nil || cfg.compiled == nil || cfg.auth == nil {
		return nil, errors.New("gateway: config not loaded; use LoadConfig or ParseConfig")
	}
	if logger == nil {
		logger = slog.Default()
	}
	led := opts.Ledger
	if led == nil {
		var err error
		led, err = ledger.Open(cfg.compiled)
		if err != nil {
			return nil, fmt.Errorf("opening the quota store: %w", err)
		}
	}
	led = mutateLedger(led, cfg.compiled)
	s := &Server{
		cfg:          cfg,
		log:          logger,
		policy:       cfg.compiled,
		led:          led,
		auth:         cfg.auth,
		storeTimeout: cfg.compiled.Backend.Timeout.D(),
		renew:        mutateRenew(cfg.LeaseRenewalEnabled()),
		inFlight:     newSubjectLimiter(cfg.Server.MaxInFlightPerSubject),
		serveErr:     make(chan error, 2),
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	s.idPrefix = "qq-" + hex.EncodeToString(b[:]) + "-"
	for _, p := range cfg.Providers {
		u, _ := url.Parse(p.URL) // validated by LoadConfig
		s.providers = append(s.providers, &upstream{
			site:    p.Site,
			base:    strings.TrimRight(u.String(), "/"),
			chatURL: strings.TrimRight(u.String(), "/") + "/v1/chat/completions",
		})
	}
	s.transport = &http.Transport{
		Proxy: nil, // never send quota-admitted traffic through an environment proxy
		DialContext: (&net.Dialer{
			Timeout:   5 * time.Second,
			KeepAlive: 30 * time.Second,
		}).DialContext,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		// Relay bytes exactly as the provider sends them; usage must be readable.
		DisableCompression: true,
	}
	s.settler = newSettler(s, cfg.Server.MaxConnections)
	s.m = newMetrics(func() float64 { return float64(s.settler.pending.Load()) })
	names := make([]string, len(s.policy.Rules))
	for i, r := range s.policy.Rules {
		names[i] = r.Name
	}
	s.ruleSeries = s.m.rules(names)
	for _, p := range s.providers {
		p.series = &siteSeries{m: s.m, site: p.site}
	}
	if v, ok := led.(releaseReporter); ok {
		s.m.registerReleases(v)
	}
	return s, nil
}

// seriesOf returns the bound series of a rule. A name outside the policy (none is) gets series
// of its own, counted under the same labels.
func (s *Server) seriesOf(rule string) *ruleSeries {
	if rs, ok := s.ruleSeries[rule]; ok {
		return rs
	}
	return &ruleSeries{m: s.m, name: rule}
}

// Start binds the data and admin listeners and serves them in the background. When it
// returns without error both ports accept connections and /readyz reports ready.
func (s *Server) Start() error {
	var err error
	s.dataLn, err = net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s (listen): %w", s.cfg.Listen, err)
	}
	s.adminLn, err = net.Listen("tcp", s.cfg.AdminListen)
	if err != nil {
		s.dataLn.Close()
		return fmt.Errorf("listen on %s (admin_listen): %w", s.cfg.AdminListen, err)
	}
	// Connections beyond the bound wait in the kernel's accept queue.
	s.dataLn = netutil.LimitListener(s.dataLn, s.cfg.Server.MaxConnections)
	errLog := slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)
	s.dataSrv = &http.Server{
		Handler: s.dataHandler(),
		// The body's deadline is set per request (serveChat), so that it can be lifted once
		// the body is read: a server-wide ReadTimeout would cut long streams.
		ReadHeaderTimeout: min(10*time.Second, s.cfg.Server.readTimeout),
		MaxHeaderBytes:    s.cfg.Server.MaxHeaderBytes,
		IdleTimeout:       120 * time.Second,
		ErrorLog:          errLog,
	}
	s.adminSrv = &http.Server{
		Handler:           s.adminHandler(),
		ReadHeaderTimeout: 5 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          errLog,
	}
	// Config decoding (a YAML tree per credential) leaves garbage the runtime would otherwise
	// keep resident; hand it back once before serving.
	debug.FreeOSMemory()
	go s.serve(s.dataSrv, s.dataLn)
	go s.serve(s.adminSrv, s.adminLn)
	s.ready.Store(true)
	sites := make([]string, len(s.providers))
	for i, p := range s.providers {
		sites[i] = p.site
	}
	rules := make([]string, len(s.policy.Rules))
	for i, r := range s.policy.Rules {
		rules[i] = r.Name
	}
	s.log.Info("gateway listening",
		"listen", s.dataLn.Addr().String(), "admin_listen", s.adminLn.Addr().String(),
		"backend", s.led.Backend(), "store_timeout", s.storeTimeout.String(),
		"lease_renewal", s.renew, "upstream_timeout", s.cfg.upstreamTimeout.String(),
		"providers", sites, "rules", rules)
	return nil
}

func (s *Server) serve(srv *http.Server, ln net.Listener) {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		s.serveErr <- err
	}
}

// DataAddr is the bound data address (after Start).
func (s *Server) DataAddr() string { return s.dataLn.Addr().String() }

// AdminAddr is the bound admin address (after Start).
func (s *Server) AdminAddr() string { return s.adminLn.Addr().String() }

// Shutdown drains the gateway: /readyz turns unready, the data listener stops accepting,
// in-flight requests may finish until ctx ends (then their connections are closed and they
// settle), the settlement queue is drained, the admin listener stops and the ledger is closed.
func (s *Server) Shutdown(ctx context.Context) error {
	var result error
	s.closeOnce.Do(func() {
		s.draining.Store(true)
		s.ready.Store(false)
		s.log.Info("gateway draining")
		// Everything happens within ctx's deadline (shutdown_timeout): in-flight requests get
		// it less a reserve in which their settlements can still reach the store; the handler
		// wait, the queue drain and the admin listener share what is left. Without a deadline
		// the old fixed budgets apply.
		deadline, bounded := ctx.Deadline()
		if !bounded {
			deadline = time.Now().Add(s.cfg.shutdownTimeout + 8*time.Second)
		}
		reqCtx, cancelReq := context.WithDeadline(ctx, deadline.Add(-s.settleReserve(time.Until(deadline))))
		defer cancelReq()
		if s.dataSrv != nil {
			if err := s.dataSrv.Shutdown(reqCtx); err != nil {
				s.log.Warn("in-flight requests did not finish before the shutdown deadline; closing their connections", "error", err.Error())
				_ = s.dataSrv.Close()
			}
		}
		// Handlers of closed connections still settle; give them a moment to reach the queue.
		waitGroup(&s.handlers, min(2*time.Second, time.Until(deadline)))
		drainCtx, cancel := context.WithDeadline(context.Background(), deadline)
		defer cancel()
		if !s.settler.close(drainCtx) {
			s.log.Warn("settlement queue not drained before the deadline; the remaining reservations expire and are charged at their estimate")
			result = errors.New("settlement queue not drained")
		}
		if s.adminSrv != nil {
			actx, acancel := context.WithTimeout(context.Background(), max(10*time.Millisecond, min(time.Second, time.Until(deadline))))
			_ = s.adminSrv.Shutdown(actx)
			acancel()
		}
		s.transport.CloseIdleConnections()
		if err := s.led.Close(); err != nil {
			s.log.Warn("closing the quota store", "error", err.Error())
		}
		s.log.Info("gateway stopped")
	})
	return result
}

// settleReserve is the part of a shutdown budget kept for settlements after the in-flight
// requests end: enough for one settle with its retries (3 store timeouts and backoff), at
// least a quarter of the budget, at most half.
func (s *Server) settleReserve(budget time.Duration) time.Duration {
	r := max(3*s.storeTimeout+250*time.Millisecond, budget/4)
	return max(0, min(r, budget/2))
}

// waitGroup waits for wg at most d.
func waitGroup(wg *sync.WaitGroup, d time.Duration) bool {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// Run serves cfg until ctx ends (SIGTERM/SIGINT in the command), then drains within the
// config's shutdown_timeout. It returns nil after a clean drain.
func Run(ctx context.Context, cfg *Config, logger *slog.Logger) error {
	s, err := New(cfg, logger, Options{})
	if err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		_ = s.led.Close()
		return err
	}
	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-s.serveErr:
		logger.Error("listener failed", "error", serveErr.Error())
	}
	sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTimeout)
	defer cancel()
	if err := s.Shutdown(sctx); err != nil && serveErr == nil {
		serveErr = err
	}
	return serveErr
}

// dataHandler routes on the path exactly as the client wrote it. A router that cleans or
// decodes paths (http.ServeMux redirects //, /./ and /../; others forward them) would let
// another spelling of a metered path past a quota that matches the canonical one, or answer it
// with a redirect a client may follow unmetered elsewhere: every spelling but the canonical one
// is 404, and no escape is accepted (r.URL.RawPath is set only when the path as sent differs
// from its canonical encoding: %2F, %63).
func (s *Server) dataHandler() http.Handler {
	return s.mutateDataHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.RawPath == "" && r.URL.Path == modelsPath {
			if r.Method != http.MethodGet {
				w.Header().Set("Allow", http.MethodGet)
				writeError(w, http.StatusMethodNotAllowed, wire.TypeInvalidRequest, wire.CodeMethod, "use GET for /v1/models")
				return
			}
			s.serveModels(w, r)
			return
		}
		ep := meteredEndpoints[r.URL.Path]
		if r.URL.RawPath != "" || ep == nil {
			writeError(w, http.StatusNotFound, wire.TypeInvalidRequest, wire.CodeNotFound, "unknown path; this gateway serves POST /v1/chat/completions, /v1/responses, /v1/completions and /v1/embeddings and GET /v1/models")
			return
		}
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, wire.TypeInvalidRequest, wire.CodeMethod, "use POST for "+ep.path)
			return
		}
		s.handlers.Add(1)
		defer s.handlers.Done()
		s.serveChat(w, r, ep)
	}))
}

func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(s.m.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/readyz", s.serveReady)
	mux.HandleFunc("/admin/quota", s.serveQuota)
	return s.mutateAdmin(mux)
}

// pick chooses the next provider round-robin. Exactly one pick per admitted request.
func (s *Server) pick() *upstream {
	n := s.next.Add(1) - 1
	return s.providers[n%uint64(len(s.providers))]
}

// requestID returns the client's x-request-id when it is short and plain, else a new one.
func (s *Server) requestID(r *http.Request) string {
	if id := r.Header.Get(wire.RequestIDHeader); validRequestID(id) {
		return id
	}
	return s.idPrefix + strconv.FormatUint(s.idSeq.Add(1), 10)
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		b := id[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '-' || b == '_' || b == '.' || b == ':') {
			return false
		}
	}
	return true
}
