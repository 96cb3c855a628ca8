package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/valkeytest"
)

// The benchmarks report figures as metrics, measured against a baseline in the same run; they
// assert nothing about time. The machine they run on may be shared: read them as ratios.

const benchBody = `{"model":"qwen3-0.6b","max_tokens":1,"messages":[{"role":"user","content":"bench"}]}`

// BenchmarkOverhead measures the latency a gateway adds: every iteration sends one request
// directly to a provider stub and one through a gateway (Valkey backend) to the same stub,
// from the same client, interleaved so that noise hits both alike. Overhead = through − direct,
// at p50 and p99, with 1 and 32 concurrent clients. Gateway and provider are real processes.
func BenchmarkOverhead(b *testing.B) {
	vk := valkeytest.Start(b)
	prov := startProvider(b, "bench", "--completion-tokens", "1")
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
	gw := startGateway(b, "gateway-bench", cfg, []string{"QQB_PW=" + pw, "QQB_VALKEY=" + vk.URL()})
	auth := basicAuth("bench", pw)
	client := &http.Client{Transport: &http.Transport{Proxy: nil, MaxIdleConns: 256, MaxIdleConnsPerHost: 128, DisableCompression: true}}
	direct := "http://" + prov.data + "/v1/chat/completions"
	through := gw.url()

	do := func(url string, withAuth bool) (time.Duration, error) {
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
	// Warm up connections and the script cache.
	for range 200 {
		if _, err := do(direct, false); err != nil {
			b.Fatal(err)
		}
		if _, err := do(through, true); err != nil {
			b.Fatal(err)
		}
	}

	for _, clients := range []int{1, 32} {
		b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
			per := max(1, b.N/clients)
			dLat := make([][]time.Duration, clients)
			gLat := make([][]time.Duration, clients)
			var wg sync.WaitGroup
			var firstErr error
			var errOnce sync.Once
			b.ResetTimer()
			for c := range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range per {
						d, err := do(direct, false)
						if err != nil {
							errOnce.Do(func() { firstErr = err })
							return
						}
						g, err := do(through, true)
						if err != nil {
							errOnce.Do(func() { firstErr = err })
							return
						}
						dLat[c] = append(dLat[c], d)
						gLat[c] = append(gLat[c], g)
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			if firstErr != nil {
				b.Fatal(firstErr)
			}
			d, g := flatten(dLat), flatten(gLat)
			dp50, dp99 := pct(d, 50), pct(d, 99)
			gp50, gp99 := pct(g, 50), pct(g, 99)
			b.ReportMetric(us(dp50), "direct-p50-µs")
			b.ReportMetric(us(dp99), "direct-p99-µs")
			b.ReportMetric(us(gp50), "gateway-p50-µs")
			b.ReportMetric(us(gp99), "gateway-p99-µs")
			b.ReportMetric(us(gp50-dp50), "overhead-p50-µs")
			b.ReportMetric(us(gp99-dp99), "overhead-p99-µs")
			b.ReportMetric(float64(gp99)/float64(dp99), "p99-ratio")
		})
	}
}

func flatten(x [][]time.Duration) []time.Duration {
	var out []time.Duration
	for _, s := range x {
		out = append(out, s...)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func pct(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted)-1) * p / 100)
	return sorted[i]
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
