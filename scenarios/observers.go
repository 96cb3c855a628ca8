package scenarios

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/wire"
)

// The typed observers a scenario reads the run through: the quota inspector (a gateway's
// /admin/quota, by key) and the provider-log client (the stubs' /admin/calls, as
// providerstub.CallLog). One way to read each, the key or the log saying what is read.

// Key names one quota key: a rule, a subject label of the scenario's principals, and the
// model for a rule keyed by subject and model ("" for a rule keyed by subject alone).
type Key struct {
	Rule, Subject, Model string
}

// QuotaInspector reads quota keys from the gateways' admin endpoints.
type QuotaInspector struct{ env *Env }

// Quotas is the scenario's quota inspector.
func (env *Env) Quotas() QuotaInspector { return QuotaInspector{env} }

// Read reads k's state from gateway's admin endpoint. On a gateway whose profile offers no
// inspection it is an errNoInspection (topology.ErrUnsupported): a scenario that needed the
// read and made no failing check is skipped, never passed.
func (qi QuotaInspector) Read(ctx context.Context, gateway string, k Key) (wire.QuotaState, error) {
	env := qi.env
	var q wire.QuotaState
	if !env.inspects() {
		return q, fmt.Errorf("inspecting the quota of %s on %s: %w", k.Subject, gateway, errNoInspection{env.gateway().Name})
	}
	cred, ok := env.credential(k.Subject)
	if !ok {
		return q, fmt.Errorf("no credential for %s in scenario %s: the deployment was built without this scenario", k.Subject, env.scenario)
	}
	u := strings.TrimRight(env.Topo.Gateway(gateway).AdminURL, "/") + "/admin/quota?rule=" +
		url.QueryEscape(k.Rule) + "&subject=" + url.QueryEscape(cred.Username)
	if k.Model != "" {
		u += "&model=" + url.QueryEscape(k.Model)
	}
	if _, err := env.adminGet(ctx, u, &q); err != nil {
		return q, fmt.Errorf("inspecting the quota of %s on %s: %w", k.Subject, gateway, err)
	}
	return q, nil
}

// blindSettleWait is how long a black-box exhaustion waits, once the providers hold nothing,
// for the gateway to settle before its next request: far beyond the one store round trip a
// settlement takes, and short enough that an exhaustion of five requests stays well within a
// 4 s window (WaitIdle's waits add up in every exhaustion).
const blindSettleWait = 150 * time.Millisecond

// WaitIdle polls k's state until no reservation is active (every admitted request has settled)
// and returns that state, within the profile's admin and store timeouts. The gateway settles
// off the response path, so a read right after a response may still see its reservation. A
// gateway without quota inspection is waited on from outside: until no provider has a request
// in flight, then blindSettleWait; the state returned is then not inspected: every figure is
// zero.
func (qi QuotaInspector) WaitIdle(ctx context.Context, gateway string, k Key) (wire.QuotaState, error) {
	return qi.WaitIdleWithin(ctx, gateway, k, adminTimeout(qi.env.Profile)+qi.env.Profile.StoreTimeout)
}

// WaitIdleWithin is WaitIdle with its own limit. On an error the state returned is the last
// read the store answered (zero when none was): with errPollDeadline, what was still held.
func (qi QuotaInspector) WaitIdleWithin(ctx context.Context, gateway string, k Key, limit time.Duration) (wire.QuotaState, error) {
	env := qi.env
	if !env.inspects() {
		if _, err := env.settledProviders(ctx); err != nil {
			return wire.QuotaState{}, fmt.Errorf("waiting for the providers to finish %s's requests: %w", k.Subject, err)
		}
		// The gateway settles off the response path, after the provider's answer ended: without
		// an inspection to poll, the next request could still meet the hold at its estimate (seen
		// on the black-box profile: a remaining header 5 short, the previous request unsettled).
		return wire.QuotaState{}, waitUntil(ctx, time.Now().Add(blindSettleWait))
	}
	var q wire.QuotaState
	var unanswered error // the last read the store did not answer: retried until the deadline
	_, err := poll(ctx, 10*time.Millisecond, limit, func(ctx context.Context) (bool, error) {
		read, err := qi.Read(ctx, gateway, k)
		if errors.Is(err, errInspectionUnanswered) {
			unanswered = err
			return false, nil
		}
		if err != nil {
			return false, err
		}
		q, unanswered = read, nil
		return q.ActiveReservations == 0 && q.ReservedTokens == 0, nil
	})
	if err != nil && unanswered != nil {
		err = fmt.Errorf("%w (last unanswered read: %w)", err, unanswered)
	}
	if err != nil {
		return q, fmt.Errorf("waiting for %s's reservations to settle: %w", k.Subject, err)
	}
	return q, nil
}

// ProviderLog is one provider's call log as GET /admin/calls reports it, and the host that
// keeps it.
type ProviderLog struct {
	Host string `json:"-"`
	providerstub.CallLog
}

// ProviderClient reads the providers' call logs through the observer.
type ProviderClient struct{ env *Env }

// Providers is the scenario's provider-log client.
func (env *Env) Providers() ProviderClient { return ProviderClient{env} }

// Read reads the call logs of the three providers: the calls of this scenario (and any a
// gateway sent without a scenario label, which count against every scenario), never those of
// scenarios running beside it.
func (pc ProviderClient) Read(ctx context.Context) (ProviderSnapshot, error) {
	env := pc.env
	s := ProviderSnapshot{At: time.Now(), ByHost: make(map[string]ProviderLog, len(topology.Providers))}
	query := ""
	if env.scenario != "" {
		query = "?scenario=" + url.QueryEscape(env.scenario)
	}
	for _, h := range topology.Providers {
		ep := env.Topo.Provider(h)
		var c ProviderLog
		if _, err := env.adminGet(ctx, strings.TrimRight(ep.AdminURL, "/")+"/admin/calls"+query, &c.CallLog); err != nil {
			return s, fmt.Errorf("reading the call log of %s: %w", h, err)
		}
		c.Host = h
		if c.Site == "" {
			c.Site = ep.Site
		}
		s.ByHost[h] = c
	}
	return s, nil
}
