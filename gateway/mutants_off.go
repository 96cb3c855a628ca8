//go:build !quotaqual_mutants

package gateway

import (
	"encoding/json"
	"net/http"

	"github.com/quotaqual/quotaqual/ledger"
)

// The mutation hooks (see internal/mutant) do nothing in every build but the mutants build;
// each is inlined away.

func mutateLedger(l ledger.Ledger, _ *ledger.CompiledPolicy) ledger.Ledger { return l }

func mutateRenew(renew bool) bool { return renew }

func mutateRenewGivesUp(error) bool { return false }

func mutateDropSettlement(pending int64) bool { return false }

func mutateChallenge(http.Header) {}

func mutateUpstreamHeaders(_, _ http.Header) {}

func (s *Server) mutateAdmin(h http.Handler) http.Handler { return h }

func (s *Server) mutateDenial(http.Header, *ledger.CompiledRule, *ledger.Denial) {}

func mutateDenialType(t string) string { return t }

func (s *Server) mutateAdmitted(http.Header, *ledger.Quota, *upstream) {}

func (s *Server) mutateRetry(_ *http.Request, _ []byte, resp *http.Response, err error) (*http.Response, error) {
	return resp, err
}

func mutateClampFacts(f ledger.RequestFacts) ledger.RequestFacts { return f }

func mutateClamp(map[string]json.RawMessage, *chatRequest) {}

func mutateUsageTokens(*usageJSON) (n int64, ok, mutated bool) { return 0, false, false }

func mutateRunningUsage(_ bool, _, _, usage int64) int64 { return usage }

func (s *Server) mutateDataHandler(h http.Handler) http.Handler { return h }
