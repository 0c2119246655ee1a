package networks

import (
	"errors"
	"fmt"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"
	"github.com/shoal-chess/shoal/server/chart"
	"github.com/shoal-chess/shoal/server/ui"
	"github.com/shoal-chess/shoal/stats"
)

// The SPRT calculator: what an SPRT with given bounds does, depending on the true Elo of the
// patch: the probability it passes and the games it takes. Everything is computed here and
// sent as a table and two SVG charts; no script is needed. Parameter names are fishtest's, so
// that its calculator links work here.

// sprtCalcForm is the calculator's form, as typed.
type sprtCalcForm struct {
	EloModel, Elo0, Elo1, DrawRatio, RMSBias string
}

// sprtCalcDefaults are fishtest's defaults: a normalized [0, 2] test at STC.
var sprtCalcDefaults = sprtCalcForm{EloModel: "Normalized", Elo0: "0.0", Elo1: "2.0", DrawRatio: "0.49", RMSBias: "191"}

// sprtCalcRow is one line of the result table.
type sprtCalcRow struct {
	Elo   float64 // logistic
	Pass  float64 // percent
	Games float64
	Bound string // "Elo0" or "Elo1" at a bound, else ""
}

// sprtCalcResult is what the calculator found.
type sprtCalcResult struct {
	Elo0, Elo1              float64 // the bounds in logistic Elo
	GamesAtBounds, MaxGames float64
	Rows                    []sprtCalcRow
	PassChart, GamesChart   template.HTML
}

type sprtCalcData struct {
	ui.Page
	Form   sprtCalcForm
	Errors map[string]string // by field name: elo-model, elo-0, elo-1, draw-ratio, rms-bias
	Result *sprtCalcResult   // nil when the form has errors
}

// SPRTCalcPage is GET /sprt_calc.
func (s *Server) SPRTCalcPage(c *gin.Context) {
	form := sprtCalcDefaults
	for _, f := range []struct {
		name string
		v    *string
	}{{"elo-model", &form.EloModel}, {"elo-0", &form.Elo0}, {"elo-1", &form.Elo1},
		{"draw-ratio", &form.DrawRatio}, {"rms-bias", &form.RMSBias}} {
		if v, ok := c.GetQuery(f.name); ok {
			*f.v = ui.ClipRunes(strings.TrimSpace(v), 40)
		}
	}
	d := sprtCalcData{Form: form, Errors: map[string]string{}}
	oc, errs := parseSPRTCalc(form)
	status := http.StatusOK
	if len(errs) > 0 {
		d.Errors, status = errs, http.StatusBadRequest
	} else {
		d.Form.EloModel = "Logistic"
		if strings.EqualFold(form.EloModel, "normalized") {
			d.Form.EloModel = "Normalized"
		}
		d.Result = sprtCalcTable(oc)
	}
	d.Page = s.ui.Page(c, "SPRT calculator")
	s.ui.Render(c, status, "sprt_calc", d)
}

// parseSPRTCalc checks the form (fishtest's rules: bounds within ±10 and at least 0.5 apart, a
// draw ratio strictly between 0 and 1, a bias of at least 0) and returns the plan's
// characteristics, or an error message for each wrong field.
func parseSPRTCalc(f sprtCalcForm) (*stats.SPRTOC, map[string]string) {
	errs := map[string]string{}
	num := func(field, label, v string) float64 {
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			errs[field] = label + " must be a number."
			return 0
		}
		return x
	}
	plan := stats.SPRTPlan{Alpha: 0.05, Beta: 0.05}
	switch strings.ToLower(f.EloModel) {
	case "normalized":
		plan.Model = stats.ModelNormalized
	case "logistic":
		plan.Model = stats.ModelLogistic
	default:
		errs["elo-model"] = "Choose the normalized or the logistic Elo model."
	}
	plan.Elo0 = num("elo-0", "Elo0", f.Elo0)
	plan.Elo1 = num("elo-1", "Elo1", f.Elo1)
	plan.DrawRatio = num("draw-ratio", "The draw ratio", f.DrawRatio)
	plan.RMSBias = num("rms-bias", "The RMS bias", f.RMSBias)
	if _, bad := errs["elo-0"]; !bad && math.Abs(plan.Elo0) > 10 {
		errs["elo-0"] = "Elo0 must be between -10 and 10."
	}
	if _, bad := errs["elo-1"]; !bad && math.Abs(plan.Elo1) > 10 {
		errs["elo-1"] = "Elo1 must be between -10 and 10."
	}
	if errs["elo-0"] == "" && errs["elo-1"] == "" && plan.Elo1 < plan.Elo0+0.5 {
		errs["elo-1"] = "Elo1 must be at least 0.5 above Elo0."
	}
	if _, bad := errs["draw-ratio"]; !bad && !(plan.DrawRatio > 0 && plan.DrawRatio < 1) {
		errs["draw-ratio"] = "The draw ratio must be between 0 and 1 (both excluded)."
	}
	if _, bad := errs["rms-bias"]; !bad && plan.RMSBias < 0 {
		errs["rms-bias"] = "The RMS bias must be 0 or more."
	}
	if len(errs) > 0 {
		return nil, errs
	}
	oc, err := stats.NewSPRTOC(plan)
	switch {
	case errors.Is(err, stats.ErrSPRTPlanVariance):
		return nil, map[string]string{"rms-bias": "This RMS bias is too large for the draw ratio: the openings' bias would explain more than all the variance of the games."}
	case err != nil:
		return nil, map[string]string{"elo-1": "These bounds cannot be used: " + err.Error() + "."}
	}
	return oc, nil
}

// sprtCalcTable evaluates the characteristics over the Elo range fishtest's calculator shows:
// a third of the bounds' distance beyond each, rounded out to whole Elo.
func sprtCalcTable(oc *stats.SPRTOC) *sprtCalcResult {
	e0, e1 := oc.LogisticElo0, oc.LogisticElo1
	if e0 == 0 {
		e0 = 0 // not -0, which would show as "-0.00"
	}
	r := &sprtCalcResult{Elo0: e0, Elo1: e1}
	_, r.GamesAtBounds = oc.At(e0)
	span := e1 - e0
	start, end := math.Floor(e0-span/3), math.Ceil(e1+span/3)

	// The charts: 10 or 20 points an Elo, and the bounds themselves.
	perElo := 10.0
	if end-start <= 5 {
		perElo = 20
	}
	var xs, pass, games []float64
	add := func(elo float64) {
		p, g := oc.At(elo)
		xs, pass, games = append(xs, elo), append(pass, 100*p), append(games, g)
		r.MaxGames = math.Max(r.MaxGames, g)
	}
	for i := math.Round(start * perElo); i <= math.Round(end*perElo); i++ {
		elo := i / perElo
		add(elo)
		for _, b := range []float64{e0, e1} {
			if elo < b && (i+1)/perElo > b {
				add(b)
			}
		}
	}
	// The table: about a dozen round steps, and a row at each bound.
	step := 0.1
	for _, st := range []float64{0.1, 0.2, 0.25, 0.5, 1, 2} {
		step = st
		if (end-start)/st <= 16 {
			break
		}
	}
	bound := func(elo float64) string {
		switch {
		case math.Abs(elo-e0) < 1e-9:
			return "Elo0"
		case math.Abs(elo-e1) < 1e-9:
			return "Elo1"
		}
		return ""
	}
	row := func(elo float64) {
		p, g := oc.At(elo)
		r.Rows = append(r.Rows, sprtCalcRow{Elo: elo, Pass: 100 * p, Games: g, Bound: bound(elo)})
	}
	for i := math.Round(start / step); i <= math.Round(end/step); i++ {
		elo := i * step
		row(elo)
		for _, b := range []float64{e0, e1} {
			if elo+1e-9 < b && (i+1)*step-1e-9 > b {
				row(b)
			}
		}
	}

	marker := func(name string, elo, top float64) chart.Series {
		return chart.Series{Name: fmt.Sprintf("%s = %.2f", name, elo), X: []float64{elo, elo}, Y: []float64{0, top}}
	}
	r.PassChart = chart.Line(chart.Chart{
		Title: "Pass probability", XLabel: "True Elo (logistic)", YLabel: "Pass probability (%)",
		Series: []chart.Series{{Name: "Pass probability (%)", X: xs, Y: pass},
			marker("Elo0", e0, 100), marker("Elo1", e1, 100)},
		HLines: []chart.HLine{{Y: 5, Label: "5%"}, {Y: 95, Label: "95%"}},
	})
	r.GamesChart = chart.Line(chart.Chart{
		Title: "Expected number of games", XLabel: "True Elo (logistic)", YLabel: "Games",
		Series: []chart.Series{{Name: "Expected games", X: xs, Y: games},
			marker("Elo0", e0, r.MaxGames), marker("Elo1", e1, r.MaxGames)},
	})
	return r
}
