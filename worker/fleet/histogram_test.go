package fleet

import (
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestBucketsCoverEveryValueWithinOneSixtyFourth(t *testing.T) {
	values := []uint64{0, 1, 63, 64, 65, 127, 128, 129, 1000, 1 << 20, 1<<20 + 12345, 1<<62 + 1, 1<<63 - 1}
	for range 10000 {
		values = append(values, rand.Uint64N(1<<40))
	}
	for _, v := range values {
		i := bucketOf(v)
		if i < 0 || i >= nBuckets {
			t.Fatalf("bucketOf(%d) = %d, out of range", v, i)
		}
		high := bucketHigh(i)
		low := uint64(0)
		if i > 0 {
			low = bucketHigh(i-1) + 1
		}
		if v < low || v > high {
			t.Fatalf("%d falls in bucket %d, which holds %d to %d", v, i, low, high)
		}
		if float64(high-v) > float64(v)/64 {
			t.Fatalf("%d: bucket top %d is more than 1/64 above it", v, high)
		}
	}
}

func TestQuantilesMatchExactOnesWithinTheBucketError(t *testing.T) {
	var h histogram
	var exact []time.Duration
	var wg sync.WaitGroup
	var mu sync.Mutex
	for g := range 8 { // recording is concurrent, as in a fleet
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 9))
			var mine []time.Duration
			for range 5000 {
				// A long-tailed latency: mostly milliseconds, sometimes a second.
				d := time.Duration(r.ExpFloat64() * float64(2*time.Millisecond))
				if r.IntN(100) == 0 {
					d += time.Second
				}
				h.record(d)
				mine = append(mine, d)
			}
			mu.Lock()
			exact = append(exact, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(exact)
	if h.count() != uint64(len(exact)) {
		t.Fatalf("count %d, want %d", h.count(), len(exact))
	}
	for _, q := range []float64{0.5, 0.95, 0.99, 1} {
		want := exact[int(q*float64(len(exact))+0.999999)-1]
		got := h.quantile(q)
		if got < want || float64(got-want) > float64(want)/64 {
			t.Errorf("quantile %v = %v, exact %v: want at most 1/64 above", q, got, want)
		}
	}
	if h.quantile(1) != exact[len(exact)-1] {
		t.Errorf("max %v, want exactly %v", h.quantile(1), exact[len(exact)-1])
	}
	var sum time.Duration
	for _, d := range exact {
		sum += d
	}
	if h.mean() != sum/time.Duration(len(exact)) {
		t.Errorf("mean %v, want %v", h.mean(), sum/time.Duration(len(exact)))
	}
}

func TestEmptyHistogram(t *testing.T) {
	var h histogram
	if h.quantile(0.5) != 0 || h.mean() != 0 || h.count() != 0 {
		t.Error("an empty histogram should report zeros")
	}
}
