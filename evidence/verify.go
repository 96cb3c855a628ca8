package evidence

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
)

// VerifyReport is what Verify found. OK reports whether the bundle is intact and clean.
type VerifyReport struct {
	Bundle   string    `json:"bundle"`
	RunID    string    `json:"run_id"`
	Files    int       `json:"files"`             // files listed in the manifest
	Missing  []string  `json:"missing"`           // listed but absent
	Extra    []string  `json:"extra"`             // present but not listed
	Changed  []string  `json:"changed"`           // checksum differs
	Findings []Finding `json:"findings"`          // credentials found by the canary scan
	Canaries int       `json:"canaries"`          // hashed canary forms checked
	Partial  string    `json:"partial,omitempty"` // why the bundle does not cover the whole run (Manifest.Partial)
}

// OK reports whether every checksum matched and the scan found nothing.
func (r VerifyReport) OK() bool {
	return len(r.Missing) == 0 && len(r.Extra) == 0 && len(r.Changed) == 0 && len(r.Findings) == 0
}

// Verify re-checks a finished bundle (a directory or a .tar.gz written by Pack): every checksum in
// manifest.json (a missing, extra or changed file is a failure), then the canary scan from
// canaries.json plus the generic credential patterns. The error is for a bundle that cannot be
// read at all (no manifest, unreadable canaries); problems found are in the report.
func Verify(dir string) (VerifyReport, error) {
	rep := VerifyReport{Bundle: dir}
	files, err := readBundle(dir)
	if err != nil {
		return rep, err
	}
	byName := map[string][]byte{}
	for _, f := range files {
		byName[f.rel] = f.data
	}
	mb, ok := byName[ManifestFile]
	if !ok {
		return rep, fmt.Errorf("evidence: %s has no %s; is it an evidence bundle?", dir, ManifestFile)
	}
	var m Manifest
	if err := json.Unmarshal(mb, &m); err != nil {
		return rep, fmt.Errorf("evidence: %s: read %s: %w", dir, ManifestFile, err)
	}
	rep.RunID = m.RunID
	rep.Partial = m.Partial
	rep.Files = len(m.Files)
	for name, want := range m.Files {
		b, ok := byName[name]
		if !ok {
			rep.Missing = append(rep.Missing, name)
			continue
		}
		sum := sha256.Sum256(b)
		if hex.EncodeToString(sum[:]) != want {
			rep.Changed = append(rep.Changed, name)
		}
	}
	for _, f := range files {
		if _, ok := m.Files[f.rel]; !ok && f.rel != ManifestFile {
			rep.Extra = append(rep.Extra, f.rel)
		}
	}
	sort.Strings(rep.Missing)
	sort.Strings(rep.Changed)
	sort.Strings(rep.Extra)

	var hs *hashedScanner
	if cb, ok := byName[CanariesFile]; ok {
		var cf CanaryFile
		dec := json.NewDecoder(bytes.NewReader(cb))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cf); err != nil {
			return rep, fmt.Errorf("evidence: %s: read %s: %w", dir, CanariesFile, err)
		}
		if hs, err = newHashedScanner(cf); err != nil {
			return rep, err
		}
		rep.Canaries = len(cf.Forms)
	} else if _, listed := m.Files[CanariesFile]; !listed {
		// A bundle without canaries.json cannot prove it holds no run secret.
		rep.Missing = append(rep.Missing, CanariesFile)
	}
	for _, file := range files {
		var fs []Finding
		for _, f := range scanViews(file) {
			if hs != nil {
				fs = append(fs, hs.scan(f)...)
			}
			fs = append(fs, scanGeneric(f)...)
		}
		rep.Findings = append(rep.Findings, dedupe(fs)...)
	}
	return rep, nil
}
