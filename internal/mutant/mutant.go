// Package mutant is the catalogue of deliberately broken gateway and ledger variants
// ("mutants") that measure what the qualification catches: `make mutants` runs the default
// qualification against each and writes which scenario failed (MUTANTS.md).
//
// Mutants exist only in a binary built with the build tag quotaqual_mutants. In every other
// build Arm does nothing and Is is a constant false that the compiler folds away with the
// broken branch, so no shipped binary can enable one. In a tagged binary the gateway process
// (and only it: `quotaqual gateway` calls Arm) reads QUOTAQUAL_MUTANT once at start. The
// harness passes its environment to the gateways it starts, so
//
//	QUOTAQUAL_MUTANT=read-then-write-reserve bin/quotaqual-mutants run --json
//
// qualifies gateways carrying that one defect. The broken code sits next to the code it breaks,
// in gateway/mutants_on.go and ledger/mutants_on.go, behind one-line hooks.
package mutant

import (
	"fmt"
	"sort"
	"strings"
)

// EnvVar names the mutant a tagged gateway process turns into.
const EnvVar = "QUOTAQUAL_MUTANT"

// Tag is the build tag that compiles the mutants in.
const Tag = "quotaqual_mutants"

// Name is a mutant's name, the value of QUOTAQUAL_MUTANT.
type Name string

// The mutants. Each breaks one promise of the quota contract (docs/contract.md) or of the gateway's behaviour (docs/gateway.md).
const (
	SeparateMemoryStores         Name = "separate-memory-stores"
	ReadThenWriteReserve         Name = "read-then-write-reserve"
	FailOpen                     Name = "fail-open"
	StoreErrorAs429              Name = "store-error-as-429"
	NoLeaseRenewal               Name = "no-lease-renewal"
	SettleDoubleCharge           Name = "settle-double-charge"
	SettleDoubleRefund           Name = "settle-double-refund"
	SettleIgnoresUsage           Name = "settle-ignores-usage"
	AdmissionIgnoresEstimate     Name = "admission-ignores-estimate"
	GatewayClock                 Name = "gateway-clock"
	SweepUnreadKey               Name = "sweep-unread-key"
	ProbesConsumeQuota           Name = "probes-consume-quota"
	CredentialsForwarded         Name = "credentials-forwarded"
	DenialWithoutHeaders         Name = "429-without-quota-headers"
	RetryAfterOneSecond          Name = "retry-after-one-second"
	RetryAfterFullWindow         Name = "retry-after-full-window"
	RemainingAlwaysLimit         Name = "remaining-always-limit"
	DenialCallsProvider          Name = "denial-calls-provider"
	TransparentRetry             Name = "transparent-retry"
	EstimateOnDisconnect         Name = "estimate-on-disconnect"
	LegacyEstimate               Name = "legacy-estimate"
	NoRequestBounds              Name = "no-request-bounds"
	NoWWWAuthenticate            Name = "401-without-www-authenticate"
	WrongAttributionSite         Name = "wrong-attribution-site"
	SettlementBacklogDrops       Name = "settlement-backlog-drops"
	FirstBudgetOnly              Name = "first-budget-only"
	ModelLeftOutOfKey            Name = "model-left-out-of-key"
	DenialTypedInsufficientQuota Name = "429-typed-insufficient-quota"
	HardClampIgnoresN            Name = "hard-clamp-ignores-n"
	HardClampMaxTokensOnly       Name = "hard-clamp-max-tokens-only"
	HardClampSentFieldsOnly      Name = "hard-clamp-sent-fields-only"
	UsageTrustsTotal             Name = "usage-trusts-total"
	UsageTrustsNegative          Name = "usage-trusts-negative"
	UsageUnbounded               Name = "usage-unbounded"
	UsageChunksSummed            Name = "usage-chunks-summed"
	UsageLastChunkWins           Name = "usage-last-chunk-wins"
	UsageUnderstatedTrusted      Name = "usage-understated-trusted"
	TrailingSlashUnmetered       Name = "trailing-slash-unmetered"
	EmbeddingsUnmetered          Name = "embeddings-unmetered"
	RenewalGivesUp               Name = "renewal-gives-up-after-a-failure"
	SettleDropsLostOverage       Name = "settle-drops-lost-hold-overage"
	RetryAfterFirstWindow        Name = "retry-after-first-refusing-window"
	LegacyClampWrongField        Name = "legacy-clamp-wrong-field"
)

// Mutant describes one broken variant.
type Mutant struct {
	Name   Name
	Layer  string // "gateway" or "ledger": where the broken code sits
	Class  string // the defect class: which promise it breaks
	Breaks string // what the variant does wrong, one sentence
	// CaughtBy names the scenarios expected to fail against it (the matrix measures it).
	CaughtBy []string
	// Note qualifies the expectation: a gap, or a catch that waits on another branch.
	Note string
}

// Catalogue lists every mutant, grouped by defect class.
var Catalogue = []Mutant{
	{SeparateMemoryStores, "ledger", "shared state",
		"each gateway keeps quota in its own memory store instead of the shared Valkey",
		[]string{"shared-budget", "gateway-restart"}, ""},
	{ReadThenWriteReserve, "ledger", "atomic admission",
		"admission reads the key's usage, decides in the gateway, then writes the reservation unconditionally 20 ms later (check-then-act across two store calls)",
		[]string{"concurrency"}, ""},
	{AdmissionIgnoresEstimate, "ledger", "hard gate",
		"admission checks settled + reserved ≤ capacity, leaving the new request's own estimate out",
		[]string{"shared-budget"}, "concurrency cannot see it: its capacity is a multiple of the estimate, where both checks agree"},
	{FailOpen, "ledger", "fail closed",
		"a store error or timeout admits the request instead of answering 503",
		[]string{"valkey-outage", "valkey-partition"}, ""},
	{StoreErrorAs429, "ledger", "fail closed",
		"a store error is answered as a quota denial (429) instead of 503 quota_store_unavailable",
		[]string{"valkey-outage", "valkey-partition"}, ""},
	{NoLeaseRenewal, "gateway", "lease",
		"in-flight reservations are never renewed: a request that outlives the lease loses its hold and its settlement",
		[]string{"concurrency"}, ""},
	{RenewalGivesUp, "gateway", "lease",
		"the renewer stops after one failed renewal (a store call past the timeout): a request in flight across a store stall loses its hold a lease later",
		[]string{"store-stall"}, ""},
	{SettleDropsLostOverage, "gateway", "truthful metering",
		"a settlement whose lease ran out (the hold charged its estimate by the expiry) is dropped as having nothing left to settle: the usage above the estimate is never charged",
		[]string{"store-stall", "gateway-pause"}, ""},
	{SettleDoubleCharge, "ledger", "idempotent settlement",
		"settlement is not idempotent: a repeated settle (a retry after a lost reply) charges the usage again",
		[]string{"shared-budget", "concurrency"}, ""},
	{SettleDoubleRefund, "ledger", "idempotent settlement",
		"settlement is not idempotent: a repeated settle refunds estimate − usage a second time",
		[]string{"shared-budget", "concurrency"}, ""},
	{SettleIgnoresUsage, "ledger", "truthful metering",
		"settlement charges the estimate whatever usage the provider reported",
		[]string{"shared-budget", "concurrency"}, ""},
	{GatewayClock, "ledger", "time source",
		"windows and leases run on each gateway's clock instead of the store's, and the clocks disagree: gateway-b's runs 3 s ahead",
		[]string{"shared-budget", "window-expiry"}, ""},
	{SweepUnreadKey, "ledger", "expiry sweep scope (the upstream D1 bug)",
		"the expiry sweep charges an expired reservation's estimate into a key admission never reads, so a dead gateway's hold vanishes uncharged",
		[]string{"gateway-crash"}, ""},
	{ProbesConsumeQuota, "gateway", "probes are free",
		"every /healthz and /readyz probe charges a token to the subject the gateway admitted last",
		[]string{"probe-no-quota"}, ""},
	{CredentialsForwarded, "gateway", "credential isolation",
		"the client's Authorization header is forwarded to the provider",
		[]string{"valid-auth"}, ""},
	{WrongAttributionSite, "gateway", "truthful attribution",
		"x-quotaqual-provider-site names the next provider in the rotation, not the one that served",
		[]string{"valid-auth"}, ""},
	{NoWWWAuthenticate, "gateway", "client contract (401)",
		"401 answers carry no WWW-Authenticate challenge",
		[]string{"auth-rejection"}, ""},
	{DenialWithoutHeaders, "gateway", "client contract (429)",
		"429 answers carry no Retry-After and no x-ratelimit-* headers",
		[]string{"shared-budget", "window-expiry"}, ""},
	{DenialTypedInsufficientQuota, "gateway", "client contract (429)",
		"429 answers say error.type insufficient_quota (OpenAI's error for a plan or balance used up, not a rate limit: a client that tells them apart does not retry it) instead of rate_limit_exceeded",
		[]string{"shared-budget", "layered-budgets", "model-budgets"}, ""},
	{RetryAfterOneSecond, "gateway", "truthful headers",
		"Retry-After (and x-ratelimit-reset-tokens) is always 1 s, whenever capacity actually frees",
		[]string{"window-expiry"}, ""},
	{RetryAfterFullWindow, "gateway", "truthful headers",
		"Retry-After is always the whole window (the upstream D2 hint), not when capacity actually frees",
		[]string{"window-expiry"}, ""},
	{FirstBudgetOnly, "ledger", "every window (layered budgets)",
		"admission weighs the estimate against the rule's first budget only: a rule with a short and a long window (per minute and per day) is held to the short one",
		[]string{"layered-budgets"}, ""},
	{RetryAfterFirstWindow, "ledger", "truthful headers",
		"a 429 that several windows of a rule refuse reports the first refusing window's wait (in the rule's order, usually the shortest), not the latest: a client that waits it out is refused again by the longer window (blind review 07)",
		[]string{"layered-budgets"}, ""},
	{ModelLeftOutOfKey, "gateway", "a key per model",
		"admission keys the quota by subject alone under a rule keyed by subject and model: spending one model's budget spends every model's",
		[]string{"model-budgets"}, ""},
	{RemainingAlwaysLimit, "gateway", "truthful headers",
		"x-ratelimit-remaining-tokens always reports the full limit",
		[]string{"shared-budget"}, ""},
	{DenialCallsProvider, "gateway", "hard gate (denials)",
		"a quota denial still sends a request to a provider before answering 429",
		[]string{"shared-budget", "concurrency"}, ""},
	{TransparentRetry, "gateway", "exactly one attempt",
		"a provider call that fails (transport error or an error status) is retried on the next provider",
		[]string{"shared-budget"}, ""},
	{EstimateOnDisconnect, "gateway", "truthful metering",
		"usage the provider did not report — a stream the client cut short, a body too large to buffer, a provider error — is charged the estimate instead of at least what was generated",
		[]string{"usage-accounting"}, ""},
	{LegacyEstimate, "gateway", "truthful metering",
		"the estimate reads max_tokens before max_completion_tokens (the bound providers honour) and ignores n",
		[]string{"usage-accounting", "output-bound"}, ""},
	{HardClampIgnoresN, "gateway", "hard gate (output bound)",
		"the hard clamp divides the reservation's room among one choice, not n: a request for n > 1 choices is forwarded a bound per choice n times too large",
		[]string{"output-bound"}, ""},
	{HardClampMaxTokensOnly, "gateway", "hard gate (output bound)",
		"the hard clamp rewrites max_tokens only (the legacy field): max_completion_tokens, which providers honour first, is forwarded as the client sent it, and a request without max_tokens unbounded",
		[]string{"output-bound"}, ""},
	{HardClampSentFieldsOnly, "gateway", "hard gate (output bound)",
		"the hard clamp rewrites only the output-bound fields the client sent: a request with neither is forwarded without a bound",
		[]string{"output-bound"}, ""},
	{LegacyClampWrongField, "gateway", "hard gate (output bound)",
		"on /v1/completions the hard clamp writes max_completion_tokens, which the legacy API does not know, and max_tokens only when the client sent it: a legacy request without max_tokens reaches the provider unbounded (blind review 12)",
		[]string{"output-bound"}, ""},
	{UsageTrustsTotal, "gateway", "truthful metering (provider usage)",
		"a reported total_tokens is charged as it is, also when it is below prompt_tokens + completion_tokens",
		[]string{"provider-usage"}, ""},
	{UsageTrustsNegative, "gateway", "truthful metering (provider usage)",
		"negative usage figures are added up as they are: a negative prompt_tokens lowers the charge (below zero, the ledger charges nothing)",
		[]string{"provider-usage"}, "a negative completion_tokens is caught anyway: it reports fewer completion tokens than the words relayed"},
	{UsageUnbounded, "gateway", "truthful metering (provider usage)",
		"usage figures are not bounded: one beyond any budget (2^62) is charged, saturating the ledger at 2^53 and spending the subject's budget, and prompt + completion may overflow int64",
		[]string{"provider-usage"}, ""},
	{UsageChunksSummed, "gateway", "truthful metering (provider usage)",
		"every SSE usage chunk is added to the charge as if each were an increment, not a running total: the same usage chunk twice is charged twice",
		[]string{"provider-usage"}, ""},
	{UsageLastChunkWins, "gateway", "truthful metering (provider usage)",
		"the last SSE usage chunk replaces the earlier ones: a usage contradicted by a smaller one after it is charged the smaller",
		[]string{"provider-usage"}, ""},
	{UsageUnderstatedTrusted, "gateway", "truthful metering (provider usage)",
		"a usage reporting fewer completion tokens than the words its response carried is charged as reported (1 token for 40 generated), in the body and in the stream",
		[]string{"provider-usage"}, ""},
	{SettlementBacklogDrops, "gateway", "truthful metering",
		"settlement has room for one job at a time and no queue: a settlement handed over while another is in progress is dropped, so its reservation is charged its estimate when the lease runs out instead of its usage (the bounded settle pool of 2026-11, which dropped thousands of settlements a second at 32 clients, scaled down to what a 2-core qualification can load)",
		[]string{"usage-accounting"}, "by its responses-ending-together case: eight responses per gateway that the providers release at one instant, so their settlements are handed over at once (concurrency's few admitted requests end milliseconds apart, about as long as a settlement takes); the gateway test TestSustainedConcurrencySettlesEveryRequestAtItsUsage catches the unscaled defect"},
	{NoRequestBounds, "gateway", "bounded resources",
		"no read deadline on the request body, and a denial lets net/http drain an announced body first: a client that announces a body and never sends it holds a connection and goroutine forever",
		[]string{"auth-rejection"}, ""},
	{TrailingSlashUnmetered, "gateway", "no path around the quota",
		"a chat request to /v1/chat/completions/ (a trailing slash, as a router that strips it would serve) is forwarded to a provider and relayed without a reservation or a charge",
		[]string{"quota-bypass"}, ""},
	{EmbeddingsUnmetered, "gateway", "no path around the quota",
		"POST /v1/embeddings is forwarded to a provider and relayed without a reservation or a charge, as a gateway that meters chat alone would: a subject spent on chat still gets embeddings",
		[]string{"api-surface"}, ""},
}

// Lookup returns the catalogue entry of a name.
func Lookup(name string) (Mutant, bool) {
	for _, m := range Catalogue {
		if string(m.Name) == name {
			return m, true
		}
	}
	return Mutant{}, false
}

// Names lists every mutant name, sorted.
func Names() []string {
	out := make([]string, len(Catalogue))
	for i, m := range Catalogue {
		out[i] = string(m.Name)
	}
	sort.Strings(out)
	return out
}

// parse validates a QUOTAQUAL_MUTANT value: empty (no mutant) or one catalogue name.
func parse(v string) (Name, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", nil
	}
	if _, ok := Lookup(v); !ok {
		return "", fmt.Errorf("%s=%q is not a mutant: choose one of %s", EnvVar, v, strings.Join(Names(), ", "))
	}
	return Name(v), nil
}
