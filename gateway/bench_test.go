package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/quotaqual/quotaqual/internal/quantile"
	"github.com/quotaqual/quotaqual/internal/valkeytest"
	"github.com/quotaqual/quotaqual/ledger"
)

// The benchmarks report figures as metrics, measured against a baseline in the same run; they
// assert nothing about time. The machine they run on may be shared: read them as ratios.

const benchBody = `{"model":"qwen3-0.6b","max_tokens":1,"messages":[{"role":"user","content":"bench"}]}`

// BenchmarkOverhead measures the latency a gateway adds, against the floor of "one more hop":
// every iteration of every client sends one request directly to a provider stub, one through
// a plain httputil.ReverseProxy (its own process) to the same stub, one through a gateway
// (Valkey backend) to the same stub, makes one trivial Lua call to the gateway's Valkey from
// the same client library the ledger uses — the store's round trip — and one admission
// (ledger.Reserve, opened from the gateway's own policy, then a settle outside the timing)
// on that Valkey — the store's part of the gateway's contract on the response path. The five
// are interleaved (in rotating order) so that noise on this shared machine hits them alike.
// All are real processes. At 1 and 32 concurrent clients it reports p50 and p99 of each, and
//
//	pXX-target = gateway / (1.1 × (proxy + valkey))
//
// the target "gateway ≤ (plain proxy + one Valkey round trip) + 10 %": at most 1
// meets it. The gateway's response waits for one store call, the reserve (the settle runs
// after the response, off its path), but that call is the admission script, not a trivial one:
//
//	pXX-vs-reserve = gateway / (1.1 × (proxy + reserve))
//
// is the same target against the hop plus the admission the contract needs, so that what is
// left above 1 is the gateway's own work. p99-ratio (gateway / direct) is the figure the first
// overhead issue measured.
//
// QUOTAQUAL_BENCH_GATEWAY_GOMAXPROCS=n runs the gateway alone with GOMAXPROCS=n (what Go gives
// a process under an n-CPU cgroup limit), the other processes unchanged. On 2 cores, at 1
// client, the gateway's reserve took ~45 µs longer inside the gateway than the reserve probe's
// (and SLOWLOG showed Valkey running the gateway's scripts ~15 µs slower than the probe's): the
// likely cause is the gateway's second P waking a thread that competes with Valkey for the CPU.
// With n=1 the 1-client p50 met its target (0.955–0.991 in three runs against 1.069–1.085
// without); at 32 clients one CPU is too few (p50-target 1.33).
func BenchmarkOverhead(b *testing.B) {
	vk := valkeytest.Start(b)
	prov := startProvider(b, "bench", "--completion-tokens", "1")
	proxy := startPlainProxy(b, "http://"+prov.data)
	pw := "bench-password"
	cfg := fmt.Sprintf(`
listen: {{listen}}
admin_listen: {{admin}}
auth:
  basic:
    - username: bench
      password_env: QQB_PW
providers:
  - site: bench
    url: http://%s
quota:
  backend: {kind: valkey, url: "${QQB_VALKEY}", namespace: qqbench, timeout: 300ms}
  rules:
    - name: bench
      budgets: [{window: 60s, capacity: 1000000000000}]
      reservation_timeout: 30s
      reserved_tokens: 10
`, prov.data)
	gwEnv := []string{"QQB_PW=" + pw, "QQB_VALKEY=" + vk.URL()}
	// The sub-benchmarks' names say which CPU budget the gateway had, so a reader (and
	// internal/benchtargets) never mistakes one run for the other.
	budget := ""
	if n := os.Getenv(benchGatewayProcsEnv); n != "" {
		if v, err := strconv.Atoi(n); err != nil || v < 1 {
			b.Fatalf("%s=%q: want a whole number of CPUs, at least 1", benchGatewayProcsEnv, n)
		}
		gwEnv = append(gwEnv, "GOMAXPROCS="+n) // the gateway's alone, not this process's
		budget = "gateway-gomaxprocs=" + n + "/"
	}
	gw := startGateway(b, "gateway-bench", cfg, gwEnv)
	store := newStoreProbe(b, vk.URL())
	admission := newReserveProbe(b, cfg, map[string]string{"QQB_PW": pw, "QQB_VALKEY": vk.URL()})
	auth := basicAuth("bench", pw)
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConns: 256, MaxIdleConnsPerHost: 128, DisableCompression: true}}

	post := func(url string, withAuth bool) (time.Duration, error) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(benchBody))
		req.Header.Set("Content-Type", "application/json")
		if withAuth {
			req.Header.Set("Authorization", auth)
		}
		start := time.Now()
		resp, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		d := time.Since(start)
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("status %d from %s", resp.StatusCode, url)
		}
		return d, err
	}
	// The paths measured, in the order of the slices below.
	paths := []func() (time.Duration, error){
		func() (time.Duration, error) { return post("http://"+prov.data+"/v1/chat/completions", false) },
		func() (time.Duration, error) { return post(proxy.url(), false) },
		func() (time.Duration, error) { return post(gw.url(), true) },
		store.roundTrip,
		admission.reserve,
	}
	const direct, plain, gateway, valkeyRTT, reserve = 0, 1, 2, 3, 4
	// Warm up connections and the script caches.
	for range 200 {
		for _, p := range paths {
			if _, err := p(); err != nil {
				b.Fatal(err)
			}
		}
	}

	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("%sclients=%d", budget, clients), func(b *testing.B) {
			per := max(1, b.N/clients)
			lat := make([][][]time.Duration, len(paths)) // path → client → samples
			for i := range lat {
				lat[i] = make([][]time.Duration, clients)
			}
			var wg sync.WaitGroup
			var firstErr error
			var errOnce sync.Once
			gwCPU, proxyCPU := procCPU(b, gw.cmd.Process.Pid), procCPU(b, proxy.cmd.Process.Pid)
			b.ResetTimer()
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for it := range per {
						for k := range paths {
							i := (it + c + k) % len(paths)
							d, err := paths[i]()
							if err != nil {
								errOnce.Do(func() { firstErr = err })
								return
							}
							lat[i][c] = append(lat[i][c], d)
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			if firstErr != nil {
				b.Fatal(firstErr)
			}
			// CPU time per request of each hop's process: what latency on a loaded machine
			// hides. The gateway's includes its settlement, which runs after the response.
			n := float64(clients * per)
			gwCPU, proxyCPU = procCPU(b, gw.cmd.Process.Pid)-gwCPU, procCPU(b, proxy.cmd.Process.Pid)-proxyCPU
			b.ReportMetric(us(gwCPU)/n, "gateway-cpu-µs/req")
			b.ReportMetric(us(proxyCPU)/n, "proxy-cpu-µs/req")
			b.ReportMetric(float64(gwCPU)/float64(proxyCPU), "cpu-ratio")
			var p50, p99 [5]time.Duration
			for i, name := range []string{"direct", "proxy", "gateway", "valkey", "reserve"} {
				s := flatten(lat[i])
				p50[i], p99[i] = quantile.Of(s, .50), quantile.Of(s, .99)
				b.ReportMetric(us(p50[i]), name+"-p50-µs")
				b.ReportMetric(us(p99[i]), name+"-p99-µs")
			}
			b.ReportMetric(us(p50[gateway]-p50[direct]), "overhead-p50-µs")
			b.ReportMetric(us(p99[gateway]-p99[direct]), "overhead-p99-µs")
			b.ReportMetric(float64(p99[gateway])/float64(p99[direct]), "p99-ratio")
			target := func(p [5]time.Duration, store int) float64 {
				return float64(p[gateway]) / (1.1 * float64(p[plain]+p[store]))
			}
			b.ReportMetric(target(p50, valkeyRTT), "p50-target")
			b.ReportMetric(target(p99, valkeyRTT), "p99-target")
			b.ReportMetric(target(p50, reserve), "p50-vs-reserve")
			b.ReportMetric(target(p99, reserve), "p99-vs-reserve")
		})
	}
}

// benchGatewayProcsEnv sets the benchmarked gateway's GOMAXPROCS (BenchmarkOverhead).
const benchGatewayProcsEnv = "QUOTAQUAL_BENCH_GATEWAY_GOMAXPROCS"

// plainProxyEnv, in the environment of this test binary, makes it a plain reverse proxy to
// the URL it holds (listening on plainProxyListenEnv) instead of running tests: the floor the
// gateway's overhead is measured against, in a process of its own as the gateway is.
const (
	plainProxyEnv       = "QUOTAQUAL_BENCH_PLAIN_PROXY"
	plainProxyListenEnv = "QUOTAQUAL_BENCH_PLAIN_PROXY_LISTEN"
)

// servePlainProxy runs the plain proxy when this process was started as one; it then never
// returns.
func servePlainProxy() {
	target := os.Getenv(plainProxyEnv)
	if target == "" {
		return
	}
	u, err := url.Parse(target)
	if err != nil {
		fmt.Fprintln(os.Stderr, "plain proxy:", err)
		os.Exit(2)
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.SetURL(u) },
		// The transport the gateway uses for its providers, so only the hop's own work differs.
		Transport: &http.Transport{Proxy: nil, MaxIdleConns: 1024, MaxIdleConnsPerHost: 256,
			IdleConnTimeout: 90 * time.Second, DisableCompression: true},
	}
	mux := http.NewServeMux()
	mux.Handle("/v1/", rp)
	mux.HandleFunc("/readyz", func(http.ResponseWriter, *http.Request) {})
	err = http.ListenAndServe(os.Getenv(plainProxyListenEnv), mux)
	fmt.Fprintln(os.Stderr, "plain proxy:", err)
	os.Exit(1)
}

// plainProxyProc is a running plain reverse proxy.
type plainProxyProc struct {
	*proc
	data string
}

func (p *plainProxyProc) url() string { return "http://" + p.data + "/v1/chat/completions" }

// startPlainProxy starts this test binary as a plain reverse proxy to target.
func startPlainProxy(b *testing.B, target string) *plainProxyProc {
	b.Helper()
	data := freeAddr(b)
	p := startProcBin(b, os.Args[0], "plain-proxy", []string{plainProxyEnv + "=" + target, plainProxyListenEnv + "=" + data})
	waitReady(b, "http://"+data+"/readyz", 10*time.Second, p)
	return &plainProxyProc{proc: p, data: data}
}

// procCPU is the CPU time (user + system) process pid has used so far, in clock ticks of
// 10 ms (USER_HZ on Linux).
func procCPU(b *testing.B, pid int) time.Duration {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// storeProbe times one round trip to Valkey through valkey-go, configured as the ledger
// configures it, with an EVALSHA of a trivial script: the store's share of an admission.
type storeProbe struct {
	c      valkey.Client
	script *valkey.Lua
}

func newStoreProbe(b *testing.B, rawURL string) *storeProbe {
	b.Helper()
	opt, err := valkey.ParseURL(rawURL)
	if err != nil {
		b.Fatal(err)
	}
	opt.DisableCache = true
	opt.MaxFlushDelay = 20 * time.Microsecond // as ledger.newValkey
	c, err := valkey.NewClient(opt)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(c.Close)
	return &storeProbe{c: c, script: valkey.NewLuaScript("return tonumber(ARGV[1]) + 1")}
}

func (s *storeProbe) roundTrip() (time.Duration, error) {
	start := time.Now()
	n, err := s.script.Exec(context.Background(), s.c, []string{"qqbench-probe"}, []string{"1"}).AsInt64()
	d := time.Since(start)
	if err == nil && n != 2 {
		err = fmt.Errorf("store probe answered %d, want 2", n)
	}
	return d, err
}

// reserveProbe times one admission through the ledger the gateway uses, opened from the same
// policy (backend, namespace, timeout), on a subject of its own; each reserve is settled
// after the timing, as the gateway settles after its response.
type reserveProbe struct {
	led  ledger.Ledger
	rule *ledger.CompiledRule
	key  string
}

// newReserveProbe opens the ledger of gateway config doc (with its listen placeholders filled).
func newReserveProbe(b *testing.B, doc string, env map[string]string) *reserveProbe {
	b.Helper()
	doc = strings.NewReplacer("{{listen}}", "127.0.0.1:0", "{{admin}}", "127.0.0.1:0").Replace(doc)
	cfg, err := ParseConfig([]byte(doc), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		b.Fatal(err)
	}
	led, err := ledger.Open(cfg.Policy())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { led.Close() })
	rule := cfg.Policy().Rules[0]
	return &reserveProbe{led: led, rule: rule, key: rule.Key("reserve-probe", "")}
}

func (p *reserveProbe) reserve() (time.Duration, error) {
	start := time.Now()
	dec, err := p.led.Reserve(context.Background(), p.rule.Quota, p.key, 10)
	d := time.Since(start)
	if err == nil && !dec.Admitted {
		err = fmt.Errorf("reserve probe denied: %+v", dec.Denial)
	}
	if err != nil {
		return d, err
	}
	_, err = p.led.Settle(context.Background(), dec.Reservation, ledger.Usage{Tokens: 10, Known: true})
	return d, err
}

func flatten(x [][]time.Duration) []time.Duration {
	var out []time.Duration
	for _, s := range x {
		out = append(out, s...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func us(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }

// BenchmarkGatewayRSS10kKeys measures the resident memory of a real gateway process whose
// in-process (memory) ledger tracks 10,000 active quota keys: 10,000 distinct authenticated
// subjects (10,000 Basic users, password_sha256) each make one request through it, so each
// key holds settled usage in its window. The memory backend is used because it keeps the keys
// inside the gateway (with Valkey the gateway holds none). Baseline: the same process right
// after start. 10,000 simultaneous in-flight requests would need ~30,000 sockets across the
// processes, beyond this machine's file limit; BenchmarkHeap10kReservations measures that
// state in process instead.
func BenchmarkGatewayRSS10kKeys(b *testing.B) {
	const n = 10_000
	prov := startProvider(b, "rss", "--completion-tokens", "1")
	var users strings.Builder
	digest := sha256.Sum256([]byte("pw"))
	hexd := hex.EncodeToString(digest[:])
	for i := range n {
		fmt.Fprintf(&users, "    - username: user-%d\n      password_sha256: %s\n", i, hexd)
	}
	cfg := fmt.Sprintf(`
listen: {{listen}}
admin_listen: {{admin}}
auth:
  basic:
%s
providers:
  - site: rss
    url: http://%s
quota:
  backend: {kind: memory}
  limits: {max_keys: 20000}
  rules:
    - name: rss
      budgets: [{window: 1h, capacity: 1000000}]
      reservation_timeout: 30s
      reserved_tokens: 10
`, strings.TrimRight(users.String(), "\n"), prov.data)
	gw := startGateway(b, "gateway-rss", cfg, nil)
	pid := gw.cmd.Process.Pid
	base := procStatusKB(b, pid, "VmRSS")

	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConnsPerHost: 64}}
	var wg sync.WaitGroup
	next := make(chan int)
	errs := make(chan error, 1)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				req, _ := http.NewRequest(http.MethodPost, gw.url(), strings.NewReader(benchBody))
				req.Header.Set("Authorization", basicAuth("user-"+strconv.Itoa(i), "pw"))
				resp, err := client.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 {
						err = fmt.Errorf("user-%d: status %d", i, resp.StatusCode)
					}
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	b.ResetTimer()
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	b.StopTimer()
	select {
	case err := <-errs:
		b.Fatal(err)
	default:
	}
	// Settlements are queued; wait until the last ones are applied.
	eventually(b, 10*time.Second, func() string {
		qs := gw.quota(b, "rss", "user-"+strconv.Itoa(n-1))
		if qs.ActiveReservations != 0 || qs.Windows[0].Settled == 0 {
			return "last settlement not applied"
		}
		return ""
	})
	rss := procStatusKB(b, pid, "VmRSS")
	hwm := procStatusKB(b, pid, "VmHWM")
	b.ReportMetric(scrapeGauge(b, "http://"+gw.admin+"/metrics", "go_memstats_heap_inuse_bytes")/(1<<20), "heap-inuse-MiB")
	b.ReportMetric(float64(base)/1024, "baseline-rss-MiB")
	b.ReportMetric(float64(rss)/1024, "rss-MiB")
	b.ReportMetric(float64(hwm)/1024, "peak-rss-MiB")
	b.ReportMetric(float64(rss)/float64(base), "rss-ratio")
	// RSS counts the binary's file-backed pages too (the same binary carries the harness's
	// docker and kind engines: shared, reclaimable page cache). Anonymous memory is what the
	// gateway itself holds.
	b.ReportMetric(float64(procStatusKB(b, pid, "RssAnon"))/1024, "rss-anon-MiB")
	b.ReportMetric(float64(procStatusKB(b, pid, "RssFile"))/1024, "rss-file-MiB")
}

func procStatusKB(b *testing.B, pid int, field string) int64 {
	b.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			f := strings.Fields(v)
			n, _ := strconv.ParseInt(f[0], 10, 64)
			return n
		}
	}
	b.Fatalf("%s not in /proc/%d/status", field, pid)
	return 0
}

// BenchmarkHeap10kReservations measures, in process, the heap a gateway holds for 10,000
// in-flight requests of 10,000 distinct subjects: one live reservation each in the memory
// ledger plus the lease renewer the gateway keeps per request. Baseline: the heap of the same
// server before the reservations (runtime.MemStats.HeapInuse after GC).
func BenchmarkHeap10kReservations(b *testing.B) {
	const n = 10_000
	doc := `
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
auth:
  basic:
    - username: x
      password_sha256: ` + strings.Repeat("0", 64) + `
providers:
  - site: s
    url: http://127.0.0.1:1
quota:
  backend: {kind: memory}
  limits: {max_keys: 20000}
  rules:
    - name: heap
      budgets: [{window: 60s, capacity: 1000}]
      reservation_timeout: 30s
      reserved_tokens: 15
`
	cfg, err := ParseConfig([]byte(doc), nil)
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(cfg, slog.New(slog.DiscardHandler), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	rule := s.policy.Rules[0]
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	base := heap()
	b.ResetTimer()
	renewers := make([]*renewer, 0, n)
	for i := range n {
		dec, err := s.led.Reserve(context.Background(), rule.Quota, rule.Key("subject-"+strconv.Itoa(i), ""), 15)
		if err != nil || !dec.Admitted {
			b.Fatalf("reserve %d: %v %+v", i, err, dec.Denial)
		}
		renewers = append(renewers, s.startRenewal(dec.Reservation))
	}
	b.StopTimer()
	held := heap()
	b.ReportMetric(float64(held)/(1<<20), "heap-MiB")
	b.ReportMetric(float64(held-base)/n, "bytes/reservation")
	b.ReportMetric(float64(held)/float64(base), "heap-ratio")
	for _, rn := range renewers {
		rn.stop()
	}
}

// scrapeGauge reads one unlabelled sample from a Prometheus text exposition.
func scrapeGauge(b *testing.B, url, name string) float64 {
	b.Helper()
	resp, err := testHTTP.Get(url)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return -1
}

// BenchmarkGatewayHotPath drives 1, then 32 concurrent clients through a gateway in this process
// (Valkey backend, a real provider stub process, JSON request log to a file as in production),
// so that `go test -bench GatewayHotPath -cpuprofile … -memprofile …` profiles the admitted
// request's path; focus the profile on serveChat. The figures (ns/op, allocs/op) include the
// benchmark's own client.
func BenchmarkGatewayHotPath(b *testing.B) {
	logf, err := os.Create(b.TempDir() + "/gateway.log")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { logf.Close() }) // after the gateway's shutdown
	s, client, postOne := startBenchGateway(b, "hot", slog.New(slog.NewJSONHandler(logf, nil)).With("component", "gateway"))
	defer client.CloseIdleConnections() // before the shutdown, which would wait for them
	post := func() error { _, _, err := postOne(); return err }
	for range 200 {
		if err := post(); err != nil {
			b.Fatal(err)
		}
	}
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			b.ReportAllocs()
			// settle-dropped: settlements turned away during this run (each is charged its
			// estimate when its lease runs out, not the usage seen).
			dropped := s.m.settlements.WithLabelValues("hot", "dropped")
			before := counterValue(dropped)
			defer func() { b.ReportMetric(counterValue(dropped)-before, "settle-dropped") }()
			if clients == 1 {
				for b.Loop() {
					if err := post(); err != nil {
						b.Fatal(err)
					}
				}
				return
			}
			b.SetParallelism(max(1, clients/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if err := post(); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer() // not the shutdown: it may wait 5 s for a connection the client opened but never used
		})
	}
}

// settleTimes is a slog handler that keeps, per request id, when the request's log line was
// written: for an admitted request that is when its settlement ended (settle.go logs it then).
type settleTimes struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (h *settleTimes) Enabled(context.Context, slog.Level) bool { return true }
func (h *settleTimes) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *settleTimes) WithGroup(string) slog.Handler            { return h }
func (h *settleTimes) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "request" {
		return nil
	}
	var id string
	settled := false
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "request_id":
			id = a.Value.String()
		case "settlement":
			settled = true
		}
		return true
	})
	if settled {
		h.mu.Lock()
		h.at[id] = r.Time
		h.mu.Unlock()
	}
	return nil
}

// BenchmarkSettleLag measures how long after a response ends its settlement lands in the store
// (the client's time of the response's last byte → the gateway's log line written when the
// settle call returned), at 1 and 32 clients through a gateway in this process (Valkey backend,
// a real provider stub process). Within that lag a client's next request is admitted against
// the estimate of the previous one, not its usage (docs/gateway.md, "Settlement lands after the response").
func BenchmarkSettleLag(b *testing.B) {
	logs := &settleTimes{at: map[string]time.Time{}}
	_, client, postOne := startBenchGateway(b, "lag", slog.New(logs))
	defer client.CloseIdleConnections()
	var (
		mu    sync.Mutex
		ended = map[string]time.Time{}
	)
	post := func() error {
		id, end, err := postOne()
		mu.Lock()
		ended[id] = end
		mu.Unlock()
		return err
	}
	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			mu.Lock()
			clear(ended)
			mu.Unlock()
			per := max(1, b.N/clients)
			var wg sync.WaitGroup
			for range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						if err := post(); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			// Every settlement of this run ends (a condition with a deadline, not a sleep).
			deadline := time.Now().Add(30 * time.Second)
			var lags []time.Duration
			for {
				lags = lags[:0]
				mu.Lock()
				logs.mu.Lock()
				for id, end := range ended {
					if at, ok := logs.at[id]; ok {
						lags = append(lags, max(0, at.Sub(end)))
					}
				}
				logs.mu.Unlock()
				n := len(ended)
				mu.Unlock()
				if len(lags) == n {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("%d of %d settlements did not end within 30 s", n-len(lags), n)
				}
				time.Sleep(10 * time.Millisecond)
			}
			sort.Slice(lags, func(i, j int) bool { return lags[i] < lags[j] })
			q := func(p float64) float64 { return float64(lags[int(p*float64(len(lags)-1))].Microseconds()) }
			b.ReportMetric(q(0.5), "lag-p50-µs")
			b.ReportMetric(q(0.99), "lag-p99-µs")
		})
	}
}

// startBenchGateway starts a gateway in this process (Valkey backend, a real provider stub
// process; rule, site and namespace named after name) logging to log, and returns it, its
// client and a post that sends one admitted request and reads the response to its end (the
// response's request id and when its last byte arrived).
func startBenchGateway(b *testing.B, name string, log *slog.Logger) (*Server, *http.Client, func() (string, time.Time, error)) {
	vk := valkeytest.Start(b)
	prov := startProvider(b, name, "--completion-tokens", "1")
	doc := fmt.Sprintf(`
listen: 127.0.0.1:0
admin_listen: 127.0.0.1:0
auth:
  basic:
    - username: bench
      password_env: QQB_PW
providers:
  - site: %[1]s
    url: http://%[2]s
quota:
  backend: {kind: valkey, url: "${QQB_VALKEY}", namespace: qq%[1]s, timeout: 300ms}
  rules:
    - name: %[1]s
      budgets: [{window: 60s, capacity: 1000000000000}]
      reservation_timeout: 30s
      reserved_tokens: 10
`, name, prov.data)
	env := map[string]string{"QQB_PW": "pw", "QQB_VALKEY": vk.URL()}
	cfg, err := ParseConfig([]byte(doc), func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		b.Fatal(err)
	}
	s, err := New(cfg, log, Options{})
	if err != nil {
		b.Fatal(err)
	}
	if err := s.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Shutdown(context.Background()) })
	url := "http://" + s.DataAddr() + "/v1/chat/completions"
	auth := basicAuth("bench", "pw")
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConns: 256, MaxIdleConnsPerHost: 128, DisableCompression: true}}
	post := func() (string, time.Time, error) {
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(benchBody))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", auth)
		resp, err := client.Do(req)
		if err != nil {
			return "", time.Time{}, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		end := time.Now()
		resp.Body.Close()
		if err == nil && resp.StatusCode != 200 {
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		return resp.Header.Get(hRequestID), end, err
	}
	return s, client, post
}
