package ci_test

// The template for a gateway's OWN repository (examples/ci/gateway-repo, issue 26): both CI
// systems run the same commands, the flags they pass are quotaqual run's, the version is pinned,
// and the commands run in order on a clean checkout of a stand-in gateway repository — quotaqual's
// own gateway, its profile kept at the path the template names.
//
// What the clean-checkout run substitutes, and why: `go install …@$QUOTAQUAL_VERSION` installs
// from this worktree's module (the pinned release need not exist yet and the test must test this
// code); the docker topology is replaced by netns (no image build, `--gateway-image` dropped):
// a docker qualification takes minutes on this machine, and the docker path of `--gateway-image`
// is covered by cmd/quotaqual's docker tests; two scenarios are selected to keep it short.
// Everything else — the profile path, the bundle, verify, JUnit, the diff — runs as written.

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

type gatewayRepoTemplate struct {
	env  map[string]string
	cmds []string
}

func gatewayRepoGitHub(t *testing.T, b []byte) gatewayRepoTemplate {
	t.Helper()
	var wf struct {
		Env  map[string]string `yaml:"env"`
		Jobs map[string]struct {
			Steps []struct {
				Run  string            `yaml:"run"`
				Uses string            `yaml:"uses"`
				With map[string]string `yaml:"with"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	if err := yaml.Unmarshal(b, &wf); err != nil {
		t.Fatalf("gateway-repo/github-actions.yml: %v", err)
	}
	job, ok := wf.Jobs["qualify"]
	if !ok {
		t.Fatal("gateway-repo/github-actions.yml has no job \"qualify\"")
	}
	var runs []string
	uses := map[string]map[string]string{}
	for _, s := range job.Steps {
		if s.Run != "" {
			runs = append(runs, s.Run)
		}
		if s.Uses != "" {
			uses[strings.SplitN(s.Uses, "@", 2)[0]] = s.With
		}
	}
	if w, ok := uses["mikepenz/action-junit-report"]; !ok || w["report_paths"] != "quotaqual-evidence/*/junit.xml" {
		t.Errorf("gateway-repo/github-actions.yml does not publish quotaqual-evidence/*/junit.xml: %v", w)
	}
	if w, ok := uses["actions/upload-artifact"]; !ok || !strings.Contains(w["path"], "quotaqual-evidence/*.tar.gz") {
		t.Errorf("gateway-repo/github-actions.yml does not upload the bundle: %v", w)
	}
	if _, ok := uses["dawidd6/action-download-artifact"]; !ok {
		t.Error("gateway-repo/github-actions.yml does not download the baseline bundle")
	}
	return gatewayRepoTemplate{env: wf.Env, cmds: scriptLines(runs)}
}

func gatewayRepoGitLab(t *testing.T, b []byte) gatewayRepoTemplate {
	t.Helper()
	var ci map[string]struct {
		Variables map[string]string `yaml:"variables"`
		Script    []string          `yaml:"script"`
		Artifacts struct {
			Paths   []string `yaml:"paths"`
			Reports struct {
				JUnit string `yaml:"junit"`
			} `yaml:"reports"`
		} `yaml:"artifacts"`
	}
	if err := yaml.Unmarshal(b, &ci); err != nil {
		t.Fatalf("gateway-repo/gitlab-ci.yml: %v", err)
	}
	job, ok := ci["qualify"]
	if !ok {
		t.Fatal("gateway-repo/gitlab-ci.yml has no job \"qualify\"")
	}
	if job.Artifacts.Reports.JUnit != "quotaqual-evidence/*/junit.xml" || !strings.Contains(strings.Join(job.Artifacts.Paths, " "), "quotaqual-evidence/*.tar.gz") {
		t.Errorf("gateway-repo/gitlab-ci.yml publishes junit %q and keeps %v", job.Artifacts.Reports.JUnit, job.Artifacts.Paths)
	}
	return gatewayRepoTemplate{env: job.Variables, cmds: scriptLines(job.Script)}
}

func loadGatewayRepoTemplates(t *testing.T) (gh, gl gatewayRepoTemplate) {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "examples", "ci", "gateway-repo")
	b, err := os.ReadFile(filepath.Join(dir, "github-actions.yml"))
	if err != nil {
		t.Fatal(err)
	}
	gh = gatewayRepoGitHub(t, b)
	if b, err = os.ReadFile(filepath.Join(dir, "gitlab-ci.yml")); err != nil {
		t.Fatal(err)
	}
	return gh, gatewayRepoGitLab(t, b)
}

// commandWith returns the one command containing s.
func commandWith(t *testing.T, cmds []string, s string) string {
	t.Helper()
	var found []string
	for _, c := range cmds {
		if strings.Contains(c, s) {
			found = append(found, c)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d template commands contain %q, want 1: %v", len(found), s, found)
	}
	return found[0]
}

func TestGatewayRepoTemplatesAgreeAndPin(t *testing.T) {
	gh, gl := loadGatewayRepoTemplates(t)
	if strings.Join(gh.cmds, "\n") != strings.Join(gl.cmds, "\n") {
		t.Errorf("the two templates run different commands:\nGitHub:\n  %s\nGitLab:\n  %s", strings.Join(gh.cmds, "\n  "), strings.Join(gl.cmds, "\n  "))
	}
	for _, k := range []string{"QUOTAQUAL_VERSION", "GATEWAY_PROFILE", "GATEWAY_IMAGE"} {
		if gh.env[k] == "" || gh.env[k] != gl.env[k] {
			t.Errorf("%s: GitHub %q, GitLab %q; want the same, set", k, gh.env[k], gl.env[k])
		}
	}
	if v := gh.env["QUOTAQUAL_VERSION"]; !regexp.MustCompile(`^v\d+\.\d+\.\d+$|^[0-9a-f]{40}$`).MatchString(v) {
		t.Errorf("QUOTAQUAL_VERSION %q is not a pinned release or commit", v)
	}
	if p := gh.env["GATEWAY_PROFILE"]; !strings.HasPrefix(p, "qualification/") || !strings.HasSuffix(p, ".yaml") {
		t.Errorf("GATEWAY_PROFILE %q: want qualification/<profile>.yaml", p)
	}
	commandWith(t, gh.cmds, `go install "github.com/quotaqual/quotaqual/cmd/quotaqual@$QUOTAQUAL_VERSION"`)
	commandWith(t, gh.cmds, `docker build -t "$GATEWAY_IMAGE"`)
	run := commandWith(t, gh.cmds, "quotaqual run ")
	for _, want := range []string{`--gateway "./$GATEWAY_PROFILE"`, "--topology docker", `--gateway-image "$GATEWAY_IMAGE"`, "--bundle tar.gz", "--evidence-dir quotaqual-evidence"} {
		if !strings.Contains(run, want) {
			t.Errorf("the run command lacks %s: %s", want, run)
		}
	}
	commandWith(t, gh.cmds, "quotaqual evidence verify quotaqual-evidence/*.tar.gz")
	commandWith(t, gh.cmds, "quotaqual evidence diff baseline/*.tar.gz quotaqual-evidence/*.tar.gz")

	// Every flag the template passes is one `quotaqual run` has.
	help, err := exec.Command("go", "run", "github.com/quotaqual/quotaqual/cmd/quotaqual", "run", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("quotaqual run --help: %v\n%s", err, help)
	}
	for _, f := range regexp.MustCompile(`--[a-z][a-z-]+`).FindAllString(run, -1) {
		if !regexp.MustCompile(`(?m)^\s+(-\w, )?` + regexp.QuoteMeta(f) + `[\s=]`).Match(help) {
			t.Errorf("the template passes %s, which quotaqual run does not have:\n%s", f, help)
		}
	}
}

// TestGatewayRepoTemplateRunsOnACleanCheckout runs the template's commands, in order, in a clean
// checkout of a stand-in gateway repository (see the file comment for what is substituted).
func TestGatewayRepoTemplateRunsOnACleanCheckout(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the clean-checkout run of the gateway template is skipped (it runs a qualification)")
	}
	root := repoRoot(t)
	gh, _ := loadGatewayRepoTemplates(t)
	work := t.TempDir()

	// Their repository: a profile where the template looks for it, and the gateway's Dockerfile.
	theirs := filepath.Join(work, "their-gateway")
	profile, err := os.ReadFile(filepath.Join(root, "undertest", "profiles", "quotaqual.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string][]byte{
		gh.env["GATEWAY_PROFILE"]: profile,
		"Dockerfile":              []byte("# the gateway's image (not built here: the test runs the netns topology)\n"),
	} {
		p := filepath.Join(theirs, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	checkout := filepath.Join(work, "checkout")
	git := func(dir string, args ...string) {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=ci", "GIT_AUTHOR_EMAIL=ci@example.invalid", "GIT_COMMITTER_NAME=ci", "GIT_COMMITTER_EMAIL=ci@example.invalid")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	git(theirs, "init", "--quiet")
	git(theirs, "add", ".")
	git(theirs, "commit", "--quiet", "-m", "gateway")
	git(work, "clone", "--quiet", theirs, checkout)

	gobin := filepath.Join(work, "gobin")
	env := append(os.Environ(), "PATH="+gobin+string(os.PathListSeparator)+os.Getenv("PATH"), "GOBIN="+gobin, "TMPDIR="+work)
	for k, v := range gh.env {
		env = append(env, k+"="+v)
	}
	shell := func(dir, c string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", c)
		cmd.Dir, cmd.Env = dir, env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Run(); err != nil {
			t.Fatalf("%q failed in %s: %v\n%s", c, dir, err, tail(out.String(), 4000))
		}
		return out.String()
	}

	diffOut := ""
	for _, c := range gh.cmds {
		switch {
		case strings.HasPrefix(c, "go install "):
			// The pinned release is stood in for by this worktree's module.
			shell(root, "go install github.com/quotaqual/quotaqual/cmd/quotaqual")
		case strings.HasPrefix(c, "docker build "):
			// The netns stand-in runs the gateway from the profile's launch argv: no image.
		case strings.HasPrefix(c, "quotaqual run "):
			c = strings.Replace(c, `--topology docker --gateway-image "$GATEWAY_IMAGE"`, "--topology netns --scenario valid-auth --scenario shared-budget", 1)
			if !strings.Contains(c, "--topology netns") {
				t.Fatalf("the run command no longer has the form the test substitutes: %s", c)
			}
			shell(checkout, c)
		case strings.Contains(c, "evidence diff baseline/"):
			stageBaseline(t, checkout) // as the download step leaves the last good bundle
			diffOut = shell(checkout, c)
		default:
			shell(checkout, c)
		}
	}
	for _, glob := range []string{"quotaqual-evidence/*.tar.gz", "quotaqual-evidence/*/junit.xml"} {
		if m, _ := filepath.Glob(filepath.Join(checkout, glob)); len(m) != 1 {
			t.Errorf("after the template's commands, %s matches %d files, want 1", glob, len(m))
		}
	}
	b, err := os.ReadFile(filepath.Join(checkout, "quotaqual-run.json"))
	if err != nil || !bytes.Contains(b, []byte(`"exit_code": 0`)) || !bytes.Contains(b, []byte(`"level": "qualified"`)) {
		t.Errorf("quotaqual-run.json: %v\n%s", err, tail(string(b), 2000))
	}
	if !bytes.Contains(b, []byte(`"topology": "netns"`)) {
		t.Errorf("the run did not use the netns stand-in:\n%s", tail(string(b), 2000))
	}
	if !strings.Contains(diffOut, "no verdict regressed") || strings.Contains(diffOut, "NOT LIKE FOR LIKE") {
		t.Errorf("the diff against the last good bundle did not compare like for like:\n%s", diffOut)
	}
}
