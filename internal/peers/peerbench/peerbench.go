// Package peerbench measures quotaqual's admission beside the third-party engines a user would
// pick instead, in one run against one valkey-server: envoy ratelimit's ShouldRateLimit (gRPC,
// one descriptor, the service's own Valkey pipeline) and gubernator's GetRateLimits (three
// nodes; owner-decided and GLOBAL). For each: decision p50/p99 and decisions/s at 1 and 64
// concurrent callers, the store's CPU per decision (INFO cpu and INFO commandstats deltas; 0
// for gubernator, which keeps no store) and the engine's own processes' CPU. The engines run in
// alternating rounds (the order rotating), so a load that changes during the run moves all
// alike; rates are medians over the rounds, latencies pooled. Every figure is read beside
// quotaqual's in the same run: the machine's load moves absolute figures, not much the ratios.
// Engines not built (`make peers`) are skipped and named. `make bench` runs it through
// cmd/peerbench.
package peerbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/quotaqual/quotaqual/internal/peers"
	"github.com/quotaqual/quotaqual/internal/quantile"
	"github.com/quotaqual/quotaqual/internal/valkeyproc"
)

// Options size the run.
type Options struct {
	Rounds    int // alternating rounds (default 5)
	PerRound1 int // decisions per engine per round at 1 caller (default 1000)
	// PerRound64 is decisions per engine per round at 64 callers (default 8000).
	PerRound64 int
	Dir        string    // scratch directory (default: a temporary one)
	Progress   io.Writer // may be nil
}

func (o *Options) defaults() {
	if o.Rounds <= 0 {
		o.Rounds = 5
	}
	if o.PerRound1 <= 0 {
		o.PerRound1 = 1000
	}
	if o.PerRound64 <= 0 {
		o.PerRound64 = 8000
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
}

// Concurrencies are the callers each engine is driven with.
var Concurrencies = []int{1, 64}

// Row is one engine's figures.
type Row struct {
	Engine, PerDecision string
	// By concurrency (Concurrencies order).
	P50, P99 [2]time.Duration
	Rate     [2]float64 // decisions/s, median over rounds
	// StoreCPU and StoreCmdUs are µs per decision of the store's CPU (INFO cpu) and of its
	// commands (INFO commandstats), over every round at both concurrencies. EngineCPU: the
	// engine's own processes (0 for quotaqual, whose admission runs in the gateway).
	StoreCPU, StoreCmdUs, EngineCPU float64
	Decisions                       int
}

// Result is the run's rows (quotaqual first) and what was skipped and why.
type Result struct {
	Rows    []Row
	Skipped []string
}

// Run starts one valkey-server and every built engine, measures them, and stops everything.
func Run(ctx context.Context, o Options) (Result, error) {
	o.defaults()
	var res Result
	if o.Dir == "" {
		d, err := os.MkdirTemp("", "quotaqual-peerbench-")
		if err != nil {
			return res, err
		}
		defer os.RemoveAll(d)
		o.Dir = d
	}
	off := false
	password := strconv.FormatInt(time.Now().UnixNano(), 36) + "pb"
	srv, err := valkeyproc.Start(ctx, valkeyproc.Options{Dir: o.Dir, Password: password, AppendOnly: &off})
	if err != nil {
		return res, fmt.Errorf("valkey-server: %w", err)
	}
	defer srv.Stop()
	probe, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{srv.Addr()}, Password: password, DisableCache: true})
	if err != nil {
		return res, err
	}
	defer probe.Close()

	qq, err := quotaqualEngine(srv.URL())
	if err != nil {
		return res, err
	}
	engines := []*engine{qq}
	defer func() {
		for _, e := range engines {
			e.close()
		}
	}()
	if err := peers.Built(peers.EnvoyRatelimit); err != nil {
		res.Skipped = append(res.Skipped, err.Error())
	} else if e, err := envoyEngine(ctx, srv.Addr(), password, o.Dir); err != nil {
		res.Skipped = append(res.Skipped, "envoy-ratelimit did not start: "+err.Error())
	} else {
		engines = append(engines, e)
	}
	if err := peers.Built(peers.Gubernator); err != nil {
		res.Skipped = append(res.Skipped, err.Error())
	} else if g, err := startGubernator(ctx, o.Dir); err != nil {
		res.Skipped = append(res.Skipped, "gubernator did not start: "+err.Error())
	} else {
		owner := g.engine("BATCHING", "HTTP GetRateLimits hits 1, TOKEN_BUCKET, BATCHING: forwarded to the key's owner node, which decides in memory (no store)")
		owner.close = func() {}
		global := g.engine("GLOBAL", "HTTP GetRateLimits hits 1, TOKEN_BUCKET, GLOBAL: the asked node answers from its copy, hits sent to the owner asynchronously (no store)")
		inner := global.close
		global.close = func() { inner(); g.stop() }
		engines = append(engines, owner, global)
	}

	// Warm up: connections, script caches, each node's copy of each key.
	for _, e := range engines {
		if _, _, err := drive(ctx, e, 64, 640); err != nil {
			return res, fmt.Errorf("%s: %w", e.name, err)
		}
	}
	type acc struct {
		lat                     [2][]time.Duration
		rates                   [2][]float64
		cpuUs, cmdUs, engineCPU float64
		decisions               int
	}
	accs := make([]acc, len(engines))
	for r := range o.Rounds {
		fmt.Fprintf(o.Progress, "peerbench: round %d of %d\n", r+1, o.Rounds)
		for k := range engines {
			i := (r + k) % len(engines)
			e, a := engines[i], &accs[i]
			cpu0, cmd0, err := storeCPU(ctx, probe)
			if err != nil {
				return res, err
			}
			eng0 := procsCPU(e.pids)
			for ci, c := range Concurrencies {
				n := o.PerRound1
				if c > 1 {
					n = o.PerRound64
				}
				lat, rate, err := drive(ctx, e, c, n)
				if err != nil {
					return res, fmt.Errorf("%s at %d callers: %w", e.name, c, err)
				}
				a.lat[ci] = append(a.lat[ci], lat...)
				a.rates[ci] = append(a.rates[ci], rate)
				a.decisions += n
			}
			cpu1, cmd1, err := storeCPU(ctx, probe)
			if err != nil {
				return res, err
			}
			a.cpuUs += cpu1 - cpu0
			a.cmdUs += cmd1 - cmd0
			a.engineCPU += float64(procsCPU(e.pids)-eng0) / float64(time.Microsecond)
		}
	}
	for i, e := range engines {
		a := accs[i]
		row := Row{Engine: e.name, PerDecision: e.perDecision, Decisions: a.decisions}
		for ci := range Concurrencies {
			slices.Sort(a.lat[ci])
			row.P50[ci], row.P99[ci] = quantile.Of(a.lat[ci], .50), quantile.Of(a.lat[ci], .99)
			row.Rate[ci] = quantile.Median(a.rates[ci])
		}
		d := float64(a.decisions)
		row.StoreCPU, row.StoreCmdUs, row.EngineCPU = a.cpuUs/d, a.cmdUs/d, a.engineCPU/d
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// drive makes n decisions of e over c callers (caller w on its own subject) and returns every
// decision's latency and the decisions per second.
func drive(ctx context.Context, e *engine, c, n int) ([]time.Duration, float64, error) {
	var next atomic.Int64
	lats := make([][]time.Duration, c)
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	start := time.Now()
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				d, err := e.decide(ctx, w)
				if err != nil {
					once.Do(func() { firstErr = err })
					return
				}
				lats[w] = append(lats[w], d)
			}
		}()
	}
	wg.Wait()
	took := time.Since(start)
	var out []time.Duration
	for _, l := range lats {
		out = append(out, l...)
	}
	return out, float64(n) / took.Seconds(), firstErr
}

// storeCPU reads the server's CPU (user + system, µs) and its commands' total µs.
func storeCPU(ctx context.Context, c valkey.Client) (cpuUs, cmdUs float64, err error) {
	info, err := c.Do(ctx, c.B().Info().Section("cpu").Section("commandstats").Build()).ToString()
	if err != nil {
		return 0, 0, fmt.Errorf("INFO cpu commandstats: %w", err)
	}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case k == "used_cpu_sys" || k == "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			cpuUs += f * 1e6
		case strings.HasPrefix(k, "cmdstat_") && k != "cmdstat_info":
			for _, kv := range strings.Split(v, ",") {
				if n, val, _ := strings.Cut(kv, "="); n == "usec" {
					f, _ := strconv.ParseFloat(val, 64)
					cmdUs += f
				}
			}
		}
	}
	return cpuUs, cmdUs, nil
}

// procsCPU is the CPU time (user + system) the processes used so far, in USER_HZ ticks of
// 10 ms; a process that is gone counts 0.
func procsCPU(pids []int) time.Duration {
	var total time.Duration
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(u+s) * 10 * time.Millisecond
	}
	return total
}

// Print writes the table (every ratio to quotaqual's row, the first) and what was skipped,
// then one go-bench line per engine so `make bench`'s targets table can read the ratios.
func Print(w io.Writer, res Result) error {
	if len(res.Rows) == 0 {
		return errors.New("no engine measured")
	}
	qq := res.Rows[0]
	us := func(d time.Duration) string { return fmt.Sprintf("%.0f", float64(d)/float64(time.Microsecond)) }
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "engine\tp50/p99 µs @1\tp50/p99 µs @64\tdecisions/s @1\t@64\tstore CPU µs/decision\tstore cmd µs/decision\tengine CPU µs/decision\tp50 @1 ÷ quotaqual\tdecisions/s @64 ÷ quotaqual")
	for _, r := range res.Rows {
		fmt.Fprintf(tw, "%s\t%s/%s\t%s/%s\t%.0f\t%.0f\t%.1f\t%.1f\t%.1f\t%.2f\t%.2f\n", r.Engine, us(r.P50[0]), us(r.P99[0]), us(r.P50[1]), us(r.P99[1]),
			r.Rate[0], r.Rate[1], r.StoreCPU, r.StoreCmdUs, r.EngineCPU, float64(r.P50[0])/float64(qq.P50[0]), r.Rate[1]/qq.Rate[1])
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "\nwhat each does per decision:")
	for _, r := range res.Rows {
		fmt.Fprintf(w, "  %s: %s\n", r.Engine, r.PerDecision)
	}
	for _, s := range res.Skipped {
		fmt.Fprintf(w, "skipped: %s\n", s)
	}
	// quotaqual-x-*: quotaqual's figure over this engine's (≤ 1: quotaqual is as fast or faster).
	for _, r := range res.Rows {
		name := strings.NewReplacer(" ", "", "(", "-", ")", "").Replace(r.Engine)
		fmt.Fprintf(w, "BenchmarkPeerAdmission/%s\t1\t%.1f p50-1-µs\t%.1f p99-1-µs\t%.1f p50-64-µs\t%.1f p99-64-µs\t%.0f decisions-1/s\t%.0f decisions-64/s\t%.3f quotaqual-x-p50-1\t%.3f quotaqual-x-p99-1\t%.3f quotaqual-x-p50-64\t%.3f quotaqual-x-p99-64\t%.3f quotaqual-x-decisions-64\n",
			name, float64(r.P50[0])/1e3, float64(r.P99[0])/1e3, float64(r.P50[1])/1e3, float64(r.P99[1])/1e3, r.Rate[0], r.Rate[1],
			float64(qq.P50[0])/float64(r.P50[0]), float64(qq.P99[0])/float64(r.P99[0]),
			float64(qq.P50[1])/float64(r.P50[1]), float64(qq.P99[1])/float64(r.P99[1]), qq.Rate[1]/r.Rate[1])
	}
	return nil
}
