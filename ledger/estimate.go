package ledger

import "math"

// MaxEstimate is the largest estimate ever returned: 2^53, the largest capacity a budget may
// have and the largest integer a float64 (and a Lua number in Valkey) holds exactly.
// Estimation saturates here instead of overflowing.
const MaxEstimate int64 = 1 << 53

// Default estimation parameters (upstream's defaults).
const (
	DefaultMultiplier    = 1.0
	DefaultBytesPerToken = 4.0
)

// Estimate is the number of tokens to reserve for a request under this rule, before it is
// forwarded. It is always in 1..MaxEstimate.
//
//   - fixed: ceil(fallback_estimate × multiplier), computed once by Compile.
//   - max_tokens: raw = max_tokens, else max_completion_tokens, else fallback_estimate;
//     ceil(raw × multiplier).
//   - input_plus_max_tokens: input = ceil(body bytes / bytes_per_token), output as max_tokens;
//     ceil((input + output) × multiplier). The body length is the real length read, not a
//     client-supplied Content-Length.
//   - model_scaled: raw as max_tokens; ceil(raw × (model_multipliers[model] or
//     default_multiplier) × multiplier).
//
// Deliberate departure from upstream: fallback_estimate is required by every strategy, so a
// request that states no max_tokens is still charged a reservation. Upstream let such requests
// through with nothing reserved, which made the quota optional for any client that simply
// left max_tokens out.
func (r *CompiledRule) Estimate(f RequestFacts) int64 {
	switch r.Strategy {
	case StrategyFixed:
		return r.fixedEstimate
	case StrategyMaxTokens:
		return scale(float64(r.output(f)), r.Multiplier)
	case StrategyInputPlusMaxTokens:
		input := 0.0
		if f.BodyBytes > 0 {
			input = math.Ceil(float64(f.BodyBytes) / r.BytesPerToken)
		}
		return scale(input+float64(r.output(f)), r.Multiplier)
	case StrategyModelScaled:
		m, ok := r.ModelMultipliers[f.Model]
		if !ok {
			m = r.DefaultMultiplier
		}
		return scale(float64(r.output(f)), m*r.Multiplier)
	default:
		// Compile admits only the four strategies; a hand-built rule gets the most
		// conservative answer rather than a free pass.
		return MaxEstimate
	}
}

// NeedsBody reports whether Estimate reads facts from the request body. Only fixed does not,
// which lets a gateway skip buffering bodies when every rule is fixed.
func (r *CompiledRule) NeedsBody() bool { return r.Strategy != StrategyFixed }

// output is the requested output bound: max_tokens, else max_completion_tokens, else the
// fallback. A non-positive value is not a bound (the provider will refuse it anyway) and must
// not make the request cheap, so it counts as absent.
func (r *CompiledRule) output(f RequestFacts) int64 {
	switch {
	case f.MaxTokens != nil && *f.MaxTokens > 0:
		return *f.MaxTokens
	case f.MaxCompletionTokens != nil && *f.MaxCompletionTokens > 0:
		return *f.MaxCompletionTokens
	default:
		return r.FallbackEstimate
	}
}

// scale returns ceil(raw × mult) clamped to 1..MaxEstimate. A product within a billionth of a
// whole number is taken as that number, so that 10 × 1.1 is 11 and not 12 through float
// rounding.
func scale(raw, mult float64) int64 {
	x := raw * mult
	if math.IsNaN(x) || x >= float64(MaxEstimate) {
		return MaxEstimate
	}
	if r := math.Round(x); math.Abs(x-r) <= 1e-9*math.Max(1, r) {
		x = r
	}
	v := int64(math.Ceil(x))
	if v < 1 {
		return 1
	}
	return v
}
