//go:build !race

package quarantine

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/shoal-chess/shoal/stats"
)

// The measurement behind the defaults (docs/QUARANTINE.md): a model of a month of a
// fishtest-sized share of the fleet, fed to the Record as the scheduler feeds it. Each machine
// plays tasks of 232 games (a 4-core worker's 30 minutes at the short time control), 48 a day,
// on one of 20 runs played at once; a run lasts a day. A run's own rate of time losses is one
// of 1e-4, 2e-4 (the fleet simulator's default), 5e-4, 1e-3 or 3e-3 (a time control too short
// for the fleet), its crash rate 5e-5 or, for one run in ten, a crashing patch's 2e-3. A
// healthy machine's rates are the run's times a factor of its own, log-normal with sigma 0.5
// (one in twenty is 2.3 times the fleet or more): healthy machines are not all alike. Bad
// machines lose 2% of their games on time and crash in 0.5% (badly bad), or lose 1% on time
// (mildly bad), whatever the run.

type modelFleet struct {
	healthy, bad, mild int // machines
	days               int
	seed               uint64
}

type modelResult struct {
	healthyQuarantined int
	checks             int     // judgements of a healthy machine (a report with a bad event)
	minP               float64 // the least p-value a healthy machine's judgement reached
	tasks, games       int64
	caughtGames        []int64 // per bad machine: its games when quarantined, -1 never
	caughtMild         []int64
	falseFactors       []float64 // the own factors of the healthy machines quarantined
}

// poisson draws a Poisson count of mean lambda (small).
func poisson(rng *rand.Rand, lambda float64) int {
	l, k, p := math.Exp(-lambda), 0, 1.0
	for {
		p *= rng.Float64()
		if p <= l {
			return k
		}
		k++
	}
}

func simulateFleet(s Settings, f modelFleet) modelResult {
	rng := rand.New(rand.NewPCG(f.seed, 1))
	r := New(s)
	res := modelResult{minP: 1}
	const tasksPerDay, gamesPerTask, concurrentRuns = 48, 232, 20
	n := f.healthy + f.bad + f.mild
	factor := make([]float64, n)
	for i := range factor {
		factor[i] = math.Exp(0.5 * rng.NormFloat64())
	}
	games := make([]int64, n)
	caught := make([]bool, n)
	tlRates := []float64{1e-4, 2e-4, 5e-4, 1e-3, 3e-3}
	type run struct {
		id        string
		tl, crash float64
	}
	runs := make([]run, concurrentRuns)
	newRun := func(day, i int) run {
		crash := 5e-5
		if rng.IntN(10) == 0 {
			crash = 2e-3
		}
		return run{fmt.Sprintf("d%d-r%d", day, i), tlRates[rng.IntN(len(tlRates))], crash}
	}
	for day := range f.days {
		for i := range runs {
			runs[i] = newRun(day, i)
		}
		for range tasksPerDay {
			for m := range n {
				if caught[m] {
					continue
				}
				rn := runs[rng.IntN(len(runs))]
				name := fmt.Sprintf("m%d", m)
				tl, cr := rn.tl*factor[m], rn.crash*factor[m]
				switch {
				case m >= f.healthy+f.bad:
					tl, cr = 0.01, rn.crash
				case m >= f.healthy:
					tl, cr = 0.02, 0.005
				}
				nt, nc := poisson(rng, gamesPerTask*tl), poisson(rng, gamesPerTask*cr)
				v := r.Games(name, rn.id, gamesPerTask, nt, nc)
				r.TaskEnded(name, rn.id, false)
				games[m] += gamesPerTask
				res.tasks++
				res.games += gamesPerTask
				if m < f.healthy && nt+nc > 0 {
					res.checks++
					r.mu.Lock()
					if t := r.tally(name, r.machines[name], BadGames); t != nil && t.Runs >= s.MinRuns && t.Trials >= int64(s.MinGames) {
						res.minP = min(res.minP, stats.PoissonTail(int(t.Count), s.MinRatio*t.Expected))
					}
					r.mu.Unlock()
				}
				if v != nil {
					caught[m] = true
					if m < f.healthy {
						res.healthyQuarantined++
						res.falseFactors = append(res.falseFactors, factor[m])
					}
				}
			}
		}
	}
	for m := f.healthy; m < n; m++ {
		g := games[m]
		if !caught[m] {
			g = -1
		}
		if m < f.healthy+f.bad {
			res.caughtGames = append(res.caughtGames, g)
		} else {
			res.caughtMild = append(res.caughtMild, g)
		}
	}
	return res
}

// worst is the largest of games, or -1 if one is -1 (never caught).
func worst(games []int64) int64 {
	if slices.Contains(games, -1) {
		return -1
	}
	return slices.Max(games)
}

func TestMeasureDefaultsOnAModelFleet(t *testing.T) {
	if testing.Short() {
		t.Skip("a month of a modelled fleet: skipped with -short")
	}
	f := modelFleet{healthy: 1000, bad: 20, mild: 20, days: 30, seed: 7}
	res := simulateFleet(DefaultSettings(), f)
	t.Logf("defaults: %d healthy machines for %d days, %d tasks, %d games: %d healthy quarantined; %d judgements of healthy machines, least p %.3g; badly bad caught within %d games (median %d), mildly bad within %d",
		f.healthy, f.days, res.tasks, res.games, res.healthyQuarantined, res.checks, res.minP,
		worst(res.caughtGames), median(res.caughtGames), worst(res.caughtMild))
	if res.healthyQuarantined != 0 {
		t.Errorf("%d healthy machines quarantined, their factors %.2f", res.healthyQuarantined, res.falseFactors)
	}
	if w := worst(res.caughtGames); w < 0 || w > 2000 {
		t.Errorf("a badly bad machine was caught after %d games (-1: never), want within 2,000", w)
	}
	if w := worst(res.caughtMild); w < 0 || w > 30000 {
		t.Errorf("a mildly bad machine was caught after %d games (-1: never), want within 30,000", w)
	}
}

// The thresholds around the defaults, for the table in docs/QUARANTINE.md (go test -v).
func TestMeasureThresholds(t *testing.T) {
	if testing.Short() {
		t.Skip("a modelled fleet per threshold: skipped with -short")
	}
	f := modelFleet{healthy: 1000, bad: 20, mild: 20, days: 30, seed: 7}
	for _, ratio := range []float64{2, 3, 5} {
		for _, p := range []float64{1e-6, 1e-9, 1e-12} {
			s := DefaultSettings()
			s.P, s.MinRatio = p, ratio
			res := simulateFleet(s, f)
			t.Logf("ratio %-2g p %-6g: healthy quarantined %2d (factors %.1f); badly bad caught within %d games (median %d), mildly bad within %d (median %d)",
				ratio, p, res.healthyQuarantined, res.falseFactors,
				worst(res.caughtGames), median(res.caughtGames), worst(res.caughtMild), median(res.caughtMild))
		}
	}
}

func median(games []int64) int64 {
	s := slices.Clone(games)
	slices.Sort(s)
	return s[len(s)/2]
}
