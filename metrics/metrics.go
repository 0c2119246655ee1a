// Package metrics holds Shoal's Prometheus metrics: one Metrics value with every collector,
// registered on the registry its constructor is given, and one method per thing worth counting.
// The components (server, scheduler, rundb) call those methods; configs/grafana-dashboard.json
// shows the result.
//
// Every method is safe for concurrent use and does nothing on a nil *Metrics, so a component
// built without metrics (most tests) needs no checks. Label values are bounded: HTTP routes are
// route templates, methods and database commands outside a fixed set become "other", and task
// reclaim reasons are a fixed set.
package metrics

import (
	"maps"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Buckets, in seconds, for the different kinds of durations.
var (
	// httpBuckets span a beat's 25 ms target up to a slow page.
	httpBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	// criticalBuckets span request_task's 100 µs target up to a stalled run lock.
	criticalBuckets = []float64{.00001, .000025, .00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1}
	// dbBuckets are for single database commands and run writes.
	dbBuckets = []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	// beatLagBuckets cover a heartbeat period (120 s by default) up to the dead-task timeout
	// (360 s) and beyond.
	beatLagBuckets = []float64{1, 5, 15, 30, 60, 90, 120, 150, 180, 240, 300, 360, 600}
)

// Reasons a task is reclaimed, the values of shoal_scheduler_tasks_reclaimed_total's reason
// label.
const (
	ReasonDead    = "dead"    // no update or beat for the dead-task timeout (the scavenger)
	ReasonStale   = "stale"   // its worker asked for a new task while still holding it
	ReasonFailed  = "failed"  // its worker gave up on it (failed_task, or an unauthorised stop_run)
	ReasonInvalid = "invalid" // its worker reported results the task cannot have
	ReasonPurge   = "purge"   // a purge marked it bad and took its games out of the run
)

var reclaimReasons = []string{ReasonDead, ReasonStale, ReasonFailed, ReasonInvalid, ReasonPurge}

// dbCommands are the database commands kept as label values; any other is "other".
var dbCommands = map[string]bool{
	"find": true, "insert": true, "update": true, "delete": true, "findAndModify": true,
	"aggregate": true, "count": true, "distinct": true, "getMore": true, "killCursors": true,
	"createIndexes": true, "listIndexes": true, "dropIndexes": true, "listCollections": true,
	"create": true, "drop": true, "dropDatabase": true, "ping": true, "buildInfo": true,
	"hello": true, "endSessions": true,
}

// PoolStats is what the token pool reports at each scrape (tokenpool.Stats, field by field).
type PoolStats struct {
	Size, InUse, Waiting        int
	Acquired, Waited, Cancelled uint64
	WaitTime                    time.Duration
}

// Fleet is the scheduler's periodic count of the work in progress.
type Fleet struct {
	UnfinishedRuns int     // runs in the schedule
	ActiveRuns     int     // unfinished runs with at least one active task
	Workers        int     // active tasks
	Cores          int     // cores of the active tasks' workers
	NPS            float64 // nodes per second of the active tasks' workers, summed
}

// Metrics holds every Shoal collector. The zero value is not usable; a nil *Metrics is, and
// records nothing.
type Metrics struct {
	httpRequests *prometheus.CounterVec
	httpDuration *prometheus.HistogramVec
	// httpSeen holds the two collectors of each route, method and code seen so far
	// (httpObserversOf), a map never changed once stored: a request reads it without a lock.
	// httpMu serialises the copies that add to it.
	httpSeen atomic.Pointer[map[httpKey]httpObservers]
	httpMu   sync.Mutex

	pool atomic.Pointer[func() PoolStats]

	slowChecks atomic.Pointer[func() int64]

	tooBusy        prometheus.Counter
	quarantined    prometheus.Counter
	critical       prometheus.Histogram
	unfinishedRuns prometheus.Gauge
	activeRuns     prometheus.Gauge
	workers        prometheus.Gauge
	cores          prometheus.Gauge
	nps            prometheus.Gauge
	assigned       prometheus.Counter
	finished       prometheus.Counter
	reclaimed      *prometheus.CounterVec
	beatLag        prometheus.Histogram

	runCache      atomic.Pointer[runCacheFuncs]
	flushDuration prometheus.Histogram
	flushErrors   prometheus.Counter

	journal         atomic.Pointer[func() (records, queued int)]
	journalWrite    prometheus.Histogram
	journalBatch    prometheus.Histogram
	journalWait     prometheus.Histogram
	journalErrors   prometheus.Counter
	journalReplay   prometheus.Gauge
	journalReplayed prometheus.Gauge
	leaseEpoch      prometheus.Gauge
	leaseAge        atomic.Pointer[func() time.Duration]
	primary         prometheus.Gauge

	dbDuration *prometheus.HistogramVec
	dbErrors   *prometheus.CounterVec

	connsOpen    prometheus.Gauge
	connsRefused *prometheus.CounterVec

	notifications *prometheus.CounterVec
}

type runCacheFuncs struct{ dirty, cached func() int }

// New creates every collector and registers it on reg. It panics if one is already registered
// there (two Metrics on one registry is a wiring mistake): give each instance its own
// registry.
func New(reg prometheus.Registerer) *Metrics {
	m := &Metrics{}
	for _, area := range []func() []prometheus.Collector{
		m.httpCollectors, m.poolCollectors, m.schedulerCollectors, m.runCacheCollectors,
		m.journalCollectors, m.dbCollectors, m.notifyCollectors,
	} {
		reg.MustRegister(area()...)
	}
	return m
}

// gauge is a plain gauge; most of Shoal's are set at a period.
func gauge(name, help string) prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
}

// httpCollectors are the requests and the connections of the HTTP server.
func (m *Metrics) httpCollectors() []prometheus.Collector {
	httpLabels := []string{"route", "method", "code"}
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_http_requests_total",
		Help: "HTTP requests answered, by route template (\"unmatched\" for none), method and status code.",
	}, httpLabels)
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "shoal_http_request_duration_seconds",
		Help:    "Time from a request's arrival to its answer, by route template, method and status code.",
		Buckets: httpBuckets,
	}, httpLabels)
	m.connsOpen = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "shoal_http_connections_open",
		Help: "Client connections open now on the main listener.",
	})
	m.connsRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_http_connections_refused_total",
		Help: "Client connections closed as soon as accepted, by the limit they met: per_address or total.",
	}, []string{"limit"})
	for _, l := range []string{"per_address", "total"} {
		m.connsRefused.WithLabelValues(l)
	}
	return []prometheus.Collector{m.httpRequests, m.httpDuration, m.connsOpen, m.connsRefused}
}

// poolCollectors read the token pool's statistics at each scrape (SetTokenPool).
func (m *Metrics) poolCollectors() []prometheus.Collector {
	poolStats := func() PoolStats {
		if f := m.pool.Load(); f != nil {
			return (*f)()
		}
		return PoolStats{}
	}
	poolGauge := func(name, help string, v func(PoolStats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help},
			func() float64 { return v(poolStats()) })
	}
	poolCounter := func(name, help string, v func(PoolStats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return v(poolStats()) })
	}
	return []prometheus.Collector{
		poolGauge("shoal_tokenpool_size", "Tokens in the token pool that bounds blocking database work.",
			func(s PoolStats) float64 { return float64(s.Size) }),
		poolGauge("shoal_tokenpool_in_use", "Tokens held now.",
			func(s PoolStats) float64 { return float64(s.InUse) }),
		poolGauge("shoal_tokenpool_waiting", "Callers waiting for a token now.",
			func(s PoolStats) float64 { return float64(s.Waiting) }),
		poolCounter("shoal_tokenpool_acquired_total", "Tokens handed out.",
			func(s PoolStats) float64 { return float64(s.Acquired) }),
		poolCounter("shoal_tokenpool_waited_total", "Tokens handed out only after a wait.",
			func(s PoolStats) float64 { return float64(s.Waited) }),
		poolCounter("shoal_tokenpool_wait_seconds_total", "Time spent waiting for a token, by callers that got one or gave up.",
			func(s PoolStats) float64 { return s.WaitTime.Seconds() }),
		poolCounter("shoal_tokenpool_cancelled_total", "Callers that gave up waiting for a token (their request ended).",
			func(s PoolStats) float64 { return float64(s.Cancelled) }),
	}
}

// schedulerCollectors are request_task's, the fleet's and the tasks'.
func (m *Metrics) schedulerCollectors() []prometheus.Collector {
	m.tooBusy = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shoal_scheduler_request_task_too_busy_total",
		Help: "request_task calls turned away at once because the request_task semaphore was full.",
	})
	m.critical = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "shoal_scheduler_critical_section_duration_seconds",
		Help:    "Time request_task holds the scheduling lock: choosing a run and creating its task.",
		Buckets: criticalBuckets,
	})
	m.unfinishedRuns = gauge("shoal_scheduler_unfinished_runs", "Runs in the schedule (not finished), at the last nps update.")
	m.activeRuns = gauge("shoal_scheduler_active_runs", "Unfinished runs with at least one active task, at the last nps update.")
	m.workers = gauge("shoal_scheduler_active_workers", "Active tasks, one per working worker, at the last nps update.")
	m.cores = gauge("shoal_scheduler_active_cores", "Cores of the workers with an active task, at the last nps update.")
	m.nps = gauge("shoal_scheduler_nodes_per_second", "Nodes per second of the workers with an active task, summed, at the last nps update.")
	m.assigned = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shoal_scheduler_tasks_assigned_total",
		Help: "Tasks handed out by request_task.",
	})
	m.finished = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shoal_scheduler_tasks_finished_total",
		Help: "Tasks ended normally: all their games played, or their run finished, stopped or deleted.",
	})
	m.reclaimed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_scheduler_tasks_reclaimed_total",
		Help: "Tasks taken back from their worker, by reason: dead (no update or beat in time), stale (its worker took a new task), failed (its worker gave up), invalid (impossible results), purge (marked bad by a purge).",
	}, []string{"reason"})
	for _, r := range reclaimReasons {
		m.reclaimed.WithLabelValues(r) // every reason is exported from the start, at 0
	}
	m.beatLag = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "shoal_scheduler_beat_lag_seconds",
		Help:    "Time since an active task's last update or beat, at the moment its worker beats.",
		Buckets: beatLagBuckets,
	})
	m.quarantined = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shoal_scheduler_workers_quarantined_total",
		Help: "Worker machines quarantined by the rule: their time losses, crashes or failed tasks far above the fleet's on the same runs.",
	})
	return []prometheus.Collector{m.tooBusy, m.critical, m.unfinishedRuns, m.activeRuns, m.workers, m.cores,
		m.nps, m.assigned, m.finished, m.reclaimed, m.beatLag, m.quarantined}
}

// runCacheCollectors are the run cache's size and its writes.
func (m *Metrics) runCacheCollectors() []prometheus.Collector {
	runCache := func(dirty bool) func() float64 {
		return func() float64 {
			f := m.runCache.Load()
			switch {
			case f == nil:
				return 0
			case dirty:
				return float64(f.dirty())
			}
			return float64(f.cached())
		}
	}
	m.flushDuration = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "shoal_runcache_flush_duration_seconds",
		Help:    "Time to encode and write one changed run to the database.",
		Buckets: dbBuckets,
	})
	m.flushErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shoal_runcache_flush_errors_total",
		Help: "Run writes that failed (the run stays dirty and is written again later).",
	})
	return []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shoal_runcache_dirty_runs",
			Help: "Runs changed in memory and not yet written to the database.",
		}, runCache(true)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shoal_runcache_cached_runs",
			Help: "Runs held in the run cache.",
		}, runCache(false)),
		m.flushDuration, m.flushErrors,
	}
}

// journalCollectors are the journal's, the lease's and the instance's role.
func (m *Metrics) journalCollectors() []prometheus.Collector {
	m.journalWrite = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "shoal_journal_write_duration_seconds",
		Help:    "Time to write one batch of journal records and check the lease; the acknowledged requests of the batch wait for it.",
		Buckets: dbBuckets,
	})
	m.journalWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "shoal_journal_wait_seconds",
		Help:    "Time from a record's queueing to its batch being stored: what an acknowledged request waits for the journal.",
		Buckets: dbBuckets,
	})
	m.journalBatch = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "shoal_journal_batch_records",
		Help:    "Records written together in one journal batch (group commit).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 12),
	})
	m.journalErrors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "shoal_journal_write_errors_total",
		Help: "Journal batches that failed or were fenced (their requests got an error, not an acknowledgement).",
	})
	m.journalReplay = gauge("shoal_journal_replay_seconds", "Time the last start took to apply the journal to the runs.")
	m.journalReplayed = gauge("shoal_journal_replayed_records", "Journal records the last start applied to the runs.")
	m.leaseEpoch = gauge("shoal_lease_epoch", "The epoch of the primary's lease this instance holds (0: it holds none). Each takeover adds one.")
	m.primary = gauge("shoal_instance_primary", "1 while this instance is the primary (holds the lease and schedules), 0 as a standby or secondary.")
	journalDepth := func(queued bool) func() float64 {
		return func() float64 {
			f := m.journal.Load()
			if f == nil {
				return 0
			}
			records, q := (*f)()
			if queued {
				return float64(q)
			}
			return float64(records)
		}
	}
	return []prometheus.Collector{
		m.journalWrite, m.journalWait, m.journalBatch, m.journalErrors, m.journalReplay, m.journalReplayed,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shoal_journal_records",
			Help: "Journal records not yet dropped: those whose runs' documents do not cover them yet, and the rest of their segments.",
		}, journalDepth(false)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shoal_journal_queued_records",
			Help: "Journal records waiting for the next batch.",
		}, journalDepth(true)),
		m.leaseEpoch, m.primary,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "shoal_lease_age_seconds",
			Help: "Time since this primary last renewed its lease (a standby takes it over once this passes the lease's time to live).",
		}, func() float64 {
			if f := m.leaseAge.Load(); f != nil {
				return (*f)().Seconds()
			}
			return 0
		}),
	}
}

// dbCollectors are the database commands' and the password checks'.
func (m *Metrics) dbCollectors() []prometheus.Collector {
	m.dbDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "shoal_db_operation_duration_seconds",
		Help:    "Time of each database command, successful or not, by command name.",
		Buckets: dbBuckets,
	}, []string{"command"})
	m.dbErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_db_operation_errors_total",
		Help: "Database commands that failed (network errors, timeouts, server errors; not a missing document), by command name.",
	}, []string{"command"})
	return []prometheus.Collector{
		m.dbDuration, m.dbErrors,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "shoal_password_checks_slow_total",
			Help: "Password checks that missed the credential cache and paid for a bcrypt comparison (logins, signups and worker API calls); a steep rise is a guessing attack or a cold cache.",
		}, func() float64 {
			if f := m.slowChecks.Load(); f != nil {
				return float64((*f)())
			}
			return 0
		}),
	}
}

// ObserveHTTPRequest records one answered request. route is the route template ("" for a
// request no route matched).
func (m *Metrics) ObserveHTTPRequest(route, method string, code int, d time.Duration) {
	if m == nil {
		return
	}
	if route == "" {
		route = "unmatched"
	}
	o := m.httpObserversOf(httpKey{route: route, method: httpMethod(method), code: code})
	o.requests.Inc()
	o.duration.Observe(d.Seconds())
}

// httpMethod is method as a label value: one of the usual methods, or "other".
func httpMethod(method string) string {
	switch method {
	case "GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS":
		return method
	}
	return "other"
}

// httpKey is the label values of an answered request.
type httpKey struct {
	route, method string
	code          int
}

// httpObservers are the collectors of one httpKey.
type httpObservers struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// httpObserversOf returns k's collectors. Every request asks for them: WithLabelValues would
// hash the three label values into each vector's index and format the code every time, so
// each route, method and code's are looked up once and kept in httpSeen. There are few (the
// labels are bounded), so adding one copies the map.
func (m *Metrics) httpObserversOf(k httpKey) httpObservers {
	if seen := m.httpSeen.Load(); seen != nil {
		if o, ok := (*seen)[k]; ok {
			return o
		}
	}
	m.httpMu.Lock()
	defer m.httpMu.Unlock()
	old := m.httpSeen.Load()
	if old != nil {
		if o, ok := (*old)[k]; ok { // another request added it meanwhile
			return o
		}
	}
	c := strconv.Itoa(k.code)
	o := httpObservers{
		requests: m.httpRequests.WithLabelValues(k.route, k.method, c),
		duration: m.httpDuration.WithLabelValues(k.route, k.method, c),
	}
	next := map[httpKey]httpObservers{}
	if old != nil {
		next = maps.Clone(*old)
	}
	next[k] = o
	m.httpSeen.Store(&next)
	return o
}

// ConnectionOpened counts a client connection in.
func (m *Metrics) ConnectionOpened() {
	if m == nil {
		return
	}
	m.connsOpen.Inc()
}

// ConnectionClosed counts a client connection out.
func (m *Metrics) ConnectionClosed() {
	if m == nil {
		return
	}
	m.connsOpen.Dec()
}

// ConnectionRefused counts a connection closed at once because it met limit ("per_address" or
// "total").
func (m *Metrics) ConnectionRefused(limit string) {
	if m == nil {
		return
	}
	m.connsRefused.WithLabelValues(limit).Inc()
}

// WatchPool makes the token-pool metrics read stats at each scrape; stats must be cheap and
// must not block. A later call replaces the earlier one.
func (m *Metrics) WatchPool(stats func() PoolStats) {
	if m == nil || stats == nil {
		return
	}
	m.pool.Store(&stats)
}

// WatchPasswordChecks makes the slow-password-check counter read n at each scrape; n must be
// cheap and must not block. A later call replaces the earlier one.
func (m *Metrics) WatchPasswordChecks(n func() int64) {
	if m == nil || n == nil {
		return
	}
	m.slowChecks.Store(&n)
}

// TooBusy counts one request_task turned away by the full semaphore.
func (m *Metrics) TooBusy() {
	if m == nil {
		return
	}
	m.tooBusy.Inc()
}

// Quarantined counts one worker machine quarantined.
func (m *Metrics) Quarantined() {
	if m == nil {
		return
	}
	m.quarantined.Inc()
}

// ObserveCriticalSection records how long request_task held the scheduling lock.
func (m *Metrics) ObserveCriticalSection(d time.Duration) {
	if m == nil {
		return
	}
	m.critical.Observe(d.Seconds())
}

// SetFleet records the work in progress.
func (m *Metrics) SetFleet(f Fleet) {
	if m == nil {
		return
	}
	m.unfinishedRuns.Set(float64(f.UnfinishedRuns))
	m.activeRuns.Set(float64(f.ActiveRuns))
	m.workers.Set(float64(f.Workers))
	m.cores.Set(float64(f.Cores))
	m.nps.Set(f.NPS)
}

// TaskAssigned counts a task handed out.
func (m *Metrics) TaskAssigned() {
	if m == nil {
		return
	}
	m.assigned.Inc()
}

// TaskFinished counts a task that ended normally.
func (m *Metrics) TaskFinished() {
	if m == nil {
		return
	}
	m.finished.Inc()
}

// TaskReclaimed counts a task taken back for reason, one of the Reason constants (any other
// counts as "other").
func (m *Metrics) TaskReclaimed(reason string) {
	if m == nil {
		return
	}
	known := false
	for _, r := range reclaimReasons {
		known = known || r == reason
	}
	if !known {
		reason = "other"
	}
	m.reclaimed.WithLabelValues(reason).Inc()
}

// ObserveBeatLag records the time since a task's last update or beat, as its worker beats.
func (m *Metrics) ObserveBeatLag(d time.Duration) {
	if m == nil {
		return
	}
	m.beatLag.Observe(max(d, 0).Seconds())
}

// WatchRunCache makes the run-cache gauges read dirty (runs waiting to be written) and cached
// (runs held) at each scrape. A later call replaces the earlier one.
func (m *Metrics) WatchRunCache(dirty, cached func() int) {
	if m == nil || dirty == nil || cached == nil {
		return
	}
	m.runCache.Store(&runCacheFuncs{dirty: dirty, cached: cached})
}

// ObserveFlush records one write of a run from the cache, failed if err is not nil.
func (m *Metrics) ObserveFlush(d time.Duration, err error) {
	if m == nil {
		return
	}
	m.flushDuration.Observe(d.Seconds())
	if err != nil {
		m.flushErrors.Inc()
	}
}

// ObserveJournalWrite records one journal batch of n records, failed or fenced if err is not nil.
func (m *Metrics) ObserveJournalWrite(d time.Duration, n int, err error) {
	if m == nil {
		return
	}
	m.journalWrite.Observe(d.Seconds())
	m.journalBatch.Observe(float64(n))
	if err != nil {
		m.journalErrors.Inc()
	}
}

// ObserveJournalWait records how long one record waited, from its queueing to its batch's end.
func (m *Metrics) ObserveJournalWait(d time.Duration) {
	if m == nil {
		return
	}
	m.journalWait.Observe(d.Seconds())
}

// SetJournalReplay records how long the start took to apply the journal, and how many records.
func (m *Metrics) SetJournalReplay(d time.Duration, records int) {
	if m == nil {
		return
	}
	m.journalReplay.Set(d.Seconds())
	m.journalReplayed.Set(float64(records))
}

// WatchJournal makes the journal gauges read depth at each scrape.
func (m *Metrics) WatchJournal(depth func() (records, queued int)) {
	if m == nil || depth == nil {
		return
	}
	m.journal.Store(&depth)
}

// WatchLease records the epoch of the lease this instance now holds, and makes the lease-age
// gauge read age at each scrape.
func (m *Metrics) WatchLease(epoch int64, age func() time.Duration) {
	if m == nil {
		return
	}
	m.leaseEpoch.Set(float64(epoch))
	if age != nil {
		m.leaseAge.Store(&age)
	}
}

// SetPrimary records whether this instance is the primary now; when it is not, it holds no lease.
func (m *Metrics) SetPrimary(primary bool) {
	if m == nil {
		return
	}
	if primary {
		m.primary.Set(1)
		return
	}
	m.primary.Set(0)
	m.leaseEpoch.Set(0)
	m.leaseAge.Store(nil)
}

// ObserveDBOperation records one database command (the driver's name for it: "find",
// "update", ...), failed or not.
func (m *Metrics) ObserveDBOperation(command string, d time.Duration, failed bool) {
	if m == nil {
		return
	}
	if !dbCommands[command] {
		command = "other"
	}
	m.dbDuration.WithLabelValues(command).Observe(d.Seconds())
	if failed {
		m.dbErrors.WithLabelValues(command).Inc()
	}
}

// The channels and outcomes of shoal_notifications_total's labels.
var (
	notifyChannels = []string{"webhook", "email"}
	notifyResults  = []string{"sent", "retry", "failed"}
)

// notifyCollectors are the notifications' deliveries.
func (m *Metrics) notifyCollectors() []prometheus.Collector {
	m.notifications = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "shoal_notifications_total",
		Help: "Attempts at delivering a notification, by channel (webhook, email) and result: sent, retry (failed, tried again later) or failed (failed for good after its last attempt).",
	}, []string{"channel", "result"})
	for _, c := range notifyChannels {
		for _, r := range notifyResults {
			m.notifications.WithLabelValues(c, r)
		}
	}
	return []prometheus.Collector{m.notifications}
}

// NotificationDelivery counts one attempt at a notification through channel ("webhook" or
// "email") with its result ("sent", "retry" or "failed"); other values count as "other".
func (m *Metrics) NotificationDelivery(channel, result string) {
	if m == nil {
		return
	}
	if !slices.Contains(notifyChannels, channel) {
		channel = "other"
	}
	if !slices.Contains(notifyResults, result) {
		result = "other"
	}
	m.notifications.WithLabelValues(channel, result).Inc()
}
