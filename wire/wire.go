// Package wire is the vocabulary the quotaqual processes share on the wire and on the command
// line: the headers a gateway and the provider stub send, the OpenAI-shaped error types and
// codes, the JSON of a gateway's /admin/quota, the exit codes of every command and the schema
// version of the evidence bundle. The gateway and the provider stub write it; the scenarios,
// the harness and the commands read it. It imports nothing of the module, so every side can
// depend on it without depending on each other.
package wire

// Headers.
const (
	// SiteHeader carries the provider's site on every response the provider stub sends, and
	// on the responses a gateway admits: the site of the provider the gateway routed the request
	// to, set from the gateway's own routing decision.
	SiteHeader = "x-quotaqual-provider-site"
	// RequestIDHeader carries the request id to the provider and back to the client.
	RequestIDHeader = "x-request-id"

	// The quota headers of a gateway's answer: Retry-After on a denial (whole seconds), and
	// the token quota of the rule that decided.
	RetryAfterHeader      = "Retry-After"
	LimitTokensHeader     = "x-ratelimit-limit-tokens"
	RemainingTokensHeader = "x-ratelimit-remaining-tokens"
	ResetTokensHeader     = "x-ratelimit-reset-tokens"
)

// Error types and codes of the gateway's own responses (and the provider stub's, where they
// mean the same), in OpenAI's error shape {"error":{"message","type","param","code"}}.
const (
	TypeAuthentication = "authentication_error"
	TypeRateLimit      = "rate_limit_exceeded"
	TypeStore          = "quota_store_unavailable"
	TypeInvalidRequest = "invalid_request_error"
	TypePermission     = "permission_error"
	TypeUpstream       = "upstream_error"
	TypeServer         = "server_error"

	CodeInvalidCredentials = "invalid_credentials"
	CodeTokenQuota         = "token_quota_exceeded"
	CodeStore              = "quota_store_unavailable"
	CodeNoRule             = "no_quota_rule"
	CodeModelNotAllowed    = "model_not_found"
	CodeModelMissing       = "model_required"
	CodeBodyTooLarge       = "request_too_large"
	CodeInvalidJSON        = "invalid_json"
	CodeEstimateTooLarge   = "estimate_exceeds_capacity"
	CodeInvalidValue       = "invalid_value"
	CodePromptFillsQuota   = "prompt_exceeds_reservation"
	CodeSubjectInFlight    = "subject_in_flight_limit"
	CodeUpstream           = "provider_unavailable"
	CodeUpstreamTimeout    = "provider_timeout"
	CodeNotFound           = "not_found"
	CodeMethod             = "method_not_allowed"
	CodeDraining           = "shutting_down"
)

// QuotaState is the JSON of a gateway's GET /admin/quota: one quota key's state, read from
// the store, so both gateways report the same.
//
// ActiveReservations is an int64 like every other count here: the gateway used int and the
// scenarios int64 for the same field; the JSON is the same number either way, and int64 is
// what the scenarios compare it with.
type QuotaState struct {
	Rule               string        `json:"rule"`
	Key                string        `json:"key"` // the hashed quota key, never the subject
	Backend            string        `json:"backend"`
	ActiveReservations int64         `json:"active_reservations"`
	ReservedTokens     int64         `json:"reserved_tokens"`
	Windows            []WindowState `json:"windows"`
}

// WindowState is one window of QuotaState.
type WindowState struct {
	Window   string `json:"window"` // e.g. "10s"
	WindowMS int64  `json:"window_ms"`
	Capacity int64  `json:"capacity"`
	Settled  int64  `json:"settled"`
}

// Settled is the settled usage in the rule's first window (the qualification's rules have one).
func (q QuotaState) Settled() int64 {
	if len(q.Windows) == 0 {
		return 0
	}
	return q.Windows[0].Settled
}

// Exit codes shared by every command.
const (
	ExitOK       = 0 // everything passed
	ExitFailed   = 1 // a scenario failed, or a served process ended with an error
	ExitUsage    = 2 // bad flags, arguments or configuration
	ExitTopology = 3 // the topology could not be brought up
	// ExitPartial: no scenario failed, but a scenario the run required (quotaqual run
	// --require; by default every selected one) was skipped: the run qualified less than it
	// was asked to.
	ExitPartial = 4
)

// BundleSchemaVersion is the version of the evidence bundle's results.json, manifest.json and
// canaries.json. Version 2 added the run's qualification (its level, each skipped scenario
// with what it lacked, the --require policy) to manifest.json and results.json; a version 1
// bundle is still read, its level computed from its verdicts.
const BundleSchemaVersion = "2"
