package chart

import (
	"encoding/xml"
	"io"
	"math"
	"strconv"
	"strings"
	"testing"
)

// node is any XML element, for inspecting rendered charts.
type node struct {
	XMLName xml.Name
	Attrs   []xml.Attr `xml:",any,attr"`
	Nodes   []node     `xml:",any"`
	Text    string     `xml:",chardata"`
}

func (n node) attr(name string) string {
	for _, a := range n.Attrs {
		if a.Name.Local == name {
			return a.Value
		}
	}
	return ""
}

// find returns every element under n (n included) with the given name.
func (n node) find(name string) []node {
	var out []node
	if n.XMLName.Local == name {
		out = append(out, n)
	}
	for _, c := range n.Nodes {
		out = append(out, c.find(name)...)
	}
	return out
}

// parse checks that a chart is well-formed XML without NaN or infinities, and returns its tree.
func parse(t *testing.T, out string) node {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(out))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v\n%s", err, out)
		}
	}
	for _, bad := range []string{"NaN", "Inf"} {
		if strings.Contains(out, bad) {
			t.Fatalf("chart contains %q:\n%s", bad, out)
		}
	}
	var root node
	if err := xml.Unmarshal([]byte(out), &root); err != nil {
		t.Fatalf("unmarshal chart: %v", err)
	}
	if root.XMLName.Local != "figure" || len(root.find("svg")) != 1 {
		t.Fatalf("chart is not a figure holding one svg:\n%s", out)
	}
	return root
}

func TestLineIsWellFormedInEdgeCases(t *testing.T) {
	nan, inf := math.NaN(), math.Inf(1)
	cases := []struct {
		name  string
		chart Chart
		paths int
	}{
		{"no series at all", Chart{Title: "empty"}, 0},
		{"a series without points", Chart{Series: []Series{{Name: "a"}}}, 0},
		{"a single point", Chart{Series: []Series{{Name: "a", X: []float64{3}, Y: []float64{7}}}}, 0},
		{"all values equal", Chart{Series: []Series{{Name: "a", X: []float64{1, 2, 3}, Y: []float64{5, 5, 5}}}}, 1},
		{"all values zero", Chart{Series: []Series{{Name: "a", X: []float64{0, 0}, Y: []float64{0, 0}}}}, 1},
		{"NaN and infinities are skipped", Chart{
			Series: []Series{{Name: "a", X: []float64{0, 1, nan, 3, 4}, Y: []float64{1, inf, 2, -inf, nan},
				Lo: []float64{nan, 0, 0, 0, 0}, Hi: []float64{1, 1, inf, 1, 1}}},
			HLines: []HLine{{Y: nan, Label: "nan"}, {Y: inf}},
		}, 0},
		{"only non-finite values", Chart{Series: []Series{{Name: "a", X: []float64{nan, inf}, Y: []float64{nan, 1}}}}, 0},
		{"a huge x range", Chart{Series: []Series{{Name: "a", X: []float64{-1e308, 1e308}, Y: []float64{0, 1}}}}, 1},
		{"the widest x range", Chart{Series: []Series{{Name: "a", X: []float64{-math.MaxFloat64, math.MaxFloat64}, Y: []float64{1, 2}}}}, 1},
		{"a range below float resolution", Chart{Series: []Series{{Name: "a", X: []float64{1e17, 1e17 + 64}, Y: []float64{1, 1 + 1e-15}}}}, 1},
		{"tiny numbers", Chart{Series: []Series{{Name: "a", X: []float64{5e-324, 1e-323}, Y: []float64{-5e-324, 5e-324}}}}, 1},
		{"lengths that do not match", Chart{Series: []Series{{Name: "a", X: []float64{1, 2, 3}, Y: []float64{1, 2}, Lo: []float64{0}, Hi: []float64{3, 4}}}}, 1},
		{"negative and odd sizes", Chart{Width: -5, Height: 1e6, Series: []Series{{X: []float64{1, 2}, Y: []float64{1, 2}}}}, 1},
		{"bounds only", Chart{HLines: []HLine{{Y: -2.94, Label: "lower"}, {Y: 2.94, Label: "upper"}}}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := parse(t, string(Line(c.chart)))
			if got := len(root.find("path")); got != c.paths {
				t.Errorf("%d paths, want %d", got, c.paths)
			}
			if got := len(root.find("title")); got < 1 {
				t.Errorf("no <title>")
			}
		})
	}
}

func TestLineShowsASinglePointAsADot(t *testing.T) {
	root := parse(t, string(Line(Chart{Series: []Series{{Name: "a", X: []float64{3}, Y: []float64{7}}}})))
	if got := len(root.find("circle")); got != 1 {
		t.Fatalf("%d circles, want 1", got)
	}
}

func TestLineSaysWhenThereIsNoData(t *testing.T) {
	out := string(Line(Chart{Title: "x", Series: []Series{{Name: "a", X: []float64{math.NaN()}, Y: []float64{1}}}}))
	if !strings.Contains(out, "No data") {
		t.Errorf("a chart without finite points does not say so:\n%s", out)
	}
}

func TestLineEscapesEveryText(t *testing.T) {
	evil := `<script>alert("x&y")</script>'`
	out := string(Line(Chart{
		Title: evil, Caption: evil, XLabel: evil, YLabel: evil,
		Series: []Series{
			{Name: evil, X: []float64{0, 1}, Y: []float64{0, 1}},
			{Name: "bell\x07 and \xff bad utf-8", X: []float64{0, 1}, Y: []float64{1, 0}},
		},
		HLines: []HLine{{Y: 0.5, Label: evil}},
	}))
	parse(t, out)
	if strings.Contains(out, "<script") {
		t.Fatalf("a label was not escaped:\n%s", out)
	}
	// Title, heading, caption, two axis titles, the path's tooltip, the legend's tooltip and
	// text, and the bound label.
	if got := strings.Count(out, "&lt;script&gt;"); got != 9 {
		t.Errorf("escaped label appears %d times, want 9:\n%s", got, out)
	}
}

func TestLinePlacesPointsOnThePlotArea(t *testing.T) {
	// 640x320 with margins 64 left, 16 right, 32 top, 44 bottom: the plot spans x 64..624 and
	// y 32..276. The data fill [0, 10] x [0, 100] exactly, which are round axis ranges.
	root := parse(t, string(Line(Chart{Width: 640, Height: 320,
		Series: []Series{{Name: "a", X: []float64{0, 5, 10}, Y: []float64{0, 50, 100}}}})))
	paths := root.find("path")
	if len(paths) != 1 {
		t.Fatalf("%d paths, want 1", len(paths))
	}
	if got, want := paths[0].attr("d"), "M64,276 L344,154 L624,32"; got != want {
		t.Errorf("path d = %q, want %q", got, want)
	}
	// The bound at y=25 is a quarter of the way up.
	root = parse(t, string(Line(Chart{Width: 640, Height: 320,
		Series: []Series{{Name: "a", X: []float64{0, 10}, Y: []float64{0, 100}}},
		HLines: []HLine{{Y: 25, Label: "b"}}})))
	var bound node
	for _, l := range root.find("line") {
		if l.attr("class") == "bound" {
			bound = l
		}
	}
	if got := bound.attr("y1"); got != "215" {
		t.Errorf("bound at y=%q, want 215", got)
	}
}

func TestLineIsResponsiveAndAccessible(t *testing.T) {
	root := parse(t, string(Line(Chart{Title: "LLR", Caption: "cap", XLabel: "games", YLabel: "LLR",
		Series: []Series{{Name: "a", X: []float64{0, 1}, Y: []float64{0, 1}}}})))
	svg := root.find("svg")[0]
	if svg.attr("viewBox") != "0 0 640 320" || svg.attr("width") != "100%" || svg.attr("role") != "img" {
		t.Errorf("svg attributes %v", svg.Attrs)
	}
	if svg.Nodes[0].XMLName.Local != "title" || svg.Nodes[0].Text != "LLR" {
		t.Errorf("the svg does not start with its <title>")
	}
	if got := root.find("figcaption"); len(got) != 1 || got[0].Text != "cap" {
		t.Errorf("figcaption %v", got)
	}
	if len(root.find("script")) != 0 {
		t.Errorf("chart has a script")
	}
}

func TestLegendOnlyWithSeveralSeries(t *testing.T) {
	one := Series{Name: "one", X: []float64{0, 1}, Y: []float64{0, 1}}
	two := Series{Name: "two", X: []float64{0, 1}, Y: []float64{1, 0}}
	hasLegend := func(c Chart) bool {
		for _, g := range parse(t, string(Line(c))).find("g") {
			if g.attr("class") == "legend" {
				return true
			}
		}
		return false
	}
	if hasLegend(Chart{Series: []Series{one}}) {
		t.Error("a single series has a legend")
	}
	if !hasLegend(Chart{Series: []Series{one, two}}) {
		t.Error("two series have no legend")
	}
	// Twenty series with long names take several legend rows, which make the drawing taller.
	var many []Series
	for i := range 20 {
		many = append(many, Series{Name: "SomeRatherLongParameterName" + strconv.Itoa(i), X: []float64{0, 1}, Y: []float64{0, float64(i)}})
	}
	root := parse(t, string(Line(Chart{Series: many})))
	if got := len(root.find("path")); got != 20 {
		t.Errorf("%d paths, want 20", got)
	}
	if vb := root.find("svg")[0].attr("viewBox"); vb == "0 0 640 320" {
		t.Errorf("viewBox %q leaves no room for the legend", vb)
	}
}

func TestNiceAxisTicksAreRound(t *testing.T) {
	cases := []struct {
		name   string
		lo, hi float64
	}{
		{"unit interval", 0, 1},
		{"games", 0, 61234},
		{"llr", -2.94, 2.94},
		{"elo", -3.7, 12.2},
		{"narrow", 0.12345, 0.12347},
		{"offset", 1e9 + 3, 1e9 + 170},
		{"negative", -1234, -17},
		{"huge", 0, 3e300},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := niceAxis(c.lo, c.hi, true)
			if a.lo > c.lo || a.hi < c.hi {
				t.Errorf("axis [%g, %g] does not cover [%g, %g]", a.lo, a.hi, c.lo, c.hi)
			}
			if n := len(a.ticks); n < 3 || n > 12 {
				t.Errorf("%d ticks %v", n, a.ticks)
			}
			m := a.step / math.Pow(10, math.Floor(math.Log10(a.step)))
			if !near(m, 1) && !near(m, 2) && !near(m, 5) {
				t.Errorf("step %g is not 1, 2 or 5 times a power of ten", a.step)
			}
			for _, v := range a.ticks {
				if q := v / a.step; !near(q, math.Round(q)) {
					t.Errorf("tick %g is not a multiple of the step %g", v, a.step)
				}
			}
		})
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

func TestTickLabels(t *testing.T) {
	cases := []struct {
		name   string
		lo, hi float64
		want   []string
	}{
		{"games in thousands", 0, 50000, []string{"0", "10k", "20k", "30k", "40k", "50k"}},
		{"tenths", 0, 1, []string{"0", "0.2", "0.4", "0.6", "0.8", "1.0"}},
		{"llr", -3, 3, []string{"-3", "-2", "-1", "0", "1", "2", "3"}},
		{"millions with a fraction", 0, 2.5e6, []string{"0", "0.5M", "1.0M", "1.5M", "2.0M", "2.5M"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := niceAxis(c.lo, c.hi, true)
			var got []string
			for _, v := range a.ticks {
				got = append(got, a.label(v))
			}
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Errorf("labels %q, want %q", got, c.want)
			}
		})
	}
}
