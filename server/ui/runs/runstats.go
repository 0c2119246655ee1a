package runs

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server/ui"
	"github.com/shoal-chess/shoal/stats"
)

// A run's live Elo page (/tests/live_elo/:id, gauges of an SPRT) and its statistics page
// (/tests/stats/:id).

// liveGauge draws a half-dial gauge as inline SVG: frac (0..1, clamped) of the arc filled,
// with text under the needle and a label under that.
func liveGauge(label, text string, frac float64, class string) template.HTML {
	if math.IsNaN(frac) {
		frac = 0
	}
	frac = math.Max(0, math.Min(1, frac))
	const cx, cy, rad = 70.0, 70.0, 55.0
	theta := math.Pi * (1 - frac)
	x, y := cx+rad*math.Cos(theta), cy-rad*math.Sin(theta)
	nx, ny := cx+(rad-10)*math.Cos(theta), cy-(rad-10)*math.Sin(theta)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="gauge %s" viewBox="0 0 140 105" role="img" aria-label="%s: %s">`,
		html.EscapeString(class), html.EscapeString(label), html.EscapeString(text))
	fmt.Fprintf(&b, `<path class="track" d="M %.2f %.2f A %.2f %.2f 0 0 1 %.2f %.2f"/>`, cx-rad, cy, rad, rad, cx+rad, cy)
	if frac > 0 {
		fmt.Fprintf(&b, `<path class="fill" d="M %.2f %.2f A %.2f %.2f 0 0 1 %.2f %.2f"/>`, cx-rad, cy, rad, rad, x, y)
	}
	fmt.Fprintf(&b, `<line class="needle" x1="%.2f" y1="%.2f" x2="%.2f" y2="%.2f"/>`, cx, cy, nx, ny)
	fmt.Fprintf(&b, `<circle class="hub" cx="%.2f" cy="%.2f" r="4"/>`, cx, cy)
	fmt.Fprintf(&b, `<text class="value" x="%.2f" y="%.2f" text-anchor="middle">%s</text>`, cx, cy+18, html.EscapeString(text))
	fmt.Fprintf(&b, `<text class="label" x="%.2f" y="%.2f" text-anchor="middle">%s</text>`, cx, cy+32, html.EscapeString(label))
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) // numbers and escaped text only
}

// liveEloRange is the least span of the Elo gauge: -liveEloRange to +liveEloRange logistic Elo.
const liveEloRange = 5

// liveEloData is /tests/live_elo/:id and its live part.
type liveEloData struct {
	ui.Page
	Run                    *rundb.Run
	ID, RunTitle, Status   string
	Err                    string // why there are no estimates
	Elo, CILo, CIHi        float64
	LOS, LLR, Lower, Upper float64
	Games, W, L, D         int
	WPct, LPct, DPct       float64
	Ptnml                  []int
	State, Model           string
	Gauges                 []template.HTML
	LiveSrc                string
}

// viewLiveElo makes the live Elo page's data for an SPRT run.
func viewLiveElo(r *rundb.Run) liveEloData {
	sp := r.Args.SPRT
	res := r.Results
	d := liveEloData{Run: r, ID: r.ID.Hex(), RunTitle: runTitle(r), Status: runStatus(r),
		Games: res.Games(), W: res.Wins, L: res.Losses, D: res.Draws, Ptnml: res.Pentanomial,
		State: sp.State, Model: chartSPRTModel(sp), LLR: sp.LLR}
	if d.Games > 0 {
		n := float64(d.Games)
		d.WPct, d.LPct, d.DPct = 100*float64(d.W)/n, 100*float64(d.L)/n, 100*float64(d.D)/n
	}
	e, err := sprtEloOf(sp, scheduler.ToStatsResults(res))
	if err != nil {
		d.Err = "The Elo estimate cannot be computed for these results: " + err.Error()
		d.Lower, d.Upper = sp.LowerBound, sp.UpperBound
	} else {
		d.Elo, d.CILo, d.CIHi, d.LOS, d.Lower, d.Upper = e.Elo, e.CI[0], e.CI[1], e.LOS, e.A, e.B
	}
	// The Elo dial spans ±liveEloRange, or wider to keep the interval on it.
	span := float64(liveEloRange)
	for _, x := range []float64{d.Elo, d.CILo, d.CIHi} {
		if !math.IsNaN(x) && !math.IsInf(x, 0) {
			span = math.Max(span, math.Ceil(math.Abs(x)))
		}
	}
	llrClass := ""
	switch sp.State {
	case "accepted":
		llrClass = "good"
	case "rejected":
		llrClass = "bad"
	}
	d.Gauges = []template.HTML{
		liveGauge("LLR", fmt.Sprintf("%.2f [%.2f, %.2f]", d.LLR, d.Lower, d.Upper), (d.LLR-d.Lower)/(d.Upper-d.Lower), llrClass),
		liveGauge("LOS", fmt.Sprintf("%.1f%%", 100*d.LOS), d.LOS, ""),
		liveGauge(fmt.Sprintf("Elo (scale ±%g)", span), fmt.Sprintf("%.2f [%.2f, %.2f]", d.Elo, d.CILo, d.CIHi), (d.Elo+span)/(2*span), ""),
	}
	if !r.Finished {
		d.LiveSrc = "/tests/view/" + d.ID + "/events?for=live_elo"
	}
	return d
}

// LiveEloPage is GET /tests/live_elo/:id: gauges of an SPRT run's LLR, LOS and Elo with the
// numbers behind them; 404 for a run that does not exist or is not an SPRT.
func (s *Server) LiveEloPage(c *gin.Context) {
	r, ok := s.viewLoad(c)
	if !ok {
		return
	}
	if r.Args.SPRT == nil {
		s.ui.PageError(c, http.StatusNotFound, "This test is not an SPRT, so it has no live Elo page.")
		return
	}
	d := viewLiveElo(r)
	d.Page = s.ui.Page(c, "Live Elo - "+d.RunTitle)
	s.ui.Render(c, http.StatusOK, "live_elo", d)
}

// viewCounts are the statistics of a run's game (trinomial) or pair (pentanomial) counts.
type viewCounts struct {
	Counts   []int
	N        int     // games or pairs
	Games    int     // games
	Score    float64 // mean score per game
	ScoreLo  float64 // its 95 % interval
	ScoreHi  float64
	Var      float64 // per game
	Stdev    float64
	NElo     float64 // normalized Elo and its 95 % interval
	NEloLo   float64
	NEloHi   float64
	DrawRate float64 // draws (trinomial) or 1-1 pairs (pentanomial)
	Elo      stats.Elo
	EloErr   bool
}

// viewCountsOf computes the statistics of counts, whose outcome i scores i/(len-1) per game (a pair
// scores twice that over two games). No counts give NaNs, which the page shows as "-".
func viewCountsOf(counts []int) viewCounts {
	st := viewCounts{Counts: counts}
	k := len(counts)
	n := 0
	for _, x := range counts {
		n += x
	}
	st.N = n
	st.Games = n
	if k == 5 {
		st.Games = 2 * n
	}
	nan := math.NaN()
	st.Score, st.ScoreLo, st.ScoreHi, st.Var, st.Stdev = nan, nan, nan, nan, nan
	st.NElo, st.NEloLo, st.NEloHi, st.DrawRate = nan, nan, nan, nan
	if e, err := stats.GetElo(counts); err == nil {
		st.Elo = e
	} else {
		st.EloErr = true
	}
	if n == 0 {
		return st
	}
	fn := float64(n)
	mean := 0.0
	for i, x := range counts {
		mean += float64(x) * float64(i) / float64(k-1)
	}
	mean /= fn
	v := 0.0
	for i, x := range counts {
		d := float64(i)/float64(k-1) - mean
		v += float64(x) * d * d
	}
	v /= fn // per sample (game or pair)
	z := 1.959963984540054
	half := z * math.Sqrt(v/fn)
	st.Score, st.ScoreLo, st.ScoreHi = mean, mean-half, mean+half
	perGame := v
	if k == 5 {
		perGame = 2 * v
	}
	st.Var, st.Stdev = perGame, math.Sqrt(perGame)
	st.DrawRate = float64(counts[k/2]) / fn
	if perGame > 0 {
		neloPerNT := 800 / math.Ln10
		sd := st.Stdev
		st.NElo = neloPerNT * (mean - 0.5) / sd
		st.NEloLo = neloPerNT * (st.ScoreLo - 0.5) / sd
		st.NEloHi = neloPerNT * (st.ScoreHi - 0.5) / sd
	}
	return st
}

// viewSPRTStats is an SPRT's state and its LLR computed several ways.
type viewSPRTStats struct {
	Model                string
	Alpha, Beta          float64
	Elo0, Elo1           float64
	State                string
	LLR                  float64 // as the run stores it
	Lower, Upper         float64 // the bounds in force (overshoot-corrected)
	A, B                 float64 // the bounds from alpha and beta
	O0, O1               float64 // overshoot corrections
	BatchSize            int
	Variants             []viewLLR
	Elo, CILo, CIHi, LOS float64
	EloErr               string
}

// viewLLR is one way to compute the LLR.
type viewLLR struct {
	Name  string
	Value float64
}

func viewSPRTStatsOf(r *rundb.Run) *viewSPRTStats {
	sp := r.Args.SPRT
	if sp == nil {
		return nil
	}
	out := &viewSPRTStats{Model: chartSPRTModel(sp), Alpha: sp.Alpha, Beta: sp.Beta, Elo0: sp.Elo0, Elo1: sp.Elo1,
		State: sp.State, LLR: sp.LLR, Lower: sp.LowerBound, Upper: sp.UpperBound, BatchSize: sp.BatchSize,
		A: math.Log(sp.Beta / (1 - sp.Alpha)), B: math.Log((1 - sp.Beta) / sp.Alpha)}
	if o := sp.Overshoot; o != nil {
		st := stats.SPRT{Overshoot: &stats.Overshoot{M0: o.M0, Sq0: o.Sq0, M1: o.M1, Sq1: o.Sq1}}
		out.O0, out.O1 = st.OvershootCorrections()
	}
	res := r.Results
	tri := []float64{float64(res.Losses), float64(res.Draws), float64(res.Wins)}
	var penta []float64
	if len(res.Pentanomial) == 5 {
		for _, x := range res.Pentanomial {
			penta = append(penta, float64(x))
		}
	}
	add := func(name string, v float64, err error) {
		if err == nil {
			out.Variants = append(out.Variants, viewLLR{name, v})
		}
	}
	switch out.Model {
	case stats.ModelNormalized:
		if penta != nil {
			v, err := stats.LLRNormalized(sp.Elo0, sp.Elo1, penta)
			add("normalized, pentanomial", v, err)
			v, err = stats.LLRNormalizedApprox(sp.Elo0, sp.Elo1, penta)
			add("normalized approximation, pentanomial", v, err)
		}
		v, err := stats.LLRNormalized(sp.Elo0, sp.Elo1, tri)
		add("normalized, trinomial", v, err)
		v, err = stats.LLRNormalizedApprox(sp.Elo0, sp.Elo1, tri)
		add("normalized approximation, trinomial", v, err)
	case stats.ModelLogistic:
		if penta != nil {
			v, err := stats.LLRLogistic(sp.Elo0, sp.Elo1, penta)
			add("logistic, pentanomial", v, err)
		}
		v, err := stats.LLRLogistic(sp.Elo0, sp.Elo1, tri)
		add("logistic, trinomial", v, err)
	}
	e, err := sprtEloOf(sp, scheduler.ToStatsResults(res))
	if err != nil {
		out.EloErr = err.Error()
	} else {
		out.Elo, out.CILo, out.CIHi, out.LOS = e.Elo, e.CI[0], e.CI[1], e.LOS
	}
	return out
}

// runStatsData is /tests/stats/:id and its live part.
type runStatsData struct {
	ui.Page
	Run                  *rundb.Run
	ID, RunTitle, Status string
	Tri                  viewCounts
	Penta                *viewCounts
	SPRT                 *viewSPRTStats
	Chi2                 viewChi2
	LiveSrc              string
}

func viewRunStats(r *rundb.Run) runStatsData {
	res := r.Results
	d := runStatsData{Run: r, ID: r.ID.Hex(), RunTitle: runTitle(r), Status: runStatus(r),
		Tri: viewCountsOf([]int{res.Losses, res.Draws, res.Wins}), SPRT: viewSPRTStatsOf(r), Chi2: newViewChi2(viewChi2Of(r))}
	if len(res.Pentanomial) == 5 {
		p := viewCountsOf(res.Pentanomial)
		d.Penta = &p
	}
	if !r.Finished {
		d.LiveSrc = "/tests/view/" + d.ID + "/events?for=stats"
	}
	return d
}

// StatsPage is GET /tests/stats/:id: a run's raw statistics (trinomial and pentanomial, the
// SPRT's LLR computed several ways, its bounds, the workers' chi-square test); 404 for a run
// that does not exist.
func (s *Server) StatsPage(c *gin.Context) {
	r, ok := s.viewLoad(c)
	if !ok {
		return
	}
	d := viewRunStats(r)
	d.Page = s.ui.Page(c, "Statistics - "+d.RunTitle)
	s.ui.Render(c, http.StatusOK, "run_stats", d)
}
