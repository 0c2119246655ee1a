package node

import (
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/tokenpool"
)

// newMetricsRegistry returns the registry of one instance's metrics, with the Go runtime's and
// the process's collectors that the default registry would have, and the runtime's scheduling
// latency (go_sched_latencies_seconds: how long goroutines waited for a CPU once runnable, the
// first sign of a server short of processor). An instance gets its own registry rather than
// the default one because tests start several instances in one process, and metrics.New refuses
// to register twice on one registry.
func newMetricsRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	schedLatency := collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/sched/latencies:seconds$`)}
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(schedLatency)),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// watchTokenPool has m read the token pool's stats at each scrape (Stats takes no lock).
func watchTokenPool(m *metrics.Metrics, p *tokenpool.Pool) {
	m.WatchPool(func() metrics.PoolStats {
		s := p.Stats()
		return metrics.PoolStats{Size: s.Size, InUse: s.InUse, Waiting: s.Waiting, Acquired: s.Acquired,
			Waited: s.Waited, WaitTime: s.WaitTime, Cancelled: s.Cancelled}
	})
}
