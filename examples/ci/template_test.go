// Package ci_test holds the CI job templates to the docs: the commands each template runs are
// the "Continuous integration" list of docs/run.md (ciPage), in order, and that list runs on a
// clean clone.
package ci_test

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quotaqual/quotaqual/internal/testbin"
)

// repoRoot is the repository this test belongs to.
func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		t.Fatalf("git rev-parse: %v", err)
	}
	return strings.TrimSpace(string(out))
}

// ciPage is the page that documents the CI job's commands (it moved there from the README).
const ciPage = "docs/run.md"

// ciCommands returns the indented command block of ciPage's "Continuous integration"
// section.
func ciCommands(t *testing.T, page []byte) []string {
	t.Helper()
	var cmds []string
	in, started := false, false
	sc := bufio.NewScanner(bytes.NewReader(page))
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			if in {
				break
			}
			in = line == "## Continuous integration"
			continue
		}
		if !in {
			continue
		}
		if strings.HasPrefix(line, "    ") {
			started = true
			cmds = append(cmds, strings.TrimSpace(line))
		} else if started && strings.TrimSpace(line) != "" {
			break
		}
	}
	if len(cmds) == 0 {
		t.Fatal(ciPage + " has no command block under \"## Continuous integration\"")
	}
	return cmds
}

// scriptLines splits run scripts into their command lines, without blanks and comments.
func scriptLines(scripts []string) []string {
	var out []string
	for _, s := range scripts {
		for _, l := range strings.Split(s, "\n") {
			if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
				out = append(out, l)
			}
		}
	}
	return out
}

func githubCommands(t *testing.T, b []byte) []string {
	t.Helper()
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				Run  string `yaml:"run"`
				Uses string `yaml:"uses"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatalf("github-actions.yml: %v", err)
	}
	job, ok := wf.Jobs["qualify"]
	if !ok {
		t.Fatal("github-actions.yml has no job \"qualify\"")
	}
	var runs []string
	uses := map[string]bool{}
	for _, s := range job.Steps {
		if s.Run != "" {
			runs = append(runs, s.Run)
		}
		if s.Uses != "" {
			uses[strings.SplitN(s.Uses, "@", 2)[0]] = true
		}
	}
	for _, a := range []string{"actions/checkout", "actions/setup-go", "actions/upload-artifact", "mikepenz/action-junit-report"} {
		if !uses[a] {
			t.Errorf("github-actions.yml does not use %s", a)
		}
	}
	return scriptLines(runs)
}

func gitlabCommands(t *testing.T, b []byte) []string {
	t.Helper()
	var ci map[string]struct {
		Script    []string `yaml:"script"`
		Artifacts struct {
			Reports struct {
				JUnit string `yaml:"junit"`
			} `yaml:"reports"`
		} `yaml:"artifacts"`
	}
	if err := yaml.Unmarshal(b, &ci); err != nil {
		t.Fatalf("gitlab-ci.yml: %v", err)
	}
	job, ok := ci["qualify"]
	if !ok {
		t.Fatal("gitlab-ci.yml has no job \"qualify\"")
	}
	if job.Artifacts.Reports.JUnit != "quotaqual-evidence/*/junit.xml" {
		t.Errorf("gitlab-ci.yml publishes junit %q", job.Artifacts.Reports.JUnit)
	}
	return scriptLines(job.Script)
}

func TestTemplatesRunTheCommandsTheReadmeDocuments(t *testing.T) {
	root := repoRoot(t)
	page, err := os.ReadFile(filepath.Join(root, ciPage))
	if err != nil {
		t.Fatal(err)
	}
	want := ciCommands(t, page)
	for name, parse := range map[string]func(*testing.T, []byte) []string{
		"github-actions.yml": githubCommands, "gitlab-ci.yml": gitlabCommands,
	} {
		b, err := os.ReadFile(filepath.Join(root, "examples", "ci", name))
		if err != nil {
			t.Fatal(err)
		}
		got := parse(t, b)
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s runs\n  %s\n%s documents\n  %s", name, strings.Join(got, "\n  "), ciPage, strings.Join(want, "\n  "))
		}
	}
	for _, must := range []string{"--bundle tar.gz", "--json", "evidence diff baseline/"} {
		if !strings.Contains(strings.Join(want, "\n"), must) {
			t.Errorf("the documented CI commands lack %q", must)
		}
	}
}

// TestReadmeCommandsRunInOrderOnACleanClone clones the committed repository and runs the
// documented commands there, in order, with a baseline bundle in place as the download step
// would leave it. `make build` is served by the test suite's own binary, copied to where the
// command puts it.
func TestReadmeCommandsRunInOrderOnACleanClone(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the clean-clone run of the CI commands is skipped (it runs a whole qualification)")
	}
	root := repoRoot(t)
	page, err := os.ReadFile(filepath.Join(root, ciPage))
	if err != nil {
		t.Fatal(err)
	}
	cmds := ciCommands(t, page)
	clone := filepath.Join(t.TempDir(), "clone")
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"clone", "--quiet", "--no-checkout", root, clone},
		{"-C", clone, "checkout", "--quiet", strings.TrimSpace(string(head))},
	} {
		if out, err := exec.Command("git", args...).CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	if got, _ := os.ReadFile(filepath.Join(clone, ciPage)); !bytes.Equal(got, page) {
		t.Skip(ciPage + " has uncommitted changes: commit them; the clean clone runs what is committed")
	}

	ran := 0
	for _, c := range cmds {
		if c == "make build" {
			bin := filepath.Join(clone, "bin", "quotaqual")
			if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := testbin.Build(bin); err != nil {
				t.Fatal(err)
			}
			ran++
			continue
		}
		if strings.Contains(c, "evidence diff baseline/") {
			// What the baseline download leaves: the last good bundle in baseline/.
			stageBaseline(t, clone)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", c)
		cmd.Dir = clone
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("command %d %q failed on a clean clone: %v\n%s", ran+1, c, err, tail(out.String(), 4000))
		}
		if strings.Contains(c, "evidence diff baseline/") && !strings.Contains(out.String(), "no verdict regressed") {
			t.Errorf("the diff against the baseline did not compare:\n%s", out.String())
		}
		ran++
	}
	if ran != len(cmds) {
		t.Fatalf("ran %d of %d commands", ran, len(cmds))
	}
	for _, glob := range []string{"quotaqual-evidence/*.tar.gz", "quotaqual-evidence/*/junit.xml", "quotaqual-evidence/*/report.html"} {
		if m, _ := filepath.Glob(filepath.Join(clone, glob)); len(m) != 1 {
			t.Errorf("after the CI commands, %s matches %d files, want 1", glob, len(m))
		}
	}
	if b, err := os.ReadFile(filepath.Join(clone, "quotaqual-run.json")); err != nil || !bytes.Contains(b, []byte(`"exit_code": 0`)) || !bytes.Contains(b, []byte(`"level": "qualified"`)) {
		t.Errorf("quotaqual-run.json: %v\n%s", err, tail(string(b), 2000))
	}
}

// stageBaseline copies the run's own bundle to baseline/ as the download step would place a
// previous one.
func stageBaseline(t *testing.T, clone string) {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(clone, "quotaqual-evidence", "*.tar.gz"))
	if len(m) != 1 {
		t.Fatalf("no bundle to use as the baseline: %v", m)
	}
	b, err := os.ReadFile(m[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(clone, "baseline"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(clone, "baseline", "last-good.tar.gz"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
