package ledger

import (
	"errors"

	"go.yaml.in/yaml/v3"

	"github.com/quotaqual/quotaqual/internal/strictyaml"
)

// Policy is the token-quota configuration, decoded strictly from YAML by LoadPolicy.
//
//	backend:
//	  kind: valkey                  # memory | valkey
//	  url: ${QUOTAQUAL_VALKEY_URL}  # redis:// or rediss://, or exactly one whole ${ENV_VAR}
//	  namespace: quotaqual          # prefix of every store key
//	  timeout: 300ms                # bound on every store call
//	  # sentinel: {master_name: quotaqual, addresses: [host:26379, ...]}   # instead of url
//	  # cluster: {addresses: [host:6379, ...]}                             # instead of url
//	  # replication: {mode: acknowledged, min_replicas: 1, ack_timeout: 100ms}
//	limits:
//	  max_keys: 10000
//	  max_key_length: 256
//	  max_active_reservations: 10000
//	  max_body_bytes: 2097152
//	rules:
//	  - name: per-application-budget
//	    match: {subjects: [application-a], models: [gpt-x]}   # absent: matches every request
//	    key: subject                                         # subject | subject_and_model
//	    allowed_models: [gpt-x]                              # absent: any model
//	    budgets: [{window: 60s, capacity: 60}]               # 1 to 8 windows
//	    reservation_timeout: 30s
//	    reserved_tokens: 15            # shorthand for estimation {strategy: fixed, fallback_estimate: 15}
//	    # estimation: {strategy: max_tokens, multiplier: 1.2, fallback_estimate: 500}
type Policy struct {
	Backend BackendConfig `yaml:"backend"`
	Limits  Limits        `yaml:"limits"`
	Rules   []Rule        `yaml:"rules"`
}

// BackendConfig selects and configures the store.
type BackendConfig struct {
	Kind      string   `yaml:"kind"`      // "memory" (default) or "valkey"
	URL       string   `yaml:"url"`       // valkey only; never logged unredacted
	Namespace string   `yaml:"namespace"` // default "quotaqual"
	Timeout   Duration `yaml:"timeout"`   // default 300ms
	// AllowEviction (valkey only) accepts a store whose maxmemory-policy may evict keys; by
	// default such a store is refused at connect (every call fails closed, naming the policy).
	AllowEviction bool `yaml:"allow_eviction"`
	// Sentinel, instead of url: the Sentinels that name the primary and announce a promotion.
	Sentinel *SentinelConfig `yaml:"sentinel"`
	// Cluster, instead of url and sentinel: the seed nodes of a Valkey Cluster.
	Cluster *ClusterConfig `yaml:"cluster"`
	// Replication: whether an admission waits for replicas to acknowledge it (valkey only).
	Replication *ReplicationConfig `yaml:"replication"`
}

// SentinelConfig points the Valkey backend at a Sentinel-managed primary:
//
//	sentinel:
//	  master_name: quotaqual                    # the name the Sentinels monitor
//	  addresses: [10.0.0.31:26379, 10.0.0.32:26379, 10.0.0.33:26379]
//	  password_env: QQ_SENTINEL_PASSWORD        # optional: the Sentinels' AUTH
//	  master_password_env: QQ_VALKEY_PASSWORD   # optional: the primary's and replicas' AUTH
type SentinelConfig struct {
	MasterName        string   `yaml:"master_name"`
	Addresses         []string `yaml:"addresses"`
	PasswordEnv       string   `yaml:"password_env"`
	MasterPasswordEnv string   `yaml:"master_password_env"`

	// Resolved by Compile from the environment; never written in YAML.
	Password       string `yaml:"-"`
	MasterPassword string `yaml:"-"`
}

// ClusterConfig points the Valkey backend at a Valkey Cluster:
//
//	cluster:
//	  addresses: [10.0.0.41:6379, 10.0.0.42:6379, 10.0.0.43:6379]   # some or all nodes
//	  password_env: QQ_VALKEY_PASSWORD                              # optional: every node's AUTH
type ClusterConfig struct {
	Addresses   []string `yaml:"addresses"`
	PasswordEnv string   `yaml:"password_env"`

	// Resolved by Compile from the environment; never written in YAML.
	Password string `yaml:"-"`
}

// ReplicationConfig says when a write counts:
//
//	replication:
//	  mode: acknowledged    # async (default): as soon as the primary ran it
//	  min_replicas: 1       # acknowledged: this many replicas confirmed it (WAIT) ...
//	  ack_timeout: 100ms    # ... within this time, else the call fails closed
type ReplicationConfig struct {
	Mode        ReplicationMode `yaml:"mode"`
	MinReplicas int             `yaml:"min_replicas"`
	AckTimeout  Duration        `yaml:"ack_timeout"`
}

// ReplicationMode names when a write counts.
type ReplicationMode string

const (
	// ReplicationAsync: a write counts once the primary ran it (Valkey's own default).
	ReplicationAsync ReplicationMode = "async"
	// ReplicationAcknowledged: a write counts once min_replicas replicas acknowledged it.
	ReplicationAcknowledged ReplicationMode = "acknowledged"
)

// Limits bounds the state one ledger instance may hold. An absent field takes its default; a
// zero written in YAML is refused (see UnmarshalYAML).
type Limits struct {
	MaxKeys               int   `yaml:"max_keys"`                // default 100000
	MaxKeyLength          int   `yaml:"max_key_length"`          // default 256
	MaxActiveReservations int   `yaml:"max_active_reservations"` // default 200000
	MaxBodyBytes          int64 `yaml:"max_body_bytes"`          // default 2 MiB
}

// Limit defaults, the upstream filter's hard-coded bounds.
const (
	DefaultMaxKeys               = 100_000
	DefaultMaxKeyLength          = 256
	DefaultMaxActiveReservations = 200_000
	DefaultMaxBodyBytes          = 2 << 20
)

// UnmarshalYAML refuses an explicit zero. In Go a zero field means "absent, take the default",
// so without this check `max_keys: 0` (which a reader may take for "unlimited") would silently
// become 100000.
func (l *Limits) UnmarshalYAML(n *yaml.Node) error {
	var errs strictyaml.Errors
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if v.Kind == yaml.ScalarNode && v.ShortTag() == "!!int" {
				var x int64
				if v.Decode(&x) == nil && x == 0 {
					errs = append(errs, strictyaml.FieldError{Path: k.Value,
						Msg: "must be positive; remove it to use the default"})
				}
			}
		}
	}
	type plain Limits // no methods: decodes field by field without recursing here
	if err := strictyaml.DecodeNode(n, (*plain)(l)); err != nil {
		var es strictyaml.Errors
		if !errors.As(err, &es) {
			return err
		}
		errs = append(errs, es...)
	}
	if len(errs) > 0 {
		return errs
	}
	return nil
}

// Rule is one quota rule. Rules are tried in order; the first whose match holds applies.
type Rule struct {
	Name               string         `yaml:"name"`
	Match              *Match         `yaml:"match"`
	Key                KeyMode        `yaml:"key"`
	AllowedModels      []string       `yaml:"allowed_models"`
	Budgets            []BudgetConfig `yaml:"budgets"`
	ReservationTimeout Duration       `yaml:"reservation_timeout"` // default 30s
	ReservedTokens     *int64         `yaml:"reserved_tokens"`
	Estimation         *Estimation    `yaml:"estimation"`
	// Enforcement is meter (default) or hard; see Enforcement.
	Enforcement Enforcement `yaml:"enforcement"`
}

// Enforcement says what a rule's reservation bounds.
type Enforcement string

const (
	// EnforcementMeter (default): admission bounds what is reserved; settlement charges what
	// was used, which may exceed the reservation (the overage is charged, and later requests
	// wait until it leaves the window).
	EnforcementMeter Enforcement = "meter"
	// EnforcementHard: the gateway also clamps the output bound it forwards to what the
	// reservation leaves after the input estimate (OutputLimit), so with a provider that
	// honours the bound, settled usage never exceeds the reservation.
	EnforcementHard Enforcement = "hard"
)

// Match restricts a rule to authenticated subjects and/or models. Both lists must hold when
// both are given. Matching never looks at client-supplied headers other than the model.
type Match struct {
	Subjects []string `yaml:"subjects"`
	Models   []string `yaml:"models"`
}

// KeyMode says what a rule's quota key is made of.
type KeyMode string

const (
	KeySubject         KeyMode = "subject"           // the authenticated subject (default)
	KeySubjectAndModel KeyMode = "subject_and_model" // subject × model
)

// BudgetConfig is one window of a rule as written in YAML.
type BudgetConfig struct {
	Window   Duration `yaml:"window"`
	Capacity int64    `yaml:"capacity"`
}

// Estimation configures how a request's token estimate is computed before admission.
// Pointers distinguish "absent" from "zero" so that fields a strategy does not use can be
// rejected by name.
type Estimation struct {
	Strategy          Strategy           `yaml:"strategy"`
	Multiplier        *float64           `yaml:"multiplier"`
	FallbackEstimate  *int64             `yaml:"fallback_estimate"`
	ModelMultipliers  map[string]float64 `yaml:"model_multipliers"`
	DefaultMultiplier *float64           `yaml:"default_multiplier"`
	BytesPerToken     *float64           `yaml:"bytes_per_token"`
}

// Strategy names an estimation strategy.
type Strategy string

const (
	StrategyFixed              Strategy = "fixed"
	StrategyMaxTokens          Strategy = "max_tokens"
	StrategyInputPlusMaxTokens Strategy = "input_plus_max_tokens"
	StrategyModelScaled        Strategy = "model_scaled"
)

// RequestFacts is what estimation may look at: facts read from the request body.
type RequestFacts struct {
	Model               string
	MaxTokens           *int64 // body "max_tokens"
	MaxCompletionTokens *int64 // body "max_completion_tokens"
	Choices             *int64 // body "n": choices generated, each up to the output bound
	BodyBytes           int64  // length of the request body
}
