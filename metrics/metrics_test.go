package metrics_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/metrics/metricstest"
)

func TestNilMetricsRecordNothing(t *testing.T) {
	var m *metrics.Metrics // what components hold when built without metrics
	m.ObserveHTTPRequest("/healthz", "GET", 200, time.Millisecond)
	m.WatchPool(func() metrics.PoolStats { return metrics.PoolStats{} })
	m.TooBusy()
	m.ObserveCriticalSection(time.Microsecond)
	m.SetFleet(metrics.Fleet{ActiveRuns: 1})
	m.TaskAssigned()
	m.TaskFinished()
	m.TaskReclaimed(metrics.ReasonDead)
	m.ObserveBeatLag(time.Second)
	m.WatchRunCache(func() int { return 1 }, func() int { return 2 })
	m.ObserveFlush(time.Millisecond, errors.New("boom"))
	m.ObserveDBOperation("find", time.Millisecond, true)
}

func TestTwoMetricsOnOneRegistryPanic(t *testing.T) {
	reg := prometheus.NewRegistry()
	metrics.New(reg)
	defer func() {
		if recover() == nil {
			t.Error("a second Metrics on the same registry did not panic")
		}
	}()
	metrics.New(reg)
}

func TestMetricNamesFollowPrometheusConventions(t *testing.T) {
	reg := prometheus.NewRegistry()
	touchAll(metrics.New(reg))
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if !strings.HasPrefix(f.GetName(), "shoal_") {
			t.Errorf("%s: want the shoal_ prefix", f.GetName())
		}
	}
}

func TestHTTPRequestsByRouteMethodAndCode(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.ObserveHTTPRequest("/healthz", "GET", 200, 2*time.Millisecond)
	m.ObserveHTTPRequest("/healthz", "GET", 200, 3*time.Millisecond)
	m.ObserveHTTPRequest("", "GET", 404, time.Millisecond)           // no route matched
	m.ObserveHTTPRequest("/api/beat", "BREW", 405, time.Millisecond) // a made-up method
	want := `
# HELP shoal_http_requests_total HTTP requests answered, by route template ("unmatched" for none), method and status code.
# TYPE shoal_http_requests_total counter
shoal_http_requests_total{code="200",method="GET",route="/healthz"} 2
shoal_http_requests_total{code="404",method="GET",route="unmatched"} 1
shoal_http_requests_total{code="405",method="other",route="/api/beat"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "shoal_http_requests_total"); err != nil {
		t.Error(err)
	}
	if n := metricstest.HistogramCount(t, reg, "shoal_http_request_duration_seconds", "route", "/healthz", "code", "200"); n != 2 {
		t.Errorf("latency observations of GET /healthz 200: %d, want 2", n)
	}
}

func TestTokenPoolIsReadAtScrape(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	names := []string{"shoal_tokenpool_size", "shoal_tokenpool_in_use", "shoal_tokenpool_waiting",
		"shoal_tokenpool_acquired_total", "shoal_tokenpool_waited_total", "shoal_tokenpool_wait_seconds_total",
		"shoal_tokenpool_cancelled_total"}
	for _, n := range names {
		if v := metricstest.Value(t, reg, n); v != 0 {
			t.Errorf("%s before WatchPool = %g, want 0", n, v)
		}
	}
	stats := metrics.PoolStats{Size: 200, InUse: 3, Waiting: 1, Acquired: 10, Waited: 4, Cancelled: 2, WaitTime: 1500 * time.Millisecond}
	m.WatchPool(func() metrics.PoolStats { return stats })
	want := map[string]float64{"shoal_tokenpool_size": 200, "shoal_tokenpool_in_use": 3, "shoal_tokenpool_waiting": 1,
		"shoal_tokenpool_acquired_total": 10, "shoal_tokenpool_waited_total": 4, "shoal_tokenpool_wait_seconds_total": 1.5,
		"shoal_tokenpool_cancelled_total": 2}
	for _, n := range names {
		if v := metricstest.Value(t, reg, n); v != want[n] {
			t.Errorf("%s = %g, want %g", n, v, want[n])
		}
	}
	stats.InUse = 7 // read again at the next scrape
	if v := metricstest.Value(t, reg, "shoal_tokenpool_in_use"); v != 7 {
		t.Errorf("in use after a change = %g, want 7", v)
	}
}

func TestSchedulerMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.TooBusy()
	m.TooBusy()
	for range 3 {
		m.TaskAssigned()
	}
	m.TaskFinished()
	m.TaskReclaimed(metrics.ReasonDead)
	m.TaskReclaimed(metrics.ReasonFailed)
	m.TaskReclaimed(metrics.ReasonFailed)
	m.TaskReclaimed("made up")
	m.SetFleet(metrics.Fleet{UnfinishedRuns: 4, ActiveRuns: 2, Workers: 5, Cores: 40, NPS: 1.5e7})
	want := `
# HELP shoal_scheduler_request_task_too_busy_total request_task calls turned away at once because the request_task semaphore was full.
# TYPE shoal_scheduler_request_task_too_busy_total counter
shoal_scheduler_request_task_too_busy_total 2
# HELP shoal_scheduler_tasks_assigned_total Tasks handed out by request_task.
# TYPE shoal_scheduler_tasks_assigned_total counter
shoal_scheduler_tasks_assigned_total 3
# HELP shoal_scheduler_tasks_finished_total Tasks ended normally: all their games played, or their run finished, stopped or deleted.
# TYPE shoal_scheduler_tasks_finished_total counter
shoal_scheduler_tasks_finished_total 1
# HELP shoal_scheduler_tasks_reclaimed_total Tasks taken back from their worker, by reason: dead (no update or beat in time), stale (its worker took a new task), failed (its worker gave up), invalid (impossible results), purge (marked bad by a purge).
# TYPE shoal_scheduler_tasks_reclaimed_total counter
shoal_scheduler_tasks_reclaimed_total{reason="dead"} 1
shoal_scheduler_tasks_reclaimed_total{reason="failed"} 2
shoal_scheduler_tasks_reclaimed_total{reason="invalid"} 0
shoal_scheduler_tasks_reclaimed_total{reason="other"} 1
shoal_scheduler_tasks_reclaimed_total{reason="purge"} 0
shoal_scheduler_tasks_reclaimed_total{reason="stale"} 0
# HELP shoal_scheduler_active_runs Unfinished runs with at least one active task, at the last nps update.
# TYPE shoal_scheduler_active_runs gauge
shoal_scheduler_active_runs 2
# HELP shoal_scheduler_unfinished_runs Runs in the schedule (not finished), at the last nps update.
# TYPE shoal_scheduler_unfinished_runs gauge
shoal_scheduler_unfinished_runs 4
# HELP shoal_scheduler_active_workers Active tasks, one per working worker, at the last nps update.
# TYPE shoal_scheduler_active_workers gauge
shoal_scheduler_active_workers 5
# HELP shoal_scheduler_active_cores Cores of the workers with an active task, at the last nps update.
# TYPE shoal_scheduler_active_cores gauge
shoal_scheduler_active_cores 40
# HELP shoal_scheduler_nodes_per_second Nodes per second of the workers with an active task, summed, at the last nps update.
# TYPE shoal_scheduler_nodes_per_second gauge
shoal_scheduler_nodes_per_second 1.5e+07
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
		"shoal_scheduler_request_task_too_busy_total", "shoal_scheduler_tasks_assigned_total",
		"shoal_scheduler_tasks_finished_total", "shoal_scheduler_tasks_reclaimed_total",
		"shoal_scheduler_active_runs", "shoal_scheduler_unfinished_runs", "shoal_scheduler_active_workers",
		"shoal_scheduler_active_cores", "shoal_scheduler_nodes_per_second"); err != nil {
		t.Error(err)
	}

	m.ObserveCriticalSection(40 * time.Microsecond)
	m.ObserveBeatLag(90 * time.Second)
	m.ObserveBeatLag(-time.Second) // a clock step back counts as no lag
	want = `
# HELP shoal_scheduler_beat_lag_seconds Time since an active task's last update or beat, at the moment its worker beats.
# TYPE shoal_scheduler_beat_lag_seconds histogram
shoal_scheduler_beat_lag_seconds_bucket{le="1"} 1
shoal_scheduler_beat_lag_seconds_bucket{le="5"} 1
shoal_scheduler_beat_lag_seconds_bucket{le="15"} 1
shoal_scheduler_beat_lag_seconds_bucket{le="30"} 1
shoal_scheduler_beat_lag_seconds_bucket{le="60"} 1
shoal_scheduler_beat_lag_seconds_bucket{le="90"} 2
shoal_scheduler_beat_lag_seconds_bucket{le="120"} 2
shoal_scheduler_beat_lag_seconds_bucket{le="150"} 2
shoal_scheduler_beat_lag_seconds_bucket{le="180"} 2
shoal_scheduler_beat_lag_seconds_bucket{le="240"} 2
shoal_scheduler_beat_lag_seconds_bucket{le="300"} 2
shoal_scheduler_beat_lag_seconds_bucket{le="360"} 2
shoal_scheduler_beat_lag_seconds_bucket{le="600"} 2
shoal_scheduler_beat_lag_seconds_bucket{le="+Inf"} 2
shoal_scheduler_beat_lag_seconds_sum 90
shoal_scheduler_beat_lag_seconds_count 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "shoal_scheduler_beat_lag_seconds"); err != nil {
		t.Error(err)
	}
	if n := metricstest.HistogramCount(t, reg, "shoal_scheduler_critical_section_duration_seconds"); n != 1 {
		t.Errorf("critical sections: %d, want 1", n)
	}
}

func TestRunCacheMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	dirty := 3
	m.WatchRunCache(func() int { return dirty }, func() int { return 10 })
	m.ObserveFlush(time.Millisecond, nil)
	m.ObserveFlush(time.Millisecond, errors.New("write refused"))
	dirty = 1
	if v := metricstest.Value(t, reg, "shoal_runcache_dirty_runs"); v != 1 {
		t.Errorf("dirty runs = %g, want 1", v)
	}
	if v := metricstest.Value(t, reg, "shoal_runcache_cached_runs"); v != 10 {
		t.Errorf("cached runs = %g, want 10", v)
	}
	if n := metricstest.HistogramCount(t, reg, "shoal_runcache_flush_duration_seconds"); n != 2 {
		t.Errorf("flushes: %d, want 2", n)
	}
	if v := metricstest.Value(t, reg, "shoal_runcache_flush_errors_total"); v != 1 {
		t.Errorf("flush errors: %g, want 1", v)
	}
}

func TestDBOperationsByCommand(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.ObserveDBOperation("find", time.Millisecond, false)
	m.ObserveDBOperation("find", time.Millisecond, true)
	m.ObserveDBOperation("update", time.Millisecond, false)
	m.ObserveDBOperation("someNewCommand", time.Millisecond, true)
	for _, c := range []struct {
		command     string
		count, errs float64
	}{{"find", 2, 1}, {"update", 1, 0}, {"other", 1, 1}} {
		if n := metricstest.HistogramCount(t, reg, "shoal_db_operation_duration_seconds", "command", c.command); float64(n) != c.count {
			t.Errorf("%s operations: %d, want %g", c.command, n, c.count)
		}
		if v := metricstest.Value(t, reg, "shoal_db_operation_errors_total", "command", c.command); v != c.errs {
			t.Errorf("%s errors: %g, want %g", c.command, v, c.errs)
		}
	}
	if n := metricstest.HistogramCount(t, reg, "shoal_db_operation_duration_seconds", "command", "someNewCommand"); n != 0 {
		t.Errorf("an unknown command got its own label value")
	}
}

// touchAll calls every method once, so that every metric, vectors included, has a series.
func touchAll(m *metrics.Metrics) {
	m.ObserveHTTPRequest("/healthz", "GET", 200, time.Millisecond)
	m.WatchPool(func() metrics.PoolStats { return metrics.PoolStats{Size: 1} })
	m.TooBusy()
	m.ObserveCriticalSection(time.Microsecond)
	m.SetFleet(metrics.Fleet{})
	m.TaskAssigned()
	m.TaskFinished()
	m.TaskReclaimed(metrics.ReasonDead)
	m.ObserveBeatLag(time.Second)
	m.WatchRunCache(func() int { return 0 }, func() int { return 0 })
	m.ObserveFlush(time.Millisecond, nil)
	m.ObserveDBOperation("find", time.Millisecond, true)
}

// Requests counted at once, on routes, methods and codes seen and not yet seen, each counted
// once, under the race detector: the collectors kept per label values are shared safely.
func TestHTTPRequestsCountedConcurrently(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	routes := []string{"/api/beat", "/api/update_task", "/api/request_task", ""}
	const goroutines, each = 8, 200
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range each {
				code := 200 + (g+i)%3
				m.ObserveHTTPRequest(routes[i%len(routes)], []string{"POST", "GET", "BREW"}[i%3], code, time.Millisecond)
			}
		})
	}
	wg.Wait()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var total, observed float64
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			switch f.GetName() {
			case "shoal_http_requests_total":
				total += mt.GetCounter().GetValue()
			case "shoal_http_request_duration_seconds":
				observed += float64(mt.GetHistogram().GetSampleCount())
			}
		}
	}
	if total != goroutines*each || observed != goroutines*each {
		t.Errorf("counted %v requests and timed %v, want %d", total, observed, goroutines*each)
	}
}

// BenchmarkObserveHTTPRequest is what every request costs the metrics.
func BenchmarkObserveHTTPRequest(b *testing.B) {
	m := metrics.New(prometheus.NewRegistry())
	b.ReportAllocs()
	for b.Loop() {
		m.ObserveHTTPRequest("/api/beat", "POST", 200, time.Millisecond)
	}
}
