package walkthrough

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// Levers are the fault levers the demo pulls.
type Levers interface {
	StopValkey(ctx context.Context) error
	StartValkey(ctx context.Context) error
}

// ChatBody is the chat request of every demo step and of up's curl lines.
func ChatBody(model string) string {
	return `{"model":"` + model + `","max_tokens":8,"messages":[{"role":"user","content":"hello"}]}`
}

// quotaHeaders are the response headers a client acts on, in the order the demo shows them.
var quotaHeaders = []string{"Retry-After", "X-Ratelimit-Limit-Tokens", "X-Ratelimit-Remaining-Tokens", "X-Ratelimit-Reset-Tokens", "X-Quotaqual-Provider-Site"}

// Demo tells the story of a shared token budget in five steps, each showing the command it ran
// and what came back: admitted on both gateways, the budget running out, a 429 with its
// headers, Valkey stopped and the 503s, recovery. It checks its own story: a step that does not
// show what it should is an error. pace is the pause between steps (0 when not on a terminal).
type Demo struct {
	Out    io.Writer
	Target Target
	Levers Levers
	Model  string
	Pace   time.Duration

	step int
}

// answer is one response as the demo shows it.
type answer struct {
	status  int
	header  http.Header
	errType string
	took    time.Duration
	err     error
}

// Run runs the five steps. Valkey is started again whatever happens.
func (d *Demo) Run(ctx context.Context) error {
	if len(d.Target.Subjects) < 2 || len(d.Target.Gateways) < 2 {
		return errors.New("demo: needs two subjects and two gateways")
	}
	a, b := d.Target.Subjects[0], d.Target.Subjects[1]
	gwA, gwB := d.Target.Gateways[0], d.Target.Gateways[1]

	d.title("Admitted on both gateways", "%s sends one request through each gateway; both admit it and a provider serves it.", a.Label)
	for _, g := range []string{gwA, gwB} {
		r := d.chat(ctx, g, a, true)
		if r.status != http.StatusOK {
			return fmt.Errorf("demo: %s on %s: want 200, got %s", a.Label, g, r.describe())
		}
	}
	d.pause(ctx)

	d.title("The shared budget runs out", "%s keeps alternating gateways. Both draw on one budget in Valkey, so it runs out after the same number of requests whichever gateway is asked.", a.Label)
	d.command(fmt.Sprintf("for i in $(seq 20); do curl … -u \"%s:$%s\" … (gateway-a and gateway-b in turn); done   # until the first 429", a.Username, a.EnvVar))
	var denied answer
	for i := 0; i < 20 && denied.status == 0; i++ {
		g := d.Target.Gateways[i%2]
		r := d.chat(ctx, g, a, false)
		switch r.status {
		case http.StatusOK:
		case http.StatusTooManyRequests:
			denied = r
		default:
			return fmt.Errorf("demo: exhausting %s on %s: want 200 or 429, got %s", a.Label, g, r.describe())
		}
	}
	if denied.status == 0 {
		return fmt.Errorf("demo: %s was never denied in 20 requests", a.Label)
	}
	d.pause(ctx)

	d.title("A 429 with its headers", "The denial tells the client how long to wait and what is left; it never reached a provider (no x-quotaqual-provider-site).")
	d.showHeaders(denied)
	other := d.chat(ctx, gwB, a, false)
	if other.status != http.StatusTooManyRequests {
		return fmt.Errorf("demo: %s on %s after the budget ran out: want 429, got %s", a.Label, gwB, other.describe())
	}
	d.pause(ctx)

	d.title("Valkey stopped", "The store goes away. Both gateways fail closed: 503 quota_store_unavailable within the store timeout, never a 200 and never a provider call.")
	d.command("# lever: stop valkey-server (the topology's StopValkey)")
	if err := d.Levers.StopValkey(ctx); err != nil {
		return fmt.Errorf("demo: stopping valkey: %w", err)
	}
	restarted := false
	defer func() {
		if !restarted {
			c, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			_ = d.Levers.StartValkey(c)
		}
	}()
	for _, g := range []string{gwA, gwB} {
		r := d.chat(ctx, g, b, true)
		if r.status != http.StatusServiceUnavailable {
			return fmt.Errorf("demo: %s on %s with valkey stopped: want 503, got %s", b.Label, g, r.describe())
		}
	}
	d.pause(ctx)

	d.title("Recovery", "Valkey comes back; the gateways reconnect on their own and admit again.")
	d.command("# lever: start valkey-server (the topology's StartValkey)")
	restarted = true
	start := time.Now()
	if err := d.Levers.StartValkey(ctx); err != nil {
		return fmt.Errorf("demo: starting valkey: %w", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	var last answer
	for tries := 1; ; tries++ {
		last = d.chat(ctx, gwA, b, false)
		if last.status == http.StatusOK {
			fmt.Fprintf(d.Out, "  admitted again %s after valkey was started (%d tries)\n", time.Since(start).Round(time.Millisecond), tries)
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("demo: %s not admitted within 15s of valkey's start: last %s", b.Label, last.describe())
		}
		t := time.NewTimer(200 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
	fmt.Fprintln(d.Out, "\nThat is the contract quotaqual qualifies: one budget across replicas, enforced before any provider is called, failing closed when the store is gone.")
	return nil
}

func (d *Demo) title(title, format string, args ...any) {
	d.step++
	fmt.Fprintf(d.Out, "\n── Step %d/5: %s ──\n%s\n", d.step, title, fmt.Sprintf(format, args...))
}

func (d *Demo) command(c string) { fmt.Fprintf(d.Out, "\n$ %s\n", c) }

func (d *Demo) pause(ctx context.Context) {
	if d.Pace <= 0 {
		return
	}
	t := time.NewTimer(d.Pace)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// chat sends one request as sub through gateway g; verbose shows the full command.
func (d *Demo) chat(ctx context.Context, g string, sub Subject, verbose bool) answer {
	url := strings.TrimRight(d.Target.DataURL[g], "/") + "/v1/chat/completions"
	body := ChatBody(d.Model)
	if verbose {
		d.command(fmt.Sprintf("curl -sS -i -u \"%s:$%s\" -H 'Content-Type: application/json' -d '%s' %s", sub.Username, sub.EnvVar, body, url))
	}
	var a answer
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		a.err = err
		return a
	}
	req.SetBasicAuth(sub.Username, sub.Password)
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := d.Target.Client.Do(req)
	if err != nil {
		a.err, a.took = err, time.Since(start)
		fmt.Fprintf(d.Out, "  %s → no response: %v\n", g, err)
		return a
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	a.status, a.header, a.took = resp.StatusCode, resp.Header, time.Since(start)
	var e struct {
		Error struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &e) == nil {
		a.errType = e.Error.Type
	}
	line := fmt.Sprintf("  %s → %s in %s", g, resp.Status, a.took.Round(100*time.Microsecond))
	if site := resp.Header.Get("X-Quotaqual-Provider-Site"); site != "" {
		line += ", served by site " + site
	}
	if rem := resp.Header.Get("X-Ratelimit-Remaining-Tokens"); rem != "" {
		line += ", remaining tokens " + rem
	}
	if a.errType != "" {
		line += ", error " + a.errType
	}
	fmt.Fprintln(d.Out, line)
	return a
}

func (d *Demo) showHeaders(a answer) {
	fmt.Fprintf(d.Out, "\n  HTTP %d %s (error type %s)\n", a.status, http.StatusText(a.status), a.errType)
	for _, h := range quotaHeaders {
		v := a.header.Get(h)
		if v == "" {
			v = "(absent)"
		}
		fmt.Fprintf(d.Out, "  %s: %s\n", h, v)
	}
}

func (a answer) describe() string {
	if a.err != nil {
		return "no response: " + a.err.Error()
	}
	s := fmt.Sprintf("%d", a.status)
	if a.errType != "" {
		s += " " + a.errType
	}
	return s
}
