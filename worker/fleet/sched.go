package fleet

import (
	"math"
	"runtime/metrics"
	"sync"
	"time"
)

// schedLatencies is the Go runtime's histogram of a process's scheduling latency: how long its
// goroutines waited, once runnable, before they ran. In the fleet's process it is the client's
// side of a tail: a reply that reached the loopback but waited for its worker's goroutine.
const schedLatencies = "/sched/latencies:seconds"

// readSchedLatencies returns this process's scheduling-latency histogram as it stands.
func readSchedLatencies() *metrics.Float64Histogram {
	s := []metrics.Sample{{Name: schedLatencies}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return nil
	}
	return s[0].Value.Float64Histogram()
}

// schedHist is a histogram of scheduling latencies: Counts[i] waits between Buckets[i] and
// Buckets[i+1] seconds (the runtime's buckets, one more bound than counts). Only the counts
// cross a pipe (the bounds include infinities, which JSON lacks): processes of one binary have
// the same bounds, and the receiver takes its own.
type schedHist struct {
	Buckets []float64 `json:"-"`
	Counts  []uint64  `json:"counts"`
}

// between is what until has observed that from had not: two readings of one histogram, whose
// buckets never change. nil when a reading is missing.
func between(from, until *metrics.Float64Histogram) *schedHist {
	if from == nil || until == nil || len(from.Counts) != len(until.Counts) {
		return nil
	}
	h := &schedHist{Buckets: append([]float64(nil), until.Buckets...), Counts: make([]uint64, len(until.Counts))}
	for i := range until.Counts {
		h.Counts[i] = until.Counts[i] - from.Counts[i]
	}
	return h
}

// merge adds o's counts to h, when both have the same buckets (processes of one binary do);
// it returns the sum, which is h, or o when h is nil.
func (h *schedHist) merge(o *schedHist) *schedHist {
	switch {
	case o == nil:
		return h
	case h == nil:
		buckets := o.Buckets
		if buckets == nil { // from a pipe: this binary's
			if own := readSchedLatencies(); own != nil {
				buckets = own.Buckets
			}
		}
		if len(buckets) != len(o.Counts)+1 {
			return nil
		}
		return &schedHist{Buckets: append([]float64(nil), buckets...), Counts: append([]uint64(nil), o.Counts...)}
	case len(h.Counts) != len(o.Counts):
		return h
	}
	for i := range h.Counts {
		h.Counts[i] += o.Counts[i]
	}
	return h
}

// quantile is the upper bound, in seconds, of the bucket holding quantile q. It returns false
// when nothing was observed or the quantile is in the open top bucket.
func (h *schedHist) quantile(q float64) (float64, bool) {
	if h == nil {
		return 0, false
	}
	var total uint64
	for _, n := range h.Counts {
		total += n
	}
	if total == 0 {
		return 0, false
	}
	var seen uint64
	for i, n := range h.Counts {
		seen += n
		if float64(seen) >= q*float64(total) {
			upper := h.Buckets[i+1]
			return upper, !math.IsInf(upper, 1)
		}
	}
	return 0, false
}

// schedWindow takes the process's scheduling latencies over the window: a reading when it
// opens (startAt) and one when the fleet starts to stop (stop). Safe for concurrent use.
type schedWindow struct {
	mu      sync.Mutex
	timer   *time.Timer
	from    *metrics.Float64Histogram
	stopped bool
	window  *schedHist // set by stop
}

// startAt takes the first reading at t.
func (s *schedWindow) startAt(t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.timer = time.AfterFunc(time.Until(t), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.stopped {
			s.from = readSchedLatencies()
		}
	})
}

// stop takes the second reading, if the window opened, and keeps what lies between.
func (s *schedWindow) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.stopped = true
	if s.timer != nil {
		s.timer.Stop()
	}
	if s.from != nil {
		s.window = between(s.from, readSchedLatencies())
	}
}

// result is the window's histogram, nil if it never opened.
func (s *schedWindow) result() *schedHist {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.window
}

// set replaces the window's histogram (a split fleet's merge).
func (s *schedWindow) set(h *schedHist) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped, s.window = true, h
}
