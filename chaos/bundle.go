package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/internal/valkeyproc"
	"github.com/quotaqual/quotaqual/internal/version"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/wire"
)

// The chaos run's evidence is an ordinary bundle (package evidence: redacted, checksummed,
// scanned for the run's secrets): results "chaos" (the seed's schedule) and "chaos-shrunk"
// (the shrunk schedule's failing run) with their requests, so report.html draws each timeline
// with its fault windows shaded; chaos/*.json hold the schedules, histories and verdicts, and
// chaos/reproduce.txt the seed and the shrunk schedule.
type bundle struct {
	w       *evidence.Writer
	o       Options
	started time.Time
	engine  string
}

func newBundle(o Options, secrets *deployment.Deployment) (*bundle, error) {
	w, err := evidence.NewWriter(o.EvidenceDir, o.RunID, secrets.Secrets())
	if err != nil {
		return nil, fmt.Errorf("--evidence-dir: %w", err)
	}
	return &bundle{w: w, o: o, started: time.Now(), engine: o.Engine}, nil
}

// collect copies the component logs of the first run into the bundle (redacted line by line),
// while its topology is still up.
func (b *bundle) collect(topo topology.Topology, workDir string) {
	dir := filepath.Join(workDir, "collected-logs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return
	}
	if err := topo.CollectLogs(dir); err != nil {
		_ = b.w.AddFile("logs/collect-error.txt", []byte(err.Error()+"\n"))
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	sort.Strings(files)
	for _, f := range files {
		_ = b.w.AddFileFrom("logs/"+filepath.Base(f), f)
	}
}

func (b *bundle) finish(rep Report, runErr error) error {
	var results []evidence.ScenarioResult
	if rep.First != nil {
		results = append(results, b.result("chaos", rep.First, "the seed's schedule"))
	} else {
		reason := "the run could not be made"
		if runErr != nil {
			reason = runErr.Error()
		}
		results = append(results, evidence.ScenarioResult{Name: "chaos", Summary: summary(rep.Schedule, 0, 0),
			Invariant: invariant, Status: evidence.Skipped, Reason: reason, Started: b.started})
	}
	if rep.Final != nil {
		results = append(results, b.result("chaos-shrunk", rep.Final, "the shrunk schedule"))
	}
	if fc := rep.FaultChecks; fc != nil && fc.Final != nil {
		results = append(results, b.result("chaos-shrunk-fault", fc.Final, "the schedule shrunk for the checks that need a fault"))
	}
	_ = b.addJSON("chaos/schedule.json", rep.Schedule)
	if rep.First != nil {
		_ = b.addJSON("chaos/first.json", rep.First)
	}
	if rep.Shrunk != nil {
		_ = b.addJSON("chaos/shrunk.json", map[string]any{"shrink": rep.Shrunk, "attempt": rep.Final})
	}
	_ = b.w.AddFile("chaos/reproduce.txt", []byte(Reproduce(rep)))

	m := evidence.Manifest{SchemaVersion: wire.BundleSchemaVersion, RunID: b.o.RunID, QuotaqualVersion: version.String(),
		ValkeyVersion: valkeyproc.Version(""), Topology: b.engine, Profile: b.o.rule().Name, Started: b.started, Ended: time.Now(), Verdicts: map[string]evidence.Status{},
		TopologyFacts: map[string]any{"seed": rep.Seed, "duration": b.o.Duration.String(), "rate_per_s": b.o.Rate, "window": b.o.rule().Window.String()}}
	if gw := b.o.Gateway; gw != nil {
		m.TopologyFacts["gateway_profile"] = map[string]string{"name": gw.Name, "status": string(gw.Status), "description": gw.Description}
	}
	m.Outcome = "passed"
	for _, r := range results {
		m.Verdicts[r.Name] = r.Status
		if r.Status == evidence.Failed {
			m.Outcome = "failed"
		}
	}
	if runErr != nil {
		m.Outcome = "topology-error"
	}
	if _, err := b.w.Finish(m, results); err != nil {
		return fmt.Errorf("evidence: %w", err)
	}
	return nil
}

const invariant = "hard gate per subject per window; no 200 from a gateway cut off from the store; no acknowledged " +
	"reservation lost; every key linearizable against the ledger model; every gateway decides again within the bound after each release"

func summary(s Schedule, subjects, gateways int) string {
	return fmt.Sprintf("seed %d: %d faults in %s under an open-loop load of %d subjects across %d gateways, judged from the history alone",
		s.Seed, len(s.Faults), s.Duration, subjects, gateways)
}

// result renders one attempt as a scenario result, its requests into requests.jsonl.
func (b *bundle) result(name string, a *Attempt, what string) evidence.ScenarioResult {
	for _, r := range a.History.Requests {
		rec := evidence.RequestRecord{Time: r.Start.UTC(), Scenario: name, Label: fmt.Sprintf("%s-%d", r.Phase, r.Seq),
			Gateway: r.Gateway, Subject: r.Subject, Credential: "valid", Method: "POST", Path: "/v1/chat/completions",
			Status: r.Status, RequestID: r.RequestID, ErrorType: r.ErrorType, Latency: r.End.Sub(r.Start), Error: r.Err}
		if r.UsageKnown {
			rec.Usage = &evidence.Usage{TotalTokens: r.Tokens}
		}
		b.w.Request(rec)
	}
	res := evidence.ScenarioResult{Name: name, Summary: summary(a.Schedule, a.Subjects, len(a.History.Gateways)) + " (" + what + ")",
		Invariant: invariant, Status: evidence.Passed, Started: a.History.Start, Elapsed: a.Elapsed}
	var windows []evidence.FaultWindow
	var faults []string
	for _, f := range a.History.Faults {
		faults = append(faults, f.Fault.String())
		if f.Injected() {
			windows = append(windows, evidence.FaultWindow{Kind: f.Lever, Target: hostTarget(f.Fault), Start: f.Pulled.UTC(), End: f.Released.UTC()})
		}
	}
	res.Facts = append(res.Facts, evidence.Fact{Name: "seed", Value: a.Schedule.Seed},
		evidence.Fact{Name: "schedule", Value: faults},
		evidence.Fact{Name: evidence.FaultWindowsFact, Value: windows},
		evidence.Fact{Name: "subjects", Value: a.Subjects},
		evidence.Fact{Name: "run_id", Value: a.RunID})
	for _, k := range sortedKeys(a.Verdict.Facts) {
		res.Facts = append(res.Facts, evidence.Fact{Name: k, Value: a.Verdict.Facts[k]})
	}
	for _, c := range a.Verdict.Checks {
		res.Assertions = append(res.Assertions, evidence.Assertion{Name: c.Name, Expected: c.Expected, Observed: c.Observed, OK: c.OK})
	}
	if nm := notMadeLine(a.Verdict); nm != "" {
		res.Evidence = "black-box: decided by the request history and the providers' call logs; not made: " + nm
	}
	res.KeyFact = fmt.Sprintf("seed %d, %d faults: %s", a.Schedule.Seed, len(a.Schedule.Faults), verdictLine(a.Verdict))
	if a.Verdict.Failed {
		res.Status = evidence.Failed
		res.Reason = strings.Join(a.Verdict.FailedChecks(), "; ")
	}
	return res
}

func (b *bundle) addJSON(rel string, v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return b.w.AddFile(rel, append(raw, '\n'))
}

// Reproduce is the text that tells how to run a failure again: the seed, and the shrunk
// schedule with the faults that exposed it.
func Reproduce(rep Report) string {
	var s strings.Builder
	fmt.Fprintf(&s, "seed: %d\nreproduce: quotaqual chaos --seed %d --duration %s", rep.Seed, rep.Seed, rep.Schedule.Duration)
	switch {
	case rep.GatewayRef != "":
		s.WriteString(" --gateway " + rep.GatewayRef)
	case rep.Schedule.Gateway != "":
		s.WriteString(" --gateway " + rep.Schedule.Gateway)
	}
	if rep.Engine != "" && rep.Engine != topology.EngineNetns {
		s.WriteString(" --topology " + rep.Engine)
	}
	if rep.Rate != 0 && rep.Rate != DefaultRate {
		fmt.Fprintf(&s, " --rate %d", rep.Rate)
	}
	if rep.Gateways != 0 && rep.Gateways != topology.DefaultGateways {
		fmt.Fprintf(&s, " --gateways %d", rep.Gateways)
	}
	for _, l := range rep.Schedule.Levers {
		s.WriteString(" --lever " + l)
	}
	if rep.Schedule.Replication != "" && rep.Schedule.Replication != deployment.ReplicationAcknowledged {
		s.WriteString(" --store-replication " + rep.Schedule.Replication)
	}
	s.WriteString("\n")
	fmt.Fprintf(&s, "schedule: %s\n", rep.Schedule)
	if rep.First != nil {
		fmt.Fprintf(&s, "verdict: %s\n", verdictLine(rep.First.Verdict))
		if nm := notMadeLine(rep.First.Verdict); nm != "" {
			fmt.Fprintf(&s, "not made: %s\n", nm)
		}
	}
	if rep.Shrunk != nil {
		fmt.Fprintf(&s, "shrunk in %d runs (budget %d, 1-minimal: %v): %s\n", rep.Shrunk.Runs, rep.Shrunk.Budget, rep.Shrunk.Minimal, rep.Shrunk.Schedule)
		if rep.Final != nil {
			fmt.Fprintf(&s, "shrunk schedule's verdict: %s\n", verdictLine(rep.Final.Verdict))
		}
		if len(rep.Shrunk.Schedule.Faults) == 0 {
			s.WriteString("exposed by: no fault — the history fails on a whole topology\n")
		}
		if fc := rep.FaultChecks; fc != nil {
			fmt.Fprintf(&s, "failed without any fault: %s\n", strings.Join(fc.WithoutFaults, "; "))
			for _, c := range fc.Checks {
				var named []string
				for _, f := range rep.Schedule.Faults {
					if slices.Contains(c.ExposedBy, f.N) {
						named = append(named, f.String())
					}
				}
				fmt.Fprintf(&s, "needs a fault: %s — exposed by %s\n", c.Name, strings.Join(named, ", "))
			}
			if fc.Shrunk != nil {
				fmt.Fprintf(&s, "shrunk for those in %d runs (budget %d, 1-minimal: %v): %s\n", fc.Shrunk.Runs, fc.Shrunk.Budget, fc.Shrunk.Minimal, fc.Shrunk.Schedule)
				if fc.Final != nil {
					fmt.Fprintf(&s, "its verdict: %s\n", verdictLine(fc.Final.Verdict))
				}
			}
		}
		if rep.Shrunk.Err != "" {
			fmt.Fprintf(&s, "shrinking stopped: %s\n", rep.Shrunk.Err)
		}
	}
	return s.String()
}

// notMadeLine lists the checks the checker could not make, each with why ("" when none).
func notMadeLine(v Verdict) string {
	var out []string
	for _, n := range v.NotMade {
		out = append(out, n.Check+" ("+n.Why+")")
	}
	return strings.Join(out, "; ")
}
