package chaos

import (
	"net/http"
	"time"
)

// History is everything a run recorded, and all the checker reads: the client's requests, the
// faults as they were really pulled and released, and the providers' call logs. Nothing in it
// comes from the gateways' own counters or the store.
type History struct {
	Start     time.Time      `json:"start"` // the traffic's time zero: faults are scheduled from it
	Gateways  []string       `json:"gateways"`
	Requests  []Request      `json:"requests"`
	Faults    []FaultEvent   `json:"faults"`
	Providers []ProviderCall `json:"provider_calls"`
	// ProviderCalls counts every call the providers received (at arrival, finished or not);
	// ProviderDropped, the log entries they dropped to stay bounded.
	ProviderCalls   int64 `json:"provider_calls_total"`
	ProviderDropped int64 `json:"provider_log_dropped"`
	// StoreGroup: the gateways decided on the replicated store group, written with
	// Replication (deployment.ReplicationAcknowledged or ReplicationAsync).
	StoreGroup  bool   `json:"store_group,omitempty"`
	Replication string `json:"replication,omitempty"`
	// Limits is the policy timeline: each span in which a gateway may have run another
	// capacity than the rule's own (a policy-change fault). Outside them every gateway runs
	// the rule's capacity (Bounds.Capacity).
	Limits []LimitSpan `json:"limits,omitempty"`
	// What the gateway's profile says a client sees, which the checker reads the answers by:
	// RequestIDHeader, the response header echoing the id it forwarded to the provider (empty:
	// none, so an admitted request cannot be found in a call log); StoreFailure, the status of
	// its answer when it cannot reach its store (0: quotaqual's 503).
	RequestIDHeader string `json:"request_id_header,omitempty"`
	StoreFailure    int    `json:"store_failure_status,omitempty"`
	// ProviderScope says which of the providers' calls were read: this run's label, or every
	// call when the gateway forwards no scenario header (the topology is the run's alone).
	ProviderScope string `json:"provider_scope,omitempty"`
}

// storeFailure is the status of the gateway's answer when it cannot reach its store.
func (h History) storeFailure() int {
	if h.StoreFailure == 0 {
		return http.StatusServiceUnavailable
	}
	return h.StoreFailure
}

// LimitSpan is one gateway on another capacity: possibly from From (the rollout's restart
// began) to To (the restart back ended), certainly from Held to Releasing.
type LimitSpan struct {
	Fault     int       `json:"fault"` // the policy-change's schedule number
	Gateway   string    `json:"gateway"`
	Capacity  int64     `json:"capacity"`
	From      time.Time `json:"from"`
	Held      time.Time `json:"held"`
	Releasing time.Time `json:"releasing"`
	To        time.Time `json:"to"`
}

// limitSpans derives the policy timeline from the policy-change faults as they happened. A
// rollout that failed half way may have left its gateway on the other capacity: it is taken
// to hold from its pull to the end of time (the lever error fails the run anyway).
func limitSpans(events []FaultEvent) []LimitSpan {
	var out []LimitSpan
	forever := time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, f := range events {
		if f.Lever != PolicyChange.Name() || f.Pulled.IsZero() {
			continue
		}
		l := LimitSpan{Fault: f.N, Gateway: f.Target.Host, Capacity: PolicyOf(f.Target).Capacity,
			From: f.Pulled, Held: f.Held, Releasing: f.Releasing, To: f.Released}
		if f.Err != "" || f.Released.IsZero() {
			l.Held, l.Releasing, l.To = time.Time{}, time.Time{}, forever
		}
		out = append(out, l)
	}
	return out
}

// Phases of the traffic.
const (
	PhaseLoad  = "load"  // the open-loop load while the schedule runs
	PhaseDrain = "drain" // after every fault is released: each subject asked until denied
)

// Request is one chat request as the client saw it.
type Request struct {
	Seq       int       `json:"seq"`
	Phase     string    `json:"phase"`
	Gateway   string    `json:"gateway"`
	Subject   string    `json:"subject"` // the subject's label, never a credential
	Scheduled time.Time `json:"scheduled"`
	Start     time.Time `json:"start"`
	End       time.Time `json:"end"`
	Status    int       `json:"status"` // 0: no HTTP answer
	RequestID string    `json:"request_id,omitempty"`
	ErrorType string    `json:"error_type,omitempty"`
	// Tokens is what the response's usage billed (prompt + completion); 0 when not a 200 or
	// the response reported no usage (UsageKnown false).
	Tokens     int64  `json:"tokens"`
	UsageKnown bool   `json:"usage_known"`
	Err        string `json:"error,omitempty"`
	// NotSent: the connection was never made (a dial error), so no gateway saw the request.
	NotSent bool `json:"not_sent,omitempty"`
}

// Admitted reports a 200.
func (r Request) Admitted() bool { return r.Status == http.StatusOK }

// Denied reports a quota denial (429).
func (r Request) Denied() bool { return r.Status == http.StatusTooManyRequests }

// Decided reports an answer that only a gateway which reached the store can give: admitted
// or denied.
func (r Request) Decided() bool { return r.Admitted() || r.Denied() }

// FaultEvent is one scheduled fault as it really happened. The lever was pulled between
// Pulled and Held (Inject's call and return) and released between Releasing and Released
// (Undo's call and return). A fault that could not be injected has Err and no Held.
type FaultEvent struct {
	Fault
	Pulled    time.Time `json:"pulled"`
	Held      time.Time `json:"held"`
	Releasing time.Time `json:"releasing"`
	Released  time.Time `json:"released"`
	// CutsOff lists the gateways that could not reach the deciding store while it was held.
	CutsOff []string `json:"cuts_off,omitempty"`
	// Touches lists the gateways that must decide again after the release, when the fault
	// cut none off for its whole hold but disturbed them (a store failover).
	Touches []string `json:"touches,omitempty"`
	Err     string   `json:"error,omitempty"`
}

// Injected reports whether the lever took hold.
func (f FaultEvent) Injected() bool { return f.Err == "" && !f.Held.IsZero() }

// ProviderCall is one entry of a provider's call log.
type ProviderCall struct {
	Site            string    `json:"site"`
	Time            time.Time `json:"time"`
	RequestID       string    `json:"request_id"`
	PromptTokens    int64     `json:"prompt_tokens"`
	GeneratedTokens int64     `json:"generated_tokens"`
	Status          int       `json:"status"`
}

// hostTarget is the target a fault acted on, for evidence.
func hostTarget(f Fault) string { return describe(f.Lever, f.Target) }
