package gateway

import (
	"context"
	"encoding/json"
	"net/http"

	"github.com/quotaqual/quotaqual/ledger"
	"github.com/quotaqual/quotaqual/wire"
)

// readyzProbeSubject is the subject whose (empty) quota key /readyz inspects to check the
// store. Inspect never creates state, so the probe consumes no quota.
const readyzProbeSubject = "quotaqual:readyz-probe"

// serveReady answers /readyz.
//
// Readiness means "this process is listening and not draining". The store's health is
// reported in the body ("store": "ok" or "unavailable") but does not, by default, make the
// gateway unready: during a store outage the gateway's correct behaviour is to answer every
// request with a fast 503 quota_store_unavailable (fail closed), and taking every gateway out
// of a load balancer would turn that clear answer into connection errors. Callers that want
// readiness to include the store ask for /readyz?store=required.
func (s *Server) serveReady(w http.ResponseWriter, r *http.Request) {
	type body struct {
		Status  string `json:"status"`
		Store   string `json:"store"`
		Backend string `json:"backend"`
	}
	b := body{Status: "ready", Store: "ok", Backend: s.led.Backend()}
	if !s.ready.Load() || s.draining.Load() {
		b.Status = "draining"
		b.Store = "not checked"
		writeJSON(w, http.StatusServiceUnavailable, b)
		return
	}
	storeOK := s.checkStore(r.Context())
	if !storeOK {
		b.Store = "unavailable"
	}
	if !storeOK && r.URL.Query().Get("store") == "required" {
		b.Status = "store_unavailable"
		writeJSON(w, http.StatusServiceUnavailable, b)
		return
	}
	writeJSON(w, http.StatusOK, b)
}

func (s *Server) checkStore(parent context.Context) bool {
	if len(s.policy.Rules) == 0 {
		return true
	}
	rule := s.policy.Rules[0]
	ctx, cancel := context.WithTimeout(parent, s.storeTimeout)
	defer cancel()
	_, err := s.led.Inspect(ctx, rule.Quota, rule.Key(readyzProbeSubject, ""))
	if err != nil {
		s.m.backendErrors.WithLabelValues(s.led.Backend(), "ready").Inc()
		return false
	}
	return true
}

// serveQuota answers GET /admin/quota?rule=R&subject=S[&model=M] with ledger.Inspect of that
// key. It changes nothing and consumes no quota.
func (s *Server) serveQuota(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		writeError(w, http.StatusMethodNotAllowed, wire.TypeInvalidRequest, wire.CodeMethod, "use GET")
		return
	}
	q := r.URL.Query()
	ruleName, subject, model := q.Get("rule"), q.Get("subject"), q.Get("model")
	if ruleName == "" || subject == "" {
		writeError(w, http.StatusBadRequest, wire.TypeInvalidRequest, "missing_parameter", "give rule and subject (and model for subject_and_model rules)")
		return
	}
	var rule *ledger.CompiledRule
	for _, cr := range s.policy.Rules {
		if cr.Name == ruleName {
			rule = cr
			break
		}
	}
	if rule == nil {
		writeError(w, http.StatusNotFound, wire.TypeInvalidRequest, "unknown_rule", "no rule with that name in this gateway's policy")
		return
	}
	key := rule.Key(subject, model)
	ctx, cancel := context.WithTimeout(r.Context(), s.storeTimeout)
	st, err := s.led.Inspect(ctx, rule.Quota, key)
	cancel()
	if err != nil {
		s.m.backendErrors.WithLabelValues(s.led.Backend(), "inspect").Inc()
		writeError(w, http.StatusServiceUnavailable, wire.TypeStore, wire.CodeStore, "the quota store is unavailable")
		return
	}
	out := wire.QuotaState{
		Rule:               rule.Name,
		Key:                key,
		Backend:            s.led.Backend(),
		ActiveReservations: int64(st.ActiveReservations),
		ReservedTokens:     st.ReservedTokens,
		Windows:            make([]wire.WindowState, 0, len(st.Windows)),
	}
	for _, wu := range st.Windows {
		out.Windows = append(out.Windows, wire.WindowState{
			Window:   ledger.Duration(wu.Window).String(),
			WindowMS: wu.Window.Milliseconds(),
			Capacity: wu.Capacity,
			Settled:  wu.Settled,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
