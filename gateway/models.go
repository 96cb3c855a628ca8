package gateway

import (
	"net/http"
	"slices"
	"time"

	"github.com/quotaqual/quotaqual/wire"
)

// modelsPath lists the models a caller may use. It is unmetered: answered by the gateway from
// its policy, with no reservation, no charge and no provider call — a listing must never spend
// quota nor become a way to reach a provider outside it.
const modelsPath = "/v1/models"

// serveModels answers GET /v1/models for an authenticated caller with the models its rules
// allow by name (a rule that allows any model lists none: there is nothing to name), in the
// OpenAI list shape.
func (s *Server) serveModels(w http.ResponseWriter, r *http.Request) {
	rec := &requestRecord{start: time.Now(), id: s.requestID(r)}
	w.Header()[hRequestID] = []string{rec.id}
	subject, ok := s.auth.authenticate(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", s.auth.challenge)
		mutateChallenge(w.Header())
		s.deny(w, rec, http.StatusUnauthorized, resultUnauthenticated, wire.CodeInvalidCredentials,
			wire.TypeAuthentication, wire.CodeInvalidCredentials,
			"missing or invalid credentials; authenticate with HTTP Basic or a bearer API key")
		return
	}
	var names []string
	for _, rule := range s.policy.Rules {
		for _, m := range rule.AllowedModels {
			if matched, ok := s.policy.Match(subject, m); ok && matched.ModelAllowed(m) && !slices.Contains(names, m) {
				names = append(names, m)
			}
		}
	}
	slices.Sort(names)
	data := make([]map[string]any, len(names))
	for i, m := range names {
		data[i] = map[string]any{"id": m, "object": "model", "created": 0, "owned_by": "quotaqual"}
	}
	writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": data})
}
