package node

import (
	"context"
	"testing"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/metrics/metricstest"
	"github.com/shoal-chess/shoal/tokenpool"
)

func TestMetricsRegistryWatchesTheTokenPool(t *testing.T) {
	reg := newMetricsRegistry()
	m := metrics.New(reg)
	pool := tokenpool.New(3)
	watchTokenPool(m, pool)
	if err := pool.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"shoal_tokenpool_size": 3, "shoal_tokenpool_in_use": 1, "shoal_tokenpool_acquired_total": 1}
	for name, v := range want {
		if got := metricstest.Value(t, reg, name); got != v {
			t.Errorf("%s = %g, want %g", name, got, v)
		}
	}
	pool.Release()
	if got := metricstest.Value(t, reg, "shoal_tokenpool_in_use"); got != 0 {
		t.Errorf("in use after the release = %g, want 0", got)
	}
	// The registry carries the runtime's metrics too, as the default registry would.
	if got := metricstest.Value(t, reg, "go_goroutines"); got < 1 {
		t.Errorf("go_goroutines = %g", got)
	}
	// And how long goroutines waited for a CPU, which the bench reads to tell the server's
	// share of a tail from the fleet's: every goroutine that ran counts once at least.
	if got := metricstest.HistogramCount(t, reg, "go_sched_latencies_seconds"); got < 1 {
		t.Errorf("go_sched_latencies_seconds count = %d, want at least 1", got)
	}
}
