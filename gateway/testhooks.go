package gateway

// Test hooks: deliberate regressions that only a test build (build tag quotaqual_testhooks,
// testhooks_on.go, switched on by the QUOTAQUAL_TEST_HOOKS environment variable) can switch
// on, so the end-to-end tests can prove that a qualification scenario catches each one.
const (
	// hookChargeEstimate: usage the provider did not report (a stream cut short, a body too
	// large to buffer, a provider error) is charged the estimate, as before issue 10.
	hookChargeEstimate = "charge-estimate"
	// hookLegacyEstimate: the estimate reads max_tokens before max_completion_tokens and
	// ignores n, as before issue 10.
	hookLegacyEstimate = "legacy-estimate"
	// hookNoRenewal: leases are never renewed, whatever lease_renewal says.
	hookNoRenewal = "no-renewal"
	// hookNoRequestBounds: no read deadline on the request body, and a denial lets net/http
	// drain an announced body first, as before issue 10.
	hookNoRequestBounds = "no-request-bounds"
)
