package scenarios

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/quotaqual/quotaqual/providerstub"
)

// providerErrorCase is a provider answering non-2xx after it generated, its error body
// reporting the usage (the stub's FailMetadata): a provider that bills the refusal. The
// contract charges such an answer the usage it reports (gateway.md, "What a request is
// charged"), whatever its status: a gateway that settles some class of them at zero ("the
// provider refused, don't bill it") lets a client loop on them uncharged.
type providerErrorCase struct {
	label  string
	status int
	stream bool // asked as a stream; the provider refuses before any chunk, with a JSON error
}

// providerErrorCases are one answer of each class: a content filter withholding what it
// generated (400), a rate limit met mid-generation (429), a server error (500), and the
// content filter refusing a stream.
var providerErrorCases = []providerErrorCase{
	{"content-filter-400", 400, false},
	{"rate-limited-429", 429, false},
	{"server-error-500", 500, false},
	{"stream-content-filter-400", 400, true},
}

// checkProviderErrorUsage sends providerErrorCases as application-c, one after another, each
// generating hostileGenerated tokens without a bound (the estimate, the rule's fallback, is
// below what is reported: a charge still pending never passes for the one wanted), and checks
// each is charged exactly the usage its error reported, read from the remaining header of
// neutral probes. It returns the key fact's part.
func checkProviderErrorUsage(ctx context.Context, env *Env, r *sharedResult) string {
	const subject, kind = appC, "errors"
	m, ok := env.newChargeMeter(subject, "usage-"+kind, usageAccountingCapacity)
	if !ok {
		r.do(func(r *Result) { r.NotMade(kind+": each provider error's charge", errNoRemainingHeader.Error()) })
		return kind + " not made"
	}
	facts := map[string]any{}
	var notRelayed, wrong, seen []string
	for i, c := range providerErrorCases {
		md := generate(hostileGenerated, "")
		md[providerstub.FailMetadata] = strconv.Itoa(c.status)
		o := env.Chat(ctx, ChatCall{Gateway: env.alternate(i), Subject: subject, Label: kind + "-" + c.label, Stream: c.stream,
			MaxTokens: -1, Metadata: md})
		fact := map[string]any{"status": o.Status, "error_type": o.ErrorType, "site": o.Site}
		facts[c.label] = fact
		pr, err := env.providerRecord(ctx, o)
		if err != nil {
			// Not the provider's answer: the gateway answered on its own (or echoed no id).
			notRelayed = append(notRelayed, fmt.Sprintf("%s: answered %d, %v", c.label, o.Status, err))
			continue
		}
		if o.Status/100 == 2 || o.Status == 0 {
			notRelayed = append(notRelayed, fmt.Sprintf("%s: the provider's %d answered %d", c.label, pr.Status, o.Status))
		}
		// The stub reports the truth: prompt + generated is the usage its error carried.
		reported := pr.Consumed()
		got, err := m.charge(ctx, func(n int64) bool { return n == reported })
		if err != nil {
			r.do(func(r *Result) { r.Error(fmt.Errorf("%s %s: %w", kind, c.label, err)) })
			return kind + " not decided"
		}
		fact["provider_status"], fact["reported"], fact["charged"], fact["probes"] = pr.Status, reported, got.tokens, got.probes
		fact["next_request"] = got.last.Status
		answer := strconv.Itoa(pr.Status)
		if c.stream {
			answer += " streamed"
		}
		seen = append(seen, fmt.Sprintf("%s %d/%d", answer, got.tokens, reported))
		switch {
		case got.last.Status != http.StatusOK:
			wrong = append(wrong, fmt.Sprintf("%s: the next request answered %d (charged at least %d, reported %d)", c.label, got.last.Status, got.tokens, reported))
		case !got.wanted:
			wrong = append(wrong, fmt.Sprintf("%s: the provider's %d reported %d, charged %d", c.label, pr.Status, reported, got.tokens))
		}
	}
	held, settled := m.held, m.checkLedger(ctx, r, kind, providerUsageRule)
	r.do(func(r *Result) {
		r.Fact(kind+"_cases", facts)
		r.Fact(kind+"_charged_from_headers", held)
		if env.inspects() {
			r.Fact(kind+"_settled_in_ledger", settled)
		}
		r.Check(kind+": every provider error relayed as an error (not 2xx), from the provider (its call log holds the request)",
			"all relayed", notRelayed, len(notRelayed) == 0)
		r.Check(kind+": every non-2xx answer charged the usage it reported (a 400 content filter, a 429, a 500, a streamed 400)",
			"each exactly its reported usage", wrong, len(wrong) == 0)
	})
	return fmt.Sprintf("%s charged/reported: %s", kind, strings.Join(seen, ", "))
}
