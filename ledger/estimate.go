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
//   - max_tokens: raw = output × choices, where output is max_completion_tokens, else
//     max_tokens, else fallback_estimate (the bound the provider honours: OpenAI, vLLM and the
//     stub read max_completion_tokens first), and choices is n (1 when absent);
//     ceil(raw × multiplier).
//   - input_plus_max_tokens: input = ceil(body bytes / bytes_per_token), output × choices as
//     max_tokens; ceil((input + output × choices) × multiplier). The body length is the real
//     length read, not a client-supplied Content-Length.
//   - model_scaled: raw as max_tokens; ceil(raw × (model_multipliers[model] or
//     default_multiplier) × multiplier).
//   - fixed: the fixed estimate is per choice too: n choices reserve n times it.
//
// Deliberate departure from upstream: fallback_estimate is required by every strategy, so a
// request that states no max_tokens is still charged a reservation. Upstream let such requests
// through with nothing reserved, which made the quota optional for any client that simply
// left max_tokens out.
func (r *CompiledRule) Estimate(f RequestFacts) int64 {
	switch r.Strategy {
	case StrategyFixed:
		return scale(float64(r.fixedEstimate)*choices(f), 1)
	case StrategyMaxTokens:
		return scale(r.outputTotal(f), r.Multiplier)
	case StrategyInputPlusMaxTokens:
		return scale(float64(r.InputEstimate(f.BodyBytes))+r.outputTotal(f), r.Multiplier)
	case StrategyModelScaled:
		m, ok := r.ModelMultipliers[f.Model]
		if !ok {
			m = r.DefaultMultiplier
		}
		return scale(r.outputTotal(f), m*r.Multiplier)
	default:
		// Compile admits only the four strategies; a hand-built rule gets the most
		// conservative answer rather than a free pass.
		return MaxEstimate
	}
}

// NeedsBody reports whether Estimate reads facts from the request body. Only fixed does not,
// which lets a gateway skip buffering bodies when every rule is fixed.
func (r *CompiledRule) NeedsBody() bool { return r.Strategy != StrategyFixed }

// InputEstimate is the input tokens a body of n bytes is taken to hold: ceil(n /
// bytes_per_token), with the rule's bytes_per_token or DefaultBytesPerToken. Estimation
// (input_plus_max_tokens), the hard gate's output clamp and the charge of a response whose
// usage is unknown all use it.
func (r *CompiledRule) InputEstimate(bodyBytes int64) int64 {
	if bodyBytes <= 0 {
		return 0
	}
	bpt := r.BytesPerToken
	if bpt <= 0 {
		bpt = DefaultBytesPerToken
	}
	v := math.Ceil(float64(bodyBytes) / bpt)
	if v >= float64(MaxEstimate) {
		return MaxEstimate
	}
	return int64(v)
}

// output is the requested output bound per choice: max_completion_tokens, else max_tokens,
// else the fallback — in the order the provider honours them, so {"max_tokens": 1,
// "max_completion_tokens": 8000} is estimated at 8000, as it will be served. A non-positive
// value is not a bound (the provider will refuse it anyway) and must not make the request
// cheap, so it counts as absent.
func (r *CompiledRule) output(f RequestFacts) int64 {
	switch {
	case f.MaxCompletionTokens != nil && *f.MaxCompletionTokens > 0:
		return *f.MaxCompletionTokens
	case f.MaxTokens != nil && *f.MaxTokens > 0:
		return *f.MaxTokens
	default:
		return r.FallbackEstimate
	}
}

// outputTotal is the output bound over every choice: output × n.
func (r *CompiledRule) outputTotal(f RequestFacts) float64 {
	return float64(r.output(f)) * choices(f)
}

// MaxChoices is the largest n (choices per request) a request may ask for: OpenAI's own
// bound. Gateways refuse larger or non-positive values before estimating.
const MaxChoices = 128

// choices is n, 1 when absent or out of range (gateways refuse those before estimating; a
// hand-built fact is read conservatively as the largest n).
func choices(f RequestFacts) float64 {
	switch {
	case f.Choices == nil:
		return 1
	case *f.Choices < 1 || *f.Choices > MaxChoices:
		return MaxChoices
	default:
		return float64(*f.Choices)
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

// OutputLimit is, under enforcement hard, the output bound per choice the gateway forwards for
// a request reserved at estimate: what the reservation leaves after the input estimate,
// divided among the n choices, and never more than the request's own bound. ok is false when
// nothing is left (the prompt alone may use the whole reservation): such a request cannot be
// served inside its reservation and is refused. Under meter it reports the request's own
// bound unchanged (0 when it has none).
func (r *CompiledRule) OutputLimit(f RequestFacts, estimate int64) (limit int64, ok bool) {
	var own int64
	switch {
	case f.MaxCompletionTokens != nil && *f.MaxCompletionTokens > 0:
		own = *f.MaxCompletionTokens
	case f.MaxTokens != nil && *f.MaxTokens > 0:
		own = *f.MaxTokens
	}
	if r.Enforcement != EnforcementHard {
		return own, true
	}
	left := estimate - r.InputEstimate(f.BodyBytes)
	per := int64(math.Floor(float64(left) / choices(f)))
	if per < 1 {
		return 0, false
	}
	if own > 0 && own < per {
		per = own
	}
	return per, true
}
