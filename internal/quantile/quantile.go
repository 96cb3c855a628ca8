// Package quantile summarises measured samples: the latency percentiles the sustained-load
// scenario writes as evidence and the benchmarks report, and a median of rates. One
// definition serves all of them, so a p99 means the same in a report and in a benchmark.
package quantile

import (
	"math"
	"slices"
	"time"
)

// Of is the q-quantile (0..1) of ds by the nearest-rank method: the smallest sample with at
// least q of the samples at or below it. ds need not be sorted and is left as it is; 0 for
// none.
func Of(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Median is the median of xs (the mean of the middle two for an even count); 0 for none.
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
