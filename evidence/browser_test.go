package evidence

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// chromium finds the headless browser, or says why there is none.
func chromium() (string, string) {
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(n); err == nil {
			return p, ""
		}
	}
	return "", "no chromium on PATH: .ci/install-deps installs Debian's chromium package"
}

// TestReportOpensInHeadlessChromium opens a report from disk in a real browser: it must load
// with no console error, no exception and no request other than the file itself, draw every
// plot with a size, and give a screenshot that is not blank. QUOTAQUAL_REPORT_HTML opens that
// report instead of the fixture's; QUOTAQUAL_REPORT_SCREENSHOT keeps the screenshot there.
func TestReportOpensInHeadlessChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the headless browser test is skipped")
	}
	exe, why := chromium()
	if exe == "" {
		t.Skip(why)
	}
	report := os.Getenv("QUOTAQUAL_REPORT_HTML")
	if report == "" {
		report = filepath.Join(reportFixture(t, t.TempDir(), "run-browser"), ReportFile)
	}
	report, _ = filepath.Abs(report)
	fileURL := "file://" + report

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.WindowSize(1280, 1600), chromedp.UserDataDir(t.TempDir()))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancelCtx := chromedp.NewContext(allocCtx)
	defer cancelCtx()
	// The browser lives as long as ctx: bound the whole test, not one action (see chromedp.Run).
	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()

	var mu sync.Mutex
	var problems []string
	note := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		problems = append(problems, fmt.Sprintf(format, args...))
	}
	// Open the tab first, so the listener sees every event of the page's load.
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("chromium did not start: %v", err)
	}
	err := chromedp.Listen(ctx, func(ev any) {
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			switch e.Type {
			case runtime.ConsoleAPICalledTypeError, runtime.ConsoleAPICalledTypeWarning, runtime.ConsoleAPICalledTypeAssert:
				note("console %s", e.Type)
			}
		case *runtime.EventExceptionThrown:
			note("exception: %s", e.ExceptionDetails.Text)
		case *cdplog.EventEntryAdded:
			if e.Entry.Level == cdplog.EntryLevelError || e.Entry.Level == cdplog.EntryLevelWarning {
				note("log %s: %s (%s)", e.Entry.Level, e.Entry.Text, e.Entry.URL)
			}
		case *network.EventRequestWillBeSent:
			if e.Request.URL != fileURL {
				note("request to %s: the report must load nothing", e.Request.URL)
			}
		case *network.EventLoadingFailed:
			note("loading failed: %s", e.ErrorText)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, enable := range []func() error{
		func() error { _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); return err },
		func() error { _, err := chromedp.Call(ctx, cdplog.Enable, cdp.Empty{}); return err },
		func() error { _, err := chromedp.Call(ctx, runtime.Enable, cdp.Empty{}); return err },
	} {
		if err := enable(); err != nil {
			t.Fatalf("enabling the browser's event domains: %v", err)
		}
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(fileURL), chromedp.WaitVisible(chromedp.CSS("section.scenario"))); err != nil {
		t.Fatalf("chromium could not open %s: %v", report, err)
	}
	plots, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('figure.plot svg').length`))
	if err != nil {
		t.Fatal(err)
	}
	sized, err := chromedp.Run(ctx, chromedp.Evaluate[int](`Array.from(document.querySelectorAll('figure.plot svg')).filter(s => { const r = s.getBoundingClientRect(); return r.width > 200 && r.height > 100 }).length`))
	if err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	mu.Lock()
	for _, p := range problems {
		t.Errorf("browser: %s", p)
	}
	mu.Unlock()
	if plots == 0 || sized != plots {
		t.Errorf("%d plots in the page, %d drawn with a size", plots, sized)
	}
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	if frac := inkFraction(img); frac < 0.02 {
		t.Errorf("screenshot is blank: %.4f of its pixels are not background", frac)
	}
	if dst := os.Getenv("QUOTAQUAL_REPORT_SCREENSHOT"); dst != "" {
		if err := os.WriteFile(dst, shot, 0o644); err != nil {
			t.Error(err)
		}
	}
}

// inkFraction is the share of pixels that differ from the top-left pixel (the background).
func inkFraction(img image.Image) float64 {
	b := img.Bounds()
	br, bg, bb, _ := img.At(b.Min.X, b.Min.Y).RGBA()
	var ink, total int
	for y := b.Min.Y; y < b.Max.Y; y += 2 {
		for x := b.Min.X; x < b.Max.X; x += 2 {
			r, g, bl, _ := img.At(x, y).RGBA()
			total++
			if r != br || g != bg || bl != bb {
				ink++
			}
		}
	}
	if total == 0 {
		return 0
	}
	return float64(ink) / float64(total)
}
