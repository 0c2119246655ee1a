package fleet

import (
	"math"
	"runtime/metrics"
	"testing"
	"time"
)

// The quantile of what two readings of a histogram differ by: observations made before the
// first reading do not count, the answer is the upper bound of the bucket that holds it, and the
// processes of a split fleet add up.
func TestSchedHistBetweenReadingsAndMerged(t *testing.T) {
	buckets := []float64{0, 0.001, 0.01, 0.1, math.Inf(1)}
	from := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{0, 0, 1000, 0}}
	until := &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{98, 1, 1000, 1}}
	h := between(from, until)
	for _, c := range []struct {
		q    float64
		want float64
		ok   bool
	}{{0.5, 0.001, true}, {0.99, 0.01, true}, {1, math.Inf(1), false}} {
		got, ok := h.quantile(c.q)
		if got != c.want || ok != c.ok {
			t.Errorf("q %g: %g %v, want %g %v", c.q, got, ok, c.want, c.ok)
		}
	}
	if _, ok := between(until, until).quantile(0.5); ok {
		t.Error("no observation between the readings: a quantile anyway")
	}
	if between(nil, until) != nil {
		t.Error("a missing reading: a histogram anyway")
	}
	// A second process's 200 waits of 10 to 100 ms move p99 to that bucket.
	other := &schedHist{Buckets: buckets, Counts: []uint64{0, 0, 200, 0}}
	if got, ok := h.merge(other).quantile(0.99); !ok || got != 0.1 {
		t.Errorf("merged p99 %g %v, want 0.1", got, ok)
	}
	if h := readSchedLatencies(); h == nil || len(h.Buckets) != len(h.Counts)+1 {
		t.Errorf("this process's scheduling latencies: %+v", h)
	}
}

// The window's reading waits for the window to open: a fleet that stops before has none.
func TestSchedWindowOpensOnTime(t *testing.T) {
	var early schedWindow
	early.startAt(time.Now().Add(time.Hour))
	early.stop()
	if early.result() != nil {
		t.Error("a window stopped before it opened has a histogram")
	}
	var w schedWindow
	w.startAt(time.Now())
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		opened := w.from != nil
		w.mu.Unlock()
		if opened || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	w.stop()
	if w.result() == nil {
		t.Error("a window that opened and stopped has no histogram")
	}
}
