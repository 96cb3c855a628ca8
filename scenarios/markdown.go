package scenarios

import (
	"fmt"
	"io"
	"strings"
)

// MarkdownCommand is the command that regenerates docs/scenarios.md from the catalogue; the
// page names it, and the test that holds the page to the catalogue prints it.
const MarkdownCommand = "go run ./cmd/quotaqual scenarios --markdown > docs/scenarios.md"

// WriteMarkdown writes the catalogue list as the Markdown page docs/scenarios.md: how many
// scenarios there are and which run by default, one row per scenario (what it proves, its
// invariant, what it needs and prefers), which run alone and why, and what each black-box
// path sees. Everything on the page comes from the scenarios' definitions, so the page cannot
// drift from the code: a test regenerates it and compares.
func WriteMarkdown(w io.Writer, list []Scenario) error {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }

	p("<!-- Generated from the scenario catalogue (package scenarios) by\n     %s\n     Do not edit: change the scenario's definition and regenerate. -->\n\n", MarkdownCommand)
	p("# The scenarios\n\n")
	everywhere := 0
	byProfile := map[string]int{}
	var profiles []string
	for _, s := range list {
		if len(s.Profiles) == 0 {
			everywhere++
			continue
		}
		for _, pr := range s.Profiles {
			if byProfile[pr] == 0 {
				profiles = append(profiles, pr)
			}
			byProfile[pr]++
		}
	}
	p("%d scenarios: %d in every profile's default run", len(list), everywhere)
	for _, pr := range profiles {
		p(", %d more in the %s profile's (%d in all)", byProfile[pr], pr, everywhere+byProfile[pr])
	}
	p(".\n`--scenario NAME` selects any scenario in any profile; `quotaqual scenarios` lists them.\n")
	p("What each checks in detail, and how the checks read a gateway from outside, is in\n")
	p("[checks.md](checks.md); the clauses they vary, in [contract.md](contract.md).\n\n")

	p("| # | scenario | proves | invariant | needs | prefers | default run |\n")
	p("|--:|---|---|---|---|---|---|\n")
	for i, s := range list {
		run := "every profile"
		if len(s.Profiles) > 0 {
			run = strings.Join(s.Profiles, ", ") + " (elsewhere `--scenario`)"
		}
		p("| %d | `%s` | %s | %s | %s | %s | %s |\n", i+1, s.Name, cell(s.Summary), cell(s.Invariant),
			needList(s.Needs), needList(s.Prefers), run)
	}

	p("\n## Side by side, or alone\n\n")
	p("A scenario that pulls no lever only sends its own principals' requests and reads its own keys,\n")
	p("so the runner runs those side by side. These declare (`Scenario.Exclusive`) that they need the\n")
	p("topology to themselves. On netns, where a topology comes up and down in about a second, each\n")
	p("gets a topology of its own (the run's spec under its own run id, `<run-id>--<letter>`), and they\n")
	p("run side by side with each other and with the rest, a few at a time; the manifest's `ran_on`\n")
	p("names each scenario's topology, and the bundle keeps each own topology's facts, logs, metrics\n")
	p("and configs under `topologies/<scenario>/`. On docker, kind and process (and with `--keep` or\n")
	p("`--store cluster`) the run keeps one topology, and they run on it one at a time with nothing\n")
	p("beside them:\n\n")
	p("| runs alone | why |\n|---|---|\n")
	for _, s := range list {
		if s.Exclusive == "" {
			continue
		}
		why := cell(s.Exclusive)
		if s.SharesAfterLever {
			why += " — then hands the topology back (`Env.ShareTopology`): the wait that follows its lever overlaps the others"
		}
		if s.WholeMachine {
			why += " — needs the whole machine, not only a topology: it runs last, alone, on the run's topology, on netns too"
		}
		p("| `%s` | %s |\n", s.Name, why)
	}

	p("\n## What each black-box path sees\n\n")
	p("A gateway without quota inspection (or without leases, attribution, or a scenario's own rule)\n")
	p("gets each scenario's black-box path (`Scenario.BlackBox`): the same clause checked from what a\n")
	p("client and the providers see. A result at the black-box evidence level carries this statement.\n\n")
	p("| scenario | its black-box path |\n|---|---|\n")
	for _, s := range list {
		p("| `%s` | %s |\n", s.Name, cell(s.BlackBox))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// needList renders needs as code spans, or a dash for none.
func needList(needs []Need) string {
	if len(needs) == 0 {
		return "—"
	}
	out := make([]string, len(needs))
	for i, n := range needs {
		out[i] = "`" + string(n) + "`"
	}
	return strings.Join(out, ", ")
}

// cell makes text safe inside a Markdown table cell: a pipe would end the cell, a newline the row.
func cell(s string) string {
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\n", " ")
}
