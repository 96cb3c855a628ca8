package gateway

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/internal/strictyaml"
	"github.com/quotaqual/quotaqual/ledger"
)

// Config is the gateway's configuration file, decoded strictly (unknown fields, duplicate keys
// and missing values are errors, each named by its path).
//
//	listen: 0.0.0.0:8080          # data port: POST /v1/chat/completions
//	admin_listen: 0.0.0.0:9090    # /metrics, /healthz, /readyz, /admin/quota
//	upstream_timeout: 60s         # whole forwarded request, streaming included (default 60s)
//	shutdown_timeout: 10s         # SIGTERM drain deadline (default 10s)
//	lease_renewal: true           # renew reservations every lease/3 while in flight (default true)
//	server:                       # bounds of the data port (defaults shown)
//	  request_read_timeout: 10s   # a request's headers and body must arrive within this
//	  write_timeout: 10s          # each write to a client must complete within this
//	  max_header_bytes: 65536
//	  max_connections: 1024       # concurrent data connections; more wait to be accepted
//	  max_in_flight_per_subject: 64  # requests of one subject at once; more get 429
//	auth:
//	  realm: quotaqual            # WWW-Authenticate realm (default quotaqual)
//	  basic:
//	    - username: application-a
//	      password_env: QQ_PASSWORD_1      # or password_sha256: <64 hex>
//	  api_keys:
//	    - subject: batch-job
//	      key_env: QQ_API_KEY_1            # or key_sha256: <64 hex>
//	providers:
//	  - site: west
//	    url: http://198.18.0.21:8000
//	quota: {...}                  # ledger.Policy
type Config struct {
	Listen          string           `yaml:"listen"`
	AdminListen     string           `yaml:"admin_listen"`
	UpstreamTimeout *ledger.Duration `yaml:"upstream_timeout"`
	ShutdownTimeout *ledger.Duration `yaml:"shutdown_timeout"`
	LeaseRenewal    *bool            `yaml:"lease_renewal"`
	Server          ServerConfig     `yaml:"server"`
	Auth            AuthConfig       `yaml:"auth"`
	Providers       []ProviderConfig `yaml:"providers"`
	Quota           ledger.Policy    `yaml:"quota"`

	// Filled in by LoadConfig.
	compiled        *ledger.CompiledPolicy
	auth            *authenticator
	upstreamTimeout time.Duration
	shutdownTimeout time.Duration
}

// ServerConfig bounds what clients can hold on the data port. Zero values take the defaults.
type ServerConfig struct {
	// RequestReadTimeout bounds the arrival of a request's headers and body: a client that
	// announces a body and sends none (or sends it slowly) is answered or cut off in bounded
	// time, before or after authentication.
	RequestReadTimeout *ledger.Duration `yaml:"request_read_timeout"`
	// WriteTimeout bounds each write to the client: one that stops reading a stream is cut off,
	// and its request settles as a client disconnect instead of holding its lease.
	WriteTimeout *ledger.Duration `yaml:"write_timeout"`
	// MaxHeaderBytes bounds the request headers.
	MaxHeaderBytes int `yaml:"max_header_bytes"`
	// MaxConnections bounds concurrent data connections.
	MaxConnections int `yaml:"max_connections"`
	// MaxInFlightPerSubject bounds one subject's concurrent requests, so one tenant cannot
	// take every connection and goroutine.
	MaxInFlightPerSubject int `yaml:"max_in_flight_per_subject"`

	readTimeout, writeTimeout time.Duration
}

// AuthConfig lists the credentials the gateway accepts.
type AuthConfig struct {
	Realm   string       `yaml:"realm"`
	Basic   []BasicUser  `yaml:"basic"`
	APIKeys []APIKeyUser `yaml:"api_keys"`
}

// BasicUser is one HTTP Basic user. The username is the authenticated subject.
type BasicUser struct {
	Username       string `yaml:"username"`
	PasswordEnv    string `yaml:"password_env"`
	PasswordSHA256 string `yaml:"password_sha256"`
}

// APIKeyUser is one bearer API key and the subject it authenticates as.
type APIKeyUser struct {
	Subject   string `yaml:"subject"`
	KeyEnv    string `yaml:"key_env"`
	KeySHA256 string `yaml:"key_sha256"`
}

// ProviderConfig is one upstream provider.
type ProviderConfig struct {
	Site string `yaml:"site"`
	URL  string `yaml:"url"`
}

// Defaults.
const (
	DefaultUpstreamTimeout = 60 * time.Second
	DefaultShutdownTimeout = 10 * time.Second
	DefaultRealm           = "quotaqual"

	DefaultRequestReadTimeout    = 10 * time.Second
	DefaultWriteTimeout          = 10 * time.Second
	DefaultMaxHeaderBytes        = 64 << 10
	DefaultMaxConnections        = 1024
	DefaultMaxInFlightPerSubject = 64
	maxServerBound               = 1 << 20
	maxProviders                 = 64
	maxCredentials               = 100_000
	maxSubjectBytes              = 256
)

// LeaseRenewalEnabled reports whether leases are renewed (the default).
func (c *Config) LeaseRenewalEnabled() bool { return c.LeaseRenewal == nil || *c.LeaseRenewal }

// UpstreamTimeoutD is the effective upstream timeout (after LoadConfig).
func (c *Config) UpstreamTimeoutD() time.Duration { return c.upstreamTimeout }

// ShutdownTimeoutD is the effective shutdown timeout (after LoadConfig).
func (c *Config) ShutdownTimeoutD() time.Duration { return c.shutdownTimeout }

// Policy returns the compiled quota policy (after LoadConfig).
func (c *Config) Policy() *ledger.CompiledPolicy { return c.compiled }

// LoadConfig reads, decodes and validates the gateway configuration at path. getenv resolves
// password_env, key_env and the policy's ${ENV} references (nil means os.LookupEnv). The error
// lists every problem with its path and the fix; it never contains a secret's value.
func LoadConfig(path string, getenv func(string) (string, bool)) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the gateway config: %w", err)
	}
	cfg, err := ParseConfig(data, getenv)
	if err != nil {
		return nil, fmt.Errorf("gateway config %s:\n%w", path, err)
	}
	return cfg, nil
}

// ParseConfig is LoadConfig on bytes.
func ParseConfig(data []byte, getenv func(string) (string, bool)) (*Config, error) {
	if getenv == nil {
		getenv = os.LookupEnv
	}
	var cfg Config
	if err := strictyaml.Decode(data, &cfg); err != nil {
		return nil, err
	}
	v := &validator{getenv: getenv}
	v.validate(&cfg)
	if len(v.errs) > 0 {
		return nil, v.errs
	}
	return &cfg, nil
}

type validator struct {
	getenv func(string) (string, bool)
	errs   strictyaml.Errors
}

func (v *validator) fail(path, format string, args ...any) {
	v.errs = append(v.errs, strictyaml.FieldError{Path: path, Msg: fmt.Sprintf(format, args...)})
}

func (v *validator) validate(c *Config) {
	v.listenAddr("listen", c.Listen, "0.0.0.0:8080")
	v.listenAddr("admin_listen", c.AdminListen, "0.0.0.0:9090")
	if c.Listen != "" && c.Listen == c.AdminListen && !strings.HasSuffix(c.Listen, ":0") {
		v.fail("admin_listen", "is the same address as listen; the admin port must be separate (for example 0.0.0.0:9090)")
	}
	c.upstreamTimeout = v.timeout("upstream_timeout", c.UpstreamTimeout, DefaultUpstreamTimeout)
	c.shutdownTimeout = v.timeout("shutdown_timeout", c.ShutdownTimeout, DefaultShutdownTimeout)
	v.server(&c.Server)
	v.auth(c)
	v.providers(c)

	compiled, err := c.Quota.Compile(v.getenv)
	if err != nil {
		var es strictyaml.Errors
		if errors.As(err, &es) {
			v.errs = append(v.errs, es.Prefix("quota")...)
		} else {
			v.fail("quota", "%v", err)
		}
		return
	}
	c.compiled = compiled
	v.leases(c)
}

func (v *validator) server(sc *ServerConfig) {
	sc.readTimeout = v.timeout("server.request_read_timeout", sc.RequestReadTimeout, DefaultRequestReadTimeout)
	sc.writeTimeout = v.timeout("server.write_timeout", sc.WriteTimeout, DefaultWriteTimeout)
	bound := func(path string, n *int, def int) {
		switch {
		case *n == 0:
			*n = def
		case *n < 0 || *n > maxServerBound:
			v.fail(path, "is %d; use 1 to %d, or remove it for the default %d", *n, maxServerBound, def)
		}
	}
	bound("server.max_header_bytes", &sc.MaxHeaderBytes, DefaultMaxHeaderBytes)
	bound("server.max_connections", &sc.MaxConnections, DefaultMaxConnections)
	bound("server.max_in_flight_per_subject", &sc.MaxInFlightPerSubject, DefaultMaxInFlightPerSubject)
}

func (v *validator) timeout(path string, d *ledger.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	if *d <= 0 {
		v.fail(path, "must be positive; remove it for the default %s", ledger.Duration(def))
		return def
	}
	return d.D()
}

func (v *validator) listenAddr(path, addr, example string) {
	if addr == "" {
		v.fail(path, "is required; give a host:port such as %s", example)
		return
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		v.fail(path, "%q is not host:port; write it like %s", addr, example)
		return
	}
	if host != "" && net.ParseIP(host) == nil && strings.ContainsAny(host, " /") {
		v.fail(path, "host %q is not an IP address or hostname; write it like %s", host, example)
	}
	if p, err := strconv.ParseUint(port, 10, 16); err != nil || (p == 0 && port != "0") {
		v.fail(path, "port %q is not a number from 0 to 65535; write it like %s", port, example)
	}
}

func (v *validator) auth(c *Config) {
	a := &c.Auth
	if a.Realm == "" {
		a.Realm = DefaultRealm
	}
	if strings.ContainsAny(a.Realm, "\"\\") || hasControl(a.Realm) {
		v.fail("auth.realm", "must not contain quotes, backslashes or control characters; use plain text such as quotaqual")
	}
	if len(a.Basic)+len(a.APIKeys) == 0 {
		v.fail("auth", "has no credentials; add at least one user under auth.basic or key under auth.api_keys")
	}
	if len(a.Basic)+len(a.APIKeys) > maxCredentials {
		v.fail("auth", "has %d credentials; at most %d are supported", len(a.Basic)+len(a.APIKeys), maxCredentials)
	}
	users := make(map[string][sha256.Size]byte, len(a.Basic))
	for i, u := range a.Basic {
		p := fmt.Sprintf("auth.basic[%d]", i)
		switch {
		case u.Username == "":
			v.fail(p+".username", "is required; it is the authenticated subject")
		case len(u.Username) > maxSubjectBytes:
			v.fail(p+".username", "is %d bytes; at most %d", len(u.Username), maxSubjectBytes)
		case strings.ContainsRune(u.Username, ':') || hasControl(u.Username):
			v.fail(p+".username", "must not contain ':' or control characters (Basic auth splits at the first ':')")
		default:
			if _, dup := users[u.Username]; dup {
				v.fail(p+".username", "%q is listed twice; list each user once", u.Username)
			}
		}
		digest, ok := v.secret(p, "password", u.PasswordEnv, u.PasswordSHA256)
		if ok {
			users[u.Username] = digest
		}
	}
	var keys []apiKey
	seenKey := map[[sha256.Size]byte]bool{}
	for i, k := range a.APIKeys {
		p := fmt.Sprintf("auth.api_keys[%d]", i)
		switch {
		case k.Subject == "":
			v.fail(p+".subject", "is required; it is the authenticated subject this key stands for")
		case len(k.Subject) > maxSubjectBytes:
			v.fail(p+".subject", "is %d bytes; at most %d", len(k.Subject), maxSubjectBytes)
		case hasControl(k.Subject):
			v.fail(p+".subject", "must not contain control characters")
		}
		digest, ok := v.secret(p, "key", k.KeyEnv, k.KeySHA256)
		if ok {
			if seenKey[digest] {
				v.fail(p, "uses the same key as an earlier entry; give every subject its own key")
			}
			seenKey[digest] = true
			keys = append(keys, apiKey{subject: k.Subject, digest: digest})
		}
	}
	c.auth = newAuthenticator(a.Realm, users, keys)
}

// secret resolves exactly one of <what>_env or <what>_sha256 to a SHA-256 digest. Errors name
// the variable, never its value.
func (v *validator) secret(p, what, env, hexDigest string) ([sha256.Size]byte, bool) {
	var d [sha256.Size]byte
	envField, shaField := p+"."+what+"_env", p+"."+what+"_sha256"
	switch {
	case env != "" && hexDigest != "":
		v.fail(p, "sets both %s_env and %s_sha256; keep one", what, what)
		return d, false
	case env == "" && hexDigest == "":
		v.fail(p, "has no %s; set %s_env (an environment variable holding it) or %s_sha256 (its SHA-256 in hex)", what, what, what)
		return d, false
	case env != "":
		val, ok := v.getenv(env)
		if !ok {
			v.fail(envField, "environment variable %s is not set; export it before starting the gateway", env)
			return d, false
		}
		if val == "" {
			v.fail(envField, "environment variable %s is empty; set it to the %s", env, what)
			return d, false
		}
		return sha256.Sum256([]byte(val)), true
	default:
		b, err := hex.DecodeString(hexDigest)
		if err != nil || len(b) != sha256.Size {
			v.fail(shaField, "must be 64 hexadecimal characters (the SHA-256 of the %s, e.g. from `printf %%s \"$SECRET\" | sha256sum`)", what)
			return d, false
		}
		copy(d[:], b)
		return d, true
	}
}

func (v *validator) providers(c *Config) {
	if len(c.Providers) == 0 {
		v.fail("providers", "is empty; list at least one provider with a site and a url")
		return
	}
	if len(c.Providers) > maxProviders {
		v.fail("providers", "has %d entries; at most %d", len(c.Providers), maxProviders)
	}
	sites := map[string]bool{}
	for i, p := range c.Providers {
		path := fmt.Sprintf("providers[%d]", i)
		switch {
		case p.Site == "":
			v.fail(path+".site", "is required; name the provider's site (it is reported in x-quotaqual-provider-site)")
		case !validSite(p.Site):
			v.fail(path+".site", "%q is not a valid site name; use 1-63 of a-z, A-Z, 0-9, '.', '_', '-'", p.Site)
		case sites[p.Site]:
			v.fail(path+".site", "%q is listed twice; give every provider its own site name", p.Site)
		}
		sites[p.Site] = true
		u, err := url.Parse(p.URL)
		switch {
		case p.URL == "":
			v.fail(path+".url", "is required; write it like http://10.0.0.5:8000")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			v.fail(path+".url", "must be an http:// or https:// URL with a host, like http://10.0.0.5:8000")
		case u.User != nil:
			v.fail(path+".url", "must not contain credentials; the gateway never forwards credentials")
		case u.RawQuery != "" || u.Fragment != "":
			v.fail(path+".url", "must not have a query or fragment; give the base URL only")
		}
	}
}

// leases checks that every reservation lease covers a request, so a long request can never
// lose its hold mid-flight and let another request over-admit.
func (v *validator) leases(c *Config) {
	storeTimeout := c.compiled.Backend.Timeout.D()
	up := c.upstreamTimeout
	for _, r := range c.compiled.Rules {
		lease := r.Quota.Lease
		path := fmt.Sprintf("quota.rules[%d].reservation_timeout", r.Index)
		if c.LeaseRenewalEnabled() {
			// Renewal every lease/3; a renewal may take up to the store timeout and one may fail,
			// so the lease must outlast two renewal intervals plus a failing call.
			min := 3*storeTimeout + time.Second
			if lease < min {
				v.fail(path, "is %s; with lease_renewal the lease must be at least 3 × quota.backend.timeout + 1s = %s (rule %s)",
					ledger.Duration(lease), ledger.Duration(min), r.Name)
			}
		} else if up >= lease {
			v.fail(path, "is %s but upstream_timeout is %s: without lease_renewal a request may outlive its reservation and over-admit; enable lease_renewal or make reservation_timeout longer than upstream_timeout (rule %s)",
				ledger.Duration(lease), ledger.Duration(up), r.Name)
		}
	}
}

func validSite(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !(b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= '0' && b <= '9' || b == '.' || b == '_' || b == '-') {
			return false
		}
	}
	return true
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}
