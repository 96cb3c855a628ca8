package undertest

import (
	"fmt"
	"regexp"
	"strings"
	"text/template"
)

// Metrics are counters a gateway exports in the Prometheus text format on its admin listener,
// which scenarios hold to what the clients and the providers observed (docs/checks.md,
// "The gateway's own counters"). Only a gateway that declares a counter can be judged on it:
// an undeclared one is a check not made, never passed. A gateway's counters are its own view
// of itself, so a black-box profile declares none.
//
// Each counter is a selector, `name` or `name{label="value",…}`: the sum of the series of that
// name whose labels include every pair given. A selector may name the rule a scenario runs
// under as {{.Rule}}, which is how scenarios running side by side keep each other's requests
// out of the count.
type Metrics struct {
	// Path is where the admin listener serves the counters, e.g. /metrics. Required when any
	// counter is declared.
	Path string `yaml:"path"`
	// UsageReported counts the settled requests of a rule charged the usage their provider
	// reported; UsageUnreported those charged something else because the usage was missing or
	// could not be trusted (a floor of what was seen, or the estimate). Declared together, and
	// each must name the rule ({{.Rule}}).
	UsageReported   string `yaml:"usage_reported"`
	UsageUnreported string `yaml:"usage_unreported"`
	// StoreErrors counts admissions that failed on the quota store: the requests answered
	// expect.store_failure.
	StoreErrors string `yaml:"store_errors"`
}

// Declared reports whether the profile declares any counter.
func (m Metrics) Declared() bool { return m != (Metrics{}) }

// Selector is one counter as a profile names it, its rule placeholder filled in.
type Selector struct {
	Name   string
	Labels map[string]string
}

// String renders the selector as a profile writes it, its labels sorted.
func (s Selector) String() string {
	if len(s.Labels) == 0 {
		return s.Name
	}
	pairs := make([]string, 0, len(s.Labels))
	for _, k := range sortedKeys(s.Labels) {
		pairs = append(pairs, fmt.Sprintf("%s=%q", k, s.Labels[k]))
	}
	return s.Name + "{" + strings.Join(pairs, ",") + "}"
}

// Matches reports whether a series with labels is one the selector sums.
func (s Selector) Matches(labels map[string]string) bool {
	for k, v := range s.Labels {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// Counter is the selector of a declared counter (one of m's fields) for rule; ok is false when
// the profile does not declare it.
func (m Metrics) Counter(declared, rule string) (s Selector, ok bool, err error) {
	if declared == "" {
		return Selector{}, false, nil
	}
	s, err = parseSelector(declared, rule)
	return s, err == nil, err
}

var (
	selectorRe = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?$`)
	labelRe    = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"([^"\\]*)"\s*$`)
)

// parseSelector fills in the rule and parses the selector.
func parseSelector(declared, rule string) (Selector, error) {
	t, err := template.New("").Option("missingkey=error").Parse(declared)
	if err != nil {
		return Selector{}, err
	}
	var b strings.Builder
	if err := t.Execute(&b, struct{ Rule string }{rule}); err != nil {
		return Selector{}, err
	}
	m := selectorRe.FindStringSubmatch(strings.TrimSpace(b.String()))
	if m == nil {
		return Selector{}, fmt.Errorf("%q is not a selector: give a metric name, optionally with labels, like name{label=\"value\"}", declared)
	}
	s := Selector{Name: m[1], Labels: map[string]string{}}
	if strings.TrimSpace(m[2]) == "" {
		return s, nil
	}
	for _, pair := range strings.Split(m[2], ",") {
		l := labelRe.FindStringSubmatch(pair)
		if l == nil {
			return Selector{}, fmt.Errorf("%q: %q is not a label pair: write label=\"value\"", declared, strings.TrimSpace(pair))
		}
		if _, dup := s.Labels[l[1]]; dup {
			return Selector{}, fmt.Errorf("%q names label %s twice", declared, l[1])
		}
		s.Labels[l[1]] = l[2]
	}
	return s, nil
}

// validateMetrics checks capabilities.metrics.
func (p *Profile) validateMetrics(bad func(path, format string, args ...any)) {
	m := p.Caps.Metrics
	if !m.Declared() {
		return
	}
	if !strings.HasPrefix(m.Path, "/") {
		bad("capabilities.metrics.path", "%q is not an absolute path: give where the admin listener serves the counters, like /metrics", m.Path)
	}
	const probe = "rule-placeholder"
	for _, c := range []struct {
		path, declared string
		rule           bool
	}{
		{"capabilities.metrics.usage_reported", m.UsageReported, true},
		{"capabilities.metrics.usage_unreported", m.UsageUnreported, true},
		{"capabilities.metrics.store_errors", m.StoreErrors, false},
	} {
		if c.declared == "" {
			continue
		}
		s, _, err := m.Counter(c.declared, probe)
		if err != nil {
			bad(c.path, "%v", err)
			continue
		}
		if c.rule && !strings.Contains(s.String(), probe) {
			bad(c.path, "%q does not name the rule: add a label matching {{.Rule}}, so that scenarios running side by side are not counted", c.declared)
		}
	}
	if (m.UsageReported == "") != (m.UsageUnreported == "") {
		bad("capabilities.metrics", "usage_reported and usage_unreported are declared together: the one is judged against the other")
	}
}
