package bench

import (
	"math"
	"runtime/metrics"
)

// schedLatencies is the Go runtime's histogram of this process's scheduling latency: how long
// goroutines waited, once runnable, before they ran. In the bench process it is the fleet's
// side of a tail: a reply that reached the loopback but waited for the worker's goroutine.
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

// histDeltaQuantile is the upper bound of the bucket holding quantile q of the observations
// until has and from had not (two readings of one histogram; the buckets never change). It
// returns false when nothing was observed between them or the quantile is in the open top
// bucket.
func histDeltaQuantile(from, until *metrics.Float64Histogram, q float64) (float64, bool) {
	if from == nil || until == nil || len(from.Counts) != len(until.Counts) {
		return 0, false
	}
	var total uint64
	for i := range until.Counts {
		total += until.Counts[i] - from.Counts[i]
	}
	if total == 0 {
		return 0, false
	}
	var seen uint64
	for i := range until.Counts {
		seen += until.Counts[i] - from.Counts[i]
		if float64(seen) >= q*float64(total) {
			upper := until.Buckets[i+1] // Buckets has one more entry than Counts
			return upper, !math.IsInf(upper, 1)
		}
	}
	return 0, false
}
