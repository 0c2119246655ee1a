package stats

import (
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// Thresholds of the two purges. The automatic purge, run when a run with auto_purge finishes,
// only removes clear outliers; the purge an approver starts from the UI is stricter.
const (
	AutoPurgeP          = 0.001
	AutoPurgeResidual   = 7.0
	ManualPurgeP        = 0.01
	ManualPurgeResidual = 4.5
)

// CrashOrTimeResidual is the residual, shown in red, that a purge records for a task removed
// because of crashes or time losses rather than by the chi-square test.
const CrashOrTimeResidual = 10.0

// Residual colors, as stored in a bad task's residual_color.
const (
	ResidualGreen  = "green"
	ResidualYellow = "yellow"
	ResidualRed    = "red"
)

// minExpected is the smallest expected cell count at which a worker's row takes part in the
// chi-square test; below it the chi-square approximation is not valid.
const minExpected = 5

// TaskResult is what the bad-worker analysis needs from one task of a run.
type TaskResult struct {
	// UniqueKey identifies the worker (worker_info.unique_key).
	UniqueKey string
	// Bad marks a task already purged; it is ignored.
	Bad                 bool
	Wins, Losses, Draws int
	// Pentanomial holds the pair counts [p0..p4]; nil for an old trinomial task. Counts of
	// another length are read as empty.
	Pentanomial []int
}

// Chi2 is the result of the chi-square homogeneity test across a run's workers.
type Chi2 struct {
	Chi2 float64
	DOF  int
	// P is the p-value of the whole table; a small P means the workers disagree.
	P float64
	// Residual maps a worker's unique key to how far it stands out from the others, as a
	// standard normal deviate, floored at 0. Workers dropped for too few games are absent.
	Residual map[string]float64
	// Workers lists the keys of Residual in the order their first task appears, the order in
	// which ties between equally bad workers are broken.
	Workers []string
	// Z95 and Z99 are the Bonferroni-corrected 95 % and 99 % thresholds for a residual.
	Z95, Z99 float64
}

// noChi2 is the result when there is nothing to test: fewer than two workers with enough games.
func noChi2() Chi2 {
	nan := math.NaN()
	return Chi2{Chi2: nan, P: nan, Residual: map[string]float64{}, Z95: nan, Z99: nan}
}

// GetChi2 runs the chi-square test of homogeneity on the results of tasks, grouped by worker,
// skipping bad tasks and the workers in exclude (which may be nil).
//
// Each worker's row counts the pairs it won, lost and drew overall, [p3+p4, p0+p1, p2]: the
// rare 2-0 and 0-2 pairs are merged with their neighbours, so that no cell is too small for
// the test. If the first task that counts (not bad, not excluded) is an old trinomial one, the
// whole table uses game counts [wins, losses, draws] instead. Workers whose smallest expected
// cell is 5 or less are dropped, repeatedly, until all remaining rows qualify. With fewer than
// two workers left, or no games, the result has NaN statistics and no residuals.
func GetChi2(tasks []TaskResult, exclude map[string]bool) Chi2 {
	type row struct {
		key    string
		counts [3]float64
	}
	var rows []*row
	byKey := map[string]*row{}
	pentanomial, decided := false, false
	for _, t := range tasks {
		if t.Bad || exclude[t.UniqueKey] {
			continue
		}
		if !decided {
			pentanomial, decided = t.Pentanomial != nil, true
		}
		var cells [3]float64
		if pentanomial {
			// A task without pairs in a pentanomial run counts as empty.
			if p := t.Pentanomial; len(p) == 5 {
				cells = [3]float64{float64(p[4] + p[3]), float64(p[0] + p[1]), float64(p[2])}
			}
		} else {
			cells = [3]float64{float64(t.Wins), float64(t.Losses), float64(t.Draws)}
		}
		r := byKey[t.UniqueKey]
		if r == nil {
			r = &row{key: t.UniqueKey}
			byKey[t.UniqueKey] = r
			rows = append(rows, r)
		}
		for i := range cells {
			r.counts[i] += cells[i]
		}
	}

	const cols = 3
	var colSums [cols]float64
	var rowSums []float64
	var total float64
	var expected [][cols]float64
	for {
		if len(rows) <= 1 {
			return noChi2()
		}
		colSums = [cols]float64{}
		rowSums = make([]float64, len(rows))
		for i, r := range rows {
			for j, v := range r.counts {
				colSums[j] += v
				rowSums[i] += v
			}
		}
		total = colSums[0] + colSums[1] + colSums[2]
		if total == 0 {
			return noChi2()
		}
		expected = make([][cols]float64, len(rows))
		kept := rows[:0:0]
		for i, r := range rows {
			low := false
			for j := range cols {
				expected[i][j] = rowSums[i] * colSums[j] / total
				if expected[i][j] <= minExpected {
					low = true
				}
			}
			if !low {
				kept = append(kept, r)
			}
		}
		if len(kept) == len(rows) {
			break
		}
		rows = kept
	}

	n := len(rows)
	res := Chi2{
		DOF:      (n - 1) * (cols - 1),
		Residual: make(map[string]float64, n),
		Workers:  make([]string, 0, n),
	}
	rowChi2 := make([]float64, n)
	for i, r := range rows {
		for j, v := range r.counts {
			d := v - expected[i][j]
			rowChi2[i] += d * d / expected[i][j]
		}
		res.Chi2 += rowChi2[i]
	}
	res.P = math.NaN()
	if !math.IsNaN(res.Chi2) {
		res.P = 1 - distuv.ChiSquared{K: float64(res.DOF)}.CDF(res.Chi2)
	}

	// A row's chi-square divided by (1 - its share of the games) is the chi-square of the 2-row
	// table "this worker against all the others", so under homogeneity it follows a chi-square
	// law with cols-1 degrees of freedom. It is reported as the normal deviate with the same
	// upper tail, computed from the tail itself so that tiny p-values keep their precision.
	tail := distuv.ChiSquared{K: cols - 1}
	for i, r := range rows {
		adjusted := rowChi2[i] / (1 - rowSums[i]/total)
		z := math.NaN()
		if !math.IsNaN(adjusted) {
			z = -distuv.UnitNormal.Quantile(tail.Survival(adjusted))
		}
		if !(z > 0) {
			z = 0 // also maps NaN to 0, as Python's max(0, nan) does
		}
		res.Residual[r.key] = z
		res.Workers = append(res.Workers, r.key)
	}

	// Bonferroni: with n workers, a residual is flagged at level p when its tail is below p/n.
	res.Z95 = distuv.UnitNormal.Quantile(1 - 0.05/float64(n))
	res.Z99 = distuv.UnitNormal.Quantile(1 - 0.01/float64(n))
	return res
}

// CrashOrTime reports whether a task had so many crashes (more than 3) or time losses (more than
// 10 % of more than 20 games) that its worker is broken, whatever the chi-square test says.
func CrashOrTime(crashes, timeLosses, games int) bool {
	return crashes > 3 || (games > 20 && float64(timeLosses)/float64(games) > 0.1)
}

// GetBadWorkers runs up to iters rounds of the purge test on tasks. In each round the chi-square
// test is repeated without the workers found so far; if the table's p-value is below p, or some
// worker's residual exceeds res, the worker with the largest residual (the first one on a tie)
// is added. It returns the keys in the order they were found, nil if none.
func GetBadWorkers(tasks []TaskResult, p, res float64, iters int) []string {
	var bad []string
	exclude := map[string]bool{}
	for range iters {
		c := GetChi2(tasks, exclude)
		worst, worstResidual, found := "", 0.0, false
		for _, key := range c.Workers {
			r := c.Residual[key]
			if c.P < p || r > res {
				if !found || r > worstResidual {
					worst, worstResidual, found = key, r, true
				}
			}
		}
		if !found {
			break
		}
		bad = append(bad, worst)
		exclude[worst] = true
	}
	return bad
}

// ResidualColor is the color a residual is shown in: green below the 95 % threshold of c,
// yellow below the 99 % one, red above (and red when c has no thresholds).
func ResidualColor(residual float64, c Chi2) string {
	switch r := math.Abs(residual); {
	case r < c.Z95:
		return ResidualGreen
	case r < c.Z99:
		return ResidualYellow
	default:
		return ResidualRed
	}
}
