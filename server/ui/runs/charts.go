package runs

import (
	"fmt"
	"html/template"
	"math"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/chart"
	"github.com/shoal-chess/shoal/stats"
)

// The charts of a run's page. A run document keeps no history of its results, so the LLR and
// Elo charts rebuild one from the tasks: task ids are handed out in time order, and summing the
// tasks' results in id order gives the run's results as they grew, task by task (a task counts
// with everything it has reported so far, not as it was at the time its successors started).
// Purged tasks ("bad") are left out, as they are from the run's results, so the last point of
// each chart is the number the rest of the page shows.

// maxChartPoints bounds the points computed for the LLR and Elo charts. Long runs have tens of
// thousands of tasks; their charts take every task's results into the sums but evaluate the
// statistics only at maxChartPoints evenly spaced tasks, always including the last, which keeps
// a page view cheap (a few milliseconds) and the SVG small.
const maxChartPoints = 400

// maxSPSASeries is the most parameters one SPSA chart draws; beyond that the lines cannot be
// told apart.
const maxSPSASeries = 20

// chartOrderCaption says how the LLR and Elo charts' histories are rebuilt.
const chartOrderCaption = "Cumulative over tasks in the order they were handed out; purged tasks are left out."

// chartSample is a run's results summed over its first tasks.
type chartSample struct {
	games   int
	results stats.Results
}

// chartCumulative returns the results of r's good tasks summed in task order, sampled at no
// more than maxChartPoints tasks (the last one included). Tasks without games add no point. The
// sums have a pentanomial exactly when the run's results have one, as the scheduler's LLR does.
func chartCumulative(r *rundb.Run) []chartSample {
	var tasks []rundb.Results
	for _, t := range r.Tasks {
		if !t.Bad && t.Stats.Games() > 0 {
			tasks = append(tasks, t.Stats)
		}
	}
	withPenta := r.Results.Pentanomial != nil
	var sum stats.Results
	var penta [5]int
	n := len(tasks)
	out := make([]chartSample, 0, min(n, maxChartPoints))
	for i, t := range tasks {
		sum.Wins += t.Wins
		sum.Losses += t.Losses
		sum.Draws += t.Draws
		for j := range penta {
			if j < len(t.Pentanomial) {
				penta[j] += t.Pentanomial[j]
			}
		}
		// Task i is kept when it crosses one of maxChartPoints equal steps through the n tasks:
		// every task when there are few, and always the last.
		if (i+1)*maxChartPoints/n == i*maxChartPoints/n {
			continue
		}
		s := chartSample{games: sum.Wins + sum.Losses + sum.Draws, results: sum}
		if withPenta {
			s.results.Pentanomial = append([]int(nil), penta[:]...)
		}
		out = append(out, s)
	}
	return out
}

// chartSPRTModel is the Elo model of an SPRT; runs from before elo_model was stored used BayesElo.
func chartSPRTModel(sp *rundb.SPRT) string {
	if sp.EloModel == "" {
		return stats.ModelBayesElo
	}
	return sp.EloModel
}

// sprtEloOf is the SPRT Elo estimate of res for a run testing sp, in its model, with the 95 %
// interval: what the run's pages and charts show.
func sprtEloOf(sp *rundb.SPRT, res stats.Results) (stats.SPRTElo, error) {
	return stats.EstimateSPRTElo(res, sp.Alpha, sp.Beta, 0.05, sp.Elo0, sp.Elo1, chartSPRTModel(sp))
}

// llrTrajectory returns the LLR of an SPRT run after each sampled task, against the games played
// so far. Each LLR is computed as the scheduler computes the run's (stats.SPRT.Update on the
// cumulative results, in the run's model), so the last one is the run's current LLR. Points
// whose LLR cannot be computed are left out.
func llrTrajectory(r *rundb.Run) (games, llr []float64) {
	sp := r.Args.SPRT
	if sp == nil {
		return nil, nil
	}
	for _, s := range chartCumulative(r) {
		// A fresh state without batch size or overshoot data: only the LLR is wanted, and the
		// bookkeeping of irregular updates does not touch it.
		st := stats.SPRT{Alpha: sp.Alpha, Beta: sp.Beta, Elo0: sp.Elo0, Elo1: sp.Elo1,
			EloModel: chartSPRTModel(sp), LowerBound: sp.LowerBound, UpperBound: sp.UpperBound}
		if err := st.Update(s.results); err != nil {
			continue
		}
		games = append(games, float64(s.games))
		llr = append(llr, st.LLR)
	}
	return games, llr
}

// llrChart draws an SPRT run's LLR over games between its bounds; "" for other runs and for
// runs with fewer than two points to draw.
func llrChart(r *rundb.Run) template.HTML {
	sp := r.Args.SPRT
	if sp == nil {
		return ""
	}
	games, llr := llrTrajectory(r)
	if len(games) < 2 {
		return ""
	}
	return chart.Line(chart.Chart{
		Title:   "LLR over games",
		Caption: "Log-likelihood ratio of the SPRT between its bounds. " + chartOrderCaption,
		XLabel:  "games",
		YLabel:  "LLR",
		Series:  []chart.Series{{Name: "LLR", X: games, Y: llr}},
		HLines: []chart.HLine{
			{Y: sp.LowerBound, Label: fmt.Sprintf("lower bound %.2f", sp.LowerBound)},
			{Y: sp.UpperBound, Label: fmt.Sprintf("upper bound %.2f", sp.UpperBound)},
		},
	})
}

// eloTrajectory returns a run's Elo estimate and its 95 % interval after each sampled task. It
// uses the estimate the run's page shows, so that the last point matches it: for SPRT runs the
// SPRT Elo estimate (stats.EstimateSPRTElo, as /api/get_elo and the finished-run message), whose
// interval accounts for the test's stopping rule; for fixed-games runs stats.GetElo on the
// pentanomial (the trinomial for runs without one), Elo ± Elo95. Both are logistic Elo. Points
// the estimate cannot be computed for are left out.
func eloTrajectory(r *rundb.Run) (games, elo, lo, hi []float64) {
	sp := r.Args.SPRT
	for _, s := range chartCumulative(r) {
		var e, l, h float64
		if sp != nil {
			est, err := sprtEloOf(sp, s.results)
			if err != nil {
				continue
			}
			e, l, h = est.Elo, est.CI[0], est.CI[1]
		} else {
			cells := s.results.Pentanomial
			if cells == nil {
				cells = []int{s.results.Losses, s.results.Draws, s.results.Wins}
			}
			est, err := stats.GetElo(cells)
			if err != nil {
				continue
			}
			e, l, h = est.Elo, est.Elo-est.Elo95, est.Elo+est.Elo95
		}
		games = append(games, float64(s.games))
		elo, lo, hi = append(elo, e), append(lo, l), append(hi, h)
	}
	return games, elo, lo, hi
}

// eloChart draws a run's Elo estimate with its 95 % interval over games; "" for SPSA runs, whose
// games are between perturbed engines and measure no Elo difference, and for runs with fewer
// than two points to draw.
func eloChart(r *rundb.Run) template.HTML {
	if r.Args.SPSA != nil {
		return ""
	}
	games, elo, lo, hi := eloTrajectory(r)
	if len(games) < 2 {
		return ""
	}
	what := "Elo estimate with its 95% confidence interval (shaded)."
	if r.Args.SPRT != nil {
		what = "SPRT Elo estimate with its 95% confidence interval (shaded), which allow for the test's stopping rule."
	}
	return chart.Line(chart.Chart{
		Title:   "Elo over games",
		Caption: what + " " + chartOrderCaption,
		XLabel:  "games",
		YLabel:  "Elo (logistic)",
		Series:  []chart.Series{{Name: "Elo", X: games, Y: elo, Lo: lo, Hi: hi}},
	})
}

// spsaChart draws the history of an SPSA run's parameters, one line per parameter, the first
// maxSPSASeries of them; "" for other runs and runs without history yet.
//
// fishtest's chart plots the raw values, which puts a parameter tuned in [0, 2000] and one in
// [0, 10] on one axis, where the second looks flat. Here each line is the parameter's change from
// its start as a percentage of its [min, max] range: every line starts at 0, parameters of any
// scale are comparable, and the legend gives the start and current values for the raw numbers.
// X is the iteration (game pair): history row k is taken once the run reaches iteration
// (k+1)*stats.SPSAHistoryPeriod, so that is where it is drawn, after the start at iteration 0.
func spsaChart(r *rundb.Run) template.HTML {
	sp := r.Args.SPSA
	if sp == nil || len(sp.Params) == 0 || len(sp.ParamHistory) == 0 {
		return ""
	}
	series := spsaSeries(sp)
	caption := "Each parameter's change from its start value, as a percentage of its [min, max] range; the legend gives the start and current values."
	if len(series) < len(sp.Params) {
		caption += fmt.Sprintf(" Showing the first %d of %d parameters.", len(series), len(sp.Params))
	}
	return chart.Line(chart.Chart{
		Title:   "SPSA parameters over iterations",
		Caption: caption,
		XLabel:  "iteration (game pairs)",
		YLabel:  "change from start (% of range)",
		Series:  series,
	})
}

// spsaSeries returns the lines of spsaChart: for each of the first maxSPSASeries parameters, its
// change from start in percent of its range, at iteration 0 and at each history row.
func spsaSeries(sp *rundb.SPSA) []chart.Series {
	period := stats.SPSAHistoryPeriod(sp.NumIter, len(sp.Params))
	n := min(len(sp.Params), maxSPSASeries)
	series := make([]chart.Series, n)
	for j, p := range sp.Params[:n] {
		span := math.Abs(p.Max - p.Min)
		if span == 0 {
			span = 100 // a parameter that cannot move: any span draws it flat at 0
		}
		xs, ys := []float64{0}, []float64{0}
		for k, row := range sp.ParamHistory {
			if j >= len(row) {
				continue
			}
			x := float64(k + 1)
			if period > 0 {
				x *= period
			}
			xs = append(xs, x)
			ys = append(ys, 100*(row[j].Theta-p.Start)/span)
		}
		series[j] = chart.Series{Name: fmt.Sprintf("%s: %.6g → %.6g", p.Name, p.Start, p.Theta), X: xs, Y: ys}
	}
	return series
}
