// Package evidence writes the run's evidence bundle: manifest with SHA-256 checksums, per-scenario
// results, the request log, component logs, metrics, effective configs, a summary and JUnit —
// all redacted, then scanned for every credential the run generated (raw, base64, URL-encoded,
// JSON-escaped) so that a leak fails the run. It knows verdicts and facts, not what any
// scenario does.
package evidence

import "time"

// Status is a scenario's verdict. A skip is never a pass.
type Status string

const (
	Passed  Status = "passed"
	Failed  Status = "failed"
	Skipped Status = "skipped"
)

// Assertion is one check that decided (or contributed to) a verdict.
type Assertion struct {
	Name     string `json:"name"`
	Expected any    `json:"expected"`
	Observed any    `json:"observed"`
	OK       bool   `json:"ok"`
}

// Fact is one named observation, kept in the order it was recorded.
type Fact struct {
	Name  string `json:"name"`
	Value any    `json:"value"`
}

// ScenarioResult is one scenario's outcome.
type ScenarioResult struct {
	Name      string `json:"name"`
	Summary   string `json:"summary"`   // what the scenario proves, one line
	Invariant string `json:"invariant"` // "hard gate: peak reserved <= capacity" or "meter: ..." etc.
	Status    Status `json:"status"`
	Reason    string `json:"reason,omitempty"` // why it failed or was skipped
	// Evidence, when set, says the verdict rests on less than the full evidence: the gateway
	// under test lacked a capability (quota inspection), so black-box evidence (provider-side
	// counts, the request history) decided it, and the checks that could not be made are named.
	Evidence   string        `json:"evidence,omitempty"`
	KeyFact    string        `json:"key_fact"` // one short line for the closing table
	Facts      []Fact        `json:"facts"`
	Assertions []Assertion   `json:"assertions"`
	Started    time.Time     `json:"started"`
	Elapsed    time.Duration `json:"elapsed_ns"`
}

// RequestRecord is one HTTP exchange a scenario made, for requests.jsonl. It holds labels, never
// credentials: Subject is the fixture's label (e.g. "application-a"), not a password or header.
type RequestRecord struct {
	Time         time.Time         `json:"time"`
	Scenario     string            `json:"scenario"`
	Label        string            `json:"label"`   // what the request was for, e.g. "exhaust-3"
	Gateway      string            `json:"gateway"` // gateway-a, gateway-b
	Subject      string            `json:"subject,omitempty"`
	Credential   string            `json:"credential"` // valid, missing, malformed, wrong-password, cross-subject
	Method       string            `json:"method"`
	Path         string            `json:"path"`
	Status       int               `json:"status"` // 0: no HTTP response
	ProviderSite string            `json:"provider_site,omitempty"`
	RequestID    string            `json:"request_id,omitempty"`
	QuotaHeaders map[string]string `json:"quota_headers,omitempty"`
	ErrorType    string            `json:"error_type,omitempty"` // OpenAI-style error.type of a denial
	Usage        *Usage            `json:"usage,omitempty"`
	Latency      time.Duration     `json:"latency_ns"`
	Error        string            `json:"error,omitempty"` // transport error
}

// Usage is the token usage an admitted response reported.
type Usage struct {
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
	TotalTokens      int64 `json:"total_tokens"`
}

// Manifest describes the run and checksums every file in the bundle.
type Manifest struct {
	SchemaVersion    string            `json:"schema_version"`
	RunID            string            `json:"run_id"`
	QuotaqualVersion string            `json:"quotaqual_version"`
	ValkeyVersion    string            `json:"valkey_version"`
	Topology         string            `json:"topology"`
	TopologyFacts    map[string]any    `json:"topology_facts,omitempty"`
	Profile          string            `json:"profile"`
	ConfigDigests    map[string]string `json:"config_digests"` // file -> sha256 of the effective (unredacted) config
	Started          time.Time         `json:"started"`
	Ended            time.Time         `json:"ended"`
	Verdicts         map[string]Status `json:"verdicts"`
	// Qualification is what the run qualified (schema 2); nil in a version 1 bundle, whose
	// level Bundle computes from its verdicts. The writer fills it when the caller has not.
	Qualification *Qualification `json:"qualification,omitempty"`
	// Outcome is how the run ended: passed, failed, required-skipped (a scenario --require
	// named was skipped: exit 4), interrupted, topology-error.
	Outcome string `json:"outcome"`
	// Partial says why the bundle does not cover the whole run — interrupted, or killed before
	// it was finished (the manifest NewWriter leaves until Finish replaces it); empty when it does.
	Partial  string `json:"partial,omitempty"`
	Teardown any    `json:"teardown,omitempty"`
	// RanOn names the topology each scenario that started ran on, by its run id: RunID for the
	// run's own topology, or the id of one of OwnTopologies.
	RanOn map[string]string `json:"ran_on,omitempty"`
	// OwnTopologies are the topologies brought up for one scenario each (a scenario that pulls a
	// lever or drives a load, where the engine makes a topology cheap), by scenario.
	OwnTopologies map[string]OwnTopology `json:"own_topologies,omitempty"`
	Files         map[string]string      `json:"files"` // relative path -> sha256 hex, every file but manifest.json
}

// OwnTopology is one scenario's own topology: its run id, facts and teardown record, and the
// bundle directory holding its metrics, configs and logs (as metrics/, config/ and logs/ do
// for the run's topology).
type OwnTopology struct {
	RunID         string            `json:"run_id"`
	Dir           string            `json:"dir"`
	Facts         map[string]any    `json:"facts,omitempty"`
	ConfigDigests map[string]string `json:"config_digests,omitempty"`
	Teardown      any               `json:"teardown,omitempty"`
	// Error says why it did not come up (its scenario was skipped) or did not tear down whole.
	Error string `json:"error,omitempty"`
}

// Facts with a shape the HTML report draws. A scenario records them with Result.Fact under
// these names; the report reads them back from results.json and renders any scenario that has
// them, without knowing what the scenario does.
const (
	// FaultWindowsFact holds []FaultWindow: when a fault lever was held.
	FaultWindowsFact = "fault_windows"
	// LedgerSamplesFact holds a LedgerSeries: the quota state of one key sampled over time.
	LedgerSamplesFact = "ledger_samples"
	// ProbesFact holds []Probe: reachability probes, drawn as a from × to:port matrix.
	ProbesFact = "probes"
)

// FaultWindow is a span during which a scenario held a fault lever: a gateway restart, a
// store outage, a partition, a failover. End is zero when the lever was never released.
type FaultWindow struct {
	Kind   string    `json:"kind"`   // restart, outage, partition, failover, …
	Target string    `json:"target"` // what the lever acted on, e.g. "gateway-a", "valkey", "gateway-a→valkey"
	Start  time.Time `json:"start"`
	End    time.Time `json:"end"`
}

// LedgerSeries is one quota key's state sampled from the ledger over time, with the capacity
// of its window and the estimate each admitted request reserves (so the report can reconstruct
// reserved tokens from the request log and draw both against the capacity line).
type LedgerSeries struct {
	Subject  string         `json:"subject"` // subject label
	Capacity int64          `json:"capacity"`
	Estimate int64          `json:"estimate"`
	WindowMS int64          `json:"window_ms,omitempty"` // the window usage counts in; 0: unknown
	Samples  []LedgerSample `json:"samples"`
}

// LedgerSample is one reading of a quota key.
type LedgerSample struct {
	Sent     time.Time `json:"sent"` // the inspection was asked for at Sent and answered by At
	At       time.Time `json:"at"`
	Reserved int64     `json:"reserved"`
	Active   int64     `json:"active"`
	Settled  int64     `json:"settled"`
}

// Probe is one reachability probe: from a host to a host's port, what the policy expects
// ("reached" for a positive control, "denied" for a negative one) and what happened.
type Probe struct {
	From      string  `json:"from"`
	To        string  `json:"to"`
	Port      int     `json:"port"`
	Expected  string  `json:"expected"`
	Reached   bool    `json:"reached"`
	Supported bool    `json:"supported"`
	Error     string  `json:"error,omitempty"`
	ElapsedMS float64 `json:"elapsed_ms"`
}
