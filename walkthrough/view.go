package walkthrough

import (
	"context"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/muesli/termenv"
)

// maxEvents is how many recent events the terminal view keeps on screen.
const maxEvents = 8

// barWidth is the width of a remaining-tokens bar, in cells.
const barWidth = 30

// View renders snapshots. On a terminal it draws a box with bars and colours (none when NO_COLOR
// is set); elsewhere it prints plain lines, one per event.
type View struct {
	out    io.Writer
	tty    bool
	header string // printed above the live box on every redraw (terminal only)
	events []Event

	title, dim, good, warn, bad, box lipgloss.Style
}

// NewView returns a view writing to out; header is redrawn above the live box on a terminal.
func NewView(out io.Writer, tty bool, header string) *View {
	r := lipgloss.NewRenderer(out)
	if !tty || os.Getenv("NO_COLOR") != "" || os.Getenv("TERM") == "dumb" {
		r.SetColorProfile(termenv.Ascii)
	}
	return &View{out: out, tty: tty, header: header,
		title: r.NewStyle().Bold(true),
		dim:   r.NewStyle().Faint(true),
		good:  r.NewStyle().Foreground(lipgloss.Color("2")),
		warn:  r.NewStyle().Foreground(lipgloss.Color("3")),
		bad:   r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
		box:   r.NewStyle().Border(lipgloss.RoundedBorder()).Padding(0, 1),
	}
}

// Live polls t every interval until ctx ends and shows what it sees.
func Live(ctx context.Context, v *View, t Target, every time.Duration) {
	prev := t.Poll(ctx)
	v.Show(prev, nil)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cur := t.Poll(ctx)
		if ctx.Err() != nil {
			return
		}
		v.Show(cur, Events(prev, cur))
		prev = cur
	}
}

// Show draws one snapshot with the events that led to it: the whole screen on a terminal, the
// new events as plain lines elsewhere (and the state once, on the first call).
func (v *View) Show(s Snapshot, events []Event) {
	first := v.events == nil
	v.events = append(v.events, events...)
	if len(v.events) > maxEvents {
		v.events = v.events[len(v.events)-maxEvents:]
	}
	if v.events == nil {
		v.events = []Event{}
	}
	if v.tty {
		fmt.Fprint(v.out, "\x1b[H\x1b[2J", v.header, v.Render(s), "\n")
		return
	}
	if first {
		for _, l := range PlainState(s) {
			fmt.Fprintln(v.out, l)
		}
	}
	for _, e := range events {
		fmt.Fprintf(v.out, "%s %s\n", e.At.Format("15:04:05"), e.Text)
	}
}

// PlainState is the state as plain lines: one per subject window and one per gateway.
func PlainState(s Snapshot) []string {
	var out []string
	for _, sub := range slices.Sorted(maps.Keys(s.Subjects)) {
		for _, w := range s.Subjects[sub] {
			out = append(out, fmt.Sprintf("%s %s: %d/%d tokens remaining in the %s window (settled %d, reserved %d)",
				s.At.Format("15:04:05"), sub, w.Remaining, w.Capacity, w.Window, w.Settled, w.Reserved))
		}
	}
	for _, g := range slices.Sorted(maps.Keys(s.Gateways)) {
		c := s.Gateways[g]
		out = append(out, fmt.Sprintf("%s %s: admitted %d, denied %d, 503 %d, store %s",
			s.At.Format("15:04:05"), g, c.Admitted, c.Denied, c.Unavailable, c.Store))
	}
	return out
}

// Render is the terminal view of one snapshot: remaining tokens as bars, the gateways'
// counters, and the recent events.
func (v *View) Render(s Snapshot) string {
	var b strings.Builder
	b.WriteString(v.title.Render("quotaqual live") + v.dim.Render("  "+s.At.Format("15:04:05")+"  (refreshes every second; Ctrl-C tears down)") + "\n\n")
	b.WriteString(v.title.Render("Remaining tokens") + v.dim.Render(" — one budget per subject, shared by both gateways") + "\n")
	for _, sub := range slices.Sorted(maps.Keys(s.Subjects)) {
		for _, w := range s.Subjects[sub] {
			fmt.Fprintf(&b, "  %-14s %-4s %s %3d/%-3d %s\n", sub, w.Window, v.bar(w), w.Remaining, w.Capacity,
				v.dim.Render(fmt.Sprintf("settled %d, reserved %d", w.Settled, w.Reserved)))
		}
	}
	b.WriteString("\n" + v.title.Render("Gateways") + "\n")
	fmt.Fprintf(&b, "  %-10s %9s %12s %6s  %s\n", "", "admitted", "denied 429", "503", "store")
	for _, g := range slices.Sorted(maps.Keys(s.Gateways)) {
		c := s.Gateways[g]
		store := v.good.Render(c.Store)
		if c.Store != "ok" {
			store = v.bad.Render(c.Store)
		}
		fmt.Fprintf(&b, "  %-10s %9s %12s %6s  %s\n", g, v.good.Render(fmt.Sprintf("%9d", c.Admitted)),
			v.warn.Render(fmt.Sprintf("%12d", c.Denied)), v.bad.Render(fmt.Sprintf("%6d", c.Unavailable)), store)
	}
	b.WriteString("\n" + v.title.Render("Events") + "\n")
	if len(v.events) == 0 {
		b.WriteString(v.dim.Render("  none yet: send a request with one of the curl lines above") + "\n")
	}
	for _, e := range v.events {
		fmt.Fprintf(&b, "  %s %s\n", v.dim.Render(e.At.Format("15:04:05")), e.Text)
	}
	for _, e := range s.Errors {
		b.WriteString(v.bad.Render("  cannot read "+e) + "\n")
	}
	return v.box.Render(strings.TrimRight(b.String(), "\n"))
}

// bar draws remaining/capacity as a bar: green above half, yellow below, red when empty.
func (v *View) bar(w Window) string {
	filled := 0
	if w.Capacity > 0 {
		filled = int((w.Remaining*barWidth + w.Capacity/2) / w.Capacity)
	}
	filled = min(max(filled, 0), barWidth)
	style := v.good
	switch {
	case w.Remaining == 0:
		style = v.bad
	case w.Remaining*2 < w.Capacity:
		style = v.warn
	}
	return style.Render(strings.Repeat("█", filled)) + v.dim.Render(strings.Repeat("░", barWidth-filled))
}
