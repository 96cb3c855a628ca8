package ledger_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/quotaqual/quotaqual/internal/quantile"
	"github.com/quotaqual/quotaqual/internal/valkeyproc"
	"github.com/quotaqual/quotaqual/internal/valkeytest"
	"github.com/quotaqual/quotaqual/ledger"
)

// BenchmarkValkeyClusterReserve: reserve latency on a three-primary Valkey Cluster against one
// valkey-server, the baseline, in the same run (append-only file off on both, as in
// BenchmarkValkey). One op is a Reserve and its Settle on each store, interleaved so both see
// the same machine at the same moments; sixteen subjects rotate, so the cluster's reserves
// reach every shard. Reported: each store's reserve p50 and the ratio cluster/single.
func BenchmarkValkeyClusterReserve(b *testing.B) {
	off := false
	noAOF := func(o *valkeyproc.Options) { o.AppendOnly = &off }
	srv := valkeytest.Start(b, noAOF)
	cl := valkeytest.StartCluster(b, 3, 0, func(o *valkeyproc.ClusterOptions) {
		for i := range o.Nodes {
			noAOF(&o.Nodes[i])
		}
	})
	single, err := ledger.NewValkey(ledger.ValkeyOptions{URL: srv.URL(), Namespace: "bench-single", Timeout: 2 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = single.Close() })
	cluster, err := ledger.NewValkey(ledger.ValkeyOptions{Cluster: &ledger.ClusterOptions{Addresses: cl.Addrs()},
		Namespace: "bench-cluster", Timeout: 2 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cluster.Close() })
	ctx, q := context.Background(), benchQuota()
	subjects := make([]string, 16)
	for i := range subjects {
		subjects[i] = fmt.Sprintf("tenant-%d", i)
	}
	timedPair := func(l ledger.Ledger, key string) (time.Duration, error) {
		t0 := time.Now()
		d, err := l.Reserve(ctx, q, key, 10)
		took := time.Since(t0)
		if err != nil || !d.Admitted {
			return 0, fmt.Errorf("reserve %s on %s: %+v, %v", key, l.Backend(), d, err)
		}
		_, err = l.Settle(ctx, d.Reservation, benchUsage)
		return took, err
	}
	for i := range 200 { // warm up: connections, every shard's script cache
		for _, l := range []ledger.Ledger{single, cluster} {
			if _, err := timedPair(l, subjects[i%len(subjects)]); err != nil {
				b.Fatal(err)
			}
		}
	}
	var one, three []time.Duration
	i := 0
	for b.Loop() {
		key := subjects[i%len(subjects)]
		i++
		a, err := timedPair(single, key)
		if err != nil {
			b.Fatal(err)
		}
		c, err := timedPair(cluster, key)
		if err != nil {
			b.Fatal(err)
		}
		one, three = append(one, a), append(three, c)
	}
	slices.Sort(one)
	slices.Sort(three)
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(micros(quantile.Of(one, .50)), "single-p50-µs")
	b.ReportMetric(micros(quantile.Of(one, .99)), "single-p99-µs")
	b.ReportMetric(micros(quantile.Of(three, .50)), "cluster-p50-µs")
	b.ReportMetric(micros(quantile.Of(three, .99)), "cluster-p99-µs")
	b.ReportMetric(float64(quantile.Of(three, .50))/float64(quantile.Of(one, .50)), "cluster/single-p50")
}
