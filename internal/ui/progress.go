// Package ui renders the harness's live progress and closing table: a spinner with elapsed time
// on a terminal, plain lines otherwise, no colour when NO_COLOR is set.
package ui

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/charmbracelet/lipgloss/table"
	"github.com/mattn/go-isatty"
	"github.com/muesli/termenv"
)

// Progress reports one step at a time.
type Progress struct {
	out   io.Writer
	tty   bool
	color bool

	mu      sync.Mutex
	current string
	started time.Time
	stop    chan struct{}
	done    chan struct{}

	ok, bad, skip, dim lipgloss.Style
}

// New returns a Progress writing to out. Spinners are used only when out is a terminal.
func New(out io.Writer) *Progress {
	tty := false
	if f, ok := out.(*os.File); ok {
		tty = isatty.IsTerminal(f.Fd())
	}
	color := tty && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb"
	r := lipgloss.NewRenderer(out)
	if !color {
		r.SetColorProfile(termenv.Ascii) // no escape sequences
	}
	return &Progress{
		out: out, tty: tty, color: color,
		ok:   r.NewStyle().Foreground(lipgloss.Color("2")).Bold(true),
		bad:  r.NewStyle().Foreground(lipgloss.Color("1")).Bold(true),
		skip: r.NewStyle().Foreground(lipgloss.Color("3")),
		dim:  r.NewStyle().Faint(true),
	}
}

var spinnerFrames = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

// Step starts a named step; on a terminal a spinner with elapsed time runs until Done.
func (p *Progress) Step(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.current, p.started = name, time.Now()
	if !p.tty {
		fmt.Fprintf(p.out, "… %s\n", name)
		return
	}
	p.stop, p.done = make(chan struct{}), make(chan struct{})
	go p.spin(name, p.started, p.stop, p.done)
}

func (p *Progress) spin(name string, started time.Time, stop, done chan struct{}) {
	defer close(done)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		fmt.Fprintf(p.out, "\r\033[K%s %s %s", spinnerFrames[i%len(spinnerFrames)], name,
			p.dim.Render(fmt.Sprintf("%.1fs", time.Since(started).Seconds())))
		select {
		case <-stop:
			fmt.Fprint(p.out, "\r\033[K")
			return
		case <-tick.C:
		}
	}
}

// Note prints a line under the current step without disturbing the spinner for long.
func (p *Progress) Note(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.out, "\r\033[K")
	}
	fmt.Fprintf(p.out, "  %s\n", p.dim.Render(fmt.Sprintf(format, args...)))
}

// Done ends the current step with a verdict word ("passed", "failed", "skipped", "ok", or a
// run's level: "qualified", "partial") and a detail.
func (p *Progress) Done(verdict, detail string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stop != nil {
		close(p.stop)
		<-p.done
		p.stop, p.done = nil, nil
	}
	elapsed := time.Since(p.started)
	mark := p.Verdict(verdict)
	line := fmt.Sprintf("%s %s %s", mark, p.current, p.dim.Render(fmt.Sprintf("(%.1fs)", elapsed.Seconds())))
	if detail != "" {
		line += " " + detail
	}
	fmt.Fprintln(p.out, line)
}

// Finished prints one finished item of a step that runs several at once (a scenario), with
// its own elapsed time, under the current step without ending it.
func (p *Progress) Finished(name, verdict string, elapsed time.Duration, detail string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.out, "\r\033[K")
	}
	line := fmt.Sprintf("%s %s %s", p.Verdict(verdict), name, p.dim.Render(fmt.Sprintf("(%.1fs)", elapsed.Seconds())))
	if detail != "" {
		line += " " + detail
	}
	fmt.Fprintln(p.out, line)
}

// Verdict renders a verdict word with its symbol and colour.
func (p *Progress) Verdict(v string) string {
	switch v {
	case "passed", "ok", "qualified":
		return p.ok.Render("✓ " + v)
	case "failed", "error":
		return p.bad.Render("✗ " + v)
	case "skipped":
		return p.skip.Render("○ " + v)
	case "partial":
		return p.skip.Render("◐ " + v)
	default:
		return v
	}
}

// Table prints a closing table with a header row.
func (p *Progress) Table(headers []string, rows [][]string) {
	t := table.New().Headers(headers...).Rows(rows...)
	if !p.color {
		t = t.Border(lipgloss.NormalBorder())
	}
	fmt.Fprintln(p.out, t.Render())
}

// Plain prints a line as is.
func (p *Progress) Plain(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.out, format+"\n", args...)
}

// Truncate shortens s to n runes with an ellipsis.
func Truncate(s string, n int) string {
	s = strings.ReplaceAll(s, "\n", " ")
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
