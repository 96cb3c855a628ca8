package evidence

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Diff compares two finished bundles — a baseline and a candidate — for a CI job that checks a
// run against the last good one: verdict changes, numeric facts that moved (with the relative
// change), request counts and latencies per scenario, and differences of versions, topology,
// profile and effective configs. It reads only the two bundles.
type Diff struct {
	Base, Head string
	// Mismatch lists what makes the two runs not like for like — a different gateway under
	// test, profile or scenario set — so a reader weighs everything below against it first.
	Mismatch   []SettingChange `json:"mismatch,omitempty"`
	Level      LevelChange     `json:"level"`      // what each run qualified
	Verdicts   []VerdictChange `json:"verdicts"`   // scenarios whose verdict changed (or that exist on one side only)
	Moved      []FactChange    `json:"moved"`      // numeric facts and request measures that changed
	Settings   []SettingChange `json:"settings"`   // versions, topology, profile, config digests
	Regressed  bool            `json:"regressed"`  // a verdict or the level got worse: the CI job fails
	Unchanged  int             `json:"unchanged"`  // scenarios with the same verdict
	Scenarios  int             `json:"scenarios"`  // scenarios on either side
	FactsAlike int             `json:"facts_same"` // numeric measures compared that did not change
	Threshold  float64         `json:"threshold"`  // a measure moved when |relative change| ≥ this
	Within     int             `json:"within"`     // measures that changed by less than Threshold
}

// DefaultThreshold is the relative change below which a measure counts as noise: run-to-run
// latencies of a millisecond or less easily move by a tenth.
const DefaultThreshold = 0.25

// LevelChange is the qualification level of both bundles (a version 1 bundle's computed from
// its verdicts).
type LevelChange struct {
	Base      Level `json:"base"`
	Head      Level `json:"head"`
	Regressed bool  `json:"regressed"` // qualified → partial or failed, partial → failed
	// Skipped is what the candidate did not qualify: its skipped scenarios and why.
	Skipped []Skip `json:"skipped,omitempty"`
}

// VerdictChange is one scenario whose verdict differs.
type VerdictChange struct {
	Scenario  string `json:"scenario"`
	Base      Status `json:"base"` // "" when the scenario is not in the baseline
	Head      Status `json:"head"` // "" when the scenario is not in the candidate
	Regressed bool   `json:"regressed"`
	Reason    string `json:"reason,omitempty"` // the candidate's reason when it did not pass
	// NotRun: the candidate did not select the scenario (it is in the baseline only). A pass
	// not run is still a regression: the candidate no longer qualifies what it covered.
	NotRun bool `json:"not_run,omitempty"`
}

// FactChange is one numeric measure that moved.
type FactChange struct {
	Scenario string   `json:"scenario"`
	Name     string   `json:"name"`
	Base     float64  `json:"base"`
	Head     float64  `json:"head"`
	Relative *float64 `json:"relative,omitempty"` // (head-base)/|base|; absent when base is 0
}

// SettingChange is one run setting that differs.
type SettingChange struct {
	Name string `json:"name"`
	Base string `json:"base"`
	Head string `json:"head"`
}

// regressed says whether going from base to head makes a scenario's verdict worse: a pass that
// is no longer a pass (failed, skipped or gone), or a skip that became a failure.
func regressed(base, head Status) bool {
	switch base {
	case Passed:
		return head != Passed
	case Skipped:
		return head == Failed
	}
	return false
}

// DiffBundles loads two bundles (directories or .tar.gz) and compares them; measures that
// changed by less than threshold (relative) are counted, not listed.
func DiffBundles(basePath, headPath string, threshold float64) (Diff, error) {
	base, err := LoadBundle(basePath)
	if err != nil {
		return Diff{}, fmt.Errorf("baseline: %w", err)
	}
	head, err := LoadBundle(headPath)
	if err != nil {
		return Diff{}, fmt.Errorf("candidate: %w", err)
	}
	return Compare(base, head, threshold), nil
}

// Compare compares a baseline bundle with a candidate.
func Compare(base, head *Bundle, threshold float64) Diff {
	d := Diff{Base: base.Path, Head: head.Path, Threshold: threshold, Mismatch: mismatches(base, head)}
	d.Level = LevelChange{Base: base.Qualification.Level, Head: head.Qualification.Level,
		Regressed: head.Qualification.Worse(base.Qualification), Skipped: head.Qualification.Skipped}
	d.Regressed = d.Level.Regressed
	baseRes, headRes := byName(base.Results), byName(head.Results)
	for _, name := range unionNames(base.Results, head.Results) {
		d.Scenarios++
		b, inBase := baseRes[name]
		h, inHead := headRes[name]
		var bs, hs Status
		if inBase {
			bs = b.Status
		}
		if inHead {
			hs = h.Status
		}
		if bs == hs {
			d.Unchanged++
		} else {
			vc := VerdictChange{Scenario: name, Base: bs, Head: hs, Regressed: regressed(bs, hs), NotRun: !inHead}
			if inHead && hs != Passed {
				vc.Reason = firstLineOf(h.Reason)
			}
			d.Verdicts = append(d.Verdicts, vc)
			d.Regressed = d.Regressed || vc.Regressed
		}
		if inBase && inHead {
			bm := measures(b, base.Requests)
			hm := measures(h, head.Requests)
			for _, k := range slices.Sorted(maps.Keys(bm)) {
				hv, ok := hm[k]
				if !ok {
					continue
				}
				bv := bm[k]
				if bv == hv {
					d.FactsAlike++
					continue
				}
				fc := FactChange{Scenario: name, Name: k, Base: bv, Head: hv}
				if bv != 0 {
					rel := (hv - bv) / math.Abs(bv)
					if math.Abs(rel) < threshold {
						d.Within++
						continue
					}
					fc.Relative = &rel
				}
				d.Moved = append(d.Moved, fc)
			}
		}
	}
	d.Settings = settingChanges(base, head)
	return d
}

// measures are a scenario's comparable numbers: every numeric fact (a list of numbers counts
// by its maximum, as "name (max)"), and from the request log the count of each status and the
// median and worst latency of each status.
func measures(r ScenarioResult, reqs []RequestRecord) map[string]float64 {
	out := map[string]float64{}
	for _, f := range r.Facts {
		switch v := f.Value.(type) {
		case json.Number:
			if x, err := v.Float64(); err == nil {
				out[f.Name] = x
			}
		case float64:
			out[f.Name] = v
		case []any:
			if strings.Contains(f.Name, "status") {
				continue // a list of HTTP statuses has no meaningful maximum
			}
			worst, n := math.Inf(-1), 0
			for _, e := range v {
				if num, ok := e.(json.Number); ok {
					if x, err := num.Float64(); err == nil {
						worst, n = max(worst, x), n+1
					}
				}
			}
			if n > 0 && n == len(v) {
				out[f.Name+" (max)"] = worst
			}
		}
	}
	lat := map[int][]float64{}
	for _, q := range reqs {
		if q.Scenario != r.Name {
			continue
		}
		lat[q.Status] = append(lat[q.Status], float64(q.Latency)/float64(time.Millisecond))
	}
	for status, l := range lat {
		sort.Float64s(l)
		out[fmt.Sprintf("requests with status %d", status)] = float64(len(l))
		out[fmt.Sprintf("latency p50 ms, status %d", status)] = math.Round(l[len(l)/2]*10) / 10
		out[fmt.Sprintf("latency max ms, status %d", status)] = math.Round(l[len(l)-1]*10) / 10
	}
	return out
}

// mismatches lists what the two runs qualified differently: the gateway under test (its
// profile's name), the scenario parameters' profile, the set of scenarios selected.
func mismatches(base, head *Bundle) []SettingChange {
	var out []SettingChange
	if b, h := gatewayOf(base.Manifest), gatewayOf(head.Manifest); b != h {
		out = append(out, SettingChange{"gateway under test", b, h})
	}
	if b, h := base.Manifest.Profile, head.Manifest.Profile; b != h {
		out = append(out, SettingChange{"profile", b, h})
	}
	bn, hn := byName(base.Results), byName(head.Results)
	var onlyBase, onlyHead []string
	for _, n := range unionNames(base.Results, head.Results) {
		if _, ok := hn[n]; !ok {
			onlyBase = append(onlyBase, n)
		}
		if _, ok := bn[n]; !ok {
			onlyHead = append(onlyHead, n)
		}
	}
	if len(onlyBase)+len(onlyHead) > 0 {
		side := func(n int, only []string, other string) string {
			s := fmt.Sprintf("%d scenarios", n)
			if len(only) > 0 {
				s += "; not in the " + other + ": " + strings.Join(only, ", ")
			}
			return s
		}
		out = append(out, SettingChange{"scenario set",
			side(len(base.Results), onlyBase, "candidate"), side(len(head.Results), onlyHead, "baseline")})
	}
	return out
}

// gatewayOf names the gateway a run qualified: its gateway profile, or quotaqual's own.
func gatewayOf(m Manifest) string {
	if gp, ok := m.TopologyFacts["gateway_profile"].(map[string]any); ok {
		if name, ok := gp["name"].(string); ok && name != "" {
			return name
		}
	}
	if gp, ok := m.TopologyFacts["gateway_profile"].(map[string]string); ok && gp["name"] != "" {
		return gp["name"]
	}
	return "quotaqual's own gateway"
}

// settingChanges lists versions, topology, profile, effective configs and topology facts that
// differ. A run's own id is replaced by "<run>" before comparing, so names derived from it
// (namespaces, keys) do not count as differences.
func settingChanges(base, head *Bundle) []SettingChange {
	bm, hm := base.Manifest, head.Manifest
	norm := func(s, runID string) string {
		if runID == "" {
			return s
		}
		return strings.ReplaceAll(s, runID, "<run>")
	}
	var out []SettingChange
	add := func(name, b, h string) {
		if norm(b, bm.RunID) != norm(h, hm.RunID) {
			out = append(out, SettingChange{name, b, h})
		}
	}
	add("quotaqual version", bm.QuotaqualVersion, hm.QuotaqualVersion)
	add("valkey version", bm.ValkeyVersion, hm.ValkeyVersion)
	add("topology", bm.Topology, hm.Topology)
	add("schema version", bm.SchemaVersion, hm.SchemaVersion)
	out = append(out, configChanges(base, head)...)
	bt, ht := map[string]string{}, map[string]string{}
	for k, v := range bm.TopologyFacts {
		bt[k] = valueString(v)
	}
	for k, v := range hm.TopologyFacts {
		ht[k] = valueString(v)
	}
	for _, k := range unionKeys(bt, ht) {
		if k == "run_id" || k == "gateway_profile" { // the gateway is a mismatch, said first
			continue
		}
		add("topology "+k, bt[k], ht[k])
	}
	return out
}

// maxConfigLines bounds how many changed lines of one config file the diff lists.
const maxConfigLines = 6

// configChanges compares the effective configs the bundles hold (config/, secrets as
// environment references) line by line, with each run's id normalised. The manifest's digests
// cannot be compared: they cover the unredacted configs, whose password hashes are new every run.
func configChanges(base, head *Bundle) []SettingChange {
	lines := func(b *Bundle, name string) []string {
		data, ok := b.Files[name]
		if !ok {
			return nil
		}
		text := string(data)
		if id := b.Manifest.RunID; id != "" {
			text = strings.ReplaceAll(text, id, "<run>")
		}
		return strings.Split(strings.TrimRight(text, "\n"), "\n")
	}
	names := map[string]bool{}
	for _, b := range []*Bundle{base, head} {
		for n := range b.Files {
			if strings.HasPrefix(n, "config/") {
				names[n] = true
			}
		}
	}
	var out []SettingChange
	for _, n := range slices.Sorted(maps.Keys(names)) {
		bl, hl := lines(base, n), lines(head, n)
		if _, ok := base.Files[n]; !ok {
			out = append(out, SettingChange{Name: n, Head: "added"})
			continue
		}
		if _, ok := head.Files[n]; !ok {
			out = append(out, SettingChange{Name: n, Base: "present", Head: "removed"})
			continue
		}
		removed, added := lineDiff(bl, hl)
		for i := 0; i < max(len(removed), len(added)) && i < maxConfigLines; i++ {
			c := SettingChange{Name: n}
			if i < len(removed) {
				c.Base = strings.TrimSpace(removed[i])
			}
			if i < len(added) {
				c.Head = strings.TrimSpace(added[i])
			}
			out = append(out, c)
		}
	}
	return out
}

// lineDiff returns the lines only in a and the lines only in b, in order (a multiset
// difference: enough to name what changed in a config without aligning it).
func lineDiff(a, b []string) (onlyA, onlyB []string) {
	count := map[string]int{}
	for _, l := range b {
		count[l]++
	}
	for _, l := range a {
		if count[l] > 0 {
			count[l]--
		} else {
			onlyA = append(onlyA, l)
		}
	}
	count = map[string]int{}
	for _, l := range a {
		count[l]++
	}
	for _, l := range b {
		if count[l] > 0 {
			count[l]--
		} else {
			onlyB = append(onlyB, l)
		}
	}
	return onlyA, onlyB
}

func byName(rs []ScenarioResult) map[string]ScenarioResult {
	m := make(map[string]ScenarioResult, len(rs))
	for _, r := range rs {
		m[r.Name] = r
	}
	return m
}

// unionNames lists the scenarios of both sides: the candidate's order, then the baseline's
// scenarios the candidate lacks.
func unionNames(base, head []ScenarioResult) []string {
	seen := map[string]bool{}
	var out []string
	for _, rs := range [][]ScenarioResult{head, base} {
		for _, r := range rs {
			if !seen[r.Name] {
				seen[r.Name] = true
				out = append(out, r.Name)
			}
		}
	}
	return out
}

func unionKeys[V any](a, b map[string]V) []string {
	seen := map[string]bool{}
	for k := range a {
		seen[k] = true
	}
	for k := range b {
		seen[k] = true
	}
	return slices.Sorted(maps.Keys(seen))
}

func firstLineOf(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}

// WriteText prints the diff for a person: verdict changes first, then what moved, then the
// settings.
func (d Diff) WriteText(w io.Writer) {
	fmt.Fprintf(w, "baseline  %s\ncandidate %s\n", d.Base, d.Head)
	if len(d.Mismatch) > 0 {
		fmt.Fprintln(w, "NOT LIKE FOR LIKE: the two runs qualified different things; read what follows with that in mind")
		for _, m := range d.Mismatch {
			fmt.Fprintf(w, "  %s: %s → %s\n", m.Name, orNone(m.Base), orNone(m.Head))
		}
	}
	switch {
	case d.Level.Regressed:
		fmt.Fprintf(w, "level: ✗ REGRESSED %s → %s", d.Level.Base, d.Level.Head)
	case d.Level.Base == d.Level.Head:
		fmt.Fprintf(w, "level: %s (unchanged)", d.Level.Head)
	default:
		fmt.Fprintf(w, "level: %s → %s", d.Level.Base, d.Level.Head)
	}
	if len(d.Level.Skipped) > 0 {
		fmt.Fprintf(w, "; the candidate did not qualify (skipped): %s", SkipList(d.Level.Skipped))
	}
	fmt.Fprintln(w)
	if len(d.Verdicts) == 0 {
		fmt.Fprintf(w, "verdicts: unchanged (%d scenarios)\n", d.Scenarios)
	} else {
		fmt.Fprintf(w, "verdicts: %d changed, %d unchanged\n", len(d.Verdicts), d.Unchanged)
		for _, v := range d.Verdicts {
			mark := "  "
			if v.Regressed {
				mark = "✗ REGRESSED "
			} else if v.Head == Passed {
				mark = "✓ improved "
			}
			fmt.Fprintf(w, "  %s%s: %s → %s", mark, v.Scenario, verdictWord(v.Base), verdictWord(v.Head))
			if v.NotRun {
				fmt.Fprint(w, " (the candidate did not select it)")
			}
			if v.Reason != "" {
				fmt.Fprintf(w, " (%s)", v.Reason)
			}
			fmt.Fprintln(w)
		}
	}
	if len(d.Moved) == 0 {
		fmt.Fprintf(w, "measures: none moved by %.0f%% or more (%d unchanged, %d within)\n", d.Threshold*100, d.FactsAlike, d.Within)
	} else {
		fmt.Fprintf(w, "measures: %d moved by %.0f%% or more, %d moved less, %d unchanged\n", len(d.Moved), d.Threshold*100, d.Within, d.FactsAlike)
		for _, m := range d.Moved {
			rel := "new (baseline 0)"
			if m.Relative != nil {
				rel = fmt.Sprintf("%+.1f%%", *m.Relative*100)
			}
			fmt.Fprintf(w, "  %s: %s %g → %g (%s)\n", m.Scenario, m.Name, m.Base, m.Head, rel)
		}
	}
	if len(d.Settings) == 0 {
		fmt.Fprintln(w, "settings: versions, topology, profile and configs unchanged")
	} else {
		fmt.Fprintf(w, "settings: %d differ\n", len(d.Settings))
		for _, s := range d.Settings {
			fmt.Fprintf(w, "  %s: %s → %s\n", s.Name, orNone(s.Base), orNone(s.Head))
		}
	}
	switch {
	case d.Regressed && d.Level.Regressed:
		fmt.Fprintf(w, "result: REGRESSED (level %s → %s)\n", d.Level.Base, d.Level.Head)
	case d.Regressed:
		fmt.Fprintln(w, "result: REGRESSED")
	default:
		fmt.Fprintln(w, "result: no verdict regressed")
	}
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// verdictWord is a verdict as the text diff shows it: a scenario one side did not select is
// "not run" there.
func verdictWord(s Status) string {
	if s == "" {
		return "not run"
	}
	return string(s)
}
