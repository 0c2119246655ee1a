// Package chart draws line charts as inline SVG for the web UI: the pages embed the markup, so
// nothing is fetched and no script runs in the browser. It is pure (no I/O) and knows nothing of
// runs or tests; server/ui/charts.go turns runs into Charts.
//
// The SVG scales to its container (a viewBox and width="100%"). Every colour is a presentation
// attribute, so the chart looks right without a stylesheet, and every element has a class, so a
// stylesheet can restyle it; see Line for the class names.
package chart

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Series is one line. X and Y are paired by index (extra values of the longer one are ignored);
// points where either is NaN or infinite are skipped, and the line joins the points around them.
// Lo and Hi, if both set, draw a shaded band (a confidence interval, say) around the line, with
// the same pairing and skipping.
type Series struct {
	Name   string
	X, Y   []float64
	Lo, Hi []float64
}

// HLine is a horizontal reference line across the plot (an SPRT bound, say), labelled at its
// right end. A line at a value that is not finite is not drawn.
type HLine struct {
	Y     float64
	Label string
}

// Chart describes one line chart. The zero value of every field is usable.
type Chart struct {
	// Title is the chart's accessible name (the SVG <title>) and its heading.
	Title string
	// Caption, if set, is shown under the chart as the figure's <figcaption>.
	Caption        string
	XLabel, YLabel string
	// Width and Height are the size of the drawing in SVG user units; the chart is then scaled
	// to the width of its container. They default to 640 by 320; a legend adds rows below.
	Width, Height int
	Series        []Series
	HLines        []HLine
}

// Layout of the drawing, in SVG user units.
const (
	defaultWidth  = 640
	defaultHeight = 320
	minWidth      = 240
	minHeight     = 160
	maxSize       = 4000

	marginLeft   = 64
	marginRight  = 16
	marginTop    = 32
	marginBottom = 44

	legendRow      = 18 // height of one legend row
	legendSwatch   = 18 // length of a legend item's line sample
	legendCharW    = 7  // rough width of a legend character at font-size 12
	legendMaxRunes = 40 // longer legend labels are cut, with the full text as a tooltip

	targetTicks = 6
	maxTicks    = 50
)

// palette is the default colour of each series, used when no stylesheet overrides the class:
// twenty distinct colours, those of fishtest's Google charts, so that a chart of twenty series
// repeats none.
var palette = []string{
	"#3366cc", "#dc3912", "#ff9900", "#109618", "#990099",
	"#0099c6", "#dd4477", "#66aa00", "#b82e2e", "#316395",
	"#994499", "#22aa99", "#aaaa11", "#6633cc", "#e67300",
	"#8b0707", "#651067", "#329262", "#5574a6", "#3b3eac",
}

// Default colours of the other parts.
const (
	colourText  = "#333"
	colourAxis  = "#888"
	colourGrid  = "#e6e6e6"
	colourBound = "#b03a2e"
)

// Line renders c as an SVG line chart inside a <figure class="chart-figure">, with the caption
// (if any) as a <figcaption class="chart-caption">. The markup is well-formed XML and every text
// taken from c is escaped, which is what makes it safe to return as template.HTML.
//
// Classes, for the stylesheet: the <svg> is "chart"; "chart-title", "plot-area" (the frame),
// "grid" (the group of grid lines), "tick-label", "axis-title", "no-data" (the message of a chart
// with no finite point); per series i, "line series-i" (the <path>), "point series-i" (a
// <circle>, for a series of a single point), "band series-i" (the interval's <polygon>);
// "bound" and "bound-label" (reference lines); "legend", "legend-item", "swatch series-i". Series
// elements draw with currentColor and carry a default color attribute, so a rule such as
// `.series-0 { color: teal }` recolours a series' line, band, point and legend swatch at once.
func Line(c Chart) template.HTML {
	w := clampSize(c.Width, defaultWidth, minWidth)
	h := clampSize(c.Height, defaultHeight, minHeight)
	plot := box{x0: marginLeft, x1: float64(w - marginRight), y0: marginTop, y1: float64(h - marginBottom)}

	xs, ys, hasData := dataExtent(c)
	xa, ya := niceAxis(xs.lo, xs.hi, xs.ok), niceAxis(ys.lo, ys.hi, ys.ok)
	sc := scale{plot: plot, x: xa, y: ya}

	legend := c.Series
	if len(legend) < 2 {
		legend = nil
	}
	lg := layoutLegend(legend, plot.x1-plot.x0)
	totalH := h + lg.height

	var b strings.Builder
	b.WriteString(`<figure class="chart-figure">`)
	fmt.Fprintf(&b, `<svg class="chart" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="100%%" role="img" font-family="sans-serif" font-size="12" fill="%s">`,
		w, totalH, colourText)
	fmt.Fprintf(&b, `<title>%s</title>`, esc(c.Title))
	if c.Title != "" {
		fmt.Fprintf(&b, `<text class="chart-title" x="%s" y="20" text-anchor="middle" font-size="14" font-weight="bold">%s</text>`,
			num(float64(w)/2), esc(c.Title))
	}

	writeAxes(&b, sc, c.XLabel, c.YLabel)

	// Bands under everything else, then reference lines, then the series.
	writeBands(&b, sc, c.Series)
	writeBounds(&b, sc, c.HLines)
	writeSeries(&b, sc, c.Series)
	if !hasData {
		fmt.Fprintf(&b, `<text class="no-data" x="%s" y="%s" text-anchor="middle" dominant-baseline="middle">No data</text>`,
			num((plot.x0+plot.x1)/2), num((plot.y0+plot.y1)/2))
	}
	fmt.Fprintf(&b, `<rect class="plot-area" x="%s" y="%s" width="%s" height="%s" fill="none" stroke="%s"/>`,
		num(plot.x0), num(plot.y0), num(plot.x1-plot.x0), num(plot.y1-plot.y0), colourAxis)

	writeLegend(&b, legend, lg, plot.x0, float64(h))
	b.WriteString(`</svg>`)
	if c.Caption != "" {
		fmt.Fprintf(&b, `<figcaption class="chart-caption">%s</figcaption>`, esc(c.Caption))
	}
	b.WriteString(`</figure>`)
	return template.HTML(b.String()) // every text in it went through esc
}

// dataExtent is the span of every series' points and bands, and of the finite reference lines;
// hasData says whether any series has a finite point.
func dataExtent(c Chart) (xs, ys extent, hasData bool) {
	for _, s := range c.Series {
		for _, p := range points(s.X, s.Y) {
			xs.add(p.x)
			ys.add(p.y)
		}
		for _, b := range bandPoints(s) {
			xs.add(b.x)
			ys.add(b.lo)
			ys.add(b.hi)
		}
	}
	for _, l := range c.HLines {
		if finite(l.Y) {
			ys.add(l.Y)
		}
	}
	return xs, ys, xs.ok
}

// writeAxes draws the grid, the tick labels and the axis titles.
func writeAxes(b *strings.Builder, sc scale, xLabel, yLabel string) {
	fmt.Fprintf(b, `<g class="grid" stroke="%s" stroke-width="1">`, colourGrid)
	for _, t := range sc.x.ticks {
		px := sc.px(t)
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(px), num(sc.plot.y0), num(px), num(sc.plot.y1))
	}
	for _, t := range sc.y.ticks {
		py := sc.py(t)
		fmt.Fprintf(b, `<line x1="%s" y1="%s" x2="%s" y2="%s"/>`, num(sc.plot.x0), num(py), num(sc.plot.x1), num(py))
	}
	b.WriteString(`</g>`)
	for _, t := range sc.x.ticks {
		fmt.Fprintf(b, `<text class="tick-label" x="%s" y="%s" text-anchor="middle">%s</text>`,
			num(sc.px(t)), num(sc.plot.y1+16), esc(sc.x.label(t)))
	}
	for _, t := range sc.y.ticks {
		fmt.Fprintf(b, `<text class="tick-label" x="%s" y="%s" text-anchor="end" dominant-baseline="middle">%s</text>`,
			num(sc.plot.x0-6), num(sc.py(t)), esc(sc.y.label(t)))
	}
	if xLabel != "" {
		fmt.Fprintf(b, `<text class="axis-title" x="%s" y="%s" text-anchor="middle">%s</text>`,
			num((sc.plot.x0+sc.plot.x1)/2), num(sc.plot.y1+36), esc(xLabel))
	}
	if yLabel != "" {
		x, y := num(16), num((sc.plot.y0+sc.plot.y1)/2)
		fmt.Fprintf(b, `<text class="axis-title" x="%s" y="%s" text-anchor="middle" transform="rotate(-90 %s %s)">%s</text>`,
			x, y, x, y, esc(yLabel))
	}

}

// writeBands draws each series' interval band.
func writeBands(b *strings.Builder, sc scale, series []Series) {
	for i, s := range series {
		band := bandPoints(s)
		if len(band) < 2 {
			continue
		}
		var pts []string
		for _, p := range band {
			pts = append(pts, num(sc.px(p.x))+","+num(sc.py(p.hi)))
		}
		for j := len(band) - 1; j >= 0; j-- {
			pts = append(pts, num(sc.px(band[j].x))+","+num(sc.py(band[j].lo)))
		}
		fmt.Fprintf(b, `<polygon class="band series-%d" color="%s" fill="currentColor" fill-opacity="0.18" stroke="none" points="%s"/>`,
			i, colour(i), strings.Join(pts, " "))
	}
}

// writeBounds draws the reference lines with their labels.
func writeBounds(b *strings.Builder, sc scale, lines []HLine) {
	for _, l := range lines {
		if !finite(l.Y) {
			continue
		}
		py := sc.py(l.Y)
		fmt.Fprintf(b, `<line class="bound" x1="%s" y1="%s" x2="%s" y2="%s" color="%s" stroke="currentColor" stroke-width="1.5" stroke-dasharray="6 4"/>`,
			num(sc.plot.x0), num(py), num(sc.plot.x1), num(py), colourBound)
		if l.Label != "" {
			fmt.Fprintf(b, `<text class="bound-label" x="%s" y="%s" text-anchor="end" font-size="11" fill="%s">%s</text>`,
				num(sc.plot.x1-4), num(py-4), colourBound, esc(l.Label))
		}
	}
}

// writeSeries draws each series: a line, or a point for a series of one.
func writeSeries(b *strings.Builder, sc scale, series []Series) {
	for i, s := range series {
		pts := points(s.X, s.Y)
		switch len(pts) {
		case 0:
			continue
		case 1:
			fmt.Fprintf(b, `<circle class="point series-%d" cx="%s" cy="%s" r="3" color="%s" fill="currentColor"><title>%s</title></circle>`,
				i, num(sc.px(pts[0].x)), num(sc.py(pts[0].y)), colour(i), esc(s.Name))
			continue
		}
		var d strings.Builder
		for j, p := range pts {
			if j == 0 {
				d.WriteString("M")
			} else {
				d.WriteString(" L")
			}
			d.WriteString(num(sc.px(p.x)) + "," + num(sc.py(p.y)))
		}
		fmt.Fprintf(b, `<path class="line series-%d" d="%s" color="%s" fill="none" stroke="currentColor" stroke-width="2" stroke-linejoin="round" stroke-linecap="round"><title>%s</title></path>`,
			i, d.String(), colour(i), esc(s.Name))
	}
}

// writeLegend draws the legend of series laid out as lg, from x0 and top (below the plot).
func writeLegend(b *strings.Builder, legend []Series, lg legendLayout, x0, top float64) {
	if len(legend) > 0 {
		b.WriteString(`<g class="legend">`)
		for i, s := range legend {
			x := x0 + float64(i%lg.cols)*lg.colWidth
			y := top + float64(i/lg.cols)*legendRow + legendRow/2
			fmt.Fprintf(b, `<g class="legend-item"><title>%s</title>`, esc(s.Name))
			fmt.Fprintf(b, `<line class="swatch series-%d" x1="%s" y1="%s" x2="%s" y2="%s" color="%s" stroke="currentColor" stroke-width="3"/>`,
				i, num(x), num(y), num(x+legendSwatch), num(y), colour(i))
			fmt.Fprintf(b, `<text x="%s" y="%s" dominant-baseline="middle">%s</text></g>`,
				num(x+legendSwatch+6), num(y), esc(truncate(s.Name, legendMaxRunes)))
		}
		b.WriteString(`</g>`)
	}
}

// clampSize returns v, or def when v is unset, kept within [lo, maxSize].
func clampSize(v, def, lo int) int {
	if v <= 0 {
		return def
	}
	return min(max(v, lo), maxSize)
}

// box is the plot area, in SVG user units (y grows downwards).
type box struct{ x0, x1, y0, y1 float64 }

type point struct{ x, y float64 }

type bandPoint struct{ x, lo, hi float64 }

// points returns the finite (x, y) pairs.
func points(xs, ys []float64) []point {
	var out []point
	for i := range min(len(xs), len(ys)) {
		if finite(xs[i]) && finite(ys[i]) {
			out = append(out, point{xs[i], ys[i]})
		}
	}
	return out
}

// bandPoints returns the finite (x, lo, hi) triples of a series' band.
func bandPoints(s Series) []bandPoint {
	var out []bandPoint
	for i := range min(len(s.X), len(s.Lo), len(s.Hi)) {
		if finite(s.X[i]) && finite(s.Lo[i]) && finite(s.Hi[i]) {
			out = append(out, bandPoint{s.X[i], s.Lo[i], s.Hi[i]})
		}
	}
	return out
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// extent is the range of the finite values added to it.
type extent struct {
	lo, hi float64
	ok     bool
}

func (e *extent) add(v float64) {
	if !e.ok {
		e.lo, e.hi, e.ok = v, v, true
		return
	}
	e.lo, e.hi = min(e.lo, v), max(e.hi, v)
}

// axis is a range rounded out to whole ticks, ticks a "nice" step apart (1, 2 or 5 times a power
// of ten).
type axis struct {
	lo, hi float64
	step   float64
	ticks  []float64
}

// niceAxis chooses about targetTicks round ticks covering [lo, hi]. A range of a single value is
// widened around it; ok false (no values) gives [0, 1]. Any finite range works, including one
// wider than math.MaxFloat64 and one too narrow for float64 to step through.
func niceAxis(lo, hi float64, ok bool) axis {
	if !ok {
		lo, hi = 0, 1
	}
	if hi-lo <= 1e-9*max(math.Abs(lo), math.Abs(hi)) { // equal, or too close to tell apart
		c := lo/2 + hi/2
		d := math.Abs(c) / 10
		if d == 0 || !finite(d) {
			d = 1
		}
		lo, hi = math.Max(c-d, -math.MaxFloat64), math.Min(c+d, math.MaxFloat64)
	}
	// Halves keep the span finite when hi-lo would overflow.
	step := niceStep((hi/2 - lo/2) / float64(targetTicks-1) * 2)
	if step == 0 || !finite(step) {
		return axis{lo: lo, hi: hi, step: hi/2 - lo/2, ticks: []float64{lo, hi}}
	}
	// Round out to whole steps; min and max absorb the rounding error of the multiplication.
	if first := math.Floor(lo/step) * step; finite(first) {
		lo = math.Min(first, lo)
	}
	if last := math.Ceil(hi/step) * step; finite(last) {
		hi = math.Max(last, hi)
	}
	a := axis{lo: lo, hi: hi, step: step}
	start := math.Ceil(lo/step) * step // lo itself unless rounding out overflowed
	if !finite(start) {
		start = lo
	}
	for i := range maxTicks {
		v := start + float64(i)*step
		if !finite(v) || v > hi+step*1e-6 {
			break
		}
		if math.Abs(v) < step*1e-6 {
			v = 0 // no "-0", and no 1e-17 from rounding
		}
		if n := len(a.ticks); n > 0 && v <= a.ticks[n-1] {
			continue // the step is below float64's resolution here
		}
		a.ticks = append(a.ticks, v)
	}
	if len(a.ticks) < 2 {
		a.ticks = []float64{lo, hi}
	}
	return a
}

// niceStep rounds a raw step to 1, 2 or 5 times a power of ten (0 if raw is not positive).
func niceStep(raw float64) float64 {
	if !(raw > 0) || !finite(raw) {
		return 0
	}
	exp := math.Floor(math.Log10(raw))
	pow := math.Pow(10, exp)
	var f float64
	switch m := raw / pow; {
	case m < 1.5:
		f = 1
	case m < 3:
		f = 2
	case m < 7:
		f = 5
	default:
		f = 10
	}
	return f * pow
}

// label formats a tick with as many decimals as the step needs, thousands as k, M, G, T.
func (a axis) label(v float64) string {
	big := max(math.Abs(a.lo), math.Abs(a.hi))
	if big >= 1e16 || a.step < 1e-6 {
		// Enough significant digits to tell neighbouring ticks apart.
		digits := 2
		if r := big / a.step; r > 1 && finite(r) {
			digits = min(max(int(math.Ceil(math.Log10(r)))+1, 2), 17)
		}
		return strconv.FormatFloat(v, 'g', digits, 64)
	}
	if v == 0 {
		return "0"
	}
	unit, suffix := 1.0, ""
	for _, u := range []struct {
		from, v float64
		s       string
	}{{1e12, 1e12, "T"}, {1e9, 1e9, "G"}, {1e6, 1e6, "M"}, {1e4, 1e3, "k"}} {
		if big >= u.from {
			unit, suffix = u.v, u.s
			break
		}
	}
	decimals := 0
	if s := a.step / unit; s > 0 && s < 1 {
		decimals = int(math.Ceil(-math.Log10(s) - 1e-9))
	}
	return strconv.FormatFloat(v/unit, 'f', decimals, 64) + suffix
}

// scale maps data to SVG coordinates.
type scale struct {
	plot box
	x, y axis
}

func (s scale) px(x float64) float64 { return lerp(s.plot.x0, s.plot.x1, frac(x, s.x)) }

func (s scale) py(y float64) float64 { return lerp(s.plot.y1, s.plot.y0, frac(y, s.y)) }

// frac is where v lies in the axis' range, 0 at lo and 1 at hi, computed on halves so that it
// stays finite for any finite range.
func frac(v float64, a axis) float64 {
	d := a.hi/2 - a.lo/2
	if d == 0 || !finite(d) {
		return 0.5
	}
	f := (v/2 - a.lo/2) / d
	if !finite(f) {
		return 0.5
	}
	return f
}

func lerp(a, b, f float64) float64 { return a + (b-a)*f }

// legendLayout places legend items in a grid of equal columns under the plot.
type legendLayout struct {
	cols     int
	colWidth float64
	height   int
}

func layoutLegend(series []Series, width float64) legendLayout {
	if len(series) == 0 {
		return legendLayout{}
	}
	longest := 0
	for _, s := range series {
		longest = max(longest, utf8.RuneCountInString(truncate(s.Name, legendMaxRunes)))
	}
	colWidth := math.Min(width, float64(legendSwatch+6+legendCharW*longest+16))
	cols := max(1, int(width/colWidth))
	rows := (len(series) + cols - 1) / cols
	return legendLayout{cols: cols, colWidth: colWidth, height: rows*legendRow + 8}
}

// truncate cuts s to n runes, marking the cut with an ellipsis.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

func colour(i int) string { return palette[i%len(palette)] }

// num formats a coordinate to a hundredth of a unit, without trailing zeros.
func num(v float64) string {
	if !finite(v) {
		v = 0 // unreachable by construction; never let "NaN" into the markup
	}
	v = math.Round(v*100) / 100
	if v == 0 {
		v = 0 // no "-0"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// esc makes text safe as XML character data or an attribute value: characters XML does not
// allow (most control characters, invalid UTF-8) become U+FFFD, then markup is escaped.
func esc(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r == '\t' || r == '\n' || r == '\r':
			return r
		case r < 0x20, r >= 0xD800 && r < 0xE000, r == 0xFFFE, r == 0xFFFF:
			return utf8.RuneError
		}
		return r
	}, s)
	return html.EscapeString(s)
}
