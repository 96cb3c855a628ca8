// Package undertest is the seam between the qualification and the gateway it qualifies. A
// gateway profile says how to launch a gateway (argv or image, a config template rendered from
// the run's facts, its environment), where it reports ready, and what to expect of it: the
// status and error type of a store failure, the quota header names, how attribution can be
// seen, its admission model and accounting granularity, and whether it offers a quota
// inspector. Engines launch gateways only through a profile; scenarios read their expectations
// from it instead of quotaqual's own literals.
//
// quotaqual's own gateway is the default profile (profiles/quotaqual.yaml), rendering exactly
// the config the qualification always rendered.
package undertest

import (
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/quotaqual/quotaqual/internal/strictyaml"
)

// Status says how far a profile has been proven here.
type Status string

const (
	// Verified: the qualification passes it in this repository's tests.
	Verified Status = "verified"
	// KnownBad: shipped to show the qualification failing; its documentation names the
	// scenarios that fail.
	KnownBad Status = "known-bad"
	// Unverified: a documented template for a gateway this repository cannot run.
	Unverified Status = "unverified"
	// Test: a gateway written for the tests (internal/altgateway).
	Test Status = "test"
	// Peer: a third-party rate-limit engine (internal/peers) driven by a shim that does what
	// the real gateway does around it; its verdicts come from real runs (docs/peers.md).
	Peer Status = "peer"
)

// Inspection kinds: how the harness can read a subject's quota state from the gateway.
const (
	// InspectNone: the gateway offers no quota inspection; scenarios use black-box evidence.
	InspectNone = "none"
	// InspectQuotaqualAdmin: GET <admin>/admin/quota?rule=R&subject=S, quotaqual's JSON.
	InspectQuotaqualAdmin = "quotaqual-admin"
)

// Admission models: what a gateway reserves when it admits a request.
const (
	AdmitFixedEstimate = "fixed-estimate" // a configured number of tokens per request
	AdmitMaxTokens     = "max-tokens"     // the request's output bound (plus its input)
	// AdmitCheckThenCharge reserves nothing: a request is admitted iff the usage already
	// charged (plus the check's own cost) is within the capacity, and its usage is charged
	// after the response. Everything in flight is admitted against the same charged usage.
	AdmitCheckThenCharge = "check-then-charge"
)

// Window anchors of a fixed window.
const (
	AnchorEpoch    = "epoch"     // windows start at multiples of the window since the Unix epoch
	AnchorFirstHit = "first-hit" // a window starts at the first charge after the last one ended
)

// Window kinds of a gateway's accounting.
const (
	WindowSliding = "sliding" // usage leaves the window one bucket at a time
	WindowFixed   = "fixed"   // the whole count resets at each window boundary
)

// Listeners a readiness probe may target.
const (
	ListenerData  = "data"
	ListenerAdmin = "admin"
)

// Profile is one gateway under test, as a profile YAML file describes it.
type Profile struct {
	Name        string    `yaml:"name"`
	Status      Status    `yaml:"status"`
	Description string    `yaml:"description"`
	Launch      Launch    `yaml:"launch"`
	Config      Config    `yaml:"config"`
	Readiness   Readiness `yaml:"readiness"`
	// Liveness, optional, is where an orchestrator checks the gateway is alive (a Kubernetes
	// liveness probe); it must not depend on the store. Empty: no liveness check.
	Liveness Readiness    `yaml:"liveness"`
	Expect   Expect       `yaml:"expect"`
	Caps     Capabilities `yaml:"capabilities"`
	// Services are processes of the gateway's own the topology runs beside it (services.go).
	Services []Service `yaml:"services"`

	tmpl *template.Template // Config.Template, parsed by validate
	argv []*template.Template
	env  map[string]*template.Template
}

// Launch is how a gateway process (or container) is started.
type Launch struct {
	// Argv is the command line, each element a template over Facts (Binary is the harness's
	// quotaqual binary, ConfigPath the rendered config as the gateway sees it).
	Argv []string `yaml:"argv"`
	// Image, for the container engines (docker, kind): the gateway's image, which must be
	// present in the local Docker engine (nothing is pulled: a missing image stops the run
	// before anything starts). In it, Argv is the whole command (its entrypoint is replaced).
	// Empty means the run's quotaqual image, whose entrypoint is the quotaqual binary: Argv
	// must then start with {{.Binary}}, and the rest is the container's command. The process
	// engines (netns, process) run Argv on the host and ignore Image.
	Image string `yaml:"image"`
	// Env is added to the gateway's environment; each value is a template over Facts. The
	// secrets (passwords, the store URL) are always in the environment under the names Facts
	// gives; a value may copy one with $NAME.
	Env map[string]string `yaml:"env"`
}

// Config is the gateway's configuration file.
type Config struct {
	File     string `yaml:"file"`     // file name, e.g. gateway.yaml
	Template string `yaml:"template"` // text/template over Facts
}

// Readiness is where the gateway reports ready.
type Readiness struct {
	Listener string `yaml:"listener"` // data or admin
	Path     string `yaml:"path"`     // e.g. /readyz
}

// Expect is what the qualification expects of the gateway's answers.
type Expect struct {
	Denial       Answer       `yaml:"denial"`        // over budget
	StoreFailure Answer       `yaml:"store_failure"` // the store unreachable
	QuotaHeaders QuotaHeaders `yaml:"quota_headers"`
	Attribution  Attribution  `yaml:"attribution"`
	// RequestIDHeader is the response header echoing the id the gateway forwarded to the
	// provider as x-request-id; empty when it forwards none.
	RequestIDHeader string `yaml:"request_id_header"`
	// AuthChallenge is the scheme a 401's WWW-Authenticate must name; empty: not required.
	AuthChallenge string    `yaml:"auth_challenge"`
	Admission     Admission `yaml:"admission"`
	// AdminProbes are admin-listener paths that must answer 200 and change no quota state.
	AdminProbes []string `yaml:"admin_probes"`
	// ModelHeader is the request header the gateway documents reading a model from besides
	// the body (quotaqual's: x-model, a disagreement with the body refused); empty: the body
	// alone names the model, so model-source sends no probe whose verdict rests on a header.
	ModelHeader string `yaml:"model_header"`
}

// Answer is a status code and, optionally, the error type its JSON body names
// (error.type, as OpenAI-compatible gateways write it).
type Answer struct {
	Status    int    `yaml:"status"`
	ErrorType string `yaml:"error_type"`
}

// QuotaHeaders are the response header names carrying the quota state; an empty name means
// the gateway does not send that header, and the checks on it are reported as not made.
type QuotaHeaders struct {
	RetryAfter string `yaml:"retry_after"`
	Limit      string `yaml:"limit"`     // the capacity
	Remaining  string `yaml:"remaining"` // capacity − settled − held, at the decision
	Reset      string `yaml:"reset"`     // "<seconds>s" until admission returns
}

// Attribution is how the provider that served a request can be seen.
type Attribution struct {
	// Header is the response header naming the provider site; empty: the provider's site is
	// seen only by counting at the providers.
	Header string `yaml:"header"`
}

// Admission is the gateway's admission model.
type Admission struct {
	Model string `yaml:"model"` // fixed-estimate, max-tokens or check-then-charge
	// CheckCost, for check-then-charge: what the check adds to the charged usage before it
	// compares with the capacity (0: admitted while charged ≤ capacity, as envoy ratelimit's
	// hits_addend 0; 1: while charged + 1 ≤ capacity, as Limitador's check of one hit).
	CheckCost int64 `yaml:"check_cost"`
	// Window: sliding or fixed.
	Window string `yaml:"window"`
	// Anchor, for a fixed window: epoch (default) or first-hit.
	Anchor string `yaml:"anchor"`
	// Windows are the only windows the gateway's engine can express (e.g. envoy ratelimit's
	// 1s, 1m, 1h, 24h); empty: any. A run whose rule has another window stops before anything
	// starts, naming the profiles that fit.
	Windows []string `yaml:"windows"`
	// Granularity is the accounting bucket: usage leaves a window at most this late.
	// "ledger" means quotaqual's ledger rule (1 s up to a one-minute window, window/60
	// rounded up to whole seconds beyond).
	Granularity string `yaml:"granularity"`
}

// Capabilities are what the gateway offers beyond answering requests. A scenario needing
// one the gateway lacks uses black-box evidence, or is skipped saying so.
type Capabilities struct {
	// QuotaInspection: none or quotaqual-admin.
	QuotaInspection string `yaml:"quota_inspection"`
	// SharedStore: the gateway keeps its quota state in the run's Valkey, so the store levers
	// (stop, partition) and "the state came from the store" apply.
	SharedStore bool `yaml:"shared_store"`
	// StoreGroup: the template renders the replicated store group (Facts.Store.Group).
	StoreGroup bool `yaml:"store_group"`
	// StoreCluster: the template renders a Valkey Cluster (Facts.Store.Cluster), so the
	// gateway can run on `--store cluster`. A gateway that takes one store address cannot.
	StoreCluster bool `yaml:"store_cluster"`
	// Rules are the features of the scenarios' own rules (Facts.ScenarioRules) the template
	// can render (rules.go): a rule needing one more is not handed to it, and its scenario
	// runs on the run's rule or is skipped, naming the feature. Empty: no scenario rule.
	Rules []RuleFeature `yaml:"rules"`
	// ScenarioRules is the field Rules replaced: true reads as every feature, false as none.
	// Set with Rules it is an error naming the replacement.
	ScenarioRules *bool `yaml:"scenario_rules"`
	// PolicyChange: the gateway can be restarted on another budget (rolling-upgrade).
	PolicyChange bool `yaml:"policy_change"`
	// Leases: admitted requests hold a reservation that expires unless renewed.
	Leases bool `yaml:"leases"`
	// RenewalsPerLease says how often the gateway renews a live request's lease: every
	// lease/N. It is what lets gateway-crash bound a dead hold from below (its last renewal +
	// lease, the last renewal within lease/N before the crash); 0, unstated, judges the
	// lower bound from the crash alone (the hold still held then), never from quotaqual's own
	// gateway's schedule.
	RenewalsPerLease int `yaml:"renewals_per_lease"`
	// ForwardsScenarioHeader: the gateway passes the request's x-quotaqual-scenario header on
	// to the provider, so the stubs count calls per scenario and the scenarios that pull no
	// lever can run side by side. Without it every scenario runs alone: a provider call that
	// names no scenario counts against all of them.
	ForwardsScenarioHeader bool `yaml:"forwards_scenario_header"`
	// StoreHosts are the hosts the gateway reaches its quota state through, which
	// valkey-partition cuts a gateway off from: [valkey] when empty; a gateway that asks a
	// rate-limit service names the service's hosts (the service reaches Valkey behind it).
	StoreHosts []string `yaml:"store_hosts"`
	// Endpoints are the OpenAI-compatible endpoints the gateway serves (Endpoint*): chat
	// always; api-surface checks each one listed and skips the rest, saying so. Empty: chat
	// only, as a profile written before the key existed.
	Endpoints []string `yaml:"endpoints"`
	// Metrics are the counters the gateway exports that scenarios may hold to what the
	// clients and the providers observed (metrics.go). Empty: none; those checks are not made.
	Metrics Metrics `yaml:"metrics"`
}

// The endpoints a profile may declare (capabilities.endpoints).
const (
	EndpointChat        = "chat"        // POST /v1/chat/completions
	EndpointResponses   = "responses"   // POST /v1/responses
	EndpointEmbeddings  = "embeddings"  // POST /v1/embeddings
	EndpointCompletions = "completions" // POST /v1/completions (legacy)
	EndpointModels      = "models"      // GET /v1/models, unmetered
)

// AllEndpoints lists every endpoint a profile may declare, in the order the docs give them.
var AllEndpoints = []string{EndpointChat, EndpointResponses, EndpointEmbeddings, EndpointCompletions, EndpointModels}

// Serves reports whether the gateway declares endpoint (chat when it declares none).
func (p *Profile) Serves(endpoint string) bool {
	if len(p.Caps.Endpoints) == 0 {
		return endpoint == EndpointChat
	}
	return slices.Contains(p.Caps.Endpoints, endpoint)
}

// Load reads and validates a profile file. Every problem is reported with its path in the
// document (launch.argv[0]: …).
func Load(path string) (*Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("gateway profile: %w", err)
	}
	p, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("gateway profile %s:\n%w", path, err)
	}
	return p, nil
}

// Parse decodes a profile strictly and validates it.
func Parse(b []byte) (*Profile, error) {
	var p Profile
	if err := strictyaml.Decode(b, &p); err != nil {
		return nil, err
	}
	if errs := p.validate(); len(errs) > 0 {
		return nil, errs
	}
	return &p, nil
}

// validate checks every field and parses the templates; it collects every problem.
func (p *Profile) validate() strictyaml.Errors {
	var errs strictyaml.Errors
	bad := func(path, format string, args ...any) {
		errs = append(errs, strictyaml.FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
	}
	if !profileName.MatchString(p.Name) {
		bad("name", "%q is not a profile name: use 1-48 characters of a-z, 0-9 and '-'", p.Name)
	}
	switch p.Status {
	case Verified, KnownBad, Unverified, Test, Peer:
	default:
		bad("status", "%q is unknown: use %s, %s, %s, %s or %s", p.Status, Verified, KnownBad, Unverified, Test, Peer)
	}
	if strings.TrimSpace(p.Description) == "" {
		bad("description", "missing: say what this gateway is and how far it is proven")
	}
	if len(p.Launch.Argv) == 0 {
		bad("launch.argv", "missing: give the gateway's command line, e.g. [\"{{.Binary}}\", gateway, --config, \"{{.ConfigPath}}\"]")
	}
	p.argv = nil
	for i, a := range p.Launch.Argv {
		t, err := parseTemplate(a)
		if err != nil {
			bad(fmt.Sprintf("launch.argv[%d]", i), "%v", err)
			continue
		}
		p.argv = append(p.argv, t)
	}
	p.env = map[string]*template.Template{}
	for _, k := range sortedKeys(p.Launch.Env) {
		path := strictyaml.JoinPath("launch.env", strictyaml.KeySegment(k))
		if !envName.MatchString(k) {
			bad(path, "%q is not an environment variable name: use A-Z, 0-9 and '_', starting with a letter", k)
			continue
		}
		t, err := parseTemplate(p.Launch.Env[k])
		if err != nil {
			bad(path, "%v", err)
			continue
		}
		p.env[k] = t
	}
	if p.Config.File == "" || strings.ContainsAny(p.Config.File, `/\`) || p.Config.File[0] == '.' {
		bad("config.file", "%q is not a plain file name: give one like gateway.yaml", p.Config.File)
	}
	if strings.TrimSpace(p.Config.Template) == "" {
		bad("config.template", "missing: give the gateway's config as a template over the run's facts")
	} else if t, err := parseTemplate(p.Config.Template); err != nil {
		bad("config.template", "%v", err)
	} else {
		p.tmpl = t
	}
	checkProbe := func(path string, r Readiness, examplePath string) {
		switch r.Listener {
		case ListenerData, ListenerAdmin:
		default:
			bad(path+".listener", "%q is unknown: use %s or %s", r.Listener, ListenerData, ListenerAdmin)
		}
		if !strings.HasPrefix(r.Path, "/") {
			bad(path+".path", "%q is not an absolute path: give one like %s", r.Path, examplePath)
		}
	}
	checkProbe("readiness", p.Readiness, "/readyz")
	if p.Liveness != (Readiness{}) {
		checkProbe("liveness", p.Liveness, "/healthz")
	}
	if img := p.Launch.Image; img != "" && !imageRef.MatchString(img) {
		bad("launch.image", "%q is not an image reference: give one like registry.example/gateway:1.2", img)
	}
	checkAnswer := func(path string, a Answer) {
		if a.Status < 400 || a.Status > 599 {
			bad(path+".status", "%d is not an error status: give the 4xx or 5xx the gateway answers", a.Status)
		}
	}
	checkAnswer("expect.denial", p.Expect.Denial)
	checkAnswer("expect.store_failure", p.Expect.StoreFailure)
	if p.Expect.StoreFailure.Status == http.StatusOK || p.Expect.StoreFailure.Status == p.Expect.Denial.Status {
		bad("expect.store_failure.status", "%d cannot tell a store failure from a denial: a gateway must fail closed with its own status", p.Expect.StoreFailure.Status)
	}
	for path, h := range map[string]string{
		"expect.quota_headers.retry_after": p.Expect.QuotaHeaders.RetryAfter,
		"expect.quota_headers.limit":       p.Expect.QuotaHeaders.Limit,
		"expect.quota_headers.remaining":   p.Expect.QuotaHeaders.Remaining,
		"expect.quota_headers.reset":       p.Expect.QuotaHeaders.Reset,
		"expect.attribution.header":        p.Expect.Attribution.Header,
		"expect.request_id_header":         p.Expect.RequestIDHeader,
	} {
		if h != "" && !headerName.MatchString(h) {
			bad(path, "%q is not an HTTP header name", h)
		}
	}
	switch a := p.Expect.Admission; a.Model {
	case AdmitFixedEstimate, AdmitMaxTokens:
		if a.CheckCost != 0 {
			bad("expect.admission.check_cost", "only a check-then-charge model has a check cost: remove it or use model %s", AdmitCheckThenCharge)
		}
	case AdmitCheckThenCharge:
		if a.CheckCost < 0 {
			bad("expect.admission.check_cost", "%d is negative: give what the check adds before it compares (0 or 1)", a.CheckCost)
		}
	default:
		bad("expect.admission.model", "%q is unknown: use %s, %s or %s", a.Model, AdmitFixedEstimate, AdmitMaxTokens, AdmitCheckThenCharge)
	}
	switch p.Expect.Admission.Anchor {
	case "", AnchorEpoch, AnchorFirstHit:
	default:
		bad("expect.admission.anchor", "%q is unknown: use %s or %s", p.Expect.Admission.Anchor, AnchorEpoch, AnchorFirstHit)
	}
	for i, w := range p.Expect.Admission.Windows {
		if d, err := time.ParseDuration(w); err != nil || d <= 0 {
			bad(fmt.Sprintf("expect.admission.windows[%d]", i), "%q is not a duration: give one like 1m", w)
		}
	}
	switch p.Expect.Admission.Window {
	case WindowSliding, WindowFixed:
	default:
		bad("expect.admission.window", "%q is unknown: use %s or %s", p.Expect.Admission.Window, WindowSliding, WindowFixed)
	}
	if g := p.Expect.Admission.Granularity; g != LedgerGranularity {
		if d, err := time.ParseDuration(g); err != nil || d <= 0 {
			bad("expect.admission.granularity", "%q is not a duration: give one like 1s, or %q for quotaqual's ledger rule", g, LedgerGranularity)
		}
	}
	for i, path := range p.Expect.AdminProbes {
		if !strings.HasPrefix(path, "/") {
			bad(fmt.Sprintf("expect.admin_probes[%d]", i), "%q is not an absolute path: give one like /healthz", path)
		}
	}
	if n := p.Caps.RenewalsPerLease; n < 0 || (n > 0 && !p.Caps.Leases) {
		bad("capabilities.renewals_per_lease", "is %d: give how many times a lease is renewed within its length (the gateway renews every lease/N), with leases: true, or leave it out when unknown", n)
	}
	switch p.Caps.QuotaInspection {
	case InspectNone, InspectQuotaqualAdmin:
	default:
		bad("capabilities.quota_inspection", "%q is unknown: use %s or %s", p.Caps.QuotaInspection, InspectNone, InspectQuotaqualAdmin)
	}
	for i, e := range p.Caps.Endpoints {
		path := fmt.Sprintf("capabilities.endpoints[%d]", i)
		switch {
		case !slices.Contains(AllEndpoints, e):
			bad(path, "%q is unknown: use %s", e, strings.Join(AllEndpoints, ", "))
		case slices.Index(p.Caps.Endpoints, e) < i:
			bad(path, "%q is listed twice: list each endpoint once", e)
		}
	}
	if len(p.Caps.Endpoints) > 0 && !slices.Contains(p.Caps.Endpoints, EndpointChat) {
		bad("capabilities.endpoints", "chat is missing: every scenario drives POST /v1/chat/completions; add chat, or leave the key out for chat only")
	}
	p.validateRules(bad)
	p.validateServices(bad)
	p.validateMetrics(bad)
	return errs
}

// ExpressesWindow reports whether the gateway's engine can express a window of w (every
// window, when the profile lists none).
func (p *Profile) ExpressesWindow(w time.Duration) bool {
	if len(p.Expect.Admission.Windows) == 0 {
		return true
	}
	for _, s := range p.Expect.Admission.Windows {
		if d, _ := time.ParseDuration(s); d == w {
			return true
		}
	}
	return false
}

// ChecksThenCharges reports whether the gateway admits on charged usage alone (no
// reservation): AdmitCheckThenCharge.
func (p *Profile) ChecksThenCharges() bool { return p.Expect.Admission.Model == AdmitCheckThenCharge }

// LedgerGranularity names quotaqual's ledger bucket rule as an accounting granularity.
const LedgerGranularity = "ledger"

// Granularity is the accounting bucket for a window: how late usage may leave it.
func (p *Profile) Granularity(window time.Duration) time.Duration {
	g := p.Expect.Admission.Granularity
	if g == LedgerGranularity {
		return ledgerBucket(window)
	}
	d, _ := time.ParseDuration(g) // validated
	return d
}

// ledgerBucket is quotaqual's ledger bucket for a window: one second up to a minute,
// window/60 rounded up to whole seconds beyond.
func ledgerBucket(window time.Duration) time.Duration {
	if window <= time.Minute {
		return time.Second
	}
	b := (window + 59) / 60
	return ((b + time.Second - 1) / time.Second) * time.Second
}

// Inspects reports whether the gateway offers quotaqual's quota inspection.
func (p *Profile) Inspects() bool { return p.Caps.QuotaInspection == InspectQuotaqualAdmin }

// What names in a profile may be.
var (
	profileName = regexp.MustCompile(`^[a-z0-9-]{1,48}$`)
	envName     = regexp.MustCompile(`^[A-Z][A-Z0-9_]*$`)
	headerName  = regexp.MustCompile(`^[A-Za-z0-9-]+$`)
	// imageRef is a Docker image reference, loosely: [registry[:port]/]path[:tag][@digest].
	imageRef = regexp.MustCompile(`^[a-z0-9][a-z0-9._/:-]*[a-z0-9](:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$`)
)

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
