// Package walkthrough is what `quotaqual up` shows a person: a live view of the running topology
// (each subject's remaining tokens per window, each gateway's admitted / denied / 503 counters,
// events as they happen) and the narrated demo. It reads the gateways' admin endpoints only
// (/admin/quota, /metrics, /readyz) through the observer client, so watching never consumes
// quota.
package walkthrough

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Target is the running topology as the walkthrough reaches it.
type Target struct {
	Gateways []string          // gateway-a, gateway-b
	AdminURL map[string]string // per gateway: /admin/quota, /metrics, /readyz
	DataURL  map[string]string // per gateway: /v1/chat/completions (the demo)
	Observer *http.Client      // reaches the admin ports
	Client   *http.Client      // reaches the data ports (the demo)
	Rule     string            // the quota rule the subjects are metered by
	Subjects []Subject
}

// Subject is one walkthrough principal.
type Subject struct {
	Label    string // application-a
	Username string
	Password string // used by the demo only; never shown
	EnvVar   string // where the printed curl lines read the password from
}

// Window is one quota window of a subject.
type Window struct {
	Window    string
	Capacity  int64
	Settled   int64
	Reserved  int64
	Remaining int64
}

// Counters are one gateway's request outcomes since it started.
type Counters struct {
	Admitted, Denied, Unavailable, Other int64
	Store                                string // ok, unavailable, unreachable
}

// Snapshot is the state at one instant.
type Snapshot struct {
	At       time.Time
	Subjects map[string][]Window // by label
	Gateways map[string]Counters
	Errors   []string // what could not be read this time
}

// Event is one thing that happened between two snapshots.
type Event struct {
	At   time.Time
	Text string
}

// Poll reads every subject's quota and every gateway's counters and store state.
func (t Target) Poll(ctx context.Context) Snapshot {
	s := Snapshot{At: time.Now(), Subjects: map[string][]Window{}, Gateways: map[string]Counters{}}
	for _, sub := range t.Subjects {
		w, err := t.quota(ctx, sub)
		if err != nil {
			s.Errors = append(s.Errors, fmt.Sprintf("quota of %s: %v", sub.Label, err))
			continue
		}
		s.Subjects[sub.Label] = w
	}
	for _, g := range t.Gateways {
		c, err := t.counters(ctx, g)
		if err != nil {
			c.Store = "unreachable"
			s.Errors = append(s.Errors, fmt.Sprintf("%s: %v", g, err))
		}
		s.Gateways[g] = c
	}
	return s
}

type quotaJSON struct {
	ReservedTokens int64 `json:"reserved_tokens"`
	Windows        []struct {
		Window   string `json:"window"`
		Capacity int64  `json:"capacity"`
		Settled  int64  `json:"settled"`
	} `json:"windows"`
}

// quota reads a subject's windows from the first gateway that answers: the state lives in the
// store, so every gateway reports the same.
func (t Target) quota(ctx context.Context, sub Subject) ([]Window, error) {
	var last error
	for _, g := range t.Gateways {
		u := strings.TrimRight(t.AdminURL[g], "/") + "/admin/quota?rule=" + url.QueryEscape(t.Rule) + "&subject=" + url.QueryEscape(sub.Username)
		var q quotaJSON
		if err := t.getJSON(ctx, u, &q); err != nil {
			last = err
			continue
		}
		out := make([]Window, 0, len(q.Windows))
		for _, w := range q.Windows {
			out = append(out, Window{Window: w.Window, Capacity: w.Capacity, Settled: w.Settled, Reserved: q.ReservedTokens,
				Remaining: max(0, w.Capacity-w.Settled-q.ReservedTokens)})
		}
		return out, nil
	}
	return nil, last
}

func (t Target) get(ctx context.Context, u string) (*http.Response, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, nil, err
	}
	resp, err := t.Observer.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp, b, err
}

func (t Target) getJSON(ctx context.Context, u string, v any) error {
	resp, b, err := t.get(ctx, u)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return json.Unmarshal(b, v)
}

// counters reads quotaqual_gateway_requests_total by result, and the store state /readyz
// reports.
func (t Target) counters(ctx context.Context, g string) (Counters, error) {
	var c Counters
	base := strings.TrimRight(t.AdminURL[g], "/")
	var ready struct {
		Store string `json:"store"`
	}
	if resp, b, err := t.get(ctx, base+"/readyz"); err != nil {
		return c, err
	} else if json.Unmarshal(b, &ready) != nil || resp.StatusCode >= 500 && ready.Store == "" {
		ready.Store = "unknown"
	}
	c.Store = ready.Store
	_, b, err := t.get(ctx, base+"/metrics")
	if err != nil {
		return c, err
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(b)))
	if err != nil {
		return c, fmt.Errorf("parsing /metrics: %w", err)
	}
	fam, ok := fams["quotaqual_gateway_requests_total"]
	if !ok {
		return c, nil // no request yet
	}
	for _, m := range fam.GetMetric() {
		n := int64(m.GetCounter().GetValue())
		result := ""
		for _, l := range m.GetLabel() {
			if l.GetName() == "result" {
				result = l.GetValue()
			}
		}
		switch result {
		case "admitted":
			c.Admitted += n
		case "denied":
			c.Denied += n
		case "store_error":
			c.Unavailable += n
		default:
			c.Other += n
		}
	}
	return c, nil
}

// Events lists what changed from prev to cur: requests each gateway decided (by outcome), store
// state changes, and subjects whose budget ran out or came back.
func Events(prev, cur Snapshot) []Event {
	var ev []Event
	add := func(format string, args ...any) {
		ev = append(ev, Event{At: cur.At, Text: fmt.Sprintf(format, args...)})
	}
	for _, g := range slices.Sorted(maps.Keys(cur.Gateways)) {
		p, c := prev.Gateways[g], cur.Gateways[g]
		for _, d := range []struct {
			what string
			n    int64
		}{
			{"admitted (200)", c.Admitted - p.Admitted},
			{"denied (429)", c.Denied - p.Denied},
			{"store unavailable (503)", c.Unavailable - p.Unavailable},
			{"rejected (401/400/5xx)", c.Other - p.Other},
		} {
			if d.n > 0 {
				add("%s: %d %s", g, d.n, d.what)
			}
		}
		if p.Store != "" && c.Store != p.Store {
			add("%s: store %s → %s", g, p.Store, c.Store)
		}
	}
	for _, s := range slices.Sorted(maps.Keys(cur.Subjects)) {
		pw, cw := prev.Subjects[s], cur.Subjects[s]
		for i, w := range cw {
			if i >= len(pw) {
				continue
			}
			switch {
			case pw[i].Remaining > 0 && w.Remaining == 0:
				add("%s: %s budget exhausted (%d settled, %d reserved of %d)", s, w.Window, w.Settled, w.Reserved, w.Capacity)
			case pw[i].Remaining == 0 && w.Remaining > 0:
				add("%s: %s budget back to %d of %d", s, w.Window, w.Remaining, w.Capacity)
			}
		}
	}
	return ev
}
