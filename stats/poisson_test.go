package stats

import (
	"math"
	"testing"
)

func TestPoissonTail(t *testing.T) {
	tests := []struct {
		name   string
		n      int
		lambda float64
		want   float64
	}{
		{"nothing seen is certain", 0, 3, 1},
		{"no mean, one event is impossible", 1, 0, 0},
		// 1 - e^-1: at least one event at a mean of one.
		{"at least one at mean one", 1, 1, 1 - math.Exp(-1)},
		// 1 - e^-2 (1 + 2 + 2): at least three at a mean of two.
		{"at least three at mean two", 3, 2, 1 - 5*math.Exp(-2)},
		// e^-0.2 * sum_{k>=10} 0.2^k/k!: the first term, 0.2^10/10! e^-0.2 = 2.3104e-14, and the
		// next ones add 1.85%: a tail far below what one minus a sum could resolve.
		{"ten at a mean of a fifth", 10, 0.2, 2.3531e-14},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := PoissonTail(tc.n, tc.lambda)
			if math.Abs(got-tc.want) > 1e-4*tc.want+1e-15 {
				t.Errorf("PoissonTail(%d, %v) = %.6g, want %.6g", tc.n, tc.lambda, got, tc.want)
			}
		})
	}
}

func TestPoissonCritical(t *testing.T) {
	// At a mean of 0.2: P(X >= 6) = 7.5e-8, P(X >= 7) = 2.1e-9, P(X >= 8) = 5.3e-11.
	if got := PoissonCritical(0.2, 1e-9); got != 8 {
		t.Errorf("PoissonCritical(0.2, 1e-9) = %d, want 8", got)
	}
	if got := PoissonCritical(0.2, 1e-7); got != 6 {
		t.Errorf("PoissonCritical(0.2, 1e-7) = %d, want 6", got)
	}
}
