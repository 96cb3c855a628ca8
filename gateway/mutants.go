package gateway

import "github.com/quotaqual/quotaqual/internal/mutant"

// Mutants switched inline where the broken branch is a line or two (the larger ones sit in
// mutants_on.go behind mutate* hooks). Outside the mutants build mutant.Is is constant false
// and the branches compile away; see internal/mutant.
const (
	// hookChargeEstimate: usage the provider did not report (a stream cut short, a body too
	// large to buffer, a provider error) is charged the estimate, as before issue 10.
	hookChargeEstimate = mutant.EstimateOnDisconnect
	// hookLegacyEstimate: the estimate reads max_tokens before max_completion_tokens and
	// ignores n, as before issue 10.
	hookLegacyEstimate = mutant.LegacyEstimate
	// hookNoRequestBounds: no read deadline on the request body, and a denial lets net/http
	// drain an announced body first, as before issue 10.
	hookNoRequestBounds = mutant.NoRequestBounds
)

func testHook(n mutant.Name) bool { return mutant.Is(n) }
