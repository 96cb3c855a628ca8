package scenarios

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/evidence"
)

// A key fact (Result.Key) states what was observed, never what was expected: a failed
// scenario's key fact must not read like a pass. The helpers below write the parts of a key
// fact that compare an observation with its bound, or that say a check held, from the observed
// values themselves — the comparison symbol is chosen by the numbers, not by the author — so
// the words cannot claim more than the evidence. KeyFactContradictions is the rule the tests
// hold every key fact to.

// atMost writes observed against its upper bound, named by one word: "60 ≤ capacity 60", or
// "110 > capacity 90 (over by 20)".
func atMost[T int | int64](observed T, bound string, limit T) string {
	if observed <= limit {
		return fmt.Sprintf("%d ≤ %s %d", observed, bound, limit)
	}
	return fmt.Sprintf("%d > %s %d (over by %d)", observed, bound, limit, observed-limit)
}

// durAtMost writes a duration against its upper bound, named by one word: "2ms ≤ SLO 1.5s",
// or "6.2s > SLO 1.5s (over by 4.7s)".
func durAtMost(observed time.Duration, bound string, limit time.Duration) string {
	o := observed.Round(time.Millisecond)
	if observed <= limit {
		return fmt.Sprintf("%s ≤ %s %s", o, bound, limit)
	}
	return fmt.Sprintf("%s > %s %s (over by %s)", o, bound, limit, (observed - limit).Round(time.Millisecond))
}

// tally counts answers by status, in the order they first appear: "503×6", "200×3, 503×3";
// a request that got no HTTP answer counts as "no answer".
func tally(statuses []int) string {
	var order []int
	n := map[int]int{}
	for _, s := range statuses {
		if n[s] == 0 {
			order = append(order, s)
		}
		n[s]++
	}
	if len(order) == 0 {
		return "no request"
	}
	parts := make([]string, len(order))
	for i, s := range order {
		what := strconv.Itoa(s)
		if s == 0 {
			what = "no answer"
		}
		parts[i] = fmt.Sprintf("%s×%d", what, n[s])
	}
	return strings.Join(parts, ", ")
}

// answeredOn says what the replicas answered: "429 on A and B" when every one answered want
// (namedReplicas), else each replica's answer: "gateway-a 200, gateway-b 429".
func answeredOn(gateways []string, outs []Outcome, want int) string {
	all := len(outs) == len(gateways)
	for _, o := range outs {
		all = all && o.Status == want
	}
	if all {
		return fmt.Sprintf("%d on %s", want, namedReplicas(len(gateways)))
	}
	parts := make([]string, len(outs))
	for i, o := range outs {
		parts[i] = fmt.Sprintf("%s %d", gateways[i], o.Status)
	}
	return strings.Join(parts, ", ")
}

// recoveryPhrase says whether the recovery checks held: "recovered", or "not recovered" (the
// failed checks, in the evidence, say how).
func recoveryPhrase(held bool) string {
	if held {
		return "recovered"
	}
	return "recovery failed its checks"
}

// mark is a position among a result's checks, for passedSince.
type mark int

// mark returns the position after the checks recorded so far.
func (r *Result) mark() mark { return mark(len(r.assertions)) }

// passedSince reports whether every check recorded after m passed (and at least one was): a
// key fact's claim that a step held ("recovered") rests on exactly the checks of that step.
func (r *Result) passedSince(m mark) bool {
	if int(m) >= len(r.assertions) {
		return false
	}
	for _, a := range r.assertions[m:] {
		if !a.OK {
			return false
		}
	}
	return true
}

// claim is a passing-condition phrase of a key fact and the checks it rests on: a failed
// scenario whose key fact contains the phrase while a check whose name the pattern matches
// failed states its passing condition.
type claim struct {
	phrase string
	checks *regexp.Regexp
}

// keyClaims are the passing-condition phrases the scenarios' key facts use, or used before
// they were written from the observations. A key fact writes them only when the checks behind
// them passed (passedSince, or the observed values themselves: answeredOn's "429 on A and B"
// is counted from the answers, so it is no claim).
var keyClaims = []claim{
	{"recovered", regexp.MustCompile(`recover`)},
	{"admitted again", regexp.MustCompile(`admitted again`)},
	{"denied on", regexp.MustCompile(`still denied|^next request on \S+ denied$`)},
}

// comparison is "A op B" (or "A op bound B") between two numbers or two durations, as atMost
// and durAtMost write it (and "within A (SLO B)").
var comparison = regexp.MustCompile(`(?:^|[^\w.])(\d+(?:\.\d+)?(?:ns|µs|us|ms|s|m|h)*(?:\d+(?:\.\d+)?(?:ns|µs|us|ms|s|m|h))*) (≤|≥|<|>|=|==) (?:[A-Za-z]+ )?(\d+(?:\.\d+)?(?:ns|µs|us|ms|s|m|h)*(?:\d+(?:\.\d+)?(?:ns|µs|us|ms|s|m|h))*)(?:[^\w.]|$)`)

var withinSLO = regexp.MustCompile(`within (\S+) \(SLO (\S+)\)`)

// statusClaim is an HTTP status the key fact says was answered: "503×3", "503 within",
// "answered 503", "503 on".
var statusClaim = regexp.MustCompile(`(?:answered |^|[^\w.])([1-5]\d\d)(?:×| within| on )`)

// KeyFactContradictions lists what r's key fact states that its own evidence contradicts
// (empty: none). statuses are the HTTP statuses r's requests were answered with (nil: not
// known, the status rule is not applied). The rules:
//   - every comparison it writes ("110 ≤ 90", "within 5.2s (SLO 1.5s)") holds for its operands;
//   - every status it says was answered ("503×3", "503 within …") is one r's requests got;
//   - a failed scenario's key fact states no passing condition (keyClaims) whose checks failed;
//   - a failed check's expected status is not named where its observed one is not.
func KeyFactContradictions(r evidence.ScenarioResult, statuses []int) []string {
	key := r.KeyFact
	var out []string
	for _, m := range comparison.FindAllStringSubmatch(key, -1) {
		if ok, known := holds(m[1], m[2], m[3]); known && !ok {
			out = append(out, fmt.Sprintf("%q does not hold", m[1]+" "+m[2]+" "+m[3]))
		}
	}
	for _, m := range withinSLO.FindAllStringSubmatch(key, -1) {
		if ok, known := holds(m[1], "≤", m[2]); known && !ok {
			out = append(out, fmt.Sprintf("%q: %s is over the SLO %s", m[0], m[1], m[2]))
		}
	}
	if statuses != nil {
		for _, m := range statusClaim.FindAllStringSubmatch(key, -1) {
			s, _ := strconv.Atoi(m[1])
			if !slices.Contains(statuses, s) {
				out = append(out, fmt.Sprintf("it says %d was answered, but no request of the scenario got %d (%s)", s, s, tally(statuses)))
			}
		}
	}
	if r.Status != evidence.Failed {
		return out
	}
	var failed []evidence.Assertion
	for _, a := range r.Assertions {
		if !a.OK {
			failed = append(failed, a)
		}
	}
	for _, c := range keyClaims {
		if !strings.Contains(key, c.phrase) {
			continue
		}
		for _, a := range failed {
			if c.checks.MatchString(a.Name) {
				out = append(out, fmt.Sprintf("it says %q while the check %q failed (expected %v, observed %v)", c.phrase, a.Name, a.Expected, a.Observed))
				break
			}
		}
	}
	for _, a := range failed {
		want, ok1 := httpStatus(a.Expected)
		got, ok2 := httpStatus(a.Observed)
		if ok1 && ok2 && want != got && namesStatus(key, want) && !namesStatus(key, got) {
			out = append(out, fmt.Sprintf("it names %d, the expectation of the failed check %q, and not %d, what was observed", want, a.Name, got))
		}
	}
	return out
}

// holds evaluates "a op b" for two numbers or two durations; known is false when they are
// neither (or not of one kind).
func holds(a, op, b string) (ok, known bool) {
	x, kx := magnitude(a)
	y, ky := magnitude(b)
	if kx == "" || kx != ky {
		return false, false
	}
	switch op {
	case "≤":
		return x <= y, true
	case "≥":
		return x >= y, true
	case "<":
		return x < y, true
	case ">":
		return x > y, true
	default:
		return x == y, true
	}
}

// magnitude reads a number ("110", kind "number") or a duration ("1.5s", kind "duration", in
// seconds).
func magnitude(s string) (float64, string) {
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return f, "number"
	}
	if d, err := time.ParseDuration(s); err == nil {
		return d.Seconds(), "duration"
	}
	return 0, ""
}

// httpStatus reads a check's expected or observed value as an HTTP status (an integer
// 100–599, as the checks record statuses).
func httpStatus(v any) (int, bool) {
	var n int
	switch x := v.(type) {
	case int:
		n = x
	case int64:
		n = int(x)
	case float64:
		n = int(x)
		if float64(n) != x {
			return 0, false
		}
	case interface{ Int64() (int64, error) }: // json.Number
		i, err := x.Int64()
		if err != nil {
			return 0, false
		}
		n = int(i)
	default:
		return 0, false
	}
	return n, n >= 100 && n <= 599
}

var digitsRun = regexp.MustCompile(`\d+`)

// namesStatus reports whether key contains status as a number of its own.
func namesStatus(key string, status int) bool {
	return slices.Contains(digitsRun.FindAllString(key, -1), strconv.Itoa(status))
}
