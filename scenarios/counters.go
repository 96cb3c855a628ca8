package scenarios

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/quotaqual/quotaqual/internal/httpget"
	"github.com/quotaqual/quotaqual/undertest"
)

// The gateway's own counters (capabilities.metrics): what a gateway says of itself, held to
// what the clients and the providers observed. Only a gateway whose profile declares a counter
// is judged on it; an undeclared one is a check not made. Counters are read from every gateway
// and summed, before and after what a scenario drives, and judged by their delta: a gateway
// that counts from its start counts whatever ran before.

// counter is one declared counter, bound to the rule a scenario runs under.
type counter struct {
	what string // what it counts, as the checks name it
	sel  undertest.Selector
}

// counterOf binds the profile's declared counter (one of capabilities.metrics' fields) to
// rule. ok is false when the profile declares none: why then says so, for the check not made.
func (env *Env) counterOf(declared, what, rule string) (c counter, why string, ok bool) {
	m := env.gateway().Caps.Metrics
	sel, ok, err := m.Counter(declared, rule)
	switch {
	case err != nil: // validated when the profile was loaded
		return counter{}, fmt.Sprintf("gateway profile %s: %v", env.gateway().Name, err), false
	case !ok:
		return counter{}, "gateway profile " + env.gateway().Name + " declares no counter of " + what +
			" (capabilities.metrics): a gateway's counters are judged only where it declares them", false
	}
	return counter{what: what, sel: sel}, "", true
}

// readCounters reads each counter once from every gateway's admin listener and sums each
// over the gateways.
func (env *Env) readCounters(ctx context.Context, cs ...counter) ([]float64, error) {
	path := env.gateway().Caps.Metrics.Path
	out := make([]float64, len(cs))
	for _, g := range env.gateways() {
		u := strings.TrimRight(env.Topo.Gateway(g).AdminURL, "/") + path
		rctx, cancel := context.WithTimeout(ctx, adminTimeout(env.Profile))
		a, err := httpget.Get(rctx, env.Topo.Observer(), u, 16<<20)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("reading %s's counters: %w", g, err)
		}
		if a.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("reading %s's counters: GET %s: status %d", g, path, a.StatusCode)
		}
		for i, c := range cs {
			v, err := sumSeries(a.Body, c.sel)
			if err != nil {
				return nil, fmt.Errorf("reading %s's counters: %w", g, err)
			}
			out[i] += v
		}
	}
	return out, nil
}

// sumSeries sums, in a Prometheus text exposition, the series sel selects. A family that is
// absent sums to 0: a series appears only once something was counted.
func sumSeries(body []byte, sel undertest.Selector) (float64, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("parsing the exposition: %w", err)
	}
	fam, ok := fams[sel.Name]
	if !ok {
		return 0, nil
	}
	var sum float64
	for _, m := range fam.GetMetric() {
		labels := make(map[string]string, len(m.GetLabel()))
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if !sel.Matches(labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Untyped != nil:
			sum += m.GetUntyped().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		default:
			return 0, fmt.Errorf("%s is a %s, not a counter", sel.Name, fam.GetType())
		}
	}
	return sum, nil
}
