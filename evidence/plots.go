package evidence

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

// The report's plots, drawn by gonum.org/v1/plot into SVG that is inlined in report.html.
// Each plot takes the legend as a separate column at its right, so no entry hides data.

const (
	plotWidth   vg.Length = 560 // points
	legendWidth vg.Length = 200
)

// Status colours: admitted green, denied orange, store unavailable red, auth purple, no
// response black, anything else grey. The same colours are used in the HTML tables.
var (
	colAdmitted = color.RGBA{R: 0x2e, G: 0x9e, B: 0x44, A: 0xff}
	colDenied   = color.RGBA{R: 0xf0, G: 0x8c, B: 0x00, A: 0xff}
	colStore    = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colAuth     = color.RGBA{R: 0x7b, G: 0x4f, B: 0xb8, A: 0xff}
	colNoResp   = color.RGBA{A: 0xff}
	colOther    = color.RGBA{R: 0x80, G: 0x80, B: 0x80, A: 0xff}
	colCapacity = color.RGBA{R: 0xd6, G: 0x27, B: 0x28, A: 0xff}
	colReserved = color.RGBA{R: 0x1f, G: 0x77, B: 0xb4, A: 0xff}
	colRecon    = color.RGBA{R: 0x17, G: 0xbe, B: 0xcf, A: 0xff}
	colSettled  = color.RGBA{R: 0x8c, G: 0x56, B: 0x4b, A: 0xff}
)

// faultColours shade fault windows by kind, translucent (not premultiplied) so the requests
// and grid inside stay visible.
var faultColours = map[string]color.NRGBA{
	"restart":   {R: 0x1f, G: 0x77, B: 0xb4, A: 0x40},
	"outage":    {R: 0xd6, G: 0x27, B: 0x28, A: 0x38},
	"partition": {R: 0x94, G: 0x67, B: 0xbd, A: 0x40},
	"failover":  {R: 0xff, G: 0x7f, B: 0x0e, A: 0x40},
}

var faultDefault = color.NRGBA{R: 0x7f, G: 0x7f, B: 0x7f, A: 0x40}

// statusClass groups HTTP statuses the way the report colours them.
type statusClass struct {
	Name  string
	Color color.RGBA
}

func classOf(status int) statusClass {
	switch {
	case status == 200:
		return statusClass{"200 admitted", colAdmitted}
	case status == 429:
		return statusClass{"429 denied", colDenied}
	case status == 503:
		return statusClass{"503 store unavailable", colStore}
	case status == 401:
		return statusClass{"401 unauthenticated", colAuth}
	case status == 0:
		return statusClass{"no response", colNoResp}
	default:
		return statusClass{"other status", colOther}
	}
}

var classOrder = []string{"200 admitted", "429 denied", "503 store unavailable", "401 unauthenticated", "other status", "no response"}

// siteGlyphs marks provider sites; a request no provider served gets a cross.
var siteGlyphs = []draw.GlyphDrawer{draw.CircleGlyph{}, draw.PyramidGlyph{}, draw.BoxGlyph{}, draw.RingGlyph{}, draw.SquareGlyph{}, draw.TriangleGlyph{}}

var fontOnce sync.Once

// newPlot returns a plot with the report's font: a sans face from the fonts gonum bundles, so
// the SVG names a family every browser maps to a local font (nothing is fetched).
func newPlot(title, xlabel, ylabel string) *plot.Plot {
	fontOnce.Do(func() { plot.DefaultFont = font.Font{Typeface: "Liberation", Variant: "Sans"} })
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.Add(plotter.NewGrid())
	return p
}

// legendEntry is one line of a plot's legend.
type legendEntry struct {
	name  string
	thumb plot.Thumbnailer
}

// renderSVG draws p with its legend in a column at the right and returns the <svg> element.
func renderSVG(p *plot.Plot, legend []legendEntry, height vg.Length) (svg string, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("plot %q: %v", p.Title.Text, r)
		}
	}()
	c := vgsvg.New(plotWidth+legendWidth, height)
	dc := draw.New(c)
	p.Draw(draw.Crop(dc, 0, -legendWidth, 0, 0))
	if len(legend) > 0 {
		l := plot.NewLegend()
		l.Top, l.Left = true, true
		l.TextStyle.Font.Size = 9
		l.ThumbnailWidth = vg.Points(14)
		l.Padding = vg.Points(3) // browsers' sans faces run taller than gonum's metrics
		for _, e := range legend {
			l.Add(e.name, e.thumb)
		}
		l.Draw(draw.Crop(dc, plotWidth+6*vg.Points(1), 0, 0, -8*vg.Points(1)))
	}
	var b bytes.Buffer
	if _, err := c.WriteTo(&b); err != nil {
		return "", fmt.Errorf("plot %q: %w", p.Title.Text, err)
	}
	s := b.String()
	if i := strings.Index(s, "<svg"); i >= 0 {
		s = s[i:] // drop the XML prolog: the SVG is inlined in HTML
	}
	return s, nil
}

func glyphThumb(clr color.Color, shape draw.GlyphDrawer) plot.Thumbnailer {
	s, _ := plotter.NewScatter(plotter.XYs{})
	s.GlyphStyle = draw.GlyphStyle{Color: clr, Radius: 3.5, Shape: shape}
	return s
}

func lineThumb(clr color.Color, dashed bool) plot.Thumbnailer {
	l, _ := plotter.NewLine(plotter.XYs{})
	l.LineStyle = draw.LineStyle{Color: clr, Width: vg.Points(1.5)}
	if dashed {
		l.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	}
	return l
}

// secondsSince is t's offset from origin in seconds.
func secondsSince(origin, t time.Time) float64 { return t.Sub(origin).Seconds() }

// timelinePlot draws every request of a scenario: x = seconds since the scenario started,
// y = the gateway, colour = status class, glyph = provider site, with the fault windows
// shaded behind.
func timelinePlot(origin time.Time, reqs []RequestRecord, faults []FaultWindow) (string, error) {
	gateways := sortedSet(reqs, func(r RequestRecord) string { return orDash(r.Gateway) })
	sites := sortedSet(reqs, func(r RequestRecord) string { return r.ProviderSite })
	row := map[string]float64{}
	ticks := plot.ConstantTicks{}
	for i, g := range gateways {
		row[g] = float64(i + 1)
		ticks = append(ticks, plot.Tick{Value: float64(i + 1), Label: g})
	}
	shape := map[string]draw.GlyphDrawer{"": draw.CrossGlyph{}}
	for i, s := range sites {
		if s != "" {
			shape[s] = siteGlyphs[(i)%len(siteGlyphs)]
		}
	}
	p := newPlot("Requests over time", "seconds since the scenario started", "")
	p.Y.Tick.Marker = ticks
	p.Y.Min, p.Y.Max = 0.4, float64(len(gateways))+0.6
	var legend []legendEntry
	top, bottom := float64(len(gateways))+0.6, 0.4
	for _, f := range faults {
		end := f.End
		if end.IsZero() {
			end = lastRequestEnd(reqs, f.Start)
		}
		x0, x1 := secondsSince(origin, f.Start), secondsSince(origin, end)
		poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: bottom}, {X: x1, Y: bottom}, {X: x1, Y: top}, {X: x0, Y: top}})
		if err != nil {
			return "", err
		}
		clr, ok := faultColours[f.Kind]
		if !ok {
			clr = faultDefault
		}
		poly.Color = clr
		poly.LineStyle.Width = 0
		p.Add(poly)
		legend = append(legend, legendEntry{fmt.Sprintf("%s: %s", f.Kind, f.Target), poly})
	}
	type key struct{ class, site string }
	groups := map[key]plotter.XYs{}
	colours := map[string]color.RGBA{}
	for i, r := range reqs {
		c := classOf(r.Status)
		colours[c.Name] = c.Color
		// A small deterministic spread keeps simultaneous requests apart on the row.
		jitter := (float64(i%7) - 3) * 0.05
		k := key{c.Name, r.ProviderSite}
		groups[k] = append(groups[k], plotter.XY{X: secondsSince(origin, r.Time), Y: row[orDash(r.Gateway)] + jitter})
	}
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].class != keys[j].class {
			return classRank(keys[i].class) < classRank(keys[j].class)
		}
		return keys[i].site < keys[j].site
	})
	for _, k := range keys {
		s, err := plotter.NewScatter(groups[k])
		if err != nil {
			return "", err
		}
		s.GlyphStyle = draw.GlyphStyle{Color: colours[k.class], Radius: 3, Shape: shape[k.site]}
		p.Add(s)
	}
	for _, name := range classOrder {
		if c, ok := colours[name]; ok {
			legend = append(legend, legendEntry{name, glyphThumb(c, draw.CircleGlyph{})})
		}
	}
	for _, s := range sites {
		if s == "" {
			legend = append(legend, legendEntry{"no provider", glyphThumb(colOther, draw.CrossGlyph{})})
			continue
		}
		legend = append(legend, legendEntry{"site " + s, glyphThumb(colOther, shape[s])})
	}
	return renderSVG(p, legend, vg.Points(float64(110+40*len(gateways))))
}

func classRank(name string) int {
	for i, n := range classOrder {
		if n == name {
			return i
		}
	}
	return len(classOrder)
}

func lastRequestEnd(reqs []RequestRecord, after time.Time) time.Time {
	end := after
	for _, r := range reqs {
		if e := r.Time.Add(r.Latency); e.After(end) {
			end = e
		}
	}
	return end
}

func sortedSet(reqs []RequestRecord, f func(RequestRecord) string) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range reqs {
		if v := f(r); !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Strings(out)
	return out
}

// tokensPlot draws a ledger series: reserved and settled tokens sampled from the ledger,
// reserved tokens reconstructed from the admitted requests' time in flight (estimate each),
// and the capacity line.
func tokensPlot(origin time.Time, span float64, ls LedgerSeries, reqs []RequestRecord) (string, error) {
	p := newPlot("Tokens of "+ls.Subject+" against capacity", "seconds since the scenario started", "tokens")
	var legend []legendEntry
	var xmax float64
	addLine := func(name string, xys plotter.XYs, clr color.Color, dashed bool, step bool) error {
		if len(xys) == 0 {
			return nil
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.LineStyle = lineThumb(clr, dashed).(*plotter.Line).LineStyle
		if step {
			l.StepStyle = plotter.PostStep
		}
		p.Add(l)
		legend = append(legend, legendEntry{name, l})
		for _, xy := range xys {
			xmax = max(xmax, xy.X)
		}
		return nil
	}
	var reserved, settled plotter.XYs
	for _, s := range ls.Samples {
		x := secondsSince(origin, s.At)
		reserved = append(reserved, plotter.XY{X: x, Y: float64(s.Reserved)})
		settled = append(settled, plotter.XY{X: x, Y: float64(s.Settled)})
	}
	recon := reconstructReserved(origin, ls, reqs)
	// The last charges stay in the window after the scenario ended: draw only what it saw.
	reconSettled := clipX(reconstructSettled(origin, ls, reqs), span)
	for _, l := range []struct {
		name   string
		xys    plotter.XYs
		clr    color.Color
		dashed bool
	}{
		{"reserved (ledger samples)", reserved, colReserved, false},
		{"reserved (reconstructed)", recon, colRecon, true},
		{"settled (ledger samples)", settled, colSettled, false},
		{"settled (reconstructed)", reconSettled, colAuth, true},
	} {
		if err := addLine(l.name, l.xys, l.clr, l.dashed, true); err != nil {
			return "", err
		}
	}
	if ls.Capacity > 0 {
		capLine := plotter.XYs{{X: 0, Y: float64(ls.Capacity)}, {X: max(xmax, span), Y: float64(ls.Capacity)}}
		if err := addLine(fmt.Sprintf("capacity %d", ls.Capacity), capLine, colCapacity, true, false); err != nil {
			return "", err
		}
		p.Y.Max = float64(ls.Capacity) * 1.15
	}
	p.Y.Min = 0
	return renderSVG(p, legend, 240*vg.Points(1))
}

// reconstructReserved rebuilds reserved tokens over time from the request log: each admitted
// request of the series' subject holds its estimate from when it was sent until its answer was
// read.
func reconstructReserved(origin time.Time, ls LedgerSeries, reqs []RequestRecord) plotter.XYs {
	var edges []stepEdge
	for _, r := range reqs {
		if r.Status == 200 && r.Subject == ls.Subject {
			edges = append(edges, stepEdge{r.Time, ls.Estimate}, stepEdge{r.Time.Add(r.Latency), -ls.Estimate})
		}
	}
	return stepLine(origin, edges)
}

// reconstructSettled rebuilds settled usage in the window from the request log: each admitted
// request of the series' subject charges its reported usage (its estimate when it reported none)
// from when its answer was read until one window later. The ledger counts usage in buckets, so
// its own line may lag this one by up to a bucket. Nothing is drawn when the window is unknown.
func reconstructSettled(origin time.Time, ls LedgerSeries, reqs []RequestRecord) plotter.XYs {
	if ls.WindowMS <= 0 {
		return nil
	}
	window := time.Duration(ls.WindowMS) * time.Millisecond
	var edges []stepEdge
	for _, r := range reqs {
		if r.Status != 200 || r.Subject != ls.Subject {
			continue
		}
		charge := ls.Estimate
		if r.Usage != nil {
			charge = r.Usage.TotalTokens
		}
		end := r.Time.Add(r.Latency)
		edges = append(edges, stepEdge{end, charge}, stepEdge{end.Add(window), -charge})
	}
	return stepLine(origin, edges)
}

// stepEdge is a change of a level at a moment.
type stepEdge struct {
	t     time.Time
	delta int64
}

// stepLine is the level the edges describe, from 0, in time order; at the same moment a rise
// comes before a fall, so a momentary peak is drawn. Nil when there are no edges.
func stepLine(origin time.Time, edges []stepEdge) plotter.XYs {
	if len(edges) == 0 {
		return nil
	}
	sort.SliceStable(edges, func(i, j int) bool {
		if !edges[i].t.Equal(edges[j].t) {
			return edges[i].t.Before(edges[j].t)
		}
		return edges[i].delta > edges[j].delta
	})
	xys := plotter.XYs{{X: secondsSince(origin, edges[0].t), Y: 0}}
	var level int64
	for _, e := range edges {
		level += e.delta
		xys = append(xys, plotter.XY{X: secondsSince(origin, e.t), Y: float64(level)})
	}
	return xys
}

// clipX keeps a step line's points up to x = limit, ending it at limit on the level it had.
// A limit of 0 keeps everything.
func clipX(xys plotter.XYs, limit float64) plotter.XYs {
	if limit <= 0 {
		return xys
	}
	for i, xy := range xys {
		if xy.X > limit {
			if i == 0 {
				return nil
			}
			return append(xys[:i:i], plotter.XY{X: limit, Y: xys[i-1].Y})
		}
	}
	return xys
}

// remainingPlot draws, for scenarios without ledger samples, the remaining tokens every
// response announced (x-ratelimit-remaining-tokens) per subject against the announced limit.
// It returns "" when no response carried the headers.
func remainingPlot(origin time.Time, span float64, reqs []RequestRecord) (string, error) {
	bySubject := map[string]plotter.XYs{}
	var limit float64
	for _, r := range reqs {
		rem, ok := headerNumber(r.QuotaHeaders, "x-ratelimit-remaining-tokens")
		if !ok {
			continue
		}
		if l, ok := headerNumber(r.QuotaHeaders, "x-ratelimit-limit-tokens"); ok {
			limit = max(limit, l)
		}
		bySubject[orDash(r.Subject)] = append(bySubject[orDash(r.Subject)], plotter.XY{X: secondsSince(origin, r.Time), Y: rem})
	}
	if len(bySubject) == 0 {
		return "", nil
	}
	p := newPlot("Remaining tokens announced to clients", "seconds since the scenario started", "tokens")
	palette := []color.RGBA{colReserved, colSettled, colRecon, colAuth}
	var legend []legendEntry
	var xmax float64
	subjects := make([]string, 0, len(bySubject))
	for s := range bySubject {
		subjects = append(subjects, s)
	}
	sort.Strings(subjects)
	for i, s := range subjects {
		xys := bySubject[s]
		sort.Slice(xys, func(a, b int) bool { return xys[a].X < xys[b].X })
		l, sc, err := plotter.NewLinePoints(xys)
		if err != nil {
			return "", err
		}
		clr := palette[i%len(palette)]
		l.LineStyle = draw.LineStyle{Color: clr, Width: vg.Points(1.5)}
		l.StepStyle = plotter.PostStep
		sc.GlyphStyle = draw.GlyphStyle{Color: clr, Radius: 2.5, Shape: draw.CircleGlyph{}}
		p.Add(l, sc)
		legend = append(legend, legendEntry{"remaining, " + s, l})
		xmax = max(xmax, xys[len(xys)-1].X)
	}
	if limit > 0 {
		l, err := plotter.NewLine(plotter.XYs{{X: 0, Y: limit}, {X: max(xmax, span), Y: limit}})
		if err != nil {
			return "", err
		}
		l.LineStyle = lineThumb(colCapacity, true).(*plotter.Line).LineStyle
		p.Add(l)
		legend = append(legend, legendEntry{fmt.Sprintf("limit %g", limit), l})
		p.Y.Max = limit * 1.15
	}
	p.Y.Min = 0
	return renderSVG(p, legend, 220*vg.Points(1))
}

func headerNumber(h map[string]string, name string) (float64, bool) {
	v, ok := h[name]
	if !ok {
		return 0, false
	}
	var f float64
	if _, err := fmt.Sscan(v, &f); err != nil {
		return 0, false
	}
	return f, true
}

// latencyPlot draws the cumulative latency distribution of each status class (admitted,
// denied, store unavailable, …) on a log axis: where each class's requests were decided.
func latencyPlot(reqs []RequestRecord) (string, error) {
	byClass := map[string][]float64{}
	colours := map[string]color.RGBA{}
	for _, r := range reqs {
		c := classOf(r.Status)
		colours[c.Name] = c.Color
		byClass[c.Name] = append(byClass[c.Name], math.Max(float64(r.Latency)/float64(time.Millisecond), 0.01))
	}
	if len(byClass) == 0 {
		return "", nil
	}
	p := newPlot("Latency distribution by status", "latency (ms, log scale)", "fraction of requests ≤ x")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Y.Min, p.Y.Max = 0, 1.05
	// An explicit, strictly positive range: with one latency (or all equal) gonum would pad the
	// range below zero, which a log axis cannot draw.
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, lat := range byClass {
		for _, v := range lat {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	p.X.Min, p.X.Max = lo/2, hi*2
	var legend []legendEntry
	for _, name := range classOrder {
		lat, ok := byClass[name]
		if !ok {
			continue
		}
		sort.Float64s(lat)
		xys := make(plotter.XYs, 0, len(lat)+1)
		for i, v := range lat {
			xys = append(xys, plotter.XY{X: v, Y: float64(i+1) / float64(len(lat))})
		}
		l, sc, err := plotter.NewLinePoints(xys)
		if err != nil {
			return "", err
		}
		l.LineStyle = draw.LineStyle{Color: colours[name], Width: vg.Points(1.5)}
		l.StepStyle = plotter.PostStep
		sc.GlyphStyle = draw.GlyphStyle{Color: colours[name], Radius: 2, Shape: draw.CircleGlyph{}}
		p.Add(l, sc)
		legend = append(legend, legendEntry{fmt.Sprintf("%s (n=%d, p50 %.1f ms)", name, len(lat), lat[len(lat)/2]), l})
	}
	return renderSVG(p, legend, 220*vg.Points(1))
}
