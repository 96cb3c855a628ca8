package ledger

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/internal/strictyaml"
)

// CompiledPolicy is a validated policy with every default filled in: what the gateway and the
// backends use. Build it with LoadPolicy or Policy.Compile, never by hand.
type CompiledPolicy struct {
	Backend BackendConfig // URL resolved from ${ENV}; kind, namespace and timeout defaulted
	Limits  Limits        // every bound set
	Rules   []*CompiledRule
}

// CompiledRule is one validated rule.
type CompiledRule struct {
	Name          string
	Index         int    // position in the policy's rules
	Quota         *Quota // what the ledger enforces: the rule's budgets and lease
	KeyMode       KeyMode
	AllowedModels []string    // empty: any model
	Enforcement   Enforcement // meter (default) or hard

	// Estimation, defaults filled in; see Estimate.
	Strategy          Strategy
	Multiplier        float64
	FallbackEstimate  int64
	ModelMultipliers  map[string]float64 // model_scaled only
	DefaultMultiplier float64            // model_scaled only
	BytesPerToken     float64            // input_plus_max_tokens only

	subjects      map[string]bool // nil: any subject
	models        map[string]bool // nil: any model
	allowed       map[string]bool // nil: any model
	fixedEstimate int64           // fixed only: ceil(fallback × multiplier)
}

// Bounds of the policy. Each is reported with its value when exceeded.
const (
	MaxRules           = 32
	MaxBudgets         = 8
	MaxCapacity        = int64(1) << 53 // exact in float64 and in Valkey's Lua numbers
	MinWindow          = time.Second
	MaxWindow          = 168 * time.Hour
	DefaultLease       = 30 * time.Second
	MinLease           = time.Second
	MaxLease           = 24 * time.Hour
	MaxAllowedModels   = 64
	MaxMatchEntries    = 1024
	MaxNameBytes       = 256 // a subject, model or model_multipliers key
	MaxKeyLengthLimit  = 1024
	MaxBodyBytesLimit  = 64 << 20
	DefaultNamespace   = "quotaqual"
	DefaultTimeout     = 300 * time.Millisecond
	MinTimeout         = 10 * time.Millisecond
	MaxTimeout         = 10 * time.Second
	maxNamespaceLength = 128
)

var (
	ruleNameRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)
	namespaceRE = regexp.MustCompile(`^[A-Za-z0-9:._-]{1,128}$`)
	envNameRE   = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*$`)
)

const strategies = "fixed, max_tokens, input_plus_max_tokens or model_scaled"

// LoadPolicy decodes a policy document strictly and compiles it. getenv resolves ${ENV_VAR}
// references (nil means os.LookupEnv). The error lists every problem found, each with its path.
func LoadPolicy(data []byte, getenv func(string) (string, bool)) (*CompiledPolicy, error) {
	var p Policy
	if err := strictyaml.Decode(data, &p); err != nil {
		return nil, err
	}
	return p.Compile(getenv)
}

// Compile validates the policy and fills in defaults. On failure it returns strictyaml.Errors
// with every problem found, paths relative to the policy's root (callers embedding the policy
// use Errors.Prefix). getenv nil means os.LookupEnv.
func (p *Policy) Compile(getenv func(string) (string, bool)) (*CompiledPolicy, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	c := &compiler{getenv: getenv}
	out := &CompiledPolicy{
		Backend: c.backend(p.Backend),
		Limits:  c.limits(p.Limits),
	}
	out.Rules = c.rules(p.Rules)
	c.keyLength(p.Limits, out.Rules)
	if len(c.errs) > 0 {
		return nil, c.errs
	}
	return out, nil
}

// Match returns the first rule whose match holds for the authenticated subject and the
// request's model. A request no rule matches is not limited by this policy; it is the
// gateway's decision what to do with it.
func (p *CompiledPolicy) Match(subject, model string) (*CompiledRule, bool) {
	for _, r := range p.Rules {
		if r.matches(subject, model) {
			return r, true
		}
	}
	return nil, false
}

// NeedsBody reports whether any rule's estimation reads the request body.
func (p *CompiledPolicy) NeedsBody() bool {
	for _, r := range p.Rules {
		if r.NeedsBody() {
			return true
		}
	}
	return false
}

func (r *CompiledRule) matches(subject, model string) bool {
	return (r.subjects == nil || r.subjects[subject]) && (r.models == nil || r.models[model])
}

// ModelAllowed reports whether the rule lets the model through. Without allowed_models every
// model is allowed, including none.
func (r *CompiledRule) ModelAllowed(model string) bool {
	return r.allowed == nil || r.allowed[model]
}

// compiler collects every problem instead of stopping at the first: a user fixing a policy
// should see all of it at once.
type compiler struct {
	getenv func(string) (string, bool)
	errs   strictyaml.Errors
}

func (c *compiler) fail(path, format string, args ...any) {
	c.errs = append(c.errs, strictyaml.FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (c *compiler) backend(b BackendConfig) BackendConfig {
	switch b.Kind {
	case "":
		b.Kind = "memory"
	case "memory", "valkey":
	default:
		c.fail("backend.kind", "%q is not a backend; write memory or valkey", b.Kind)
	}
	switch {
	case b.Kind == "memory" && b.URL != "":
		c.fail("backend.url", "not used by kind memory; remove it or set kind: valkey")
	case b.Kind == "valkey" && b.URL != "" && b.Sentinel != nil:
		c.fail("backend.url", "not used with backend.sentinel (the Sentinels name the primary); remove one of them")
	case b.Kind == "valkey" && b.URL != "" && b.Cluster != nil:
		c.fail("backend.url", "not used with backend.cluster (the cluster client learns the nodes from backend.cluster.addresses); remove one of them")
	case b.Kind == "valkey" && b.Sentinel != nil && b.Cluster != nil:
		c.fail("backend.sentinel", "not used with backend.cluster (a Valkey Cluster promotes its replicas itself, without Sentinels); remove one of them")
	case b.Kind == "valkey" && b.URL == "" && b.Sentinel == nil && b.Cluster == nil:
		c.fail("backend.url", "required for kind valkey; write redis://host:6379 or a whole ${ENV_VAR} reference, or configure backend.sentinel instead (or backend.cluster for a Valkey Cluster)")
	case b.Kind == "valkey" && b.URL != "":
		b.URL = c.backendURL(b.URL)
	}
	if b.Kind == "memory" && b.AllowEviction {
		c.fail("backend.allow_eviction", "not used by kind memory; remove it or set kind: valkey")
	}
	b.Sentinel = c.sentinel(b.Kind, b.Sentinel)
	b.Cluster = c.cluster(b.Kind, b.Cluster)
	if b.Namespace == "" {
		b.Namespace = DefaultNamespace
	} else if !namespaceRE.MatchString(b.Namespace) {
		c.fail("backend.namespace", "must be 1 to %d characters of A-Z a-z 0-9 : . _ -", maxNamespaceLength)
	}
	switch t := b.Timeout.D(); {
	case t == 0:
		b.Timeout = Duration(DefaultTimeout)
	case t < MinTimeout || t > MaxTimeout:
		c.fail("backend.timeout", "%s is out of bounds; write %s to %s", b.Timeout, Duration(MinTimeout), Duration(MaxTimeout))
	}
	b.Replication = c.replication(b.Kind, b.Timeout.D(), b.Replication)
	return b
}

// Bounds of backend.sentinel and backend.replication.
const (
	MaxSentinels      = 16
	MaxMinReplicas    = 16
	DefaultAckTimeout = 100 * time.Millisecond
)

// sentinel checks backend.sentinel and resolves its password references.
func (c *compiler) sentinel(kind string, s *SentinelConfig) *SentinelConfig {
	const path = "backend.sentinel"
	if s == nil {
		return nil
	}
	if kind != "valkey" {
		c.fail(path, "not used by kind %s; remove it or set kind: valkey", kind)
		return nil
	}
	out := *s
	if s.MasterName == "" {
		c.fail(path+".master_name", "required; write the name the Sentinels monitor (their `sentinel monitor <name> ...` line)")
	} else if !namespaceRE.MatchString(s.MasterName) {
		c.fail(path+".master_name", "must be 1 to %d characters of A-Z a-z 0-9 : . _ -", maxNamespaceLength)
	}
	c.addresses(path+".addresses", s.Addresses, "Sentinel", MaxSentinels, "10.0.0.31:26379")
	out.Password = c.passwordEnv(path+".password_env", s.PasswordEnv, "the Sentinels' password")
	out.MasterPassword = c.passwordEnv(path+".master_password_env", s.MasterPasswordEnv, "the Valkey password")
	return &out
}

// MaxClusterSeeds bounds backend.cluster.addresses (the client learns the other nodes).
const MaxClusterSeeds = 64

// cluster checks backend.cluster and resolves its password reference.
func (c *compiler) cluster(kind string, cl *ClusterConfig) *ClusterConfig {
	const path = "backend.cluster"
	if cl == nil {
		return nil
	}
	if kind != "valkey" {
		c.fail(path, "not used by kind %s; remove it or set kind: valkey", kind)
		return nil
	}
	out := *cl
	c.addresses(path+".addresses", cl.Addresses, "cluster node", MaxClusterSeeds, "10.0.0.41:6379")
	out.Password = c.passwordEnv(path+".password_env", cl.PasswordEnv, "the cluster nodes' password")
	return &out
}

// addresses checks a required list of host:port (Sentinels, cluster seed nodes): at least one,
// at most limit, each once.
func (c *compiler) addresses(path string, addrs []string, what string, limit int, example string) {
	switch n := len(addrs); {
	case n == 0:
		c.fail(path, "required; list the %ss as host:port, e.g. [%s, ...]", what, example)
	case n > limit:
		c.fail(path, "lists %d %ss; at most %d", n, what, limit)
	}
	seen := map[string]bool{}
	for i, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		p, perr := strconv.Atoi(port)
		switch {
		case err != nil || host == "" || perr != nil || p < 1 || p > 65535:
			c.fail(fmt.Sprintf("%s[%d]", path, i), "%q is not host:port; write it like %s", a, example)
		case seen[a]:
			c.fail(fmt.Sprintf("%s[%d]", path, i), "%q is listed twice; list each %s once", a, what)
		}
		seen[a] = true
	}
}

// passwordEnv resolves an optional *_env field naming an environment variable. No message
// may contain the variable's value.
func (c *compiler) passwordEnv(path, name, what string) string {
	if name == "" {
		return ""
	}
	if !envNameRE.MatchString(name) {
		c.fail(path, "invalid environment variable name; write NAME made of A-Z, 0-9 and _, not starting with a digit")
		return ""
	}
	v, ok := c.getenv(name)
	switch {
	case !ok:
		c.fail(path, "environment variable %s is not set; set it to %s", name, what)
	case v == "":
		c.fail(path, "environment variable %s is empty; set it to %s", name, what)
	}
	return v
}

// replication checks backend.replication and fills in its defaults. A nil result means async.
func (c *compiler) replication(kind string, storeTimeout time.Duration, r *ReplicationConfig) *ReplicationConfig {
	const path = "backend.replication"
	if r == nil {
		return nil
	}
	out := *r
	switch r.Mode {
	case "":
		c.fail(path+".mode", "required; write acknowledged (a write counts once min_replicas replicas confirmed it) or async (once the primary ran it)")
		return nil
	case ReplicationAsync:
		if r.MinReplicas != 0 {
			c.fail(path+".min_replicas", "not used by mode async; remove it or write mode: acknowledged")
		}
		if r.AckTimeout != 0 {
			c.fail(path+".ack_timeout", "not used by mode async; remove it or write mode: acknowledged")
		}
		return nil
	case ReplicationAcknowledged:
	default:
		c.fail(path+".mode", "%q is not a mode; write acknowledged or async", r.Mode)
		return nil
	}
	if kind != "valkey" {
		c.fail(path, "mode acknowledged needs kind valkey (the memory backend has no replicas); remove it or set kind: valkey")
		return nil
	}
	switch {
	case r.MinReplicas == 0:
		out.MinReplicas = 1
	case r.MinReplicas < 0 || r.MinReplicas > MaxMinReplicas:
		c.fail(path+".min_replicas", "%d is out of bounds; write 1 to %d", r.MinReplicas, MaxMinReplicas)
	}
	if r.AckTimeout == 0 {
		out.AckTimeout = Duration(min(DefaultAckTimeout, storeTimeout/2))
	}
	if t := out.AckTimeout.D(); t < time.Millisecond || t >= storeTimeout {
		c.fail(path+".ack_timeout", "is %s; it must be at least 1ms and shorter than backend.timeout (%s), which bounds the write and its acknowledgement together",
			out.AckTimeout, Duration(storeTimeout))
	}
	return &out
}

// backendURL resolves a whole-value ${ENV_VAR} reference and checks the scheme. No message
// here may contain the URL or the variable's value: either may carry a password.
func (c *compiler) backendURL(raw string) string {
	const path = "backend.url"
	v, from := raw, ""
	if strings.Contains(raw, "${") {
		if !strings.HasPrefix(raw, "${") || !strings.HasSuffix(raw, "}") || strings.Count(raw, "${") != 1 {
			c.fail(path, "an environment variable reference must be the whole value, exactly ${NAME}; put the whole URL in the variable")
			return ""
		}
		name := raw[2 : len(raw)-1]
		if !envNameRE.MatchString(name) {
			c.fail(path, "invalid environment variable name; write ${NAME} with NAME made of A-Z, 0-9 and _, not starting with a digit")
			return ""
		}
		val, ok := c.getenv(name)
		if !ok {
			c.fail(path, "environment variable %s is not set; set it to the Valkey URL", name)
			return ""
		}
		if val == "" {
			c.fail(path, "environment variable %s is empty; set it to the Valkey URL", name)
			return ""
		}
		v, from = val, fmt.Sprintf(" (in environment variable %s)", strings.TrimSpace(name))
	}
	lower := strings.ToLower(v)
	if !strings.HasPrefix(lower, "redis://") && !strings.HasPrefix(lower, "rediss://") {
		c.fail(path, "scheme must be redis:// or rediss://%s", from)
		return ""
	}
	u, err := url.Parse(v)
	if err != nil { // err's text quotes the URL: never include it
		c.fail(path, "not a valid URL%s; write redis://[user:password@]host:port", from)
		return ""
	}
	if u.Host == "" {
		c.fail(path, "has no host%s; write redis://[user:password@]host:port", from)
		return ""
	}
	return v
}

func (c *compiler) limits(l Limits) Limits {
	positive := func(path string, v, def, max int64) int64 {
		switch {
		case v == 0:
			return def
		case v < 0:
			c.fail(path, "%d is negative; write a positive whole number, or remove it for the default %d", v, def)
		case v > max:
			c.fail(path, "%d exceeds the maximum %d", v, max)
		}
		return v
	}
	l.MaxKeys = int(positive("limits.max_keys", int64(l.MaxKeys), DefaultMaxKeys, math.MaxInt32))
	l.MaxKeyLength = int(positive("limits.max_key_length", int64(l.MaxKeyLength), DefaultMaxKeyLength, MaxKeyLengthLimit))
	l.MaxActiveReservations = int(positive("limits.max_active_reservations", int64(l.MaxActiveReservations), DefaultMaxActiveReservations, math.MaxInt32))
	l.MaxBodyBytes = positive("limits.max_body_bytes", l.MaxBodyBytes, DefaultMaxBodyBytes, MaxBodyBytesLimit)
	return l
}

// keyLength refuses a max_key_length shorter than the keys the rules produce: every request
// would be denied as an invalid key.
func (c *compiler) keyLength(given Limits, rules []*CompiledRule) {
	if given.MaxKeyLength <= 0 {
		return // default (256) holds every key shape; negative already reported
	}
	need, by := 0, ""
	for _, r := range rules {
		n := subjectKeyLen
		if r.KeyMode == KeySubjectAndModel {
			n = subjectAndModelKeyLen
		}
		if n > need {
			need, by = n, fmt.Sprintf("rules[%d]", r.Index)
		}
	}
	if given.MaxKeyLength < need {
		c.fail("limits.max_key_length", "%d is shorter than the %d-byte keys %s produces; raise it to at least %d", given.MaxKeyLength, need, by, need)
	}
}

func (c *compiler) rules(rules []Rule) []*CompiledRule {
	switch {
	case len(rules) == 0:
		c.fail("rules", "at least one rule is required")
	case len(rules) > MaxRules:
		c.fail("rules", "%d rules; at most %d are allowed", len(rules), MaxRules)
	}
	out := make([]*CompiledRule, 0, len(rules))
	names := map[string]int{}
	catchAll := -1
	for i := range rules {
		path := fmt.Sprintf("rules[%d]", i)
		r := c.rule(path, i, &rules[i])
		if j, dup := names[r.Name]; dup && r.Name != "" {
			c.fail(path+".name", "%q is already the name of rules[%d]; names must be unique", r.Name, j)
		} else {
			names[r.Name] = i
		}
		if catchAll >= 0 {
			c.fail(path, "unreachable: rules[%d] (%q) has no match and takes every request first; move %q before it or remove it", catchAll, rules[catchAll].Name, r.Name)
		} else if rules[i].Match == nil {
			catchAll = i
		}
		out = append(out, r)
	}
	return out
}

func (c *compiler) rule(path string, i int, r *Rule) *CompiledRule {
	cr := &CompiledRule{Name: r.Name, Index: i, KeyMode: r.Key}
	switch {
	case r.Name == "":
		c.fail(path+".name", "required; name the rule with a-z, 0-9, '.', '_' or '-'")
	case !ruleNameRE.MatchString(r.Name):
		c.fail(path+".name", "%q is not a valid name; use 1 to 63 characters of a-z 0-9 . _ - starting with a letter or digit", r.Name)
	}
	switch r.Enforcement {
	case "":
		cr.Enforcement = EnforcementMeter
	case EnforcementMeter, EnforcementHard:
		cr.Enforcement = r.Enforcement
	default:
		c.fail(path+".enforcement", "%q is not an enforcement; write meter (charge what is used) or hard (clamp the forwarded output bound to the reservation)", r.Enforcement)
	}
	switch r.Key {
	case "":
		cr.KeyMode = KeySubject
	case KeySubject, KeySubjectAndModel:
	default:
		c.fail(path+".key", "%q is not a key mode; write subject or subject_and_model", r.Key)
	}
	if r.Match != nil {
		if r.Match.Subjects == nil && r.Match.Models == nil {
			c.fail(path+".match", "empty; list subjects and/or models, or remove match to match every request")
		}
		cr.subjects = c.nameSet(path+".match.subjects", r.Match.Subjects, MaxMatchEntries,
			"list at least one subject, or remove the key to match any subject")
		cr.models = c.nameSet(path+".match.models", r.Match.Models, MaxMatchEntries,
			"list at least one model, or remove the key to match any model")
	}
	if r.AllowedModels != nil {
		cr.AllowedModels = append([]string(nil), r.AllowedModels...)
		cr.allowed = c.nameSet(path+".allowed_models", r.AllowedModels, MaxAllowedModels,
			"list at least one model, or remove the key to allow any model")
		// A model the rule matches but does not allow would be refused on every request.
		if cr.models != nil && cr.allowed != nil {
			for k, m := range r.Match.Models {
				if m != "" && !cr.allowed[m] {
					c.fail(fmt.Sprintf("%s.match.models[%d]", path, k), "%q is matched but not in allowed_models, so every request for it would be refused; add it to allowed_models or remove it here", m)
				}
			}
		}
	}
	if cr.KeyMode == KeySubjectAndModel && cr.allowed == nil && cr.models == nil {
		// Issue 10, defect 5: every junk model string would mint a fresh budget and fill
		// max_keys for every tenant.
		c.fail(path+".allowed_models", "is required with key subject_and_model: without it one subject can create a quota key (and a fresh budget) per made-up model name and fill limits.max_keys for everyone; list the models (or match.models)")
	}
	quota, minCap, minAt := c.budgets(path, r)
	cr.Quota = quota
	c.estimation(path, r, cr, minCap, minAt)
	return cr
}

// nameSet validates a list of subjects or models: non-empty list, non-empty entries of at most
// MaxNameBytes, no duplicates, at most max entries. A nil list means "any" and returns nil.
// Entries are not echoed: subjects are identities.
func (c *compiler) nameSet(path string, list []string, max int, emptyFix string) map[string]bool {
	if list == nil {
		return nil
	}
	if len(list) == 0 {
		c.fail(path, "empty list; %s", emptyFix)
		return map[string]bool{}
	}
	if len(list) > max {
		c.fail(path, "%d entries; at most %d are allowed", len(list), max)
	}
	set := make(map[string]bool, len(list))
	first := map[string]int{}
	for k, v := range list {
		at := fmt.Sprintf("%s[%d]", path, k)
		switch {
		case v == "":
			c.fail(at, "empty; remove it")
		case len(v) > MaxNameBytes:
			c.fail(at, "%d bytes; at most %d are allowed", len(v), MaxNameBytes)
		}
		if j, dup := first[v]; dup {
			c.fail(at, "duplicates %s[%d]; remove one", path, j)
			continue
		}
		first[v] = k
		set[v] = true
	}
	return set
}

// budgets validates windows, capacities and the lease, and returns the quota with the smallest
// valid capacity (and where it is) for the estimate checks. minCap is 0 when no capacity is
// valid, which skips those checks rather than reporting them twice.
func (c *compiler) budgets(path string, r *Rule) (q *Quota, minCap int64, minAt string) {
	q = &Quota{Rule: r.Name, Lease: r.ReservationTimeout.D()}
	switch {
	case len(r.Budgets) == 0:
		c.fail(path+".budgets", "at least one budget is required, e.g. [{window: 60s, capacity: 1000}]")
	case len(r.Budgets) > MaxBudgets:
		c.fail(path+".budgets", "%d budgets; at most %d windows per rule", len(r.Budgets), MaxBudgets)
	}
	windows := map[time.Duration]int{}
	for k, b := range r.Budgets {
		at := fmt.Sprintf("%s.budgets[%d]", path, k)
		w := b.Window.D()
		switch {
		case w == 0:
			c.fail(at+".window", "required; write a duration such as 60s")
		case w < MinWindow:
			c.fail(at+".window", "%s is shorter than the minimum %s", b.Window, Duration(MinWindow))
		case w > MaxWindow:
			c.fail(at+".window", "%s is longer than the maximum %s (7 days)", b.Window, Duration(MaxWindow))
		}
		if j, dup := windows[w]; dup && w != 0 {
			c.fail(at+".window", "%s duplicates budgets[%d]; each window may appear once per rule", b.Window, j)
		} else {
			windows[w] = k
		}
		switch {
		case b.Capacity <= 0:
			c.fail(at+".capacity", "must be a positive whole number of tokens")
		case b.Capacity > MaxCapacity:
			c.fail(at+".capacity", "%d exceeds the maximum %d (2^53)", b.Capacity, MaxCapacity)
		case minCap == 0 || b.Capacity < minCap:
			minCap, minAt = b.Capacity, fmt.Sprintf("budgets[%d]", k)
		}
		q.Budgets = append(q.Budgets, Budget{Window: w, Capacity: b.Capacity})
	}
	switch l := q.Lease; {
	case l == 0:
		q.Lease = DefaultLease
	case l < MinLease || l > MaxLease:
		c.fail(path+".reservation_timeout", "%s is out of bounds; write %s to %s", r.ReservationTimeout, Duration(MinLease), Duration(MaxLease))
	}
	return q, minCap, minAt
}

// unusedFields lists, per strategy, the estimation fields it does not read. Setting one is an
// error (upstream review: silently ignored knobs hide a leftover after a strategy change).
var unusedFields = map[Strategy][]string{
	StrategyFixed:              {"model_multipliers", "default_multiplier", "bytes_per_token"},
	StrategyMaxTokens:          {"model_multipliers", "default_multiplier", "bytes_per_token"},
	StrategyInputPlusMaxTokens: {"model_multipliers", "default_multiplier"},
	StrategyModelScaled:        {"bytes_per_token"},
}

func (c *compiler) estimation(path string, r *Rule, cr *CompiledRule, minCap int64, minAt string) {
	cr.Multiplier, cr.DefaultMultiplier, cr.BytesPerToken = DefaultMultiplier, DefaultMultiplier, DefaultBytesPerToken
	switch {
	case r.ReservedTokens != nil && r.Estimation != nil:
		c.fail(path, "reserved_tokens and estimation are both set; keep one (reserved_tokens: N is estimation {strategy: fixed, fallback_estimate: N})")
		return
	case r.ReservedTokens == nil && r.Estimation == nil:
		c.fail(path, "no estimate; add reserved_tokens: N or an estimation block")
		return
	case r.ReservedTokens != nil:
		n := *r.ReservedTokens
		cr.Strategy, cr.FallbackEstimate, cr.fixedEstimate = StrategyFixed, n, n
		c.tokens(path+".reserved_tokens", "estimate", n, minCap, minAt)
		return
	}
	e, ep := r.Estimation, path+".estimation"
	cr.Strategy = e.Strategy
	unused, known := unusedFields[e.Strategy]
	switch {
	case e.Strategy == "":
		c.fail(ep+".strategy", "required; write %s", strategies)
	case !known:
		c.fail(ep+".strategy", "%q is not a strategy; write %s", e.Strategy, strategies)
	}
	present := map[string]bool{
		"model_multipliers":  e.ModelMultipliers != nil,
		"default_multiplier": e.DefaultMultiplier != nil,
		"bytes_per_token":    e.BytesPerToken != nil,
	}
	for _, f := range unused {
		if present[f] {
			c.fail(ep+"."+f, "not accepted by strategy %s; remove it", e.Strategy)
		}
	}
	cr.Multiplier = c.factor(ep+".multiplier", e.Multiplier, DefaultMultiplier)
	if e.Strategy == StrategyModelScaled {
		cr.DefaultMultiplier = c.factor(ep+".default_multiplier", e.DefaultMultiplier, DefaultMultiplier)
		cr.ModelMultipliers = c.modelMultipliers(ep+".model_multipliers", e.ModelMultipliers)
	}
	if e.Strategy == StrategyInputPlusMaxTokens {
		cr.BytesPerToken = c.factor(ep+".bytes_per_token", e.BytesPerToken, DefaultBytesPerToken)
	}
	if e.FallbackEstimate == nil {
		// Required for every strategy, unlike upstream: see Estimate.
		c.fail(ep+".fallback_estimate", "required: the estimate of a request that states no max_tokens; add fallback_estimate: N")
		return
	}
	cr.FallbackEstimate = *e.FallbackEstimate
	if !c.tokens(ep+".fallback_estimate", "fallback_estimate", cr.FallbackEstimate, minCap, minAt) || !known {
		return
	}
	// The estimate of a request without max_tokens must fit, or such requests could never be
	// admitted. For fixed that is every request.
	mult, what := cr.Multiplier, "ceil(fallback_estimate × multiplier)"
	if e.Strategy == StrategyModelScaled {
		mult, what = cr.Multiplier*cr.DefaultMultiplier, "ceil(fallback_estimate × default_multiplier × multiplier)"
	}
	est := scale(float64(cr.FallbackEstimate), mult)
	if e.Strategy == StrategyFixed {
		cr.fixedEstimate = est
	}
	if minCap > 0 && est > minCap {
		c.fail(ep, "estimate %d (%s) exceeds capacity %d of %s; lower it or raise the capacity", est, what, minCap, minAt)
	}
}

// tokens checks a token count used as an estimate; it reports whether the value is valid.
func (c *compiler) tokens(path, noun string, n, minCap int64, minAt string) bool {
	switch {
	case n <= 0:
		c.fail(path, "must be a positive whole number of tokens")
	case n > MaxCapacity:
		c.fail(path, "%d exceeds the maximum %d (2^53)", n, MaxCapacity)
	case minCap > 0 && n > minCap:
		c.fail(path, "%s %d exceeds capacity %d of %s; lower it or raise the capacity", noun, n, minCap, minAt)
	default:
		return true
	}
	return false
}

// factor validates an optional multiplier-like number: absent means def.
func (c *compiler) factor(path string, v *float64, def float64) float64 {
	if v == nil {
		return def
	}
	if !validFactor(*v) {
		c.fail(path, "must be a finite number greater than 0")
		return def
	}
	return *v
}

func validFactor(f float64) bool { return f > 0 && !math.IsInf(f, 0) && !math.IsNaN(f) }

func (c *compiler) modelMultipliers(path string, m map[string]float64) map[string]float64 {
	if m == nil {
		return nil
	}
	if len(m) == 0 {
		c.fail(path, "empty; list model: multiplier pairs, or remove it to use default_multiplier for every model")
		return nil
	}
	if len(m) > MaxMatchEntries {
		c.fail(path, "%d models; at most %d are allowed", len(m), MaxMatchEntries)
	}
	models := make([]string, 0, len(m))
	for k := range m {
		models = append(models, k)
	}
	sort.Strings(models) // deterministic error order
	out := make(map[string]float64, len(m))
	for _, k := range models {
		at := strictyaml.JoinPath(path, strictyaml.KeySegment(k))
		switch {
		case k == "":
			c.fail(at, "empty model name; remove it")
		case len(k) > MaxNameBytes:
			c.fail(at, "model name of %d bytes; at most %d are allowed", len(k), MaxNameBytes)
		case !validFactor(m[k]):
			c.fail(at, "must be a finite number greater than 0")
		default:
			out[k] = m[k]
		}
	}
	return out
}
