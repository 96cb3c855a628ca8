package qualify

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/quotaqual/quotaqual/deployment"
	"github.com/quotaqual/quotaqual/evidence"
	"github.com/quotaqual/quotaqual/ledger"
	"github.com/quotaqual/quotaqual/topology"
	"github.com/quotaqual/quotaqual/undertest"
)

// On a --store cluster run the point of the cluster is that the subjects' quota state is
// spread over its shards. While the scenarios run, and once after them (before teardown), the
// harness asks every primary which of the run's keys it holds (SCAN on that node alone), maps
// each key back to its subject and rule by its hash tag, and records for each the slot and the
// node that holds it. Two checks decide the run with the scenarios: the keys span at least two shards, and each
// lies on the node whose slot range holds its slot.

// ClusterPlacementFact is the manifest's topology fact holding the placement.
const ClusterPlacementFact = "store_cluster_placement"

// MinShards is how many shards the subjects' keys must span.
const MinShards = 2

// MinKeysForSpan is how many quota keys the span check needs: n keys spread by their hash
// all land on one of three shards with probability 3^(1-n) (1 in 2187 for 8), so with fewer a
// failed check would say little about the gateway — a run of one or two scenarios (--scenario)
// has that few. Below it the check is not made, and the placement says why.
const MinKeysForSpan = 8

// ClusterPlacement is where the run's quota state was found on the cluster.
type ClusterPlacement struct {
	Keys []KeyPlacement `json:"keys"`
	// QuotaKeysPerNode counts the quota keys (subject × rule) found on each node.
	QuotaKeysPerNode map[string]int `json:"quota_keys_per_node"`
	// Unattributed counts store keys under the run's namespace that no subject's tag explains
	// (a rule keyed by model, say); they still count for the span.
	Unattributed int                  `json:"unattributed_keys"`
	Checks       []evidence.Assertion `json:"checks"`
	// SpanNotMade says why the span check was not made (too few quota keys), when it was not.
	SpanNotMade string `json:"span_not_made,omitempty"`
	// Looks is how many times the cluster was read (every 2 s during the scenarios).
	Looks   int           `json:"looks"`
	Elapsed time.Duration `json:"elapsed_ns"` // the last look and the placement, after the scenarios

}

// KeyPlacement is one quota key's state: the subject and rule it belongs to, its hash slot,
// the node SCAN found its keys on, and the node whose slot range holds that slot.
type KeyPlacement struct {
	Subject string `json:"subject"`
	Rule    string `json:"rule"`
	Slot    int    `json:"slot"`
	Node    string `json:"node"`       // where SCAN found its keys
	Addr    string `json:"node_addr"`  // that node's host:port
	Owner   string `json:"owner"`      // the primary whose slot range holds Slot
	Keys    int    `json:"store_keys"` // how many store keys (reservations, buckets, …) it has there
}

// OK reports whether every check passed.
func (p ClusterPlacement) OK() bool {
	for _, c := range p.Checks {
		if !c.OK {
			return false
		}
	}
	return len(p.Checks) > 0
}

// subjectRule names one quota key.
type subjectRule struct{ subject, rule string }

// quotaTags maps the hash tag of every (subject, rule) the run's gateways may key to it: the
// qualification's rule and the scenarios' own, each keyed by subject.
func quotaTags(d *deployment.Deployment) map[string]subjectRule {
	rules := []string{undertest.RuleName}
	for _, r := range d.ScenarioRules() {
		rules = append(rules, r.Name)
	}
	out := map[string]subjectRule{}
	for _, c := range d.Credentials {
		for _, r := range rules {
			out[ledger.HashTag(r, ledger.SubjectKey(c.Username))] = subjectRule{c.Username, r}
		}
	}
	return out
}

// hashTag is the text between the first '{' and the next '}' of key, or "".
func hashTag(key string) string {
	_, rest, ok := strings.Cut(key, "{")
	if !ok {
		return ""
	}
	tag, _, ok := strings.Cut(rest, "}")
	if !ok {
		return ""
	}
	return tag
}

// placeKeys summarises a cluster view: each quota key's slot, node and owner, and the checks.
func placeKeys(v topology.ClusterView, tags map[string]subjectRule) ClusterPlacement {
	p := ClusterPlacement{QuotaKeysPerNode: map[string]int{}}
	type found struct{ node, tag string } // one quota key as found on one node
	byKey := map[found]*KeyPlacement{}
	unattributed := map[found]bool{}
	for _, n := range v.Nodes {
		for _, k := range n.Keys {
			f := found{n.Name, hashTag(k)}
			sr, ok := tags[f.tag]
			if !ok {
				p.Unattributed++
				if !unattributed[f] {
					unattributed[f] = true
					p.QuotaKeysPerNode[n.Name]++
				}
				continue
			}
			kp := byKey[f]
			if kp == nil {
				slot := ledger.HashSlot(k)
				kp = &KeyPlacement{Subject: sr.subject, Rule: sr.rule, Slot: slot, Node: n.Name, Addr: n.Addr, Owner: v.Owner(slot)}
				byKey[f] = kp
				p.QuotaKeysPerNode[n.Name]++
			}
			kp.Keys++
		}
	}
	for _, kp := range byKey {
		p.Keys = append(p.Keys, *kp)
	}
	slices.SortFunc(p.Keys, func(a, b KeyPlacement) int {
		return strings.Compare(a.Subject+"\x00"+a.Rule+"\x00"+a.Node, b.Subject+"\x00"+b.Rule+"\x00"+b.Node)
	})
	shards := 0
	for _, n := range v.Nodes {
		if p.QuotaKeysPerNode[n.Name] > 0 {
			shards++
		}
	}
	keys := len(p.Keys) + len(unattributed)
	if keys >= MinKeysForSpan {
		p.Checks = append(p.Checks, evidence.Assertion{
			Name:     "the run's quota keys span at least two shards",
			Expected: fmt.Sprintf(">= %d of %d primaries hold quota keys", MinShards, len(v.Nodes)),
			Observed: fmt.Sprintf("%d (%s)", shards, perNode(v, p.QuotaKeysPerNode)),
			OK:       shards >= MinShards,
		})
	} else {
		p.SpanNotMade = fmt.Sprintf("%d quota keys seen (%s): fewer than %d, which would all hash to one of %d shards by chance more often than 1 in 700; run more scenarios to check the spread",
			keys, perNode(v, p.QuotaKeysPerNode), MinKeysForSpan, len(v.Nodes))
	}
	var misplaced []string
	for _, k := range p.Keys {
		if k.Node != k.Owner {
			misplaced = append(misplaced, fmt.Sprintf("%s/%s slot %d on %s, owner %s", k.Subject, k.Rule, k.Slot, k.Node, k.Owner))
		}
	}
	p.Checks = append(p.Checks, evidence.Assertion{
		Name:     "every quota key lies on the primary whose slot range holds its slot",
		Expected: "0 misplaced",
		Observed: fmt.Sprintf("%d misplaced of %d %v", len(misplaced), len(p.Keys), misplaced),
		OK:       len(misplaced) == 0 && len(p.Keys) > 0,
	})
	return p
}

func perNode(v topology.ClusterView, counts map[string]int) string {
	var parts []string
	for _, n := range v.Nodes {
		parts = append(parts, fmt.Sprintf("%s: %d", n.Name, counts[n.Name]))
	}
	return strings.Join(parts, ", ")
}

// A quota key's store keys expire once its window and leases have passed (seconds in the quick
// profile), so a look after the scenarios finds only the last few. The watcher looks every
// clusterWatchEvery while the scenarios run, and once more at the end, and keeps every key it
// has seen on each node: the placement covers each subject key seen during the run. Every 2 s:
// a key lives at least its window (4 s in quick), and each look costs six connections to the
// nodes (on docker six docker execs, which at every 500 ms slowed the run's other container
// operations down).
const clusterWatchEvery = 2 * time.Second

// clusterWatch accumulates what the looks at a cluster found.
type clusterWatch struct {
	done  chan struct{}
	ended chan struct{}
	view  topology.ClusterView
	seen  []map[string]bool // per node, every key seen
	looks int
	err   error // the last look's error, if no look succeeded
}

// watchCluster starts looking at topo's cluster (nil when the store is no cluster).
func watchCluster(ctx context.Context, topo topology.Topology, d *deployment.Deployment) *clusterWatch {
	cs, ok := topo.(topology.ClusterStore)
	if !ok {
		return nil
	}
	w := &clusterWatch{done: make(chan struct{}), ended: make(chan struct{})}
	go func() {
		defer close(w.ended)
		tick := time.NewTicker(clusterWatchEvery)
		defer tick.Stop()
		for {
			w.look(ctx, cs, d.Namespace+":")
			select {
			case <-w.done:
				w.look(context.WithoutCancel(ctx), cs, d.Namespace+":")
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// look reads the cluster once and merges what it found.
func (w *clusterWatch) look(ctx context.Context, cs topology.ClusterStore, prefix string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	v, err := cs.ClusterView(ctx, prefix)
	if err != nil {
		if w.looks == 0 {
			w.err = err
		}
		return
	}
	w.looks++
	w.err = nil
	if w.seen == nil {
		w.view = v
		w.seen = make([]map[string]bool, len(v.Nodes))
		for i := range w.seen {
			w.seen[i] = map[string]bool{}
		}
	}
	for i, n := range v.Nodes {
		if i >= len(w.seen) {
			break
		}
		w.view.Nodes[i].Slots = n.Slots // the latest slot map
		for _, k := range n.Keys {
			w.seen[i][k] = true
		}
	}
}

// finish stops the watcher after one last look and returns every key seen, per node.
func (w *clusterWatch) finish() (topology.ClusterView, int, error) {
	close(w.done)
	<-w.ended
	if w.looks == 0 {
		if w.err == nil {
			w.err = fmt.Errorf("the cluster was never read")
		}
		return topology.ClusterView{}, 0, w.err
	}
	v := w.view
	v.Nodes = slices.Clone(v.Nodes)
	for i := range v.Nodes {
		v.Nodes[i].Keys = slices.Sorted(maps.Keys(w.seen[i]))
	}
	return v, w.looks, nil
}

// recordPlacement records the placement of a cluster run's keys in the manifest's topology
// facts and in store-cluster.json, and returns why the run fails on it (nil: it passed, or the
// store is no cluster).
func recordPlacement(ctx context.Context, rep Reporter, watch *clusterWatch, d *deployment.Deployment, w *evidence.Writer, m *evidence.Manifest) error {
	if watch == nil {
		return nil
	}
	start := time.Now()
	v, looks, err := watch.finish()
	if ctx.Err() != nil {
		return nil // interrupted: the run fails anyway, and the scenarios may not have run
	}
	rep.Step("store cluster: where the subjects' keys lie")
	var p ClusterPlacement
	if err == nil {
		p = placeKeys(v, quotaTags(d))
		p.Looks = looks
		p.Elapsed = time.Since(start)
	}
	if err != nil {
		rep.Done("failed", err.Error())
		m.TopologyFacts[ClusterPlacementFact] = map[string]any{"error": err.Error()}
		return fmt.Errorf("reading where the quota keys lie on the cluster: %w", err)
	}
	m.TopologyFacts[ClusterPlacementFact] = p
	if b, err := json.MarshalIndent(p, "", "  "); err == nil {
		_ = w.AddFile(ClusterPlacementFile, append(b, '\n'))
	}
	detail := fmt.Sprintf("%d quota keys; %s", len(p.Keys), p.Checks[0].Observed)
	if p.SpanNotMade != "" {
		detail = fmt.Sprintf("%d quota keys on their owners; span not checked: %s", len(p.Keys), p.SpanNotMade)
	}
	if !p.OK() {
		rep.Done("failed", detail)
		var failed []string
		for _, c := range p.Checks {
			if !c.OK {
				failed = append(failed, fmt.Sprintf("%s: expected %v, observed %v", c.Name, c.Expected, c.Observed))
			}
		}
		return fmt.Errorf("store cluster: %s", strings.Join(failed, "; "))
	}
	rep.Done("ok", detail)
	return nil
}

// ClusterPlacementFile is the bundle file with the placement.
const ClusterPlacementFile = "store-cluster.json"
