package ledger

import (
	"math"
	"strings"
	"testing"
)

func i64(v int64) *int64 { return &v }

// estimateRule compiles a single rule with the given estimation block and a capacity large
// enough for any estimate.
func estimateRule(t *testing.T, estimation string) *CompiledRule {
	t.Helper()
	p := mustLoad(t, oneRule("budgets: [{window: 60s, capacity: 9007199254740992}]\nestimation: "+estimation))
	return p.Rules[0]
}

func TestEstimateStrategies(t *testing.T) {
	fixed := estimateRule(t, "{strategy: fixed, fallback_estimate: 40, multiplier: 1.25}")
	maxTok := estimateRule(t, "{strategy: max_tokens, fallback_estimate: 500, multiplier: 1.2}")
	input := estimateRule(t, "{strategy: input_plus_max_tokens, fallback_estimate: 100, bytes_per_token: 4}")
	input35 := estimateRule(t, "{strategy: input_plus_max_tokens, fallback_estimate: 100, bytes_per_token: 3.5, multiplier: 2}")
	scaled := estimateRule(t, `{strategy: model_scaled, fallback_estimate: 100, multiplier: 2, default_multiplier: 1.5, model_multipliers: {big: 3, small: 0.25}}`)
	scaledDefault := estimateRule(t, `{strategy: model_scaled, fallback_estimate: 100}`)

	cases := []struct {
		name string
		rule *CompiledRule
		f    RequestFacts
		want int64
	}{
		{"fixed is ceil(fallback × multiplier) whatever the request", fixed, RequestFacts{MaxTokens: i64(9999), BodyBytes: 1 << 20}, 50},
		{"max_tokens scales max_tokens", maxTok, RequestFacts{MaxTokens: i64(100)}, 120},
		{"max_tokens rounds up", maxTok, RequestFacts{MaxTokens: i64(3)}, 4}, // 3.6
		{"max_completion_tokens is the bound providers honour, before max_tokens", maxTok, RequestFacts{MaxTokens: i64(1), MaxCompletionTokens: i64(8000)}, 9600},
		{"max_tokens alone is the bound", maxTok, RequestFacts{MaxTokens: i64(10)}, 12},
		{"max_completion_tokens alone is the bound", maxTok, RequestFacts{MaxCompletionTokens: i64(1000)}, 1200},
		{"a non-positive max_completion_tokens counts as absent", maxTok, RequestFacts{MaxTokens: i64(10), MaxCompletionTokens: i64(0)}, 12},
		{"n choices reserve n times the bound", maxTok, RequestFacts{MaxCompletionTokens: i64(10), Choices: i64(64)}, 768},
		{"n choices reserve n times the fallback", maxTok, RequestFacts{Choices: i64(2)}, 1200},
		{"fixed is per choice", fixed, RequestFacts{Choices: i64(3)}, 150},
		{"input_plus_max_tokens counts the input once and the output n times", input, RequestFacts{MaxTokens: i64(10), Choices: i64(3), BodyBytes: 401}, 131},
		{"model_scaled scales n choices", scaled, RequestFacts{Model: "big", MaxTokens: i64(10), Choices: i64(2)}, 120},
		{"an out-of-range n is read as the largest", maxTok, RequestFacts{MaxTokens: i64(1), Choices: i64(0)}, 154}, // 1 × 128 × 1.2
		{"max_tokens falls back to fallback_estimate", maxTok, RequestFacts{}, 600},
		{"a zero max_tokens counts as absent", maxTok, RequestFacts{MaxTokens: i64(0)}, 600},
		{"a negative max_tokens counts as absent", maxTok, RequestFacts{MaxTokens: i64(-5), MaxCompletionTokens: i64(10)}, 12},
		{"a negative max_completion_tokens counts as absent", maxTok, RequestFacts{MaxTokens: i64(10), MaxCompletionTokens: i64(-5)}, 12},
		{"input_plus_max_tokens adds ceil(body / bytes_per_token)", input, RequestFacts{MaxTokens: i64(10), BodyBytes: 401}, 111},
		{"input_plus_max_tokens with no body is the output alone", input, RequestFacts{MaxTokens: i64(10)}, 10},
		{"input_plus_max_tokens falls back for the output", input, RequestFacts{BodyBytes: 4}, 101},
		{"input_plus_max_tokens applies the multiplier to the sum", input35, RequestFacts{MaxTokens: i64(10), BodyBytes: 7}, 24}, // (2+10)×2
		{"model_scaled uses the model's multiplier", scaled, RequestFacts{Model: "big", MaxTokens: i64(10)}, 60},
		{"model_scaled rounds up a small multiplier", scaled, RequestFacts{Model: "small", MaxTokens: i64(1)}, 1},
		{"model_scaled uses default_multiplier for other models", scaled, RequestFacts{Model: "other", MaxTokens: i64(10)}, 30},
		{"model_scaled falls back to fallback_estimate", scaled, RequestFacts{Model: "big"}, 600},
		{"model_scaled defaults both multipliers to 1", scaledDefault, RequestFacts{Model: "x", MaxTokens: i64(7)}, 7},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.rule.Estimate(tc.f); got != tc.want {
				t.Fatalf("Estimate = %d, want %d", got, tc.want)
			}
		})
	}
}

func TestEstimateSaturatesAt2To53(t *testing.T) {
	huge := i64(math.MaxInt64)
	cases := []struct {
		name, estimation string
		f                RequestFacts
	}{
		{"max_tokens near int64 max", "{strategy: max_tokens, fallback_estimate: 1, multiplier: 1000}", RequestFacts{MaxTokens: huge}},
		{"input plus output beyond int64", "{strategy: input_plus_max_tokens, fallback_estimate: 1, bytes_per_token: 0.000001}", RequestFacts{MaxTokens: huge, BodyBytes: math.MaxInt64}},
		{"model multiplier overflowing float64", "{strategy: model_scaled, fallback_estimate: 1, multiplier: 1e300, model_multipliers: {m: 1e300}}", RequestFacts{Model: "m", MaxTokens: i64(2)}},
		{"just above 2^53", "{strategy: max_tokens, fallback_estimate: 1}", RequestFacts{MaxTokens: i64(1<<53 + 1)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := estimateRule(t, tc.estimation).Estimate(tc.f); got != MaxEstimate {
				t.Fatalf("Estimate = %d, want %d", got, MaxEstimate)
			}
		})
	}
	t.Run("exactly 2^53 is kept", func(t *testing.T) {
		r := estimateRule(t, "{strategy: max_tokens, fallback_estimate: 1}")
		if got := r.Estimate(RequestFacts{MaxTokens: i64(1 << 53)}); got != MaxEstimate {
			t.Fatalf("Estimate = %d", got)
		}
	})
}

func TestScaleIgnoresFloatNoise(t *testing.T) {
	for _, tc := range []struct {
		raw, mult float64
		want      int64
	}{
		{10, 1.1, 11},   // 11.000000000000002 in float64
		{100, 1.1, 110}, // 110.00000000000001
		{3, 1.1, 4},     // 3.3 rounds up
		{1, 1e-300, 1},  // never below one token
		{0, 1, 1},
		{math.NaN(), 1, MaxEstimate},
	} {
		if got := scale(tc.raw, tc.mult); got != tc.want {
			t.Errorf("scale(%v, %v) = %d, want %d", tc.raw, tc.mult, got, tc.want)
		}
	}
}

func TestNeedsBodyOnlyForBodyStrategies(t *testing.T) {
	for _, tc := range []struct {
		estimation string
		want       bool
	}{
		{"{strategy: fixed, fallback_estimate: 1}", false},
		{"{strategy: max_tokens, fallback_estimate: 1}", true},
		{"{strategy: input_plus_max_tokens, fallback_estimate: 1}", true},
		{"{strategy: model_scaled, fallback_estimate: 1}", true},
	} {
		t.Run(tc.estimation, func(t *testing.T) {
			if got := estimateRule(t, tc.estimation).NeedsBody(); got != tc.want {
				t.Fatalf("NeedsBody = %v", got)
			}
		})
	}
}

func TestEstimateOfAnUncompiledStrategyIsConservative(t *testing.T) {
	r := &CompiledRule{Strategy: "bogus"}
	if got := r.Estimate(RequestFacts{}); got != MaxEstimate {
		t.Fatalf("Estimate = %d, want %d", got, MaxEstimate)
	}
}

func TestOutputLimitUnderHardEnforcement(t *testing.T) {
	hard := mustLoad(t, oneRule("budgets: [{window: 60s, capacity: 1000}]\nreserved_tokens: 60\nenforcement: hard")).Rules[0]
	meter := mustLoad(t, oneRule("budgets: [{window: 60s, capacity: 1000}]\nreserved_tokens: 60")).Rules[0]
	if meter.Enforcement != EnforcementMeter || hard.Enforcement != EnforcementHard {
		t.Fatalf("enforcement: meter rule %q, hard rule %q", meter.Enforcement, hard.Enforcement)
	}
	cases := []struct {
		name   string
		rule   *CompiledRule
		f      RequestFacts
		want   int64
		wantOK bool
	}{
		{"hard: no bound asked, the reservation after the input is the bound", hard, RequestFacts{BodyBytes: 80}, 40, true},
		{"hard: a larger bound is clamped", hard, RequestFacts{MaxTokens: i64(5000), BodyBytes: 80}, 40, true},
		{"hard: max_completion_tokens is clamped too", hard, RequestFacts{MaxTokens: i64(1), MaxCompletionTokens: i64(5000), BodyBytes: 80}, 40, true},
		{"hard: a smaller bound is kept", hard, RequestFacts{MaxTokens: i64(7), BodyBytes: 80}, 7, true},
		{"hard: n choices share what is left", hard, RequestFacts{Choices: i64(3), BodyBytes: 80}, 13, true},
		{"hard: a prompt that fills the reservation cannot be served", hard, RequestFacts{BodyBytes: 240}, 0, false},
		{"meter: the request's own bound, unclamped", meter, RequestFacts{MaxCompletionTokens: i64(5000), BodyBytes: 80}, 5000, true},
		{"meter: no bound stays no bound", meter, RequestFacts{BodyBytes: 80}, 0, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.rule.OutputLimit(tc.f, 60)
			if got != tc.want || ok != tc.wantOK {
				t.Fatalf("OutputLimit = %d, %v; want %d, %v", got, ok, tc.want, tc.wantOK)
			}
		})
	}
}

func TestEnforcementMustBeMeterOrHard(t *testing.T) {
	_, err := LoadPolicy([]byte(oneRule("budgets: [{window: 60s, capacity: 100}]\nreserved_tokens: 10\nenforcement: strict")), nil)
	if err == nil || !strings.Contains(err.Error(), "rules[0].enforcement") || !strings.Contains(err.Error(), "hard") {
		t.Fatalf("error %v does not name quota.rules[0].enforcement and the choices", err)
	}
}
