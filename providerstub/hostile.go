package providerstub

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// UsageMetadata asks the stub to report a hostile usage instead of the truth (body metadata
// {"quotaqual_usage": MODE}, forwarded by gateways with the body): missing, partial, negative,
// inconsistent with its parts, absurdly large, or — streamed — duplicated or contradicting. What
// the stub generates, and what its call log records (prompt_tokens, completion_tokens,
// generated_tokens), stay the truth: the log is what a gateway's charge is judged against, and
// usage_mode names what was reported instead.
const UsageMetadata = "quotaqual_usage"

// The hostile usage modes. p and c are the true prompt and completion tokens.
const (
	UsageMissing            = "missing"             // no usage: no "usage" member, no usage chunk
	UsagePromptOnly         = "prompt-only"         // {prompt_tokens: p}
	UsageCompletionOnly     = "completion-only"     // {completion_tokens: c}
	UsageNegativePrompt     = "negative-prompt"     // {-1000, c, c-1000}: a negative prompt_tokens
	UsageNegativeCompletion = "negative-completion" // {p, -c, p-c}: completion_tokens negated
	UsageTotalBelow         = "total-below"         // {p, c, 1}: total_tokens below prompt + completion
	UsageTotalAbove         = "total-above"         // {p, c, p+c+1000}: total_tokens above prompt + completion
	UsageHuge               = "huge"                // {p, 2^62, p+2^62}: beyond any budget (2^53), no overflow
	UsageOverflow           = "overflow"            // {2^62, 2^62, 2^63-1}: prompt + completion overflows int64
	UsageUnderstated        = "understated"         // {p, 1, p+1}: one completion token, whatever was generated
	// Streamed only (each usage object is one usage chunk):
	UsageDuplicated    = "duplicated"    // the true usage chunk, twice
	UsageContradicting = "contradicting" // the true usage chunk, then an understated one
)

// UsageModes lists every hostile usage mode.
var UsageModes = []string{UsageMissing, UsagePromptOnly, UsageCompletionOnly, UsageNegativePrompt, UsageNegativeCompletion, UsageTotalBelow,
	UsageTotalAbove, UsageHuge, UsageOverflow, UsageUnderstated, UsageDuplicated, UsageContradicting}

// streamedOnly are the modes that need a stream: a JSON body has one usage member.
var streamedOnly = []string{UsageDuplicated, UsageContradicting}

// requestUsageMode reads the optional hostile usage mode ("" reports the truth).
func requestUsageMode(md map[string]string, stream bool) (string, error) {
	v, ok := md[UsageMetadata]
	if !ok {
		return "", nil
	}
	if !slices.Contains(UsageModes, v) {
		return "", fmt.Errorf("metadata.%s %q is not a usage mode: use one of %s", UsageMetadata, sanitize(v), strings.Join(UsageModes, ", "))
	}
	if !stream && slices.Contains(streamedOnly, v) {
		return "", fmt.Errorf("metadata.%s %q reports two usage chunks and needs \"stream\": true (a JSON body has one usage member)", UsageMetadata, v)
	}
	return v, nil
}

// reportedUsage is what the stub reports for the true usage u under mode: no usage object
// (missing), one, or two (duplicated, contradicting: two usage chunks, in order).
func reportedUsage(mode string, u Usage) []map[string]int64 {
	obj := func(p, c, t int64) map[string]int64 {
		return map[string]int64{"prompt_tokens": p, "completion_tokens": c, "total_tokens": t}
	}
	truth := obj(u.PromptTokens, u.CompletionTokens, u.TotalTokens)
	understated := obj(u.PromptTokens, 1, u.PromptTokens+1)
	const big = int64(1) << 62
	switch mode {
	case UsageMissing:
		return nil
	case UsagePromptOnly:
		return []map[string]int64{{"prompt_tokens": u.PromptTokens}}
	case UsageCompletionOnly:
		return []map[string]int64{{"completion_tokens": u.CompletionTokens}}
	case UsageNegativePrompt:
		return []map[string]int64{obj(-1000, u.CompletionTokens, u.CompletionTokens-1000)}
	case UsageNegativeCompletion:
		return []map[string]int64{obj(u.PromptTokens, -u.CompletionTokens, u.PromptTokens-u.CompletionTokens)}
	case UsageTotalBelow:
		return []map[string]int64{obj(u.PromptTokens, u.CompletionTokens, 1)}
	case UsageTotalAbove:
		return []map[string]int64{obj(u.PromptTokens, u.CompletionTokens, u.TotalTokens+1000)}
	case UsageHuge:
		return []map[string]int64{obj(u.PromptTokens, big, u.PromptTokens+big)}
	case UsageOverflow:
		return []map[string]int64{obj(big, big, math.MaxInt64)}
	case UsageUnderstated:
		return []map[string]int64{understated}
	case UsageDuplicated:
		return []map[string]int64{truth, truth}
	case UsageContradicting:
		return []map[string]int64{truth, understated}
	}
	return []map[string]int64{truth}
}
