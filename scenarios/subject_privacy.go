package scenarios

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/topology"
)

// The position: the last of the scenarios that pull no lever, so that in the shared block it
// starts when an earlier one frees a slot and ends inside the block's longest scenario
// (window-expiry, layered-budgets): its own work is a few dozen milliseconds of requests and
// reads.
func init() { register(2070, subjectPrivacy) }

func subjectPrivacy() Scenario {
	return Scenario{
		Name: "subject-privacy",
		Summary: "after every subject's traffic on every gateway (admitted, streamed and denied), no raw username is in the " +
			"gateways' logs (and their services'), in the metrics the profile declares, or in the keys of the run's store",
		Invariant: "identity: the subject is hashed before it reaches the store, the logs or the metrics — no line of a gateway's " +
			"log, no metric series and no store key holds a username the run's subjects log in with",
		BlackBox: "sees what every gateway the harness launches leaves behind it: its log (and its services'), the metrics its profile " +
			"declares, the keys it writes to the run's store; cannot see the store's values, logs shipped elsewhere than " +
			"standard output, or a subject written in a form other than the username (a reversible encoding)",
		Run: runSubjectPrivacy,
	}
}

// privacyScanCap bounds the store keys read, so that a store full of another run's keys
// cannot make the scan the scenario's cost.
const privacyScanCap = 200_000

// runSubjectPrivacy sends each of its subjects' requests through every gateway (one streamed),
// spends application-c until a denial, then reads what the gateways left behind — their logs,
// their declared metrics, the run's store keys — for any username the run's subjects log in
// with. The logs are searched for the scenario's own usernames only: other scenarios send
// usernames in client headers (identity-sources) that a gateway may log as the client's input.
func runSubjectPrivacy(ctx context.Context, env *Env) *Result {
	r := env.NewResult()
	var outs []Outcome
	for _, s := range subjects() {
		for _, g := range env.gateways() {
			outs = append(outs, env.Chat(ctx, ChatCall{Gateway: g, Label: s + "-" + g, Subject: s}))
		}
		outs = append(outs, env.Chat(ctx, ChatCall{Gateway: gwA, Label: s + "-streamed", Subject: s, Stream: true}))
	}
	denied := false
	for i := 0; i < exhaustCap && !denied; i++ {
		o := env.Chat(ctx, ChatCall{Gateway: env.alternate(i), Label: fmt.Sprintf("until-denied-%d", i+1), Subject: appC})
		outs = append(outs, o)
		denied = o.Status == http.StatusTooManyRequests
	}
	admitted := 0
	for _, o := range outs {
		if o.Admitted() {
			admitted++
		}
	}
	r.Fact("answers", tally(statuses(outs)))
	r.Fact("denial_reached", denied)
	r.Check("the subjects' requests were admitted (the gateways had them to log and count)", "> 0 admitted", admitted, admitted > 0)

	own := map[string]string{} // needle → subject label, the scenario's own usernames
	all := map[string]string{} // every username of the run
	nOwn, nAll := 0, 0
	if env.Deployment != nil {
		for _, c := range env.Deployment.Credentials {
			if c.Scenario == "" {
				// The walkthrough's users (`quotaqual up`), named by bare labels that other
				// words contain ("per-application-budget"): no run sends their traffic.
				continue
			}
			nAll++
			if c.Scenario == env.scenario {
				nOwn++
			}
			for _, n := range usernameForms(c.Username) {
				all[n] = c.Username
				if c.Scenario == env.scenario {
					own[n] = c.Label
				}
			}
		}
	}
	r.Fact("usernames_searched", fmt.Sprintf("logs: the scenario's %d; metrics and store: the run's %d (each as sent and percent-encoded)", nOwn, nAll))

	var made, read []string // the parts read, as the key fact and DecidedBy name them
	// judge makes the check on one part read, or says why it was not made.
	judge := func(p privacyPart) {
		check := "no raw subject in " + p.where
		if p.err != nil {
			r.NotMade(check, p.err.Error())
			return
		}
		made = append(made, p.made)
		read = append(read, p.read)
		r.Check(check, fmt.Sprintf("none of %s usernames in %d %s", p.whose, p.of, p.unit), orNone(p.hits), len(p.hits) == 0)
	}
	logs, logErr := env.privacyLogs(ctx, r, outs, own)
	judge(privacyPart{where: "the gateways' logs", read: "the gateways' logs", whose: "the scenario's", unit: "lines",
		of: logs.lines, hits: logs.hits, err: logErr,
		made: fmt.Sprintf("%d of %d log lines (%d logs)", len(logs.hits), logs.lines, logs.files)})
	series, metricHits, metricsErr := env.privacyMetrics(ctx, all)
	judge(privacyPart{where: "the gateways' metrics", read: "the gateways' metrics", whose: "the run's", unit: "series",
		of: series, hits: metricHits, err: metricsErr,
		made: fmt.Sprintf("%d of %d metric series", len(metricHits), series)})
	keys, keyHits, storeErr := env.privacyStore(ctx, all, admitted)
	judge(privacyPart{where: "the store's keys", read: "the run's store keys", whose: "the run's", unit: "keys",
		of: keys, hits: keyHits, err: storeErr,
		made: fmt.Sprintf("%d of %d store keys", len(keyHits), keys)})
	if logErr != nil || metricsErr != nil || storeErr != nil {
		r.DecidedBy(read...)
	}
	if len(made) == 0 {
		r.Skip(fmt.Sprintf("none of the gateways' logs, metrics or store keys could be read: logs: %v; metrics: %v; store: %v", logErr, metricsErr, storeErr))
		r.Key("nothing read")
		return r
	}
	r.Key("raw subjects in %s", strings.Join(made, ", "))
	return r
}

// privacyPart is one part of the run read for raw subjects (the gateways' logs, their metrics,
// the store's keys): what was searched, what was found, or why it could not be read.
type privacyPart struct {
	where string   // the part, as the check names it
	read  string   // the part, as DecidedBy names it
	whose string   // whose usernames were searched: "the scenario's" or "the run's"
	unit  string   // what of counts: lines, series, keys
	of    int      // how many were searched
	hits  []string // the raw subjects found
	made  string   // what was read, for the key fact
	err   error    // why the part could not be read
}

// usernameForms are the forms a username is searched in: as sent, and percent-encoded (a gateway
// that logs a URL or a query string).
func usernameForms(username string) []string {
	return []string{username, url.QueryEscape(username)}
}

// orNone is a check's observed list of hits: "none", or the first few and how many more.
func orNone(hits []string) any {
	const shown = 5
	switch {
	case len(hits) == 0:
		return "none"
	case len(hits) > shown:
		return append(slices.Clone(hits[:shown]), fmt.Sprintf("… and %d more", len(hits)-shown))
	}
	return hits
}

// logScan is what the gateways' logs showed.
type logScan struct {
	files, lines int
	hits         []string // file:line: the subject label and the line's start
}

// privacyLogs collects the components' logs once the gateways have written their lines about
// the scenario's requests, and searches the gateways' (and the profile's services') logs for
// needles. A gateway that names its request ids in its answers is read until each id is in
// its logs (the line of an admitted request is written at its settlement, after the answer);
// one that does not, a settlement's grace after the providers finished.
func (env *Env) privacyLogs(ctx context.Context, r *Result, outs []Outcome, needles map[string]string) (logScan, error) {
	var ids []string
	for _, o := range outs {
		if o.RequestID != "" {
			ids = append(ids, o.RequestID)
		}
	}
	hosts := append(slices.Clone(env.gateways()), env.gateway().ServiceHosts()...)
	parent := env.WorkDir
	if parent == "" {
		parent = os.TempDir()
	}
	read := func() (logScan, int, error) {
		dir, err := os.MkdirTemp(parent, "subject-privacy-logs-")
		if err != nil {
			return logScan{}, 0, err
		}
		defer os.RemoveAll(dir)
		if err := env.Topo.CollectLogs(dir); err != nil {
			return logScan{}, 0, fmt.Errorf("collecting the components' logs: %w", err)
		}
		return scanLogs(dir, hosts, needles, ids)
	}
	if len(ids) == 0 {
		if err := env.settleBlind(ctx); err != nil {
			return logScan{}, err
		}
		s, _, err := read()
		r.Fact("logs_read", "the gateway names no request id: read a settlement's grace after the providers finished")
		return s, err
	}
	var s logScan
	var found int
	tries, err := poll(ctx, 200*time.Millisecond, settleGrace(env.Profile.StoreTimeout)+2*time.Second, func(context.Context) (bool, error) {
		var err error
		s, found, err = read()
		return found == len(ids), err
	})
	r.Fact("request_ids_in_the_logs", fmt.Sprintf("%d of %d (%d reads)", found, len(ids), tries))
	if err != nil && !errors.Is(err, errPollDeadline) {
		return s, err
	}
	return s, nil
}

// scanLogs reads dir/<host>.log for each host and reports every line holding a needle, and
// how many of ids appear anywhere in them. A log the topology did not collect is left out; no
// gateway log at all, or no line, is an error: there was nothing to search.
func scanLogs(dir string, hosts []string, needles map[string]string, ids []string) (logScan, int, error) {
	var s logScan
	seen := map[string]bool{}
	gatewayLogs := 0
	for _, h := range hosts {
		f, err := os.Open(filepath.Join(dir, h+".log"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return s, 0, err
		}
		s.files++
		if topology.IsGateway(h) {
			gatewayLogs++
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		n := 0
		for sc.Scan() {
			n++
			line := sc.Text()
			for needle, label := range needles {
				if strings.Contains(line, needle) {
					s.hits = append(s.hits, fmt.Sprintf("%s.log:%d: %s: %s", h, n, label, firstLine(line)))
					break
				}
			}
			for _, id := range ids {
				if !seen[id] && strings.Contains(line, id) {
					seen[id] = true
				}
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return s, 0, fmt.Errorf("reading %s's log: %w", h, err)
		}
		s.lines += n
	}
	switch {
	case gatewayLogs == 0:
		return s, 0, fmt.Errorf("the topology collected no gateway log (looked for %s.log in what CollectLogs wrote)", strings.Join(hosts, ".log, "))
	case s.lines == 0:
		return s, 0, errors.New("the gateways logged no line")
	}
	return s, len(seen), nil
}

// privacyMetrics scrapes every metrics path the profile declares (expect.admin_probes naming
// metrics) on every gateway and searches the series for needles.
func (env *Env) privacyMetrics(ctx context.Context, needles map[string]string) (series int, hits []string, err error) {
	var paths []string
	for _, p := range env.gateway().Expect.AdminProbes {
		if strings.Contains(p, "metrics") {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		return 0, nil, fmt.Errorf("gateway profile %s declares no metrics endpoint (expect.admin_probes names none)", env.gateway().Name)
	}
	for _, g := range env.gateways() {
		for _, p := range paths {
			status, body, _, err := env.adminProbe(ctx, g, p, "metrics-scrape")
			if err != nil || status != http.StatusOK {
				return series, hits, fmt.Errorf("%s %s answered %d (%v)", g, p, status, err)
			}
			for i, line := range strings.Split(string(body), "\n") {
				if line == "" || strings.HasPrefix(line, "#") {
					continue
				}
				series++
				for needle, label := range needles {
					if strings.Contains(line, needle) {
						hits = append(hits, fmt.Sprintf("%s %s:%d: %s: %s", g, p, i+1, label, firstLine(line)))
						break
					}
				}
			}
		}
	}
	return series, hits, nil
}

// privacyStore lists the run's store keys (SCAN, on every primary of a cluster) and searches
// them for needles. It is made where the gateway keeps its quota state in the run's store and
// the harness can reach it; a store that holds no key after admitted requests is not where
// the gateway keeps them, and says so.
func (env *Env) privacyStore(ctx context.Context, needles map[string]string, admitted int) (keys int, hits []string, err error) {
	gw := env.gateway()
	if !gw.Caps.SharedStore {
		return 0, nil, fmt.Errorf("gateway profile %s keeps its quota state outside the run's store (capabilities.shared_store false; store hosts %s)",
			gw.Name, strings.Join(gw.StoreHosts(), ", "))
	}
	var all []string
	if cs, ok := env.Topo.(topology.ClusterStore); ok && cs.ClusterEndpoints() != nil {
		v, err := cs.ClusterView(ctx, "")
		if err != nil {
			return 0, nil, fmt.Errorf("reading the cluster's keys: %w", err)
		}
		for _, n := range v.Nodes {
			all = append(all, n.Keys...)
		}
	} else {
		admin, ok := env.Topo.(topology.StoreAdmin)
		if !ok {
			return 0, nil, fmt.Errorf("the %s engine cannot send the store a command (no StoreAdmin)", env.Topo.Engine())
		}
		if rs, ok := env.Topo.(interface{ StoreAdminReason() string }); ok && rs.StoreAdminReason() != "" {
			return 0, nil, errors.New(rs.StoreAdminReason())
		}
		cursor := "0"
		for {
			reply, err := admin.StoreCommand(ctx, "SCAN", cursor, "COUNT", "1000")
			if err != nil {
				return 0, nil, fmt.Errorf("SCAN: %w", err)
			}
			// The reply as text: the next cursor, then the page's keys (no key of a quota
			// holds a space; one that did would count twice and still be searched whole).
			f := strings.Fields(reply)
			if len(f) == 0 {
				return 0, nil, fmt.Errorf("SCAN answered %q", reply)
			}
			cursor = f[0]
			all = append(all, f[1:]...)
			if cursor == "0" || len(all) >= privacyScanCap {
				break
			}
		}
	}
	if len(all) == 0 {
		return 0, nil, fmt.Errorf("the run's store held no key after %d admitted requests: the gateway keeps its quota state elsewhere", admitted)
	}
	for _, k := range all {
		for needle, label := range needles {
			if strings.Contains(k, needle) {
				hits = append(hits, label+": "+firstLine(k))
				break
			}
		}
	}
	return len(all), hits, nil
}
