package altgateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"
)

// Config is the gateway's JSON config file.
type Config struct {
	Bind       string    `json:"bind"`        // host:port of the chat API
	HealthBind string    `json:"health_bind"` // host:port of /live and /ready
	Counter    Counter   `json:"counter"`
	Allowance  Allowance `json:"allowance"`
	Callers    []Caller  `json:"callers"`
	Backends   []string  `json:"backends"` // provider base URLs, used round-robin
	// ProbeCharge, test-only, makes the gateway a defective variant: every /live and /ready
	// probe charges this many tokens to the caller admitted last (a health check that runs a
	// canary admission on the counter it last touched). A foreign gateway whose probes spend
	// quota, for the tests that prove probe-no-quota fails it without inspection
	// (undertest/testdata/altgateway-probes-charge.yaml). Absent (0) in every other config.
	ProbeCharge int64 `json:"probe_charge,omitempty"`
}

// Counter is where the fixed-window counters live.
type Counter struct {
	Address          string `json:"address"`           // Valkey host:port
	PasswordVariable string `json:"password_variable"` // environment variable holding its password
	KeyPrefix        string `json:"key_prefix"`
	DeadlineMS       int    `json:"deadline_ms"` // per Valkey operation; past it the call is refused
}

// Allowance is every caller's budget: Tokens per fixed window of PeriodSeconds, each call
// charged ChargePerCall up front and corrected to its reported usage afterwards.
type Allowance struct {
	PeriodSeconds int   `json:"period_seconds"`
	Tokens        int64 `json:"tokens"`
	ChargePerCall int64 `json:"charge_per_call"`
}

// Caller is one Basic-Auth caller; its secret is in the environment variable SecretVariable.
type Caller struct {
	ID             string `json:"id"`
	SecretVariable string `json:"secret_variable"`
}

// Settings is a checked config with its secrets resolved.
type Settings struct {
	Config
	password string
	secrets  map[string]string // caller id -> secret
	deadline time.Duration
	period   time.Duration
}

// LoadConfig reads and checks the config file, resolving secrets from getenv.
func LoadConfig(path string, getenv func(string) (string, bool)) (*Settings, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("altgateway: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("altgateway: %s: %w", path, err)
	}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	for what, addr := range map[string]string{"bind": c.Bind, "health_bind": c.HealthBind, "counter.address": c.Counter.Address} {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			bad("%s %q is not host:port", what, addr)
		}
	}
	if c.Counter.DeadlineMS <= 0 {
		bad("counter.deadline_ms must be positive")
	}
	if c.Allowance.PeriodSeconds <= 0 || c.Allowance.Tokens <= 0 || c.Allowance.ChargePerCall <= 0 {
		bad("allowance.period_seconds, tokens and charge_per_call must all be positive")
	}
	if c.ProbeCharge < 0 {
		bad("probe_charge must not be negative")
	}
	if len(c.Backends) == 0 {
		bad("backends is empty: list at least one provider URL")
	}
	for _, b := range c.Backends {
		if u, err := url.Parse(b); err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			bad("backend %q is not an http(s) URL", b)
		}
	}
	s := &Settings{Config: c, secrets: map[string]string{},
		deadline: time.Duration(c.Counter.DeadlineMS) * time.Millisecond,
		period:   time.Duration(c.Allowance.PeriodSeconds) * time.Second}
	if c.Counter.PasswordVariable != "" {
		pw, ok := getenv(c.Counter.PasswordVariable)
		if !ok {
			bad("counter.password_variable: $%s is not set", c.Counter.PasswordVariable)
		}
		s.password = pw
	}
	if len(c.Callers) == 0 {
		bad("callers is empty")
	}
	for _, cl := range c.Callers {
		sec, ok := getenv(cl.SecretVariable)
		if cl.ID == "" || strings.Contains(cl.ID, ":") || !ok || sec == "" {
			bad("caller %q: needs an id without ':' and a set secret_variable", cl.ID)
			continue
		}
		s.secrets[cl.ID] = sec
	}
	if len(problems) > 0 {
		return nil, errors.New("altgateway: " + path + ": " + strings.Join(problems, "; "))
	}
	return s, nil
}
