package quarantine

import (
	"strconv"
	"testing"
	"time"
)

// BenchmarkGamesFleet is Games for a fleet of more machines than the record holds, each
// reporting in turn, as update_task calls it: the record forgets an eighth of its machines
// every MaxMachines/8 new ones. Besides the mean, it reports the mean of the calls that
// forget: update_task holds a run's lock across the call, so request_task waits on it.
func BenchmarkGamesFleet(b *testing.B) {
	r := New(DefaultSettings())
	const fleet = 100_000
	names := make([]string, fleet)
	for i := range names {
		names[i] = "machine-" + strconv.Itoa(i)
	}
	runs := make([]string, 50)
	for i := range runs {
		runs[i] = "run" + strconv.Itoa(i)
	}
	var forgetting time.Duration
	forgets, i, held := 0, 0, 0
	for b.Loop() {
		start := time.Now()
		r.Games(names[i%fleet], runs[i%len(runs)], 16, 0, 0)
		d := time.Since(start)
		if n, _ := r.Size(); n < held {
			forgetting += d
			forgets++
			held = n
		} else {
			held = n
		}
		i++
	}
	if forgets > 0 {
		b.ReportMetric(float64(forgetting.Microseconds())/float64(forgets), "µs/forget")
	}
}
