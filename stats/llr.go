package stats

import (
	"fmt"
	"math"
)

// A distribution is a list of outcomes (value a_i, probability p_i), values ascending. Results are
// counts of either [losses, draws, wins] (trinomial) or game pairs [LL, LD+DL, LW+DD+WL, DW+WD,
// WW] by pair score (pentanomial).
type distribution struct {
	a, p []float64
}

// neloPerNT converts a normalized t-value to normalized Elo: 800/ln 10.
var neloPerNT = 800 / math.Ln10

// regularize replaces zero counts by a small prior (1e-3) so that no outcome has probability
// zero and every logarithm below is finite.
func regularize(results []float64) []float64 {
	out := make([]float64, len(results))
	for i, r := range results {
		if r == 0 {
			r = 1e-3
		}
		out[i] = r
	}
	return out
}

// floats converts counts to float64.
func floats(counts []int) []float64 {
	out := make([]float64, len(counts))
	for i, c := range counts {
		out[i] = float64(c)
	}
	return out
}

// resultsToPDF regularizes counts and turns them into the empirical distribution of the score
// (0, 1/2, 1 for games; 0, 1/4, ..., 1 for pairs), returning the total count too.
func resultsToPDF(results []float64) (float64, distribution) {
	r := regularize(results)
	n := 0.0
	for _, x := range r {
		n += x
	}
	count := len(r)
	d := distribution{a: make([]float64, count), p: make([]float64, count)}
	for i, x := range r {
		d.a[i] = float64(i) / float64(count-1)
		d.p[i] = x / n
	}
	return n, d
}

// meanVar returns the mean and variance of d.
func meanVar(d distribution) (float64, float64) {
	s := 0.0
	for i := range d.a {
		s += d.p[i] * d.a[i]
	}
	v := 0.0
	for i := range d.a {
		v += d.p[i] * (d.a[i] - s) * (d.a[i] - s)
	}
	return s, v
}

// secular solves sum_i p_i a_i / (1 + x a_i) = 0 for x, between the poles -1/max(a) and
// -1/min(a). It needs values on both sides of zero.
func secular(a, p []float64) (float64, error) {
	v, w := math.Inf(1), math.Inf(-1)
	for _, x := range a {
		v, w = math.Min(v, x), math.Max(w, x)
	}
	if v*w >= 0 {
		return 0, fmt.Errorf("secular equation requires support straddling zero (min %g, max %g)", v, w)
	}
	const eps = 1e-9
	f := func(x float64) float64 {
		s := 0.0
		for i := range a {
			s += p[i] * a[i] / (1 + x*a[i])
		}
		return s
	}
	x, err := brentq(f, -1/w+eps, -1/v-eps)
	if err != nil {
		return 0, fmt.Errorf("secular equation: %w", err)
	}
	return x, nil
}

// mleExpected is the maximum-likelihood distribution with mean s given the empirical d.
func mleExpected(d distribution, s float64) (distribution, error) {
	shifted := make([]float64, len(d.a))
	for i, a := range d.a {
		shifted[i] = a - s
	}
	x, err := secular(shifted, d.p)
	if err != nil {
		return distribution{}, err
	}
	out := distribution{a: d.a, p: make([]float64, len(d.a))}
	for i := range d.a {
		out.p[i] = d.p[i] / (1 + x*shifted[i])
	}
	if m, _ := meanVar(out); math.Abs(m-s) >= 1e-6 {
		return distribution{}, fmt.Errorf("MLE with mean %g came out with mean %g", s, m)
	}
	return out, nil
}

// mleTValue is the maximum-likelihood distribution with t-value (mu - ref)/sigma = t given the
// empirical d, found by the fixed-point iteration of normalized Elo (at most 10 steps).
func mleTValue(d distribution, ref, t float64) (distribution, error) {
	n := len(d.a)
	cur := distribution{a: d.a, p: make([]float64, n)}
	for i := range cur.p {
		cur.p[i] = 1 / float64(n)
	}
	shifted := make([]float64, n)
	for range 10 {
		mu, v := meanVar(cur)
		sigma := math.Pow(v, 0.5)
		for i, a := range d.a {
			z := (mu - a) / sigma
			shifted[i] = a - ref - t*sigma*(1+z*z)/2
		}
		x, err := secular(shifted, d.p)
		if err != nil {
			return distribution{}, err
		}
		next := distribution{a: d.a, p: make([]float64, n)}
		change := 0.0
		for i := range d.a {
			next.p[i] = d.p[i] / (1 + x*shifted[i])
			change = math.Max(change, math.Abs(cur.p[i]-next.p[i]))
		}
		cur = next
		if change < 1e-9 {
			break
		}
	}
	mu, v := meanVar(cur)
	if math.Abs(t-(mu-ref)/math.Pow(v, 0.5)) >= 1e-5 {
		return distribution{}, fmt.Errorf("MLE with t-value %g did not converge", t)
	}
	return cur, nil
}

// llrPerSample is the generalized log-likelihood ratio divided by the number of samples: the
// mean log ratio of the two constrained MLEs under the empirical distribution.
func llrPerSample(d, pdf0, pdf1 distribution) float64 {
	s := 0.0
	for i := range d.p {
		s += d.p[i] * (math.Log(pdf1.p[i]) - math.Log(pdf0.p[i]))
	}
	return s
}

// LogisticScore is the expected score at a logistic Elo difference.
func LogisticScore(elo float64) float64 { return 1 / (1 + math.Pow(10, -elo/400)) }

// LLRLogistic is the generalized log-likelihood ratio of H1: elo = elo1 against H0: elo = elo0,
// both in logistic Elo, for trinomial or pentanomial results.
func LLRLogistic(elo0, elo1 float64, results []float64) (float64, error) {
	n, d := resultsToPDF(results)
	pdf0, err := mleExpected(d, LogisticScore(elo0))
	if err != nil {
		return 0, err
	}
	pdf1, err := mleExpected(d, LogisticScore(elo1))
	if err != nil {
		return 0, err
	}
	return n * llrPerSample(d, pdf0, pdf1), nil
}

// LLRNormalized is the generalized log-likelihood ratio of H1: nelo = nelo1 against H0: nelo =
// nelo0, both in normalized Elo, for trinomial or pentanomial results.
func LLRNormalized(nelo0, nelo1 float64, results []float64) (float64, error) {
	t0, t1 := nelo0/neloPerNT, nelo1/neloPerNT
	switch len(results) {
	case 3:
	case 5:
		t0, t1 = t0*math.Sqrt2, t1*math.Sqrt2
	default:
		return 0, fmt.Errorf("results have %d cells, want 3 or 5", len(results))
	}
	n, d := resultsToPDF(results)
	pdf0, err := mleTValue(d, 0.5, t0)
	if err != nil {
		return 0, err
	}
	pdf1, err := mleTValue(d, 0.5, t1)
	if err != nil {
		return 0, err
	}
	return n * llrPerSample(d, pdf0, pdf1), nil
}

// LLRNormalizedApprox is the closed-form approximation of LLRNormalized.
func LLRNormalizedApprox(nelo0, nelo1 float64, results []float64) (float64, error) {
	count, d := resultsToPDF(results)
	mu, v := meanVar(d)
	var sigmaPG, games float64
	switch len(results) {
	case 3:
		sigmaPG, games = math.Pow(v, 0.5), count
	case 5:
		sigmaPG, games = math.Pow(2*v, 0.5), 2*count
	default:
		return 0, fmt.Errorf("results have %d cells, want 3 or 5", len(results))
	}
	nt0, nt1 := nelo0/neloPerNT, nelo1/neloPerNT
	nt := (mu - 0.5) / sigmaPG
	return games / 2 * math.Log((1+(nt-nt0)*(nt-nt0))/(1+(nt-nt1)*(nt-nt1))), nil
}

// llrDriftVariance approximates the LLR of a test of s0 against s1 by a Brownian motion and
// returns its drift and variance per sample when the true expected score is s.
func llrDriftVariance(d distribution, s0, s1, s float64) (float64, float64) {
	_, v := meanVar(d)
	return (s - (s0+s1)/2) * (s1 - s0) / v, (s1 - s0) * (s1 - s0) / v
}
