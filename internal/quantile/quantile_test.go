package quantile

import (
	"testing"
	"time"
)

func TestOfNearestRank(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	for q, want := range map[float64]time.Duration{0.5: 5, 0.99: 10, 1: 10, 0.1: 1, 0: 1} {
		if got := Of(ds, q); got != want {
			t.Errorf("Of(%v) = %d, want %d", q, got, want)
		}
	}
	if ds[0] != 5 {
		t.Error("Of sorted its argument in place")
	}
	if Of(nil, 0.5) != 0 {
		t.Error("the quantile of nothing is not 0")
	}
}

func TestMedian(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := Median(c.xs); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
}
