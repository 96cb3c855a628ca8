package scenarios

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/httpget"
	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
)

// RuleName is the qualification's one quota rule.
const RuleName = undertest.RuleName

// Env is what a scenario may use: the topology (HTTP clients, endpoints, levers), the run's
// deployment (credentials, by scenario and subject label), the profile, and the recorders.
type Env struct {
	Topo       topology.Topology
	Deployment *deployment.Deployment
	Profile    deployment.Profile
	// Gateway is the gateway under test: what to expect of it and what it offers. Nil means
	// quotaqual's own gateway (undertest.Default).
	Gateway *undertest.Profile
	// Load, when set, is the load sustained-load drives instead of the profile's.
	Load *SustainedLoad
	// Record receives every HTTP exchange a scenario makes (labels only, never credentials).
	Record func(evidence.RequestRecord)
	// Progress receives short human-readable progress lines, each naming its scenario; may be
	// nil. Scenarios run side by side call it from several goroutines.
	Progress func(string)
	// Finished, when set, receives each scenario's result as soon as it is decided (one call
	// at a time; scenarios finish in any order).
	Finished func(evidence.ScenarioResult)
	// WorkDir is the run's own directory (memory-backed on netns; docs/secrets.md), where a
	// scenario may copy files that could hold a secret (the components' logs); empty: the
	// system's temporary directory.
	WorkDir string

	// OwnTopology, when set, gives each scenario that pulls a lever or drives a load
	// (Scenario.Exclusive) a topology of its own, instead of the run's topology to itself one
	// after another: it brings one up for sc (the same spec as the run's, under its own run id,
	// host names and work directory), and done collects what the bundle needs of it and tears
	// it down once sc has finished. Those scenarios run side by side with the others, at most
	// OwnTopologies at once.
	OwnTopology   func(ctx context.Context, sc Scenario) (own OwnTopology, done func(), err error)
	OwnTopologies int

	scenario string  // set by Run for the scenario being run
	current  *Result // the scenario's result, so a panic keeps its partial facts
	share    func()  // set by Run for an exclusive scenario: hands the topology back early
}

// ShareTopology tells the runner that this exclusive scenario has released its lever and the
// topology is whole again (every gateway serving on its own store and policy), so scenarios
// that pull no lever may run beside the rest of it (its waits). It does nothing for a
// scenario that already shares the topology, or when called again.
func (env *Env) ShareTopology() {
	if env.share != nil {
		env.share()
	}
}

// recordMu serialises Record calls: scenarios record from concurrent goroutines and the
// recorder (the evidence writer) need not be safe for concurrent use.
var recordMu sync.Mutex

func (env *Env) forScenario(name string) *Env {
	e := *env
	e.scenario = name
	e.current = nil
	e.share = nil
	return &e
}

// gateway is the profile of the gateway under test.
func (env *Env) gateway() *undertest.Profile {
	if env == nil || env.Gateway == nil {
		return defaultGateway
	}
	return env.Gateway
}

var defaultGateway = undertest.Default()

// inspects reports whether the gateway under test reports quota state.
func (env *Env) inspects() bool { return env.gateway().Inspects() }

// NewResult starts the scenario's result.
func (env *Env) NewResult() *Result {
	r := NewResult()
	env.current = r
	return r
}

func (env *Env) progress(msg string) {
	if env != nil && env.Progress != nil {
		env.Progress(msg)
	}
}

// Progressf reports one progress line prefixed with the scenario's name.
func (env *Env) Progressf(format string, args ...any) {
	env.progress(env.scenario + ": " + fmt.Sprintf(format, args...))
}

func (env *Env) record(rec evidence.RequestRecord) {
	if env.Record == nil {
		return
	}
	recordMu.Lock()
	defer recordMu.Unlock()
	env.Record(rec)
}

// Deadlines, all derived from the profile.

// requestTimeout bounds one chat request: the provider's longest hold plus generous slack for
// the store and the machine.
func requestTimeout(p deployment.Profile) time.Duration {
	return 5*time.Second + 4*p.StoreTimeout + p.TTFT + time.Duration(p.CompletionTokens)*p.InterToken + longestHold(p)
}

// adminTimeout bounds one admin request (quota inspection, provider call log, probes).
func adminTimeout(p deployment.Profile) time.Duration {
	return 2*time.Second + 4*p.StoreTimeout
}

// scenarioDeadline bounds a whole scenario.
func scenarioDeadline(p deployment.Profile) time.Duration {
	return 60*time.Second + 2*p.RecoveryMax + 4*p.Window + 4*requestTimeout(p)
}

// bucketWidth is the gateway's accounting bucket for a window (its profile's granularity; for
// quotaqual's ledger one second up to a minute, window/60 rounded up to whole seconds beyond).
func (env *Env) bucketWidth(window time.Duration) time.Duration {
	return env.gateway().Granularity(window)
}

// errPollDeadline is returned by poll when its limit passed before fn reported done.
var errPollDeadline = errors.New("deadline passed")

// poll calls fn, then again every interval, until fn reports done, fn fails, ctx ends or
// limit has passed since the start. fn is called at least once. It never sleeps past the
// deadline and re-checks the deadline after every wake-up.
func poll(ctx context.Context, interval, limit time.Duration, fn func(ctx context.Context) (bool, error)) (tries int, err error) {
	deadline := time.Now().Add(limit)
	for {
		tries++
		done, err := fn(ctx)
		if err != nil {
			return tries, err
		}
		if done {
			return tries, nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return tries, fmt.Errorf("after %d tries in %s: %w", tries, limit, errPollDeadline)
		}
		wait := interval
		if wait > left {
			wait = left
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return tries, ctx.Err()
		case <-t.C:
		}
	}
}

// waitUntil waits until t or until ctx ends.
func waitUntil(ctx context.Context, t time.Time) error {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// adminGet fetches url with the observer client and decodes JSON into v when v is not nil.
// errInspectionUnanswered marks an admin read the gateway answered 503: its store did not
// answer this one read in time (on a loaded machine, or a connection still recovering from a
// partition). A wait treats it as a read that failed, not as a state.
var errInspectionUnanswered = errors.New("the gateway's store did not answer the inspection")

func (env *Env) adminGet(ctx context.Context, u string, v any) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, adminTimeout(env.Profile))
	defer cancel()
	a, err := httpget.Get(ctx, env.Topo.Observer(), u, 64<<20)
	if err != nil {
		if a.StatusCode == 0 {
			return 0, err
		}
		return a.StatusCode, fmt.Errorf("reading %s: %w", u, err)
	}
	if v == nil {
		return a.StatusCode, nil
	}
	if a.StatusCode == http.StatusServiceUnavailable {
		return a.StatusCode, fmt.Errorf("GET %s: status %d: %s: %w", u, a.StatusCode, firstLine(string(a.Body)), errInspectionUnanswered)
	}
	if a.StatusCode != http.StatusOK {
		return a.StatusCode, fmt.Errorf("GET %s: status %d: %s", u, a.StatusCode, firstLine(string(a.Body)))
	}
	if err := json.Unmarshal(a.Body, v); err != nil {
		return a.StatusCode, fmt.Errorf("GET %s: decoding the JSON answer: %w", u, err)
	}
	return a.StatusCode, nil
}

// ProviderSnapshot is every provider's call log at one moment.
type ProviderSnapshot struct {
	At     time.Time
	ByHost map[string]ProviderLog
}

// Total is the number of calls all providers received.
func (s ProviderSnapshot) Total() int64 {
	var n int64
	for _, c := range s.ByHost {
		n += c.Calls
	}
	return n
}

// InFlight is the number of requests the providers hold at the moment of the snapshot.
func (s ProviderSnapshot) InFlight() int64 {
	var n int64
	for _, c := range s.ByHost {
		n += c.InFlight
	}
	return n
}

// SiteDelta is, per site, how many calls arrived between before and after. Every site of
// after appears, with 0 when it got none.
func SiteDelta(before, after ProviderSnapshot) map[string]int64 {
	out := make(map[string]int64, len(after.ByHost))
	for h, c := range after.ByHost {
		out[c.Site] += c.Calls - before.ByHost[h].Calls
	}
	return out
}

// TotalDelta is how many provider calls arrived between before and after.
func TotalDelta(before, after ProviderSnapshot) int64 { return after.Total() - before.Total() }

// SitesCovered lists the sites with at least one call in delta, sorted.
func SitesCovered(delta map[string]int64) []string {
	var out []string
	for s, n := range delta {
		if n > 0 {
			out = append(out, s)
		}
	}
	sort.Strings(out)
	return out
}

// FindRequest looks a request id up in every provider's log and returns the site that served
// it and its log entry.
func (s ProviderSnapshot) FindRequest(id string) (string, providerstub.CallRecord, bool) {
	if id == "" {
		return "", providerstub.CallRecord{}, false
	}
	for _, h := range topology.Providers {
		c := s.ByHost[h]
		for _, r := range c.Requests {
			if r.RequestID == id {
				return c.Site, r, true
			}
		}
	}
	return "", providerstub.CallRecord{}, false
}

// errNoInspection is a quota read of a gateway that offers none. It is ErrUnsupported: a
// scenario that needed the read and made no failing check is skipped, never passed.
type errNoInspection struct{ profile string }

func (e errNoInspection) Error() string {
	return "gateway profile " + e.profile + " offers no quota inspection"
}

func (e errNoInspection) Unwrap() error { return topology.ErrUnsupported }

// credential returns the scenario's principal for a subject label.
func (env *Env) credential(label string) (deployment.Credential, bool) {
	if env.Deployment == nil {
		return deployment.Credential{}, false
	}
	return env.Deployment.Credential(env.scenario, label)
}

// subjects are the three subject labels of every scenario.
func subjects() []string { return append([]string(nil), deployment.Subjects...) }

// ms renders a duration as milliseconds with one decimal, for facts.
func ms(d time.Duration) float64 {
	return float64(d.Microseconds()/100) / 10
}

// ownRule is the scenario rule named name as the run renders it, when the gateway under test
// can express it (its profile's capabilities.rules) and so has it; why says otherwise which
// parts of the rule it cannot express (or that the run has no such rule). A scenario that
// prefers its own rule runs on the run's rule when why is set.
func (env *Env) ownRule(name string) (rule deployment.ScenarioRule, why string) {
	if env == nil || env.Deployment == nil {
		return rule, "needs its own rule " + name + ", which this run does not render (no deployment)"
	}
	for _, r := range env.Deployment.ScenarioRules() {
		if r.Name == name {
			return r, env.gateway().CannotExpress(r, deployment.FormatDuration(env.Profile.Lease))
		}
	}
	return rule, "needs its own rule " + name + ", which this run does not render (the deployment has no users of " + name + ")"
}

// ownRulesWhy says why the gateway under test cannot express every rule of scenario (those
// naming it as their Scenario, or named like it), "" when it can: the runner skips a scenario
// that needs its own rules with this reason, naming each part.
func (env *Env) ownRulesWhy(scenario string) string {
	if env == nil || env.Deployment == nil {
		return "needs its own rules, which this run does not render (no deployment)"
	}
	var whys []string
	found := false
	for _, r := range env.Deployment.ScenarioRules() {
		if r.Name != scenario && r.Scenario != scenario {
			continue
		}
		found = true
		if why := env.gateway().CannotExpress(r, deployment.FormatDuration(env.Profile.Lease)); why != "" && !slices.Contains(whys, why) {
			whys = append(whys, why)
		}
	}
	if !found {
		return "needs its own rule, which this run does not render (the deployment has no users of " + scenario + ")"
	}
	return strings.Join(whys, "; ")
}

// hasOwnRule reports whether the gateway under test has the scenario rule named name.
func (env *Env) hasOwnRule(name string) bool {
	_, why := env.ownRule(name)
	return why == ""
}
