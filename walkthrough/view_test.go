package walkthrough

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func snap(at time.Time, remainingA int64, gwA Counters) Snapshot {
	return Snapshot{At: at,
		Subjects: map[string][]Window{
			"application-a": {{Window: "4s", Capacity: 60, Settled: 60 - remainingA, Remaining: remainingA}},
			"application-b": {{Window: "4s", Capacity: 60, Remaining: 60}},
		},
		Gateways: map[string]Counters{"gateway-a": gwA, "gateway-b": {Store: "ok"}},
	}
}

func texts(ev []Event) []string {
	var out []string
	for _, e := range ev {
		out = append(out, e.Text)
	}
	return out
}

func TestEventsNameWhatChanged(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	before := snap(t0, 60, Counters{Store: "ok"})
	after := snap(t0.Add(time.Second), 0, Counters{Admitted: 4, Denied: 2, Unavailable: 0, Store: "ok"})
	got := strings.Join(texts(Events(before, after)), "\n")
	for _, want := range []string{"gateway-a: 4 admitted (200)", "gateway-a: 2 denied (429)", "application-a: 4s budget exhausted (60 settled, 0 reserved of 60)"} {
		if !strings.Contains(got, want) {
			t.Errorf("events lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "gateway-b") || strings.Contains(got, "application-b") {
		t.Errorf("events name what did not change:\n%s", got)
	}
	outage := snap(t0.Add(2*time.Second), 0, Counters{Admitted: 4, Denied: 2, Unavailable: 3, Store: "unavailable"})
	got = strings.Join(texts(Events(after, outage)), "\n")
	for _, want := range []string{"gateway-a: 3 store unavailable (503)", "gateway-a: store ok → unavailable"} {
		if !strings.Contains(got, want) {
			t.Errorf("outage events lack %q:\n%s", want, got)
		}
	}
	back := snap(t0.Add(6*time.Second), 45, Counters{Admitted: 5, Denied: 2, Unavailable: 3, Store: "ok"})
	got = strings.Join(texts(Events(outage, back)), "\n")
	for _, want := range []string{"gateway-a: store unavailable → ok", "application-a: 4s budget back to 45 of 60", "gateway-a: 1 admitted (200)"} {
		if !strings.Contains(got, want) {
			t.Errorf("recovery events lack %q:\n%s", want, got)
		}
	}
	if ev := Events(back, back); len(ev) != 0 {
		t.Errorf("no change gave events: %v", texts(ev))
	}
}

func TestTerminalViewDrawsBarsCountersAndEvents(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	v := NewView(&out, true, "HEADER\n")
	s := snap(t0, 15, Counters{Admitted: 3, Denied: 1, Unavailable: 2, Store: "unavailable"})
	v.Show(s, []Event{{At: t0, Text: "gateway-a: 1 denied (429)"}})
	screen := out.String()
	if !strings.HasPrefix(screen, "\x1b[H\x1b[2JHEADER\n") {
		t.Errorf("a terminal redraw must clear the screen and repeat the header: %q", screen[:min(len(screen), 40)])
	}
	// 15 of 60 remaining is a quarter of the bar; 60 of 60 the whole bar.
	quarter := strings.Repeat("█", barWidth/4+1) + strings.Repeat("░", barWidth-barWidth/4-1)
	if !strings.Contains(screen, quarter) || !strings.Contains(screen, " 15/60 ") {
		t.Errorf("application-a's bar is not a quarter full:\n%s", screen)
	}
	if !strings.Contains(screen, strings.Repeat("█", barWidth)+" ") || !strings.Contains(screen, " 60/60 ") {
		t.Errorf("application-b's bar is not full:\n%s", screen)
	}
	for _, want := range []string{"gateway-a", "unavailable", "15:00:00 gateway-a: 1 denied (429)", "╭", "╯"} {
		if !strings.Contains(screen, want) {
			t.Errorf("terminal view lacks %q:\n%s", want, screen)
		}
	}
	row := ""
	for _, l := range strings.Split(screen, "\n") {
		if strings.Contains(l, "gateway-a") && strings.Contains(l, "unavailable") {
			row = l
		}
	}
	if f := strings.Fields(strings.Trim(row, "│ ")); len(f) < 5 || f[1] != "3" || f[2] != "1" || f[3] != "2" {
		t.Errorf("gateway-a counters row = %q, want admitted 3, denied 1, 503 2", row)
	}
}

func TestPlainViewPrintsTheStateOnceThenOneLinePerEvent(t *testing.T) {
	t0 := time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)
	var out bytes.Buffer
	v := NewView(&out, false, "HEADER\n")
	v.Show(snap(t0, 60, Counters{Store: "ok"}), nil)
	v.Show(snap(t0.Add(time.Second), 45, Counters{Admitted: 1, Store: "ok"}), []Event{{At: t0.Add(time.Second), Text: "gateway-a: 1 admitted (200)"}})
	v.Show(snap(t0.Add(2*time.Second), 45, Counters{Admitted: 1, Store: "ok"}), nil)
	got := out.String()
	want := "15:00:00 application-a: 60/60 tokens remaining in the 4s window (settled 0, reserved 0)\n" +
		"15:00:00 application-b: 60/60 tokens remaining in the 4s window (settled 0, reserved 0)\n" +
		"15:00:00 gateway-a: admitted 0, denied 0, 503 0, store ok\n" +
		"15:00:00 gateway-b: admitted 0, denied 0, 503 0, store ok\n" +
		"15:00:01 gateway-a: 1 admitted (200)\n"
	if got != want {
		t.Errorf("plain view:\n%s\nwant:\n%s", got, want)
	}
	if strings.Contains(got, "\x1b") || strings.Contains(got, "HEADER") {
		t.Error("the plain view wrote escape sequences or redrew the header")
	}
}
