package bench

import (
	"math"
	"runtime/metrics"
	"testing"
)

// The quantile of what two readings of a histogram differ by: observations made before the
// first reading do not count, and the answer is the upper bound of the bucket that holds it.
func TestHistDeltaQuantile(t *testing.T) {
	buckets := []float64{0, 0.001, 0.01, 0.1, math.Inf(1)}
	from := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{0, 0, 1000, 0}}
	until := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{98, 1, 1000, 1}}
	for _, c := range []struct {
		q    float64
		want float64
		ok   bool
	}{{0.5, 0.001, true}, {0.99, 0.01, true}, {1, math.Inf(1), false}} {
		got, ok := histDeltaQuantile(from, until, c.q)
		if got != c.want || ok != c.ok {
			t.Errorf("q %g: %g %v, want %g %v", c.q, got, ok, c.want, c.ok)
		}
	}
	if _, ok := histDeltaQuantile(until, until, 0.5); ok {
		t.Error("no observation between the readings: a quantile anyway")
	}
	if _, ok := histDeltaQuantile(nil, until, 0.5); ok {
		t.Error("a missing reading: a quantile anyway")
	}
	if h := readSchedLatencies(); h == nil || len(h.Buckets) != len(h.Counts)+1 {
		t.Errorf("this process's scheduling latencies: %+v", h)
	}
}
