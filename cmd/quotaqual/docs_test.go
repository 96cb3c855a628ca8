package main

// Tests that hold README.md and docs/ to what the code knows: the commands and their flags
// (cobra's own tree), the engines (the registry), the generated scenario page and the links
// between the pages. Each failure names the page, the line and what to change.

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/quotaqual/quotaqual/scenarios"
	"github.com/quotaqual/quotaqual/topology"
)

// docPages returns README.md and every page of docs/, by their path from the repository root.
func docPages(t *testing.T) map[string]string {
	t.Helper()
	pages := map[string]string{}
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append([]string{"../../README.md"}, files...) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		pages[strings.TrimPrefix(f, "../../")] = string(b)
	}
	return pages
}

// section returns the lines of page under the heading that starts with heading, up to the
// next heading of the same or a higher level.
func section(t *testing.T, name, page, heading string) []string {
	t.Helper()
	level := strings.Index(heading, " ")
	var out []string
	in := false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "#") {
			l := strings.Index(line, " ")
			if in && l > 0 && l <= level {
				break
			}
			if strings.HasPrefix(line, heading) {
				in = true
				continue
			}
		}
		if in {
			out = append(out, line)
		}
	}
	if !in {
		t.Fatalf("%s has no section %q", name, heading)
	}
	return out
}

// firstCells returns the first cell of every body row of the first table in lines.
func firstCells(lines []string) []string {
	var cells []string
	row := 0
	for _, line := range lines {
		if !strings.HasPrefix(line, "|") {
			if row > 0 {
				break
			}
			continue
		}
		row++
		if row > 2 { // past the header and the separator
			cells = append(cells, strings.TrimSpace(strings.Split(line, "|")[1]))
		}
	}
	return cells
}

var codeSpan = regexp.MustCompile("`([^`]+)`")

// TestDocsMarkdownFlagWritesTheScenariosPage runs the command the page names and compares:
// docs/scenarios.md is `quotaqual scenarios --markdown`'s output, byte for byte.
func TestDocsMarkdownFlagWritesTheScenariosPage(t *testing.T) {
	root := newRootCmd()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"scenarios", "--markdown"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	page, err := os.ReadFile("../../docs/scenarios.md")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), page) {
		t.Errorf("docs/scenarios.md differs from `quotaqual scenarios --markdown`: run `%s`", scenarios.MarkdownCommand)
	}
}

// TestReadmeCommandsTableListsEveryCommand holds the README's commands table to cobra's tree:
// every command it names exists, and every command a user can run (not hidden) is named.
func TestReadmeCommandsTableListsEveryCommand(t *testing.T) {
	pages := docPages(t)
	root := newRootCmd()
	named := map[*cobra.Command]bool{}
	for _, cell := range firstCells(section(t, "README.md", pages["README.md"], "## Commands")) {
		for _, span := range codeSpan.FindAllStringSubmatch(cell, -1) {
			words := strings.Fields(span[1])
			if len(words) == 0 || words[0] != "quotaqual" {
				continue // an alias in prose, as `up --demo`
			}
			cmd, rest, err := root.Find(words[1:])
			if err != nil || cmd == root || (len(rest) > 0 && !strings.HasPrefix(rest[0], "-") && len(cmd.Commands()) > 0) {
				t.Errorf("README.md's commands table names %q, which is no command of quotaqual", span[1])
				continue
			}
			named[cmd] = true
		}
		// `quotaqual peers build` / `list`: the bare word after a slash is a sibling.
		if m := regexp.MustCompile("^`quotaqual (\\w+) \\w+` / `(\\w+)`").FindStringSubmatch(cell); m != nil {
			if cmd, _, err := root.Find([]string{m[1], m[2]}); err == nil && cmd.Name() == m[2] {
				named[cmd] = true
			} else {
				t.Errorf("README.md's commands table names %q, which is no command of quotaqual %s", m[2], m[1])
			}
		}
	}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			if sub.Hidden || sub.Name() == "help" || sub.Name() == "completion" {
				continue
			}
			if len(sub.Commands()) > 0 {
				walk(sub)
				continue
			}
			if !named[sub] {
				t.Errorf("README.md's commands table does not name `%s`: add a row", sub.CommandPath())
			}
		}
	}
	walk(root)
}

// commandAt walks words down the command tree from root as far as they name subcommands, and
// returns the command reached and how many words named it.
func commandAt(root *cobra.Command, words []string) (*cobra.Command, int) {
	cmd, n := root, 0
	for _, w := range words {
		var next *cobra.Command
		for _, sub := range cmd.Commands() {
			if sub.Name() == w || slices.Contains(sub.Aliases, w) {
				next = sub
			}
		}
		if next == nil {
			break
		}
		cmd, n = next, n+1
	}
	return cmd, n
}

// hasFlag reports whether cmd accepts --name, its own or inherited.
func hasFlag(cmd *cobra.Command, name string) bool {
	if name == "help" {
		return true
	}
	var found bool
	for _, fs := range []*pflag.FlagSet{cmd.Flags(), cmd.InheritedFlags(), cmd.PersistentFlags()} {
		found = found || fs.Lookup(name) != nil
	}
	return found
}

// commandLines returns the command snippets of a page: its code spans (a span may run over a
// line break, so they are read paragraph by paragraph) and the lines of its code blocks
// (indented or fenced), each with the line it starts on.
func commandLines(page string) (snippets []string, lines []int) {
	fenced := false
	var para []string
	start := 0
	flush := func() {
		for _, m := range codeSpan.FindAllStringSubmatch(strings.Join(para, " "), -1) {
			snippets, lines = append(snippets, m[1]), append(lines, start)
		}
		para = nil
	}
	for i, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "```") {
			flush()
			fenced = !fenced
			continue
		}
		if fenced || strings.HasPrefix(line, "    ") {
			flush()
			snippets, lines = append(snippets, strings.TrimSpace(line)), append(lines, i+1)
			continue
		}
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "|") {
			flush()
		}
		if strings.TrimSpace(line) == "" {
			continue
		}
		if len(para) == 0 {
			start = i + 1
		}
		para = append(para, line)
	}
	flush()
	return snippets, lines
}

var (
	// quotaqual as a command word: at the start, after a space or a path (bin/quotaqual,
	// ./cmd/quotaqual), followed by a space.
	invocation = regexp.MustCompile(`(?:^|[\s/])quotaqual (.*)`)
	flagName   = regexp.MustCompile(`(?:^|[\s\[(])--([a-z][a-z0-9-]*)`)
	scenarioOf = regexp.MustCompile(`--scenario[ =]([a-z0-9-]+)`)
)

// TestDocsMentionOnlyFlagsTheCommandsHave finds every quotaqual command line in README.md and
// docs/ — code spans and code blocks — and checks each --flag it passes exists on the command
// it names (cobra), and each --scenario it names is a scenario, so no page documents a flag or
// a scenario that was renamed away.
func TestDocsMentionOnlyFlagsTheCommandsHave(t *testing.T) {
	root := newRootCmd()
	known := map[string]bool{}
	for _, s := range scenarios.All() {
		known[s.Name] = true
	}
	checked := 0
	for name, page := range docPages(t) {
		snippets, lines := commandLines(page)
		for i, snippet := range snippets {
			m := invocation.FindStringSubmatch(snippet)
			if m == nil {
				continue
			}
			// One command: stop at a pipe, a redirection or the next command.
			args := regexp.MustCompile(`\s(\||>|&&|;)\s`).Split(m[1], 2)[0]
			cmd, n := commandAt(root, strings.Fields(args))
			if n == 0 {
				continue // "quotaqual" as a word in prose, not a command
			}
			for _, f := range flagName.FindAllStringSubmatch(args, -1) {
				checked++
				if !hasFlag(cmd, f[1]) {
					t.Errorf("%s:%d: `%s` has no flag --%s (in %q)", name, lines[i], cmd.CommandPath(), f[1], snippet)
				}
			}
			for _, s := range scenarioOf.FindAllStringSubmatch(args, -1) {
				if !known[s[1]] {
					t.Errorf("%s:%d: --scenario %s is no scenario (in %q)", name, lines[i], s[1], snippet)
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("only %d flags found in the docs' command lines: the parser lost them", checked)
	}
}

// TestDocsRunFlagsTableIsTheRunCommands holds docs/run.md's table of `quotaqual run` flags to
// the command: every flag in it exists, and every flag of run is in it.
func TestDocsRunFlagsTableIsTheRunCommands(t *testing.T) {
	page := docPages(t)["docs/run.md"]
	run, _, err := newRootCmd().Find([]string{"run"})
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, cell := range firstCells(section(t, "docs/run.md", page, "## `quotaqual run` flags")) {
		for _, f := range regexp.MustCompile("`--([a-z0-9-]+)").FindAllStringSubmatch(cell, -1) {
			documented[f[1]] = true
			if run.Flags().Lookup(f[1]) == nil {
				t.Errorf("docs/run.md documents --%s, which quotaqual run does not have: remove its row", f[1])
			}
		}
	}
	run.Flags().VisitAll(func(f *pflag.Flag) {
		if !f.Hidden && f.Name != "help" && !documented[f.Name] {
			t.Errorf("docs/run.md's flags table lacks --%s (%s): add a row", f.Name, f.Usage)
		}
	})
}

// TestDocsEngineTablesNameTheRegisteredEngines holds the engine tables of README.md and
// docs/topologies.md to the registry: one row per registered engine, none besides.
func TestDocsEngineTablesNameTheRegisteredEngines(t *testing.T) {
	pages := docPages(t)
	want := topology.EngineNames()
	if len(want) == 0 {
		t.Fatal("no engine registered: the test binary does not import topology/engines")
	}
	for _, tc := range []struct{ page, heading string }{
		{"README.md", "## Engines"},
		{"docs/topologies.md", "# Topologies"},
	} {
		var got []string
		for _, cell := range firstCells(section(t, tc.page, pages[tc.page], tc.heading)) {
			m := codeSpan.FindStringSubmatch(cell)
			if m == nil {
				t.Errorf("%s: engine table row %q does not name its engine in a code span", tc.page, cell)
				continue
			}
			got = append(got, m[1])
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s's engine table names %v; the registry has %v", tc.page, got, want)
		}
	}
}

// TestDocsLinksResolve checks every relative link of README.md and docs/ — the README's docs/
// index above all — names a file that exists and, with a #fragment, a heading of that page.
func TestDocsLinksResolve(t *testing.T) {
	pages := docPages(t)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	linked := map[string]bool{}
	for name, page := range pages {
		for i, line := range strings.Split(page, "\n") {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, fragment, _ := strings.Cut(target, "#")
				path := name
				if file != "" {
					path = filepath.ToSlash(filepath.Clean(filepath.Join(filepath.Dir(name), file)))
				}
				if name == "README.md" {
					linked[path] = true
				}
				if _, err := os.Stat(filepath.Join("../..", path)); err != nil {
					t.Errorf("%s:%d: the link %s names %s, which does not exist", name, i+1, target, path)
					continue
				}
				if fragment == "" {
					continue
				}
				targetPage, ok := pages[path]
				if !ok {
					continue // a page outside README.md and docs/ (MUTANTS.md): its file is enough
				}
				if !slices.Contains(anchors(targetPage), fragment) {
					t.Errorf("%s:%d: the link %s names no heading of %s (its anchors: %s)", name, i+1, target, path,
						strings.Join(anchors(targetPage), ", "))
				}
			}
		}
	}
	for name := range pages {
		if name != "README.md" && !linked[name] {
			t.Errorf("README.md does not link %s: add it to the README's Documentation list", name)
		}
	}
}

// anchors returns the fragment GitHub gives each heading of page: lower case, punctuation
// other than hyphens and underscores dropped, spaces turned into hyphens, a repeat numbered.
func anchors(page string) []string {
	var out []string
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(page, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", a, n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}
