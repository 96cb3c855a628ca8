package scenarios

import (
	"testing"

	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/undertest"
)

// TestSumSeriesAddsTheSelectedSeries: a counter is the sum of the series whose labels include
// the selector's, across backends and other labels; an absent family is 0 (nothing counted yet).
func TestSumSeriesAddsTheSelectedSeries(t *testing.T) {
	body := []byte(`# HELP quotaqual_gateway_backend_errors_total Quota store errors by operation.
# TYPE quotaqual_gateway_backend_errors_total counter
quotaqual_gateway_backend_errors_total{backend="valkey",reason="reserve"} 3
quotaqual_gateway_backend_errors_total{backend="valkey",reason="settle"} 5
quotaqual_gateway_backend_errors_total{backend="memory",reason="reserve"} 1
# TYPE quotaqual_gateway_usage_total counter
quotaqual_gateway_usage_total{result="known",rule="provider-usage"} 30
quotaqual_gateway_usage_total{result="unknown",rule="provider-usage"} 9
quotaqual_gateway_usage_total{result="unknown",rule="per-application-budget"} 2
`)
	m := undertest.Default().Caps.Metrics
	for _, c := range []struct {
		declared string
		want     float64
	}{
		{m.StoreErrors, 4},
		{m.UsageUnreported, 9},
		{m.UsageReported, 30},
		{"quotaqual_gateway_backend_errors_total", 9},
		{"quotaqual_gateway_renewals_total", 0},
	} {
		sel, _, err := m.Counter(c.declared, providerUsageRule)
		if err != nil {
			t.Fatal(err)
		}
		got, err := sumSeries(body, sel)
		if err != nil || got != c.want {
			t.Errorf("%s: %v (%v), want %v", sel, got, err, c.want)
		}
	}
	if _, err := sumSeries([]byte("not an exposition {"), undertest.Selector{Name: "x"}); err == nil {
		t.Error("a garbled exposition was read")
	}
}

// TestUsageReadingsFollowWhatWasGenerated: a true usage must be counted reported; a usage that
// states nothing at least what was generated must be counted unreported (a gateway charging it
// as reported fails the charge checks); the rest is the gateway's reading.
func TestUsageReadingsFollowWhatWasGenerated(t *testing.T) {
	rec := func(mode string, prompt int64) providerstub.CallRecord {
		return providerstub.CallRecord{UsageMode: mode, PromptTokens: prompt, GeneratedTokens: hostileGenerated}
	}
	for _, c := range []struct {
		rec  providerstub.CallRecord
		want usageReading
	}{
		{rec("", 9), readReported},
		{rec(providerstub.UsageMissing, 9), readUnreported},
		{rec(providerstub.UsageNegativeCompletion, 9), readUnreported},
		{rec(providerstub.UsagePromptOnly, 9), readUnreported},
		{rec(providerstub.UsagePromptOnly, 60), readEither},
		{rec(providerstub.UsageUnderstated, 9), readUnreported},
		{rec(providerstub.UsageUnderstated, hostileGenerated-1), readEither},
		{rec(providerstub.UsageTotalBelow, 9), readEither},
		{rec(providerstub.UsageDuplicated, 9), readEither},
		{rec(providerstub.UsageHuge, 9), readEither},
	} {
		if got := readingOf(c.rec); got != c.want {
			t.Errorf("%q (prompt %d): %v, want %v", c.rec.UsageMode, c.rec.PromptTokens, got, c.want)
		}
	}
}
