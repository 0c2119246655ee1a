package stats

import (
	"errors"
	"math"
)

// errNoSignChange means a root finder was given an interval whose ends have the same sign.
var errNoSignChange = errors.New("f(a) and f(b) must have different signs")

// errNoConvergence means a root finder ran out of iterations.
var errNoConvergence = errors.New("root finding did not converge")

// Root-finding tolerances: scipy.optimize.brentq's defaults, so that roots agree with fishtest's
// to the last few digits.
const (
	brentXTol    = 2e-12
	brentRTol    = 4 * 2.220446049250313e-16
	brentMaxIter = 100
)

// brentq finds a root of f in [a, b], where f(a) and f(b) have opposite signs, by Brent's method
// (inverse quadratic interpolation guarded by bisection). It follows the classic formulation
// that scipy uses, step for step, so both stop at the same point.
func brentq(f func(float64) float64, a, b float64) (float64, error) {
	xpre, xcur := a, b
	fpre, fcur := f(xpre), f(xcur)
	var xblk, fblk, spre, scur float64
	if fpre == 0 {
		return xpre, nil
	}
	if fcur == 0 {
		return xcur, nil
	}
	if math.IsNaN(fpre) || math.IsNaN(fcur) {
		return math.NaN(), errors.New("f is NaN at an end of the interval")
	}
	if math.Signbit(fpre) == math.Signbit(fcur) {
		return math.NaN(), errNoSignChange
	}
	for range brentMaxIter {
		if fpre != 0 && fcur != 0 && math.Signbit(fpre) != math.Signbit(fcur) {
			xblk, fblk = xpre, fpre
			spre = xcur - xpre
			scur = spre
		}
		if math.Abs(fblk) < math.Abs(fcur) {
			xpre, xcur, xblk = xcur, xblk, xcur
			fpre, fcur, fblk = fcur, fblk, fcur
		}
		delta := (brentXTol + brentRTol*math.Abs(xcur)) / 2
		sbis := (xblk - xcur) / 2
		if fcur == 0 || math.Abs(sbis) < delta {
			return xcur, nil
		}
		if math.Abs(spre) > delta && math.Abs(fcur) < math.Abs(fpre) {
			var stry float64
			if xpre == xblk {
				stry = -fcur * (xcur - xpre) / (fcur - fpre) // secant
			} else {
				dpre := (fpre - fcur) / (xpre - xcur)
				dblk := (fblk - fcur) / (xblk - xcur)
				stry = -fcur * (fblk*dblk - fpre*dpre) / (dblk * dpre * (fblk - fpre)) // inverse quadratic
			}
			if 2*math.Abs(stry) < math.Min(math.Abs(spre), 3*math.Abs(sbis)-delta) {
				spre, scur = scur, stry
			} else {
				spre, scur = sbis, sbis
			}
		} else {
			spre, scur = sbis, sbis
		}
		xpre, fpre = xcur, fcur
		if math.Abs(scur) > delta {
			xcur += scur
		} else if sbis > 0 {
			xcur += delta
		} else {
			xcur -= delta
		}
		fcur = f(xcur)
		if math.IsNaN(fcur) {
			return math.NaN(), errors.New("f is NaN inside the interval")
		}
	}
	return xcur, errNoConvergence
}
