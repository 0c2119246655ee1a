package stats

import (
	"fmt"
	"math"
)

// brownian is a Brownian motion with drift mu and volatility sigma, started at 0 and stopped
// when it leaves (a, b): the model of an SPRT's LLR.
type brownian struct {
	a, b, mu, sigma2 float64
}

// u is a primitive of e^(gamma y) sin(n pi y / A), times (2/A) e^(-gamma y).
func u(n, gamma, A, y float64) float64 {
	return (2*A*gamma*math.Sin(math.Pi*n*y/A) - 2*math.Pi*n*math.Cos(math.Pi*n*y/A)) /
		(A*A*gamma*gamma + math.Pi*math.Pi*n*n)
}

// outcomeCDF is the probability that the motion passes to the right of the point (T, y), the
// time axis drawn vertically: the probability of an outcome no better than the one observed. It
// sums the eigenfunction series and falls back to Siegmund's approximation where the series
// would converge slowly.
func (w brownian) outcomeCDF(T, y float64) (float64, error) {
	gamma := w.mu / w.sigma2
	A := w.b - w.a
	var ret float64
	var err error
	if w.sigma2*T/(A*A) < 1e-2 || math.Abs(gamma*A) > 15 {
		ret = w.outcomeCDFSiegmund(T, y)
	} else {
		ret, err = w.outcomeCDFSeries(T, y)
	}
	if err != nil {
		return math.NaN(), err
	}
	if !(-1e-3 <= ret && ret <= 1+1e-3) {
		return math.NaN(), fmt.Errorf("outcome probability %g is not a probability", ret)
	}
	return ret, nil
}

// maxSeriesTerms bounds the eigenfunction series; it converges in far fewer terms wherever it
// is used.
const maxSeriesTerms = 1_000_000

func (w brownian) outcomeCDFSeries(T, y float64) (float64, error) {
	A := w.b - w.a
	x := -w.a
	y -= w.a
	gamma := w.mu / w.sigma2
	lambda := func(n float64) float64 {
		return math.Pow(n*math.Pi/A, 2)*w.sigma2/2 + (w.mu*w.mu/w.sigma2)/2
	}
	lambda1 := lambda(1)
	t0 := math.Exp(-lambda1*T - x*gamma + y*gamma)
	s := 0.0
	for n := 1.0; ; n++ {
		if n > maxSeriesTerms {
			return math.NaN(), fmt.Errorf("outcome series did not converge")
		}
		t1 := math.Exp(-(lambda(n) - lambda1) * T)
		t3 := u(n, gamma, A, y)
		t4 := math.Sin(n * math.Pi * x / A)
		s += t1 * t3 * t4
		if math.Abs(t0*t1*t3) <= 1e-9 {
			break
		}
	}
	var pre float64
	switch {
	case gamma*A > 30: // avoid overflow
		pre = math.Exp(-2 * gamma * x)
	case math.Abs(gamma*A) < 1e-8: // avoid 0/0
		pre = (A - x) / A
	default:
		pre = (1 - math.Exp(2*gamma*(A-x))) / (1 - math.Exp(2*gamma*A))
	}
	return pre + t0*s, nil
}

// outcomeCDFSiegmund is Siegmund's approximation, with the asymptotic expansion of the normal
// tail where the exact product would overflow.
func (w brownian) outcomeCDFSiegmund(T, y float64) float64 {
	denom := math.Sqrt(T * w.sigma2)
	offset := w.mu * T
	gamma := w.mu / w.sigma2
	z := (y - offset) / denom
	za := (-y + offset + 2*w.a) / denom
	zb := (y - offset - 2*w.b) / denom
	tail := func(z, g float64) float64 {
		return -math.Exp(-(z*z)/2+2*g) / math.Sqrt(2*math.Pi) * (1/z - 1/math.Pow(z, 3))
	}
	t1 := phi(z)
	var t2, t3 float64
	if gamma*w.a >= 5 {
		t2 = tail(za, gamma*w.a)
	} else {
		t2 = math.Exp(2*gamma*w.a) * phi(za)
	}
	if gamma*w.b >= 5 {
		t3 = tail(zb, gamma*w.b)
	} else {
		t3 = math.Exp(2*gamma*w.b) * phi(zb)
	}
	return t1 + t2 - t3
}
