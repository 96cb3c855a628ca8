package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/providerstub"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
)

// client sends the run's chat requests from the client host and records each as the client
// saw it. Credentials go only into the request's Authorization header.
type client struct {
	topo      topology.Topology
	dep       *deployment.Deployment
	gw        *undertest.Profile
	requestID string // the response header echoing the request id the gateway forwarded
	timeout   time.Duration
	maxTokens int64

	mu   sync.Mutex
	seq  int
	reqs []Request
}

func newClient(topo topology.Topology, dep *deployment.Deployment, gw *undertest.Profile) *client {
	if gw == nil {
		gw = undertest.Default()
	}
	p := dep.Profile
	return &client{
		topo: topo, dep: dep, gw: gw, requestID: gw.Expect.RequestIDHeader,
		// Long enough for a store timeout or two and a restart behind a request; a request
		// still unanswered then is recorded without an answer (ambiguous), as a crash's are.
		timeout: 5*time.Second + 4*p.StoreTimeout,
		// One output token, as the scenarios ask by default: the stub's usage is then the
		// prompt and that token, well within the rule's reservation, so the hard gate holds
		// admitted usage to the capacity (what the checker judges).
		maxTokens: 1,
	}
}

// chat sends one request and records it.
func (c *client) chat(ctx context.Context, phase, gateway, subject string, scheduled time.Time) Request {
	c.mu.Lock()
	c.seq++
	r := Request{Seq: c.seq, Phase: phase, Gateway: gateway, Subject: subject, Scheduled: scheduled}
	c.mu.Unlock()
	c.do(ctx, &r)
	c.mu.Lock()
	c.reqs = append(c.reqs, r)
	c.mu.Unlock()
	return r
}

func (c *client) do(ctx context.Context, r *Request) {
	body, _ := json.Marshal(map[string]any{
		"model":      providerstub.DefaultModel,
		"messages":   []map[string]string{{"role": "user", "content": "hello"}},
		"max_tokens": c.maxTokens,
	})
	cred, ok := c.dep.Credential(scenarioName, r.Subject)
	r.Start = time.Now()
	r.End = r.Start
	if !ok {
		r.Err = "no credential for " + r.Subject + ": the deployment was not built for chaos"
		return
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	u := strings.TrimRight(c.topo.Gateway(r.Gateway).DataURL, "/") + "/v1/chat/completions"
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		r.Err = err.Error()
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(providerstub.ScenarioHeader, scenarioName)
	req.SetBasicAuth(cred.Username, cred.Password)
	r.Start = time.Now()
	resp, err := c.topo.Client().Do(req)
	if err != nil {
		r.End = time.Now()
		r.Err = err.Error()
		// A connection that was never made carried no request: the gateway cannot have acted
		// on it (a crashed gateway's port refuses, an overloaded one's accept queue times out).
		var op *net.OpError
		r.NotSent = errors.As(err, &op) && op.Op == "dial"
		return
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	r.End = time.Now()
	r.Status = resp.StatusCode
	if c.requestID != "" {
		r.RequestID = resp.Header.Get(c.requestID)
	}
	if err != nil {
		r.Err = "reading the response body: " + err.Error()
	}
	var v struct {
		Usage *struct {
			PromptTokens     int64 `json:"prompt_tokens"`
			CompletionTokens int64 `json:"completion_tokens"`
			TotalTokens      int64 `json:"total_tokens"`
		} `json:"usage"`
		Error *struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &v) == nil {
		if r.Status == http.StatusOK && v.Usage != nil {
			r.Tokens = max(v.Usage.TotalTokens, v.Usage.PromptTokens+v.Usage.CompletionTokens)
			r.UsageKnown = r.Tokens > 0
		}
		if v.Error != nil {
			r.ErrorType = v.Error.Type
		}
	}
}

func (c *client) requests() []Request {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Request(nil), c.reqs...)
}

// Load is the open-loop traffic: Rate requests a second for For, each leaving on its schedule
// whatever the answers to the earlier ones. Subjects are used activeSubjects at a time, each
// group for its slice of the load, so fresh budgets meet the faults all through the run; within
// a group requests go round its subjects and, per subject, round the gateways (neighbouring
// subjects start on different ones).
type Load struct {
	Rate     int
	For      time.Duration
	Subjects []string
}

func (c *client) loadGroups(ctx context.Context, l Load, gateways []string, start time.Time) {
	every := time.Second / time.Duration(l.Rate)
	total := int(l.For / every)
	group := min(activeSubjects, len(l.Subjects))
	groups := len(l.Subjects) / group
	var wg sync.WaitGroup
	for k := range total {
		at := start.Add(time.Duration(k) * every)
		if !sleepUntil(ctx, at) {
			break
		}
		g := min(k*groups/total, groups-1)
		i, visit := k%group, k/group
		subject, gw := l.Subjects[g*group+i], gateways[(i+visit)%len(gateways)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.chat(ctx, PhaseLoad, gw, subject, at)
		}()
	}
	wg.Wait()
}

// drain asks every subject, one request at a time and round the gateways, until a quota
// denial: whatever budget the faults left is spent, so an acknowledged admission the store lost
// shows as a subject admitted past its capacity. A request without a decision (503, no
// answer) is asked again, at most retries times in a row.
func (c *client) drain(ctx context.Context, subjects, gateways []string, maxAsks, retries int) {
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, s := range subjects {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			undecided := 0
			for k := 0; k < maxAsks && ctx.Err() == nil; k++ {
				r := c.chat(ctx, PhaseDrain, gateways[(i+k)%len(gateways)], s, time.Now())
				if r.Denied() {
					return
				}
				if !r.Decided() {
					if undecided++; undecided > retries {
						return
					}
					sleepUntil(ctx, time.Now().Add(200*time.Millisecond))
					continue
				}
				undecided = 0
			}
		}()
	}
	wg.Wait()
}

// sleepUntil waits for t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// readProviders reads the three providers' call logs: this run's calls (the chaos label), or
// every call when all is set (a gateway that forwards no scenario header: its calls carry no
// label, and the topology is this run's alone).
func readProviders(ctx context.Context, topo topology.Topology, all bool) (calls []ProviderCall, total, dropped int64, err error) {
	for _, h := range topology.Providers {
		ep := topo.Provider(h)
		u := strings.TrimRight(ep.AdminURL, "/") + "/admin/calls?scenario=" + scenarioName
		if all {
			u = strings.TrimRight(ep.AdminURL, "/") + "/admin/calls"
		}
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, u, nil)
		resp, err := topo.Observer().Do(req)
		if err != nil {
			cancel()
			return nil, 0, 0, fmt.Errorf("reading the call log of %s: %w", h, err)
		}
		var log providerstub.CallLog
		derr := json.NewDecoder(resp.Body).Decode(&log)
		resp.Body.Close()
		cancel()
		if resp.StatusCode != http.StatusOK || derr != nil {
			return nil, 0, 0, fmt.Errorf("reading the call log of %s: status %d %v", h, resp.StatusCode, derr)
		}
		total += log.Calls
		dropped += log.Dropped
		for _, r := range log.Requests {
			calls = append(calls, ProviderCall{Site: ep.Site, Time: r.Time, RequestID: r.RequestID,
				PromptTokens: r.PromptTokens, GeneratedTokens: r.GeneratedTokens, Status: r.Status})
		}
	}
	return calls, total, dropped, nil
}
