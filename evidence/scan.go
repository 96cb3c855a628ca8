package evidence

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/quotaqual/quotaqual/wire"
)

// Finding is one credential found in a bundle: where, and in which form. It never holds the
// credential itself.
type Finding struct {
	File string `json:"file"` // bundle-relative path
	Line int    `json:"line"` // 1-based
	Form string `json:"form"` // "raw", "base64-std-offset1", "authorization-header", ...
}

func (f Finding) String() string { return fmt.Sprintf("%s:%d: %s", f.File, f.Line, f.Form) }

// bundleFile is one file of a bundle, read from a directory or a tarball.
type bundleFile struct {
	rel  string
	data []byte
}

// maxBundleBytes bounds what Scan and Verify read into memory from a tarball.
const maxBundleBytes = 1 << 30

// readBundle returns every regular file of a bundle directory, or of a .tar.gz written by Pack
// (the leading <run-id>/ directory stripped), sorted by path.
func readBundle(p string) ([]bundleFile, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Errorf("evidence: open bundle: %w", err)
	}
	var files []bundleFile
	if st.IsDir() {
		err = filepath.WalkDir(p, func(fp string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			if !d.Type().IsRegular() {
				return fmt.Errorf("%s is not a regular file", fp)
			}
			rel, err := filepath.Rel(p, fp)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(fp)
			if err != nil {
				return err
			}
			files = append(files, bundleFile{rel: filepath.ToSlash(rel), data: b})
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("evidence: read bundle %s: %w", p, err)
		}
	} else {
		files, err = readTarball(p)
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(files, func(a, b int) bool { return files[a].rel < files[b].rel })
	return files, nil
}

func readTarball(p string) ([]bundleFile, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, fmt.Errorf("evidence: open bundle: %w", err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("evidence: %s is neither a bundle directory nor a .tar.gz: %w", p, err)
	}
	tr := tar.NewReader(gz)
	var files []bundleFile
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("evidence: read %s: %w", p, err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			continue
		case tar.TypeReg:
		default:
			return nil, fmt.Errorf("evidence: %s: entry %q is not a regular file", p, h.Name)
		}
		name := path.Clean(h.Name)
		if !filepath.IsLocal(filepath.FromSlash(name)) {
			return nil, fmt.Errorf("evidence: %s: entry %q escapes the bundle", p, h.Name)
		}
		total += h.Size
		if total > maxBundleBytes {
			return nil, fmt.Errorf("evidence: %s: larger than %d bytes unpacked", p, int64(maxBundleBytes))
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("evidence: read %s from %s: %w", h.Name, p, err)
		}
		files = append(files, bundleFile{rel: name, data: b})
	}
	// Pack puts everything under <run-id>/; strip that directory when every entry shares it.
	if len(files) > 0 {
		top, _, ok := strings.Cut(files[0].rel, "/")
		for _, f := range files {
			if !ok || !strings.HasPrefix(f.rel, top+"/") {
				ok = false
				break
			}
		}
		if ok {
			for i := range files {
				files[i].rel = files[i].rel[len(top)+1:]
			}
		}
	}
	return files, nil
}

// Scan looks for canaries (the run's secrets) in every file of the bundle at dir — a directory or
// a .tar.gz — in every form SecretForms lists, and for credential-shaped text of any origin (see
// scanGeneric). It returns the findings in file and line order.
func Scan(dir string, canaries []string) ([]Finding, error) {
	files, err := readBundle(dir)
	if err != nil {
		return nil, err
	}
	var forms []Form
	for _, c := range canaries {
		forms = append(forms, SecretForms(c)...)
	}
	lit := newLitMatcher(forms)
	var out []Finding
	for _, file := range files {
		var fs []Finding
		for _, f := range scanViews(file) {
			for s, e, p := lit.next(f.data, 0); s >= 0; s, e, p = lit.next(f.data, e) {
				fs = append(fs, Finding{File: f.rel, Line: lineAt(f.data, s), Form: lit.pats[p].Name})
			}
			fs = append(fs, scanGeneric(f)...)
		}
		out = append(out, dedupe(fs)...)
	}
	return out, nil
}

func lineAt(b []byte, off int) int { return bytes.Count(b[:off], []byte{'\n'}) + 1 }

func dedupe(fs []Finding) []Finding {
	sort.SliceStable(fs, func(a, b int) bool { return fs[a].Line < fs[b].Line })
	var out []Finding
	seen := map[Finding]bool{}
	for _, f := range fs {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	return out
}

var (
	genAuthHeader = regexp.MustCompile(`(?i)\b(?:proxy-)?authorization\\*["']?[ \t]*[:=][ \t]*\\*["']?[ \t]*(?:basic|bearer)[ \t]+([^\s"'\\]+)`)
	genUserinfo   = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.\-]*://([^\s/?#@"'<>\\:]*):([^\s/?#@"'<>\\]+)@`)
)

// scanGeneric finds credentials of any origin the redaction should have removed: an
// Authorization header with a Basic or Bearer value, URL userinfo with a password, and a
// secret-named JSON field with a non-empty string value — each unless the value is Marker. The
// regular expressions run only on lines a keyword search (over an ASCII-lowercased copy) selects.
func scanGeneric(f bundleFile) []Finding {
	var out []Finding
	b := f.data
	lower := asciiLower(nil, b)
	for _, ln := range linesWith(b, lower, []byte("authorization")) {
		l := b[ln:lineEnd(b, ln)]
		for _, m := range genAuthHeader.FindAllSubmatchIndex(l, -1) {
			if !bytes.HasPrefix(l[m[2]:], []byte(Marker)) {
				out = append(out, Finding{File: f.rel, Line: lineAt(b, ln+m[0]), Form: "authorization-header"})
			}
		}
	}
	for _, ln := range linesWith(b, lower, []byte("://")) {
		l := b[ln:lineEnd(b, ln)]
		if bytes.IndexByte(l, '@') < 0 {
			continue
		}
		for _, m := range genUserinfo.FindAllSubmatchIndex(l, -1) {
			if string(l[m[4]:m[5]]) != Marker && string(l[m[2]:m[5]]) != Marker {
				out = append(out, Finding{File: f.rel, Line: lineAt(b, ln+m[0]), Form: "url-userinfo"})
			}
		}
	}
	// Every secret key holds one of keyWords; lines with none cannot hold a secret JSON field.
	var cand []int
	for _, w := range keyWords {
		cand = append(cand, linesWith(b, lower, w)...)
	}
	sort.Ints(cand)
	for i, ln := range cand {
		if i > 0 && cand[i-1] == ln {
			continue
		}
		le := lineEnd(b, ln)
		l, ll := b[ln:le], lower[ln:le]
		for _, kv := range findKeyValues(l, ll) {
			if !kv.quoted || kv.delim != ':' || kv.keyStart == 0 || l[kv.keyStart-1] != '"' {
				continue // JSON fields only: "key": "value"
			}
			v := l[kv.valStart+kv.quoteLen:]
			if bytes.HasPrefix(v, []byte(Marker)) || kv.valEnd-kv.valStart <= 2*kv.quoteLen {
				continue // redacted, or empty
			}
			out = append(out, Finding{File: f.rel, Line: lineAt(b, ln+kv.keyStart), Form: "json-secret-field"})
		}
	}
	return out
}

// linesWith returns the start offsets of the lines of b whose lowercase copy contains w, in order.
func linesWith(b, lower, w []byte) []int {
	var out []int
	for off := 0; off < len(lower); {
		i := bytes.Index(lower[off:], w)
		if i < 0 {
			break
		}
		p := off + i
		ls := bytes.LastIndexByte(b[:p], '\n') + 1
		if len(out) == 0 || out[len(out)-1] != ls {
			out = append(out, ls)
		}
		off = lineEnd(b, p) + 1
	}
	return out
}

func lineEnd(b []byte, from int) int {
	if i := bytes.IndexByte(b[from:], '\n'); i >= 0 {
		return from + i
	}
	return len(b)
}

// CanaryFile is canaries.json: what `evidence verify` needs to re-run the canary scan long after
// the run, without the run's secrets.
//
// Why it leaks nothing useful: for every form of every secret it stores the form's length, a
// SHA-256 of (salt || form) and a 32-bit prefilter — the top half of a 64-bit polynomial hash of
// the form whose base is derived from the same salt. The salt is 32 random bytes drawn per bundle,
// so no precomputed table applies and equal secrets in two bundles look unrelated. All three only
// let someone holding the bundle test a guess; none can be inverted. The secrets are generated
// per run with well over 100 bits of entropy, so testing guesses is hopeless, and a 32-bit
// fingerprint tells a guesser nothing that the full salted SHA-256 next to it does not already
// tell them. Form names ("base64-std-offset1") say how a secret would be encoded, not what it is.
// The same bundle never holds the secrets themselves: that is what the scan proves.
type CanaryFile struct {
	SchemaVersion string        `json:"schema_version"`
	Algorithm     string        `json:"algorithm"`
	Salt          string        `json:"salt"` // hex
	Forms         []CanaryEntry `json:"forms"`
}

// CanaryEntry is one hashed form of one secret.
type CanaryEntry struct {
	Form      string `json:"form"`
	Length    int    `json:"length"`
	Prefilter uint32 `json:"prefilter"`
	SHA256    string `json:"sha256"` // hex of SHA-256(salt || form)
}

const canaryAlgorithm = "sha256(salt||form); prefilter = top 32 bits of sum(form[i]*B^(len-1-i)) mod 2^64, B = little-endian uint64(salt[0:8]) | 1"

// NewCanaryFile hashes every form of every secret with a fresh random salt.
func NewCanaryFile(secrets []string) (CanaryFile, error) {
	salt := make([]byte, 32)
	if _, err := rand.Read(salt); err != nil {
		return CanaryFile{}, fmt.Errorf("evidence: draw canary salt: %w", err)
	}
	cf := CanaryFile{SchemaVersion: wire.BundleSchemaVersion, Algorithm: canaryAlgorithm, Salt: hex.EncodeToString(salt)}
	base := rollBase(salt)
	seen := map[string]bool{}
	for _, s := range secrets {
		for _, f := range SecretForms(s) {
			if seen[f.Value] {
				continue
			}
			seen[f.Value] = true
			cf.Forms = append(cf.Forms, CanaryEntry{
				Form: f.Name, Length: len(f.Value),
				Prefilter: uint32(rollHash([]byte(f.Value), base) >> 32),
				SHA256:    saltedHash(salt, []byte(f.Value)),
			})
		}
	}
	// Sorted by hash, so the order says nothing about which secret a form belongs to.
	sort.Slice(cf.Forms, func(a, b int) bool { return cf.Forms[a].SHA256 < cf.Forms[b].SHA256 })
	return cf, nil
}

func rollBase(salt []byte) uint64 { return binary.LittleEndian.Uint64(salt[:8]) | 1 }

func rollHash(b []byte, base uint64) uint64 {
	var h uint64
	for _, c := range b {
		h = h*base + uint64(c)
	}
	return h
}

func saltedHash(salt, b []byte) string {
	h := sha256.New()
	h.Write(salt)
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil))
}

// hashedScanner finds windows of a file whose salted hash matches a canary entry. For each
// distinct form length it rolls the polynomial hash over the file (one multiply-add per byte),
// tests the prefilter's top bits against a 64 Ki-bit table, and computes SHA-256 only for the
// rare windows that pass — a few MB scan in tens of milliseconds.
type hashedScanner struct {
	salt    []byte
	base    uint64
	lengths []lengthGroup
}

type lengthGroup struct {
	n      int
	pow    uint64 // base^n
	bits   [1 << 16 / 64]uint64
	byPre  map[uint32][]CanaryEntry
	maxLen int
}

func newHashedScanner(cf CanaryFile) (*hashedScanner, error) {
	salt, err := hex.DecodeString(cf.Salt)
	if err != nil || len(salt) < 8 {
		return nil, fmt.Errorf("evidence: %s: salt is not hex of at least 8 bytes", CanariesFile)
	}
	hs := &hashedScanner{salt: salt, base: rollBase(salt)}
	groups := map[int]*lengthGroup{}
	for _, e := range cf.Forms {
		if e.Length <= 0 {
			return nil, fmt.Errorf("evidence: %s: form %q has length %d", CanariesFile, e.Form, e.Length)
		}
		g := groups[e.Length]
		if g == nil {
			g = &lengthGroup{n: e.Length, byPre: map[uint32][]CanaryEntry{}}
			g.pow = 1
			for i := 0; i < e.Length; i++ {
				g.pow *= hs.base
			}
			groups[e.Length] = g
		}
		k := e.Prefilter >> 16
		g.bits[k/64] |= 1 << (k % 64)
		g.byPre[e.Prefilter] = append(g.byPre[e.Prefilter], e)
	}
	for _, g := range groups {
		hs.lengths = append(hs.lengths, *g)
	}
	sort.Slice(hs.lengths, func(a, b int) bool { return hs.lengths[a].n < hs.lengths[b].n })
	return hs, nil
}

func (hs *hashedScanner) scan(f bundleFile) []Finding {
	var out []Finding
	b := f.data
	base := hs.base
	for gi := range hs.lengths {
		g := &hs.lengths[gi]
		n := g.n
		if len(b) < n {
			continue
		}
		pow, bits := g.pow, &g.bits
		var h uint64
		for _, c := range b[:n] {
			h = h*base + uint64(c)
		}
		in, outb := b[n:], b[:len(b)-n]
		for i := 0; ; i++ {
			if k := uint32(h >> 48); bits[k>>6]&(1<<(k&63)) != 0 {
				if es, ok := g.byPre[uint32(h>>32)]; ok {
					sum := saltedHash(hs.salt, b[i:i+n])
					for _, e := range es {
						if subtle.ConstantTimeCompare([]byte(sum), []byte(e.SHA256)) == 1 {
							out = append(out, Finding{File: f.rel, Line: lineAt(b, i), Form: e.Form})
						}
					}
				}
			}
			if i >= len(in) {
				break
			}
			h = h*base + uint64(in[i]) - uint64(outb[i])*pow
		}
	}
	return out
}
