package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
)

func init() { register(400, identitySources) }

func identitySources() Scenario {
	return Scenario{
		Name: "identity-sources",
		Summary: "an authenticated subject whose budget is spent names another subject, or a made-up one, in every identity header " +
			"and body field a client controls, logs in with other spellings of its username, and is impersonated with bad credentials; " +
			"none of it is admitted, reaches a provider, or charges the subject it names",
		Invariant: "hard gate: the subject is the gateway's own authentication's, never a client's header or field, nor a new " +
			"spelling of a username (a new budget); a bad credential is answered 401 before the quota is looked at (no quota " +
			"header, no quota in the body) and changes no subject's ledger",
		// Its own rule only lengthens the window; without it the run's rule serves.
		Prefers: []Need{NeedQuotaInspection, NeedScenarioRules},
		BlackBox: "sees the answers (a spent subject gets no admission, whatever it names), the providers' call counts, and " +
			"the named subject, left room for exactly one estimate before, still admitted once and only once after; cannot see a " +
			"charge that lands on a made-up name except through that name's admission, nor a change to the spent subject's " +
			"settled usage (nothing more is admitted to it either way), so it does not report one",
		Rules: identitySourcesRules,
		Run:   runIdentitySources,
	}
}

// identitySourcesRule is the run's budget over a window that outlasts the scenario, so the
// spent subject and the one left room for one estimate stay so, however slow the host.
const (
	identitySourcesRule   = "identity-sources"
	identitySourcesWindow = 10 * time.Minute
)

func identitySourcesRules(p deployment.Profile) []deployment.ScenarioRule {
	return []deployment.ScenarioRule{runBudgetRule(identitySourcesRule, p, identitySourcesWindow, p.Lease)}
}

// identityHeaders are request headers through which a client could name a subject: the
// trusted-proxy headers of the common SSO front doors (oauth2-proxy, Apache and nginx
// auth_request, Kong, Grafana's auth proxy, cloud load balancers), the upstream design's
// metadata name (identity.user_id) spelled as a header, and generic ones. A gateway may read
// none of them as the quota subject: the subject comes only from its own authentication.
var identityHeaders = []string{
	"X-Forwarded-User", "X-Forwarded-Email", "X-Forwarded-Preferred-Username",
	"X-User-Id", "X-User", "X-Quota-Subject", "X-Subject", "X-Tenant-Id",
	"X-Auth-Request-User", "X-Auth-Request-Email", "X-Auth-Request-Preferred-Username",
	"X-Remote-User", "Remote-User", "X-Authenticated-User", "X-Consumer-Username",
	"X-Webauth-User", "X-Goog-Authenticated-User-Email", "X-Ms-Client-Principal-Name",
	"Identity.User_Id", "X-Identity-User-Id",
}

// identityFields are body fields through which a client could name a subject: OpenAI's own
// end-user field and metadata keys (the upstream design's name among them).
var identityFields = []struct {
	name     string
	metadata bool // a key of the body's metadata, else a top-level field
}{{"user", false}, {"identity.user_id", true}, {"user_id", true}, {"subject", true}}

// usernameSpellings are other spellings of a username: each must be refused (401) or metered
// as the username itself, never as a subject of its own.
var usernameSpellings = []struct {
	name  string
	spell func(string) string
}{
	{"title-case", func(u string) string {
		parts := strings.Split(u, "-")
		for i, p := range parts {
			if p != "" {
				parts[i] = strings.ToUpper(p[:1]) + p[1:]
			}
		}
		return strings.Join(parts, "-")
	}},
	{"upper-case", strings.ToUpper},
	{"first-letter-upper", func(u string) string { return strings.ToUpper(u[:1]) + u[1:] }},
	{"trailing-space", func(u string) string { return u + " " }},
	{"leading-space", func(u string) string { return " " + u }},
}

// quotaWords are what a refusal's body must not contain when the request was not
// authenticated: a 401 that speaks of the quota tells a stranger about a subject's budget.
var quotaWords = []string{"quota", "rate_limit", "rate limit", "ratelimit", "remaining", "retry", "exceeded", "capacity"}

// runIdentitySources spends application-a's budget with one request (its usage a token past
// the capacity) and leaves application-b room for exactly one estimate (a fill request whose
// usage is capacity − estimate). Then, as application-a, it names application-b and a made-up
// subject in every identity header and field, logs in with other spellings of its username,
// and sends bad credentials for it: the rule admits none of these (application-a is spent, and
// a bad credential is no one). Afterwards application-b is admitted once and then denied, which
// shows from outside that none of them charged it a single token.
func runIdentitySources(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	p := env.Profile
	gw := env.gateway()
	if !env.inspects() {
		r.DecidedBy("admissions probed from outside", "the providers' call logs")
		r.NotMade("settled and reserved tokens of every subject unchanged", "no quota inspection: the admissions after the probes decide")
	}
	// Its own rule, when the gateway renders one, has a window no slow host outlasts; the run's
	// rule has the profile's short window, which the scenario must then finish within.
	rule, window := RuleName, p.Window
	if env.hasOwnRule(identitySourcesRule) {
		rule, window = identitySourcesRule, identitySourcesWindow
	}
	r.Fact("rule", fmt.Sprintf("%s: %d tokens reserved, capacity %d per %s", rule, p.Estimate, p.Capacity, window))
	if err := env.fixedWindowStart(ctx, r, window, fixedWindowMargin); err != nil {
		return r.Error(err)
	}
	spent, err := env.fillRoom(ctx, ChatCall{Gateway: gwA, Label: "spend-application-a", Subject: appA}, p.Capacity, spentRoom)
	if err != nil {
		return r.Error(err)
	}
	boundary, err := env.fillRoom(ctx, ChatCall{Gateway: gwB, Label: "fill-application-b", Subject: appB}, p.Capacity, p.Estimate)
	if err != nil {
		return r.Error(err)
	}
	r.Check("application-a's budget spent by one request", http.StatusOK, spent.Status, spent.Admitted())
	r.Check("application-b filled to room for one estimate", http.StatusOK, boundary.Status, boundary.Admitted())
	room := p.Capacity - charge(boundary, p.Estimate)
	r.Fact("spent_by_application_a_from_the_response", charge(spent, p.Estimate))
	r.Fact("room_left_to_application_b", room)
	// The fills must have settled at their usage before the probes: a hold at the estimate
	// would leave application-a room the probes could take.
	keys := []modelKey{{appA, ""}, {appB, ""}, {appC, ""}}
	before, ok := env.idleStates(ctx, r, rule, keys)
	if !ok {
		return r
	}
	pBefore, ok := env.readProviders(ctx, r, "provider call counts before the probes")
	if !ok {
		return r
	}
	victim, _ := env.credential(appB)
	madeUp := "nobody-" + env.scenario
	denial := gw.Expect.Denial.Status

	// The probes below are judged by application-a being spent: first see that it is. A
	// gateway that did not charge the spending request in full (gubernator refuses a hit past
	// its limit, so the overage of a settlement is dropped) admits a plain request here, and
	// every probe's admission would be that, not the name it carries.
	plain := env.Chat(ctx, ChatCall{Gateway: gwB, Label: "plain-application-a-before-the-probes", Subject: appA})
	r.Check("application-a, spent by one request past its capacity, is denied a plain request before the probes (the request's usage was charged)",
		denial, plain.Status, plain.Status == denial)
	if plain.Status != denial {
		r.Key("application-a's spending request (%d tokens on a budget of %d) was not charged in full: a plain request after it answered %d; the identity probes were not sent",
			charge(spent, p.Estimate), p.Capacity, plain.Status)
		return r
	}

	// 1. Another subject named by the spent one: the quota's denial, whatever the name.
	var named []Outcome
	var namedWrong []string
	send := func(label string, c ChatCall) {
		c.Gateway, c.Label, c.Subject = env.alternate(len(named)), label, appA
		o := env.Chat(ctx, c)
		named = append(named, o)
		if o.Status != denial {
			namedWrong = append(namedWrong, fmt.Sprintf("%s: %d", label, o.Status))
		}
	}
	for _, h := range identityHeaders {
		send("header-"+h+"-names-application-b", ChatCall{Headers: map[string]string{h: victim.Username}})
		send("header-"+h+"-names-a-made-up-subject", ChatCall{Headers: map[string]string{h: madeUp}})
	}
	for _, f := range identityFields {
		for _, who := range []struct{ what, name string }{{"application-b", victim.Username}, {"a-made-up-subject", madeUp}} {
			c := ChatCall{Fields: map[string]any{f.name: who.name}}
			if f.metadata {
				c = ChatCall{Metadata: map[string]string{f.name: who.name}}
			}
			send("field-"+f.name+"-names-"+who.what, c)
		}
	}
	r.Check(fmt.Sprintf("spent application-a naming another subject in %d headers and %d body fields: every answer the quota's denial (%d)",
		len(identityHeaders), len(identityFields), denial), "none otherwise", namedWrong, len(namedWrong) == 0)

	// 2. Other spellings of the spent subject's username, with its password: refused, or
	// metered as the subject (then spent): never a budget of their own.
	own, _ := env.credential(appA)
	var spellings []Outcome
	var spellingWrong []string
	for i, s := range usernameSpellings {
		o := env.Chat(ctx, ChatCall{Gateway: env.alternate(i), Label: "username-" + s.name, Subject: appA, Username: s.spell(own.Username)})
		spellings = append(spellings, o)
		if o.Status != http.StatusUnauthorized && o.Status != denial {
			spellingWrong = append(spellingWrong, fmt.Sprintf("%s: %d", s.name, o.Status))
		}
	}
	r.Check(fmt.Sprintf("spent application-a's username spelled %d other ways: refused (401) or the subject's own denial (%d)", len(usernameSpellings), denial),
		"none otherwise", spellingWrong, len(spellingWrong) == 0)

	// 3. Bad credentials naming the spent subject (and one naming application-b): 401 before
	// the quota is looked at.
	var bad []Outcome
	for i, k := range rejectedKinds {
		c := ChatCall{Gateway: env.alternate(i), Label: "bad-" + string(k) + "-for-application-a", Subject: appA, Cred: k}
		if k == CredCrossSubject {
			// application-a's username with application-b's password.
			c.Subject, c.CrossWith = appB, appA
		}
		bad = append(bad, env.Chat(ctx, c))
	}
	bad = append(bad,
		env.Chat(ctx, ChatCall{Gateway: gwA, Label: "bad-wrong-password-for-application-b", Subject: appB, Cred: CredWrongPassword}),
		env.Chat(ctx, ChatCall{Gateway: gwB, Label: "bad-cross-subject-for-application-b", Subject: appA, Cred: CredCrossSubject, CrossWith: appB}))
	var not401, leaks []string
	for i, o := range bad {
		label := fmt.Sprintf("#%d", i+1)
		if o.Status != http.StatusUnauthorized {
			not401 = append(not401, fmt.Sprintf("%s: %d", label, o.Status))
		}
		if l := quotaLeak(o); l != "" {
			leaks = append(leaks, label+": "+l)
		}
	}
	for i, o := range spellings {
		if o.Status == http.StatusUnauthorized {
			if l := quotaLeak(o); l != "" {
				leaks = append(leaks, usernameSpellings[i].name+": "+l)
			}
		}
	}
	r.Check(fmt.Sprintf("%d bad credentials (missing, malformed, unknown bearer, no colon, wrong password, cross-subject) → 401", len(bad)),
		"all 401", not401, len(not401) == 0)
	r.Check("every 401 tells nothing of the quota: no Retry-After, no x-ratelimit-* or ratelimit-* header, no quota word in the body",
		"none", leaks, len(leaks) == 0)

	after, ok := env.idleStates(ctx, r, rule, keys)
	if !ok {
		return r
	}
	pAfter, provOK := env.readProviders(ctx, r, "provider call counts after the probes")
	// The admissions after the probes: application-b has room for one estimate, not two;
	// application-a none.
	last := env.Chat(ctx, ChatCall{Gateway: gwB, Label: "application-b-last-the-rule-admits", Subject: appB})
	over := env.Chat(ctx, ChatCall{Gateway: gwA, Label: "application-b-one-past-the-rule", Subject: appB})
	still := env.Chat(ctx, ChatCall{Gateway: gwB, Label: "application-a-still-spent", Subject: appA})
	checkedAt := time.Now()

	if provOK {
		d := TotalDelta(pBefore, pAfter)
		r.Check("none of the probes reached a provider", 0, d, d == 0)
		r.Fact("provider_calls_delta", d)
	}
	checkStatesUnchanged(r, keys, before, after, "the probes")
	env.checkOneEstimateLeft(r, appB, room, p.Capacity, last, over)
	r.Check("application-a, spent before the probes, still denied after them", denial, still.Status, still.Status == denial)
	// The fills' usage may leave the window no earlier than a window after they were sent.
	leaveAt := spent.Start.Add(window)
	r.Check("probes and admissions finished within the fills' window (their usage could not have left)",
		fmt.Sprintf("before %s after the fills", window), fmt.Sprintf("%s after the fills", checkedAt.Sub(spent.Start).Round(time.Millisecond)),
		checkedAt.Before(leaveAt))
	r.Fact("named_statuses", tally(statuses(named)))
	r.Fact("spelling_statuses", tally(statuses(spellings)))
	r.Fact("bad_credential_statuses", tally(statuses(bad)))
	r.Key("spent application-a naming others: %s; spellings: %s; bad credentials: %s; provider calls +%d; application-b after: %d then %d",
		tally(statuses(named)), tally(statuses(spellings)), tally(statuses(bad)), TotalDelta(pBefore, pAfter), last.Status, over.Status)
	return r
}

// quotaLeak says what of the quota an unauthenticated refusal tells ("" nothing): a quota
// header (the standard names, whatever the profile expects) or a quota word in its body.
func quotaLeak(o Outcome) string {
	var found []string
	for name := range o.Headers {
		l := strings.ToLower(name)
		if l == "retry-after" || strings.HasPrefix(l, "x-ratelimit-") || strings.HasPrefix(l, "ratelimit") {
			found = append(found, "header "+l)
		}
	}
	body := strings.ToLower(o.Body)
	for _, w := range quotaWords {
		if strings.Contains(body, w) {
			found = append(found, fmt.Sprintf("%q in the body", w))
		}
	}
	return strings.Join(found, ", ")
}
