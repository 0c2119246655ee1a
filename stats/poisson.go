package stats

import (
	"math"

	"gonum.org/v1/gonum/mathext"
)

// PoissonTail is the probability that a Poisson count of mean lambda is n or more: the
// one-sided p-value of seeing n events where lambda were expected. It is 1 for n <= 0 and 0 for
// n > 0 with lambda <= 0. Small tails keep their precision (it is the regularized lower
// incomplete gamma function, not one minus a sum).
func PoissonTail(n int, lambda float64) float64 {
	switch {
	case n <= 0:
		return 1
	case lambda <= 0 || math.IsNaN(lambda):
		return 0
	case math.IsInf(lambda, 1):
		return 1
	}
	return mathext.GammaIncReg(float64(n), lambda)
}

// PoissonCritical is the least count n whose PoissonTail(n, lambda) is below p: how many events
// at a mean of lambda are needed before a test at level p rejects. It returns 0 when p > 1.
func PoissonCritical(lambda, p float64) int {
	if p > 1 {
		return 0
	}
	n := 1
	for PoissonTail(n, lambda) >= p {
		n++
	}
	return n
}
