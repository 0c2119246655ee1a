package stats

import (
	"errors"
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// isFinite reports whether x is neither infinite nor NaN.
func isFinite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// phi is the standard normal distribution function.
func phi(x float64) float64 { return distuv.UnitNormal.CDF(x) }

// phiInv is the standard normal quantile function.
func phiInv(p float64) float64 { return distuv.UnitNormal.Quantile(p) }

// ScoreToElo is the logistic Elo difference at an expected score, with the score clamped to
// [0.001, 0.999] so that a clean sweep reads as a large finite number.
func ScoreToElo(score float64) float64 {
	x := math.Min(math.Max(score, 1e-3), 1-1e-3)
	return -400 * math.Log10(1/x-1)
}

// Elo is the estimate of a fixed-game run: logistic Elo, the half-width of its 95 % interval,
// and the likelihood of superiority.
type Elo struct {
	Elo   float64
	Elo95 float64
	LOS   float64
}

// GetElo estimates Elo from trinomial [losses, draws, wins] or pentanomial [p0..p4] counts,
// with a normal approximation of the score. Empty cells are regularized, so even no results
// at all give numbers (an Elo of 0 with a huge interval), as in fishtest; the only error is a
// slice that is neither 3 nor 5 cells long.
func GetElo(results []int) (Elo, error) {
	if len(results) != 3 && len(results) != 5 {
		return Elo{}, errors.New("results must have 3 or 5 cells")
	}
	// The same operations as fishtest's, in the same order: at 2^31 draws the LOS depends on
	// the last bit of the score (meanVar's order moves it by 8e-6).
	r := regularize(floats(results))
	count := len(r)
	n := 0.0
	for _, x := range r {
		n += x
	}
	games := n * float64(count-1) / 2
	mu := 0.0
	for i, x := range r {
		mu += x * (float64(i) / 2)
	}
	mu /= games
	muPerSample := float64(count-1) / 2 * mu
	v := 0.0
	for i, x := range r {
		d := float64(i)/2 - muPerSample
		v += x * math.Pow(d, 2)
	}
	v /= games
	stdev := math.Sqrt(v)
	se := stdev / math.Sqrt(games)
	muMin := mu + phiInv(0.025)*se
	muMax := mu + phiInv(0.975)*se
	return Elo{
		Elo:   ScoreToElo(mu),
		Elo95: (ScoreToElo(muMax) - ScoreToElo(muMin)) / 2,
		LOS:   phi((mu - 0.5) / se),
	}, nil
}

// bayesEloToProba returns the win, loss and draw probabilities at a BayesElo difference with
// the given draw Elo.
func bayesEloToProba(belo, drawElo float64) (win, loss, draw float64) {
	win = 1 / (1 + math.Pow(10, (-belo+drawElo)/400))
	loss = 1 / (1 + math.Pow(10, (belo+drawElo)/400))
	return win, loss, 1 - win - loss
}

// probaToBayesElo is the inverse of bayesEloToProba.
func probaToBayesElo(win, loss float64) (belo, drawElo float64, err error) {
	if !(0 < win && win < 1 && 0 < loss && loss < 1) {
		return math.NaN(), math.NaN(), errors.New("win and loss probabilities must be in (0, 1)")
	}
	belo = 200 * math.Log10(win/loss*(1-loss)/(1-win))
	drawElo = 200 * math.Log10((1-loss)/loss*(1-win)/win)
	return belo, drawElo, nil
}

// drawEloOf estimates the draw Elo of trinomial [losses, draws, wins] counts (regularized by
// the caller).
func drawEloOf(r []float64) (float64, error) {
	n := r[0] + r[1] + r[2]
	_, drawElo, err := probaToBayesElo(r[2]/n, r[0]/n)
	return drawElo, err
}

// bayesEloToElo converts a BayesElo difference to logistic Elo at the given draw Elo.
func bayesEloToElo(belo, drawElo float64) float64 {
	win, _, draw := bayesEloToProba(belo, drawElo)
	return ScoreToElo(win + 0.5*draw)
}
