package fleet

import (
	"math"
	"math/bits"
	"sync/atomic"
	"time"
)

// The latency histogram is log-linear, as HdrHistogram's: values below 2^subBits nanoseconds
// get a bucket each, and every power-of-two range above is cut into 2^subBits equal buckets, so a
// bucket is never wider than 1/64 of its values (1.6 %). It covers every positive int64.
//
// Why a histogram and not the exact samples: a fleet of thousands of workers records thousands
// of requests a second, from as many goroutines, for as long as a soak test lasts. Exact samples
// grow without bound and need a lock (or a merge) on the hot path; this costs 29 KiB per
// endpoint whatever the run's length, and recording is a handful of atomic adds. A percentile
// that is 1.6 % high at worst is well inside the noise of any latency measurement; the maximum is
// kept exactly.
const (
	subBits  = 6
	subCount = 1 << subBits
	nBuckets = (64 - subBits) * subCount
)

// histogram counts durations. Safe for concurrent use; the zero value is empty and ready.
type histogram struct {
	counts [nBuckets]atomic.Uint64
	n      atomic.Uint64
	sum    atomic.Int64 // nanoseconds
	max    atomic.Int64 // nanoseconds
}

// bucketOf is the bucket of v nanoseconds.
func bucketOf(v uint64) int {
	if v < subCount {
		return int(v)
	}
	shift := bits.Len64(v) - 1 - subBits
	return (shift+1)*subCount + int((v>>shift)&(subCount-1))
}

// bucketHigh is the largest value bucket i holds.
func bucketHigh(i int) uint64 {
	if i < subCount {
		return uint64(i)
	}
	shift := i/subCount - 1
	low := uint64(subCount+i%subCount) << shift
	return low + (uint64(1) << shift) - 1
}

// record adds one duration; negative ones count as zero.
func (h *histogram) record(d time.Duration) {
	v := max(int64(d), 0)
	h.counts[bucketOf(uint64(v))].Add(1)
	h.n.Add(1)
	h.sum.Add(v)
	for m := h.max.Load(); v > m && !h.max.CompareAndSwap(m, v); m = h.max.Load() {
	}
}

// count is the number of recorded durations.
func (h *histogram) count() uint64 { return h.n.Load() }

// quantile returns the q-quantile (0 < q <= 1) as the highest value of the bucket holding the
// ceil(q*n)-th smallest duration, capped at the exact maximum: never below the true quantile,
// and at most 1/64 above it. An empty histogram gives 0. Meant to be called once recording has
// ended; during recording it is a consistent estimate of some recent moment.
func (h *histogram) quantile(q float64) time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(n)))
	rank = min(max(rank, 1), n)
	var seen uint64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return time.Duration(min(bucketHigh(i), uint64(h.max.Load())))
		}
	}
	return time.Duration(h.max.Load())
}

// mean is the average duration, 0 when empty.
func (h *histogram) mean() time.Duration {
	n := h.n.Load()
	if n == 0 {
		return 0
	}
	return time.Duration(h.sum.Load() / int64(n))
}
