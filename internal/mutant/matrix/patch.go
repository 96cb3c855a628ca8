package matrix

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/quotaqual/quotaqual/internal/strictyaml"
	"github.com/quotaqual/quotaqual/undertest"
)

// BlindDir is where the blind set lives, relative to the repository root.
const BlindDir = "internal/mutant/blind"

// BlindSet is internal/mutant/blind/catalogue.yaml: who wrote the patches, from what, against
// which commit, and one entry per patch.
type BlindSet struct {
	// Writer says who wrote the set and what they had read (and had not).
	Writer  string        `yaml:"writer"`
	Written string        `yaml:"written"` // the date
	Against string        `yaml:"against"` // the commit the patches were written against
	Mutants []BlindMutant `yaml:"mutants"`
}

// BlindMutant is one patch of the blind set.
type BlindMutant struct {
	Name   string `yaml:"name"`
	Patch  string `yaml:"patch"` // file name in BlindDir
	Layer  string `yaml:"layer"`
	Class  string `yaml:"class"`
	Breaks string `yaml:"breaks"`
	// Clause is the promise of the contract it breaks, as the writer cited it.
	Clause string `yaml:"clause"`
	// Realistic is the writer's reason an engineer would plausibly write it.
	Realistic string `yaml:"realistic"`
	// Measured, when set, is what a measurement of the patch found, in each view: the date,
	// the run, and which scenario's check failed (or that it escaped) white-box and black-box.
	Measured string `yaml:"measured,omitempty"`
}

var (
	mutantName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,47}$`)
	patchName  = regexp.MustCompile(`^[0-9]{2}-[a-z0-9-]+\.patch$`)
)

// LoadBlind reads and validates the blind set under root. Every problem is reported at once.
func LoadBlind(root string) (BlindSet, error) {
	var set BlindSet
	path := filepath.Join(root, BlindDir, "catalogue.yaml")
	b, err := os.ReadFile(path)
	if err != nil {
		return set, fmt.Errorf("the blind set: %w", err)
	}
	if err := strictyaml.Decode(b, &set); err != nil {
		return set, fmt.Errorf("%s:\n%w", path, err)
	}
	var errs strictyaml.Errors
	bad := func(p, format string, args ...any) {
		errs = append(errs, strictyaml.FieldError{Path: p, Msg: fmt.Sprintf(format, args...)})
	}
	if strings.TrimSpace(set.Writer) == "" {
		bad("writer", "missing: say who wrote the set and what they had read")
	}
	if !regexp.MustCompile(`^[0-9a-f]{7,40}$`).MatchString(set.Against) {
		bad("against", "%q is not a commit: give the commit the patches were written against", set.Against)
	}
	names, files := map[string]bool{}, map[string]bool{}
	for i, m := range set.Mutants {
		p := fmt.Sprintf("mutants[%d]", i)
		if !mutantName.MatchString(m.Name) || names[m.Name] {
			bad(p+".name", "%q is not a unique mutant name of a-z, 0-9 and '-'", m.Name)
		}
		names[m.Name] = true
		if !patchName.MatchString(m.Patch) || files[m.Patch] {
			bad(p+".patch", "%q is not a unique patch file name like 01-some-defect.patch", m.Patch)
		} else if _, err := os.Stat(filepath.Join(root, BlindDir, m.Patch)); err != nil {
			bad(p+".patch", "%v", err)
		}
		files[m.Patch] = true
		if m.Layer != "gateway" && m.Layer != "ledger" {
			bad(p+".layer", "%q is unknown: use gateway or ledger", m.Layer)
		}
		if strings.TrimSpace(m.Class) == "" || strings.TrimSpace(m.Breaks) == "" || strings.TrimSpace(m.Clause) == "" {
			bad(p, "needs its class, what it breaks and the contract clause it breaks")
		}
	}
	if len(errs) > 0 {
		return set, fmt.Errorf("%s:\n%w", path, errs)
	}
	return set, nil
}

// Mutants are the set's patches as matrix mutants, their patch paths under root.
func (s BlindSet) Matrix(root string) []Mutant {
	out := make([]Mutant, 0, len(s.Mutants))
	for _, m := range s.Mutants {
		out = append(out, Mutant{Name: m.Name, Origin: OriginBlind, Layer: m.Layer, Class: m.Class, Breaks: m.Breaks,
			Note: "breaks: " + m.Clause, Patch: filepath.Join(root, BlindDir, m.Patch)})
	}
	return out
}

// PatchedFiles lists the files a patch changes (its "+++ b/…" lines).
func PatchedFiles(patch []byte) []string {
	var out []string
	for _, line := range strings.Split(string(patch), "\n") {
		if f, ok := strings.CutPrefix(line, "+++ b/"); ok {
			out = append(out, strings.TrimSpace(f))
		}
	}
	return out
}

// CheckApplies reports whether patch still applies to the working tree at root.
func CheckApplies(ctx context.Context, root, patch string) error {
	abs, err := filepath.Abs(patch)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "git", "apply", "--check", abs)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s no longer applies to the tree (port it to the code as it is now): %s", filepath.Base(patch), strings.TrimSpace(string(out)))
	}
	return nil
}

// BuildPatched builds the quotaqual binary of root's working tree with patch applied, into out.
// The tree is copied (tracked and untracked files that are not ignored) to a temporary
// directory, patched there and built there, so root is never touched. It links like `make
// build` (-s -w: no symbol table or DWARF, which nothing reads; the link is the build's larger
// part, ~40% less CPU without them).
func BuildPatched(ctx context.Context, root, patch, out string) error {
	if root == "" {
		root = "."
	}
	abs, err := filepath.Abs(patch)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "quotaqual-patched-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if err := copyTree(ctx, root, tmp); err != nil {
		return err
	}
	apply := exec.CommandContext(ctx, "git", "apply", "--whitespace=nowarn", abs)
	apply.Dir = tmp
	if b, err := apply.CombinedOutput(); err != nil {
		return fmt.Errorf("%s does not apply (port it to the code as it is now): %s", filepath.Base(patch), strings.TrimSpace(string(b)))
	}
	outAbs, err := filepath.Abs(out)
	if err != nil {
		return err
	}
	stamp := "blind-" + strings.TrimSuffix(filepath.Base(patch), ".patch")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath",
		"-ldflags", "-s -w -X github.com/quotaqual/quotaqual/internal/version.Version="+stamp, "-o", outAbs, "./cmd/quotaqual")
	build.Dir = tmp
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=-buildvcs=false")
	if b, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("%s applies but does not build: %s", filepath.Base(patch), tail(strings.TrimSpace(string(b)), 800))
	}
	return nil
}

// copyTree copies the files git knows at root (tracked, or untracked and not ignored) to dst.
func copyTree(ctx context.Context, root, dst string) error {
	ls := exec.CommandContext(ctx, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	ls.Dir = root
	list, err := ls.Output()
	if err != nil {
		return fmt.Errorf("listing the files of %s (git ls-files): %w", root, err)
	}
	for _, f := range bytes.Split(list, []byte{0}) {
		if len(f) == 0 {
			continue
		}
		rel := string(f)
		src := filepath.Join(root, rel)
		info, err := os.Lstat(src)
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted in the working tree, or not a plain file
		}
		if err := copyFile(src, filepath.Join(dst, rel), info.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// binaryArgv is how quotaqual's profiles start the gateway: the harness's own binary.
const binaryArgv = `argv: ["{{.Binary}}", gateway,`

// ProfileLaunching writes, under dir, a copy of the gateway profile at profile (relative to
// root; "" = the shipped default) that launches gateway binary bin instead of the harness's
// own, and returns its path. Only launch.argv[0] changes: the expectations and capabilities
// stay the profile's.
func ProfileLaunching(root, profile, bin, dir string) (string, error) {
	var text []byte
	var err error
	if profile == "" {
		text, err = undertest.ShippedYAML(undertest.DefaultName)
	} else {
		p := profile
		if !filepath.IsAbs(p) && root != "" {
			p = filepath.Join(root, p)
		}
		text, err = os.ReadFile(p)
	}
	if err != nil {
		return "", fmt.Errorf("reading the gateway profile to launch %s: %w", bin, err)
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		return "", err
	}
	if n := bytes.Count(text, []byte(binaryArgv)); n != 1 {
		return "", fmt.Errorf("gateway profile %q: want exactly one launch.argv starting %s, found %d", profile, binaryArgv, n)
	}
	text = bytes.Replace(text, []byte(binaryArgv), []byte(fmt.Sprintf(`argv: [%q, gateway,`, abs)), 1)
	if _, err := undertest.Parse(text); err != nil {
		return "", fmt.Errorf("gateway profile %q launching %s:\n%w", profile, bin, err)
	}
	name := strings.TrimSuffix(filepath.Base(profile), ".yaml")
	if name == "" || name == "." {
		name = undertest.DefaultName
	}
	out := filepath.Join(dir, fmt.Sprintf("%s-%s.yaml", name, filepath.Base(bin)))
	if err := os.WriteFile(out, text, 0o644); err != nil {
		return "", err
	}
	return out, nil
}
