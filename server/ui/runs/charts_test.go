package runs

import (
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/stats"
)

// chartTask is a task that reported the given trinomial and pentanomial results.
func chartTask(w, l, d int, penta []int, bad bool) rundb.Task {
	games := w + l + d
	return rundb.Task{NumGames: games, Bad: bad,
		Stats: rundb.Results{Wins: w, Losses: l, Draws: d, Pentanomial: penta}}
}

// chartRun returns a run with the given tasks and, as the scheduler keeps them, results summed
// over its good tasks (with a pentanomial unless none of the tasks has one).
func chartRun(tasks ...rundb.Task) *rundb.Run {
	r := &rundb.Run{Tasks: tasks}
	for _, t := range tasks {
		if t.Bad {
			continue
		}
		r.Results.Wins += t.Stats.Wins
		r.Results.Losses += t.Stats.Losses
		r.Results.Draws += t.Stats.Draws
		if t.Stats.Pentanomial != nil {
			if r.Results.Pentanomial == nil {
				r.Results.Pentanomial = make([]int, 5)
			}
			for i, p := range t.Stats.Pentanomial {
				r.Results.Pentanomial[i] += p
			}
		}
	}
	return r
}

// chartWithSPRT makes r an SPRT run of the given model and sets its LLR as the scheduler does.
func chartWithSPRT(t *testing.T, r *rundb.Run, model string) *rundb.Run {
	t.Helper()
	s := stats.NewSPRT(0.05, 0.05, 0, 2, model, 8)
	if err := s.Update(chartStatsResults(r.Results)); err != nil {
		t.Fatalf("sprt update: %v", err)
	}
	r.Args.SPRT = &rundb.SPRT{Alpha: s.Alpha, Beta: s.Beta, Elo0: s.Elo0, Elo1: s.Elo1, EloModel: model,
		LLR: s.LLR, State: s.State, BatchSize: s.BatchSize, LowerBound: s.LowerBound, UpperBound: s.UpperBound}
	return r
}

func chartStatsResults(r rundb.Results) stats.Results {
	return stats.Results{Wins: r.Wins, Losses: r.Losses, Draws: r.Draws, Pentanomial: r.Pentanomial}
}

// chartWellFormed fails the test unless out is well-formed XML without NaN.
func chartWellFormed(t *testing.T, out string) {
	t.Helper()
	dec := xml.NewDecoder(strings.NewReader(out))
	for {
		_, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed: %v\n%s", err, out)
		}
	}
	if strings.Contains(out, "NaN") {
		t.Fatalf("chart contains NaN:\n%s", out)
	}
}

func chartPentaTasks() []rundb.Task {
	return []rundb.Task{
		chartTask(120, 100, 280, []int{3, 50, 120, 70, 7}, false),
		chartTask(130, 95, 275, []int{2, 45, 125, 72, 6}, false),
		chartTask(0, 0, 0, []int{0, 0, 0, 0, 0}, false), // handed out, nothing reported yet
		chartTask(110, 112, 278, []int{5, 60, 118, 62, 5}, false),
		chartTask(140, 90, 270, []int{1, 40, 130, 70, 9}, false),
	}
}

func TestLLRChartEndsAtTheRunLLR(t *testing.T) {
	trinomial := func() []rundb.Task {
		var out []rundb.Task
		for _, task := range chartPentaTasks() {
			task.Stats.Pentanomial = nil
			out = append(out, task)
		}
		return out
	}
	cases := []struct {
		name  string
		model string
		tasks []rundb.Task
	}{
		{"normalized pentanomial", stats.ModelNormalized, chartPentaTasks()},
		{"logistic pentanomial", stats.ModelLogistic, chartPentaTasks()},
		{"normalized trinomial of an old run", stats.ModelNormalized, trinomial()},
		{"BayesElo trinomial of an old run", stats.ModelBayesElo, trinomial()},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := chartWithSPRT(t, chartRun(c.tasks...), c.model)
			games, llr := llrTrajectory(r)
			if len(games) != 4 { // the task without games adds no point
				t.Fatalf("%d points, want 4", len(games))
			}
			if got, want := games[len(games)-1], float64(r.Results.Games()); got != want {
				t.Errorf("last point at %v games, want %v", got, want)
			}
			if got, want := llr[len(llr)-1], r.Args.SPRT.LLR; got != want {
				t.Errorf("last LLR %v, want the run's %v", got, want)
			}
			// The first point is the first task's results alone.
			first := chartWithSPRT(t, chartRun(c.tasks[0]), c.model)
			if got, want := llr[0], first.Args.SPRT.LLR; got != want {
				t.Errorf("first LLR %v, want %v", got, want)
			}
			out := string(llrChart(r))
			chartWellFormed(t, out)
			if !strings.Contains(out, "in the order they were handed out") {
				t.Errorf("the chart does not say how its history is built:\n%s", out)
			}
			for _, b := range []string{"lower bound -2.94", "upper bound 2.94"} {
				if !strings.Contains(out, b) {
					t.Errorf("the chart has no %q line", b)
				}
			}
		})
	}
}

func TestLLRChartLeavesOutBadTasks(t *testing.T) {
	tasks := chartPentaTasks()
	// A purged task full of wins: counted, it would push the LLR far up.
	tasks = append(tasks[:2:2], append([]rundb.Task{chartTask(500, 0, 0, []int{0, 0, 0, 0, 250}, true)}, tasks[2:]...)...)
	r := chartWithSPRT(t, chartRun(tasks...), stats.ModelNormalized)
	clean := chartWithSPRT(t, chartRun(chartPentaTasks()...), stats.ModelNormalized)
	if r.Args.SPRT.LLR != clean.Args.SPRT.LLR {
		t.Fatalf("test setup: the run's LLR counts the bad task")
	}
	games, llr := llrTrajectory(r)
	wantGames, wantLLR := llrTrajectory(clean)
	if fmt.Sprint(games) != fmt.Sprint(wantGames) || fmt.Sprint(llr) != fmt.Sprint(wantLLR) {
		t.Errorf("trajectory with a bad task\n%v %v\nwant\n%v %v", games, llr, wantGames, wantLLR)
	}
}

func TestLLRChartSamplesLongRuns(t *testing.T) {
	var tasks []rundb.Task
	for i := range 3*maxChartPoints + 7 {
		tasks = append(tasks, chartTask(10+i%3, 9, 21, []int{0, 4, 10, 5, 1}, i%50 == 7))
	}
	r := chartWithSPRT(t, chartRun(tasks...), stats.ModelNormalized)
	games, llr := llrTrajectory(r)
	if len(games) != maxChartPoints {
		t.Errorf("%d points, want %d", len(games), maxChartPoints)
	}
	if got, want := llr[len(llr)-1], r.Args.SPRT.LLR; got != want {
		t.Errorf("last LLR %v, want the run's %v", got, want)
	}
	for i := 1; i < len(games); i++ {
		if games[i] <= games[i-1] {
			t.Fatalf("games do not grow at point %d: %v", i, games[i-1:i+1])
		}
	}
}

func TestEloChartEndsAtThePageEstimate(t *testing.T) {
	t.Run("SPRT run", func(t *testing.T) {
		r := chartWithSPRT(t, chartRun(chartPentaTasks()...), stats.ModelNormalized)
		_, elo, lo, hi := eloTrajectory(r)
		want, err := stats.EstimateSPRTElo(chartStatsResults(r.Results), 0.05, 0.05, 0.05, 0, 2, stats.ModelNormalized)
		if err != nil {
			t.Fatal(err)
		}
		n := len(elo) - 1
		if elo[n] != want.Elo || lo[n] != want.CI[0] || hi[n] != want.CI[1] {
			t.Errorf("last point %v [%v, %v], want %v %v", elo[n], lo[n], hi[n], want.Elo, want.CI)
		}
		chartWellFormed(t, string(eloChart(r)))
	})
	t.Run("fixed-games run", func(t *testing.T) {
		r := chartRun(chartPentaTasks()...)
		r.Args.NumGames = 4000
		_, elo, lo, hi := eloTrajectory(r)
		want, err := stats.GetElo(r.Results.Pentanomial)
		if err != nil {
			t.Fatal(err)
		}
		n := len(elo) - 1
		if elo[n] != want.Elo || lo[n] != want.Elo-want.Elo95 || hi[n] != want.Elo+want.Elo95 {
			t.Errorf("last point %v [%v, %v], want %v ± %v", elo[n], lo[n], hi[n], want.Elo, want.Elo95)
		}
		out := string(eloChart(r))
		chartWellFormed(t, out)
		if !strings.Contains(out, `class="band series-0"`) {
			t.Errorf("no interval band:\n%s", out)
		}
	})
}

func TestChartsOfOtherRunsAreEmpty(t *testing.T) {
	fixed := chartRun(chartPentaTasks()...)
	oneTask := chartWithSPRT(t, chartRun(chartPentaTasks()[0]), stats.ModelNormalized)
	spsa := chartSPSARun(3, 0)
	cases := []struct {
		name string
		got  string
	}{
		{"LLR of a fixed-games run", string(llrChart(fixed))},
		{"LLR of an SPSA run", string(llrChart(spsa))},
		{"LLR of a single task", string(llrChart(oneTask))},
		{"Elo of a single task", string(eloChart(oneTask))},
		{"Elo of an SPSA run", string(eloChart(spsa))},
		{"SPSA of a fixed-games run", string(spsaChart(fixed))},
		{"SPSA without history", string(spsaChart(spsa))},
		{"LLR of a run without tasks", string(llrChart(chartWithSPRT(t, chartRun(), stats.ModelNormalized)))},
	}
	for _, c := range cases {
		if c.got != "" {
			t.Errorf("%s: got a chart, want none", c.name)
		}
	}
}

// chartSPSARun returns an SPSA run of n parameters with rows history samples, parameter j moving
// from j*10 by j per sample in a range of width 100*(j+1).
func chartSPSARun(n, rows int) *rundb.Run {
	sp := &rundb.SPSA{NumIter: 1000, Iter: rows * 10}
	for j := range n {
		start := float64(j * 10)
		sp.Params = append(sp.Params, rundb.SPSAParam{Name: fmt.Sprintf("P%d", j), Start: start,
			Min: start - 50*float64(j+1), Max: start + 50*float64(j+1), Theta: start + float64(rows*j)})
	}
	for k := range rows {
		row := make([]rundb.SPSAHistoryPoint, n)
		for j := range n {
			row[j] = rundb.SPSAHistoryPoint{Theta: float64(j*10 + (k+1)*j)}
		}
		sp.ParamHistory = append(sp.ParamHistory, row)
	}
	r := chartRun()
	r.Args.SPSA = sp
	return r
}

func TestSPSAChartHasAPathPerParameter(t *testing.T) {
	cases := []struct {
		name          string
		params, paths int
		note          bool
	}{
		{"one parameter", 1, 1, false},
		{"three parameters", 3, 3, false},
		{"twenty parameters", 20, 20, false},
		{"too many parameters", 25, 20, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := string(spsaChart(chartSPSARun(c.params, 5)))
			chartWellFormed(t, out)
			if got := strings.Count(out, "<path "); got != c.paths {
				t.Errorf("%d paths, want %d", got, c.paths)
			}
			note := fmt.Sprintf("first %d of %d parameters", maxSPSASeries, c.params)
			if strings.Contains(out, note) != c.note {
				t.Errorf("caption says %q: %v, want %v", note, !c.note, c.note)
			}
		})
	}
}

func TestSPSAChartNormalisesToTheRange(t *testing.T) {
	// Parameter 1 starts at 10 in [-90, 110] and moves by 1 per sample: after k samples it is k
	// units, k/2 % of its range, from its start. 1000 iterations and 2 parameters sample every
	// 1000/100 = 10 iterations.
	r := chartSPSARun(2, 5)
	series := spsaSeries(r.Args.SPSA)
	if len(series) != 2 {
		t.Fatalf("%d series, want 2", len(series))
	}
	s := series[1]
	if got, want := fmt.Sprint(s.X), "[0 10 20 30 40 50]"; got != want {
		t.Errorf("X %s, want %s", got, want)
	}
	if got, want := fmt.Sprint(s.Y), "[0 0.5 1 1.5 2 2.5]"; got != want {
		t.Errorf("Y %s, want %s", got, want)
	}
	if got, want := s.Name, "P1: 10 → 15"; got != want {
		t.Errorf("name %q, want %q (the start and current values)", got, want)
	}
	chartWellFormed(t, string(spsaChart(r)))
}
