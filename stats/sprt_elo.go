package stats

import (
	"errors"
	"fmt"
	"math"
)

// SPRTElo is the Elo estimate of an SPRT: the median-unbiased Elo, its confidence interval, the
// likelihood of superiority, and the LLR with the test's bounds (A, B). Elo and CI are logistic
// Elo whatever the test's model, as in fishtest.
type SPRTElo struct {
	A   float64    `json:"a"`
	B   float64    `json:"b"`
	Elo float64    `json:"elo"`
	CI  [2]float64 `json:"ci"`
	LOS float64    `json:"LOS"`
	LLR float64    `json:"LLR"`
}

// sprtEstimator models the LLR of a finished or running test as a Brownian motion between the
// bounds and inverts the probability of the observed outcome to estimate Elo.
type sprtEstimator struct {
	a, b       float64
	elo0, elo1 float64
	normalized bool
	sigmaPG    float64 // per-game (or per-pair) score deviation, for normalized Elo
	pdf        distribution
	s0, s1     float64
	llr, t     float64
}

func newSPRTEstimator(alpha, beta, elo0, elo1 float64, model string, results []float64) (*sprtEstimator, error) {
	e := &sprtEstimator{
		a: math.Log(beta / (1 - alpha)), b: math.Log((1 - beta) / alpha),
		elo0: elo0, elo1: elo1, normalized: model == ModelNormalized,
	}
	n, d := resultsToPDF(results)
	e.pdf = d
	if e.normalized {
		_, v := meanVar(d)
		switch len(results) {
		case 3:
			e.sigmaPG = math.Pow(v, 0.5)
		case 5:
			e.sigmaPG = math.Pow(2*v, 0.5)
		default:
			return nil, fmt.Errorf("results have %d cells, want 3 or 5", len(results))
		}
	}
	e.s0, e.s1 = e.eloToScore(elo0), e.eloToScore(elo1)
	mu, _ := llrDriftVariance(d, e.s0, e.s1, mean(d))
	e.llr, e.t = n*mu, n
	// An LLR beyond a bound is pulled back onto it, at the time the drift would have reached it.
	slope := e.llr / n
	if e.llr < e.a {
		e.t, e.llr = e.a/slope, e.a
	} else if e.llr > e.b {
		e.t, e.llr = e.b/slope, e.b
	}
	return e, nil
}

func mean(d distribution) float64 { m, _ := meanVar(d); return m }

func (e *sprtEstimator) eloToScore(elo float64) float64 {
	if e.normalized {
		return elo/neloPerNT*e.sigmaPG + 0.5
	}
	return LogisticScore(elo)
}

// outcomeProb is the probability that a test of a patch with logistic Elo elo ends worse than
// the observed one (fails sooner, passes later, or fails instead of passing).
func (e *sprtEstimator) outcomeProb(elo float64) (float64, error) {
	mu, v := llrDriftVariance(e.pdf, e.s0, e.s1, LogisticScore(elo))
	w := brownian{a: e.a, b: e.b, mu: mu, sigma2: math.Pow(math.Sqrt(v), 2)}
	return w.outcomeCDF(e.t, e.llr)
}

// lowerBound returns the largest Elo for which the observed outcome has probability below p.
func (e *sprtEstimator) lowerBound(p float64) (float64, error) {
	return widenedRoot(func(elo float64) (float64, error) {
		prob, err := e.outcomeProb(elo)
		return prob - (1 - p), err
	}, (e.elo0+e.elo1)/2, e.elo1-e.elo0)
}

// maxWidenings caps the doublings of widenedRoot's interval. 64 of them take a pair of bounds
// 2e-18 Elo apart out to ±1000 Elo, so only bounds that have collapsed, or are not numbers,
// run out; without the cap they would search forever.
const maxWidenings = 64

// widenedRoot solves g(elo) = 0 the way fishtest's lower_cb does: in avg ± 30·delta, clipped
// to ±1000 Elo, doubling the width while the interval does not bracket a root. If even ±1000
// does not, it returns the end of that range where g would cross zero.
func widenedRoot(g func(float64) (float64, error), avg, delta float64) (float64, error) {
	var failure error
	f := func(elo float64) float64 {
		v, err := g(elo)
		if err != nil {
			failure = err
			return math.NaN()
		}
		return v
	}
	width := 30.0
	for range maxWidenings {
		lo, hi := math.Max(avg-width*delta, -1000), math.Min(avg+width*delta, 1000)
		sol, err := brentq(f, lo, hi)
		if failure != nil {
			return math.NaN(), failure
		}
		if errors.Is(err, errNoSignChange) {
			if lo > -1000 || hi < 1000 {
				width *= 2
				continue
			}
			atLo := f(lo)
			if failure != nil {
				return math.NaN(), failure
			}
			if atLo > 0 {
				return hi, nil
			}
			return lo, nil
		}
		if err != nil {
			return math.NaN(), err
		}
		return sol, nil
	}
	return math.NaN(), fmt.Errorf("no solution within ±1000 Elo of %g after %d widenings of the interval", avg, maxWidenings)
}

// errBadBounds means a test's bounds do not satisfy elo0 < elo1, which the estimate's interval
// search needs.
var errBadBounds = errors.New("elo1 must be greater than elo0")

// EstimateSPRTElo computes the SPRT Elo estimate of results (fishtest's SPRT_elo) for a test with
// the given error rates and bounds, with a (1-p) confidence interval. Bounds that are not
// ordered, before or after the conversion of BayesElo bounds to logistic Elo (which can make
// them equal), are an error, as are results the estimate cannot be computed for.
func EstimateSPRTElo(r Results, alpha, beta, p, elo0, elo1 float64, model string) (SPRTElo, error) {
	if !(elo1 > elo0) {
		return SPRTElo{}, fmt.Errorf("sprt elo estimate: %w: got elo0 %g, elo1 %g", errBadBounds, elo0, elo1)
	}
	lmodel, lelo0, lelo1, err := logisticBounds(model, elo0, elo1, r)
	if err != nil {
		return SPRTElo{}, err
	}
	if !(lelo1 > lelo0) {
		return SPRTElo{}, fmt.Errorf("sprt elo estimate: %w: %s bounds %g, %g are %g, %g logistic Elo at the results' draw Elo",
			errBadBounds, model, elo0, elo1, lelo0, lelo1)
	}
	// fishtest regularizes the trinomial here; resultsToPDF and the LLR do it anyway.
	results := r.samples()
	e, err := newSPRTEstimator(alpha, beta, lelo0, lelo1, lmodel, results)
	if err != nil {
		return SPRTElo{}, err
	}
	out := SPRTElo{A: e.a, B: e.b}
	steps := []struct {
		dst *float64
		p   float64
	}{{&out.Elo, 0.5}, {&out.CI[0], p / 2}, {&out.CI[1], 1 - p/2}}
	for _, s := range steps {
		if *s.dst, err = e.lowerBound(s.p); err != nil {
			return SPRTElo{}, fmt.Errorf("sprt elo estimate: %w", err)
		}
	}
	if out.LOS, err = e.outcomeProb(0); err != nil {
		return SPRTElo{}, fmt.Errorf("sprt elo estimate: %w", err)
	}
	if out.LLR, err = llr(lmodel, lelo0, lelo1, results); err != nil {
		return SPRTElo{}, fmt.Errorf("sprt elo estimate: %w", err)
	}
	for _, x := range []float64{out.Elo, out.CI[0], out.CI[1], out.LOS, out.LLR} {
		if !isFinite(x) {
			return SPRTElo{}, errors.New("sprt elo estimate is not finite")
		}
	}
	return out, nil
}
