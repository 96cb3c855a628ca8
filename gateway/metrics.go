package gateway

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/quotaqual/quotaqual/ledger"
)

// metrics are the gateway's Prometheus series, on their own registry. Every label is bounded:
// rule (configured names), result and reason (fixed sets below), backend, site (configured
// names). Subjects, quota keys and model strings never become labels.
//
//	quotaqual_gateway_requests_total{rule,result,reason}
//	    result: admitted | denied | unauthenticated | store_error | bad_request | upstream_error
//	    reason: "" for admitted, else a ledger denial reason or a gateway reason code
//	quotaqual_gateway_tokens_reserved_total{rule}      estimates admitted
//	quotaqual_gateway_tokens_charged_total{rule}       tokens charged at settlement
//	quotaqual_gateway_tokens_refunded_total{rule}      estimate - charged, when positive
//	quotaqual_gateway_tokens_overage_total{rule}       charged - estimate, when positive
//	quotaqual_gateway_settlements_total{rule,result}   applied | unacknowledged | noop | failed | dropped
//	quotaqual_gateway_usage_total{rule,result}         known | unknown (settled at the estimate)
//	quotaqual_gateway_renewals_total{rule,result}      renewed | lost | error
//	quotaqual_gateway_backend_errors_total{backend,reason}  reason: reserve | renew | settle | inspect | ready
//	quotaqual_gateway_upstream_requests_total{site,result}  result: 2xx | 3xx | 4xx | 5xx | error
//	quotaqual_gateway_upstream_errors_total{site,reason}    reason: transport | timeout | body | client_disconnect
//	quotaqual_gateway_admission_seconds{backend,result}     time to decide (auth done → decision)
//	quotaqual_gateway_upstream_seconds{site}                forward start → response fully relayed
//	quotaqual_gateway_reservations_in_flight{rule}          admitted and not yet settled
//	quotaqual_gateway_settlement_queue_depth                settlements handed over and not yet ended
type metrics struct {
	reg *prometheus.Registry

	requests         *prometheus.CounterVec
	tokensReserved   *prometheus.CounterVec
	tokensCharged    *prometheus.CounterVec
	tokensRefunded   *prometheus.CounterVec
	tokensOverage    *prometheus.CounterVec
	settlements      *prometheus.CounterVec
	usage            *prometheus.CounterVec
	renewals         *prometheus.CounterVec
	backendErrors    *prometheus.CounterVec
	upstreamRequests *prometheus.CounterVec
	upstreamErrors   *prometheus.CounterVec
	admission        *prometheus.HistogramVec
	upstream         *prometheus.HistogramVec
	inFlight         *prometheus.GaugeVec
	queueDepth       prometheus.GaugeFunc
}

const ns = "quotaqual_gateway"

func newMetrics(queueDepth func() float64) *metrics {
	m := &metrics{reg: prometheus.NewRegistry()}
	cv := func(name, help string, labels ...string) *prometheus.CounterVec {
		c := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: name, Help: help}, labels)
		m.reg.MustRegister(c)
		return c
	}
	m.requests = cv("requests_total", "Chat completion requests by outcome.", "rule", "result", "reason")
	m.tokensReserved = cv("tokens_reserved_total", "Tokens reserved (estimates of admitted requests).", "rule")
	m.tokensCharged = cv("tokens_charged_total", "Tokens charged at settlement.", "rule")
	m.tokensRefunded = cv("tokens_refunded_total", "Reserved tokens refunded at settlement.", "rule")
	m.tokensOverage = cv("tokens_overage_total", "Tokens charged beyond the estimate at settlement.", "rule")
	m.settlements = cv("settlements_total", "Settlements by result: applied, unacknowledged (applied on the primary, too few replicas confirmed), noop (already settled or expired), failed after retries, dropped (handed over after a shutdown began its drain; the lease expires at the estimate).", "rule", "result")
	m.usage = cv("usage_total", "Usage reading by result: known, or unknown (charged at the estimate).", "rule", "result")
	m.renewals = cv("renewals_total", "Lease renewals by result.", "rule", "result")
	m.backendErrors = cv("backend_errors_total", "Quota store errors by operation.", "backend", "reason")
	m.upstreamRequests = cv("upstream_requests_total", "Requests forwarded to providers by response class.", "site", "result")
	m.upstreamErrors = cv("upstream_errors_total", "Upstream failures by reason.", "site", "reason")
	m.admission = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "admission_seconds", Help: "Time to reach an admission decision (reserve call).",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"backend", "result"})
	m.upstream = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "upstream_seconds", Help: "Time from forwarding to the end of the relayed response.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 12),
	}, []string{"site"})
	m.inFlight = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: ns, Name: "reservations_in_flight", Help: "Admitted requests whose reservation is not yet settled.",
	}, []string{"rule"})
	m.queueDepth = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: ns, Name: "settlement_queue_depth", Help: "Settlements not yet ended: waiting for a store slot, in a store call or waiting to retry.",
	}, queueDepth)
	m.reg.MustRegister(m.admission, m.upstream, m.inFlight, m.queueDepth,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// releaseReporter is a ledger that releases ambiguous reserves in the background (the Valkey
// backend: a reserve that timed out after it may have run is settled at zero).
type releaseReporter interface{ Releases() ledger.ReleaseStats }

// registerReleases exports those releases, so an operator can see holds that a slow store
// would otherwise have kept for a whole lease.
func (m *metrics) registerReleases(l releaseReporter) {
	results := []struct {
		result string
		value  func(ledger.ReleaseStats) int64
	}{
		{"released", func(r ledger.ReleaseStats) int64 { return r.Released }},
		{"noop", func(r ledger.ReleaseStats) int64 { return r.Noop }},
		{"failed", func(r ledger.ReleaseStats) int64 { return r.Failed }},
		{"dropped", func(r ledger.ReleaseStats) int64 { return r.Dropped }},
	}
	for _, res := range results {
		m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Namespace: ns, Name: "ambiguous_reserve_releases_total",
			Help:        "Reserves that failed after they may have reached the store, released in the background by result: released (a hold existed), noop (none did), failed and dropped (the lease expires at the estimate).",
			ConstLabels: prometheus.Labels{"result": res.result},
		}, func() float64 { return float64(res.value(l.Releases())) }))
	}
}

// bound is one series of a vector, looked up on its first use and kept, so that counting it
// again costs no label hashing and no vector lock (WithLabelValues takes both, on every call).
// On first use rather than in advance: a series still appears in /metrics only once something
// counted it, as with WithLabelValues.
type bound[T any] struct {
	once sync.Once
	v    T
}

func (b *bound[T]) get(lookup func() T) T {
	b.once.Do(func() { b.v = lookup() })
	return b.v
}

// ruleSeries are the series of one rule that every admitted request counts (a denial's are
// looked up per request: its reasons are many and its path is not the one measured).
type ruleSeries struct {
	m    *metrics
	name string

	admitted, reserved, inFlight, usageKnown, usageUnknown bound[prometheus.Counter]
	applied, charged, refunded, overage                    bound[prometheus.Counter]
	inFlightGauge                                          bound[prometheus.Gauge]
}

// rules binds the series of each rule name. Rule names are configured, so the set is fixed.
func (m *metrics) rules(names []string) map[string]*ruleSeries {
	out := make(map[string]*ruleSeries, len(names))
	for _, n := range names {
		out[n] = &ruleSeries{m: m, name: n}
	}
	return out
}

func (r *ruleSeries) requestsAdmitted() prometheus.Counter {
	return r.admitted.get(func() prometheus.Counter { return r.m.requests.WithLabelValues(r.name, resultAdmitted, "") })
}

func (r *ruleSeries) tokensReserved() prometheus.Counter {
	return r.reserved.get(func() prometheus.Counter { return r.m.tokensReserved.WithLabelValues(r.name) })
}

func (r *ruleSeries) reservationsInFlight() prometheus.Gauge {
	return r.inFlightGauge.get(func() prometheus.Gauge { return r.m.inFlight.WithLabelValues(r.name) })
}

// usage counts a settled request's usage reading: known, or unknown.
func (r *ruleSeries) usage(known bool) prometheus.Counter {
	if known {
		return r.usageKnown.get(func() prometheus.Counter { return r.m.usage.WithLabelValues(r.name, "known") })
	}
	return r.usageUnknown.get(func() prometheus.Counter { return r.m.usage.WithLabelValues(r.name, "unknown") })
}

func (r *ruleSeries) settlementsApplied() prometheus.Counter {
	return r.applied.get(func() prometheus.Counter { return r.m.settlements.WithLabelValues(r.name, "applied") })
}

func (r *ruleSeries) tokensCharged() prometheus.Counter {
	return r.charged.get(func() prometheus.Counter { return r.m.tokensCharged.WithLabelValues(r.name) })
}

func (r *ruleSeries) tokensRefunded() prometheus.Counter {
	return r.refunded.get(func() prometheus.Counter { return r.m.tokensRefunded.WithLabelValues(r.name) })
}

func (r *ruleSeries) tokensOverage() prometheus.Counter {
	return r.overage.get(func() prometheus.Counter { return r.m.tokensOverage.WithLabelValues(r.name) })
}

// siteSeries are the series of one provider site that every forwarded request counts.
type siteSeries struct {
	m    *metrics
	site string

	seconds bound[prometheus.Observer]
	classes [len(statusClasses)]bound[prometheus.Counter]
}

func (ss *siteSeries) upstreamSeconds() prometheus.Observer {
	return ss.seconds.get(func() prometheus.Observer { return ss.m.upstream.WithLabelValues(ss.site) })
}

// upstreamRequests counts a response of status code by its class (statusClass).
func (ss *siteSeries) upstreamRequests(code int) prometheus.Counter {
	i := statusClass(code)
	return ss.classes[i].get(func() prometheus.Counter {
		return ss.m.upstreamRequests.WithLabelValues(ss.site, statusClasses[i])
	})
}
