package scenarios

import (
	"bytes"
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestMarkdownPageIsGenerated holds docs/scenarios.md to the catalogue: the page is exactly
// what WriteMarkdown renders from All(), so its names, counts, needs and black-box statements
// are the code's.
func TestMarkdownPageIsGenerated(t *testing.T) {
	var want bytes.Buffer
	if err := WriteMarkdown(&want, All()); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../docs/scenarios.md")
	if err != nil {
		t.Fatalf("%v: generate it with `%s`", err, MarkdownCommand)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Errorf("docs/scenarios.md is not what the catalogue generates: run `%s`", MarkdownCommand)
	}
}

// TestDocsStateEveryBlackBoxPath checks the table of black-box paths (docs/scenarios.md, where
// it moved from the README) holds every scenario's BlackBox statement as the definition has it.
func TestDocsStateEveryBlackBoxPath(t *testing.T) {
	b, err := os.ReadFile("../docs/scenarios.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range All() {
		row := "| `" + s.Name + "` | " + s.BlackBox + " |"
		if !bytes.Contains(b, []byte(row)) {
			t.Errorf("docs/scenarios.md lacks the row\n%s\nrun `%s`", row, MarkdownCommand)
		}
	}
}

// TestDocsChecksPageDescribesEveryScenario holds docs/checks.md's table of what each scenario
// proves to the catalogue: one row per scenario, and no row for a scenario that does not exist.
func TestDocsChecksPageDescribesEveryScenario(t *testing.T) {
	b, err := os.ReadFile("../docs/checks.md")
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, s := range All() {
		known[s.Name] = true
	}
	// | scenario | proves | kind of invariant |, each row's first cell the scenario's name.
	row := regexp.MustCompile("^\\| `([a-z0-9-]+)`")
	described := map[string]bool{}
	in := false
	for i, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| scenario | proves |") {
			in = true
			continue
		}
		if in && !strings.HasPrefix(line, "|") {
			break
		}
		if m := row.FindStringSubmatch(line); in && m != nil {
			if !known[m[1]] {
				t.Errorf("docs/checks.md:%d describes scenario %q, which quotaqual scenarios does not list", i+1, m[1])
			}
			described[m[1]] = true
		}
	}
	for name := range known {
		if !described[name] {
			t.Errorf("docs/checks.md's table of what each scenario proves has no row for %s", name)
		}
	}
}
