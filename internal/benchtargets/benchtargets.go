// Package benchtargets reads the output of `go test -bench` (what `make bench` prints) and
// states issue 25's performance targets as ratios to the floors measured in the same run: each
// target names the benchmark and metric that carries it, the bound, and whether the run met
// it. It judges only what the benchmarks measured; a target whose benchmark did not run is
// listed as not measured, never as met.
package benchtargets

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
)

// Results are the metrics of every benchmark in an output, by benchmark name (without the
// -GOMAXPROCS suffix) and unit. A benchmark that ran twice keeps its last figures.
type Results map[string]map[string]float64

// benchLine is one result line: name, iterations, then value/unit pairs.
var benchLine = regexp.MustCompile(`^(Benchmark\S+?)(?:-\d+)?\s+\d+\s+(.*)$`)

// Parse reads go test -bench output; lines that are not results are skipped.
func Parse(r io.Reader) (Results, error) {
	out := Results{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		m := benchLine.FindStringSubmatch(strings.TrimSpace(sc.Text()))
		if m == nil {
			continue
		}
		f := strings.Fields(m[2])
		metrics := map[string]float64{}
		for i := 0; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			metrics[f[i+1]] = v
		}
		out[m[1]] = metrics
	}
	return out, sc.Err()
}

// Target is one stated target: Metric of Bench is ≤ (AtMost) or ≥ Bound.
type Target struct {
	What   string
	Bench  string
	Metric string
	Bound  float64
	AtMost bool
	// Floor names the metric of the same benchmark that gives the ratio its meaning (printed
	// beside it), when there is one.
	Floor string
}

// Targets are issue 25's targets as `make bench` measures them.
func Targets() []Target {
	t := []Target{{
		What: "ledger reserve+settle pairs/s @64 goroutines / commands floor", Bench: "BenchmarkValkeyVsFloor",
		Metric: "x-commands-floor", Bound: 0.9, Floor: "commands-pairs/s",
	}}
	for _, budget := range []string{"", "gateway-gomaxprocs=1/"} {
		for _, clients := range []int{1, 32} {
			for _, q := range []string{"p50", "p99"} {
				what := fmt.Sprintf("gateway %s / (1.1 × (plain proxy + reserve)) @%d client(s)", q, clients)
				if budget != "" {
					what += ", gateway GOMAXPROCS=1"
				}
				t = append(t, Target{What: what, Bench: fmt.Sprintf("BenchmarkOverhead/%sclients=%d", budget, clients),
					Metric: q + "-vs-reserve", Bound: 1.0, AtMost: true, Floor: "reserve-" + q + "-µs"})
			}
		}
	}
	// The peers' goal: quotaqual's admission no slower than envoy ratelimit's decision on the
	// same Valkey (internal/peers/peerbench; absent when envoy ratelimit is not built).
	for _, m := range []string{"p50-1", "p99-1", "p50-64", "p99-64"} {
		t = append(t, Target{What: "quotaqual admission " + strings.Replace(m, "-", " @", 1) + " caller(s) / envoy ratelimit's", Bench: "BenchmarkPeerAdmission/envoy-ratelimit",
			Metric: "quotaqual-x-" + m, Bound: 1.0, AtMost: true, Floor: m + "-µs"})
	}
	return t
}

// Verdict is one target judged against a run.
type Verdict struct {
	Target
	Measured, FloorValue float64
	Ran, Met             bool
}

// Judge judges every target against res.
func Judge(res Results, targets []Target) []Verdict {
	out := make([]Verdict, len(targets))
	for i, t := range targets {
		v := Verdict{Target: t}
		if m, ok := res[t.Bench]; ok {
			v.Measured, v.Ran = m[t.Metric]
			v.FloorValue = m[t.Floor]
			if v.Ran {
				v.Met = v.Measured >= t.Bound
				if t.AtMost {
					v.Met = v.Measured <= t.Bound
				}
			}
		}
		out[i] = v
	}
	return out
}

// Print writes the verdicts as a table.
func Print(w io.Writer, vs []Verdict) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tratio\tbound\tmet\tfloor (same run)\tbenchmark · metric")
	for _, v := range vs {
		op := "≥"
		if v.AtMost {
			op = "≤"
		}
		measured, met, floor := "-", "not measured", "-"
		if v.Ran {
			measured, met = fmt.Sprintf("%.3f", v.Measured), map[bool]string{true: "yes", false: "NO"}[v.Met]
			if v.Floor != "" {
				floor = fmt.Sprintf("%s %.0f", v.Floor, v.FloorValue)
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s %.2f\t%s\t%s\t%s · %s\n", v.What, measured, op, v.Bound, met, floor, v.Bench, v.Metric)
	}
	return tw.Flush()
}
