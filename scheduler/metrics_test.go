package scheduler

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/metrics/metricstest"
	"github.com/shoal-chess/shoal/rundb"
)

// newMeteredScheduler is newTestScheduler reporting to a fresh registry.
func newMeteredScheduler(t *testing.T) (*Scheduler, *clock, *prometheus.Registry) {
	t.Helper()
	s, clk := newTestScheduler(t)
	reg := prometheus.NewRegistry()
	s.cfg.Metrics = metrics.New(reg)
	return s, clk, reg
}

// taskCounters are the task and too-busy counters' exposition, for GatherAndCompare.
func taskCounters(assigned, finished, tooBusy int, reclaimed map[string]int) string {
	var b strings.Builder
	b.WriteString("# HELP shoal_scheduler_request_task_too_busy_total request_task calls turned away at once because the request_task semaphore was full.\n")
	b.WriteString("# TYPE shoal_scheduler_request_task_too_busy_total counter\n")
	b.WriteString("shoal_scheduler_request_task_too_busy_total " + strconv.Itoa(tooBusy) + "\n")
	b.WriteString("# HELP shoal_scheduler_tasks_assigned_total Tasks handed out by request_task.\n")
	b.WriteString("# TYPE shoal_scheduler_tasks_assigned_total counter\n")
	b.WriteString("shoal_scheduler_tasks_assigned_total " + strconv.Itoa(assigned) + "\n")
	b.WriteString("# HELP shoal_scheduler_tasks_finished_total Tasks ended normally: all their games played, or their run finished, stopped or deleted.\n")
	b.WriteString("# TYPE shoal_scheduler_tasks_finished_total counter\n")
	b.WriteString("shoal_scheduler_tasks_finished_total " + strconv.Itoa(finished) + "\n")
	b.WriteString("# HELP shoal_scheduler_tasks_reclaimed_total Tasks taken back from their worker, by reason: dead (no update or beat in time), stale (its worker took a new task), failed (its worker gave up), invalid (impossible results), purge (marked bad by a purge).\n")
	b.WriteString("# TYPE shoal_scheduler_tasks_reclaimed_total counter\n")
	for _, r := range []string{"dead", "failed", "invalid", "purge", "stale"} {
		b.WriteString(`shoal_scheduler_tasks_reclaimed_total{reason="` + r + `"} ` + strconv.Itoa(reclaimed[r]) + "\n")
	}
	return b.String()
}

var taskCounterNames = []string{"shoal_scheduler_request_task_too_busy_total", "shoal_scheduler_tasks_assigned_total",
	"shoal_scheduler_tasks_finished_total", "shoal_scheduler_tasks_reclaimed_total"}

func TestSchedulerMetricsAfterAScriptedWorkload(t *testing.T) {
	s, clk, reg := newMeteredScheduler(t)
	ctx := context.Background()
	id := addRun(t, s, runSpec{numGames: 100000, approved: true})

	// Four workers get a task each.
	tasks := map[int]TaskReply{}
	for i := 1; i <= 4; i++ {
		tasks[i] = request(t, s, worker(i))
		if tasks[i].Waiting {
			t.Fatalf("worker %d got no task: %+v", i, tasks[i])
		}
	}
	// A full semaphore turns the next caller away before the scheduling lock.
	full := int32(s.TaskSemaphoreSize())
	s.inside.Add(full)
	if got := request(t, s, worker(9)); got.Info != TooBusy {
		t.Fatalf("with the semaphore full: %+v", got)
	}
	s.inside.Add(-full)
	if n := metricstest.HistogramCount(t, reg, "shoal_scheduler_critical_section_duration_seconds"); n != 4 {
		t.Errorf("critical sections: %d, want 4 (the too-busy call never takes the lock)", n)
	}

	// Worker 1 beats 30 s after its task was created.
	clk.advance(30 * time.Second)
	if got, err := s.Beat(ctx, id, tasks[1].TaskID); err != nil || !*got.TaskAlive {
		t.Fatalf("beat: %+v %v", got, err)
	}
	want := `
# HELP shoal_scheduler_beat_lag_seconds Time since an active task's last update or beat, at the moment its worker beats.
# TYPE shoal_scheduler_beat_lag_seconds histogram
shoal_scheduler_beat_lag_seconds_bucket{le="1"} 0
shoal_scheduler_beat_lag_seconds_bucket{le="5"} 0
shoal_scheduler_beat_lag_seconds_bucket{le="15"} 0
shoal_scheduler_beat_lag_seconds_bucket{le="30"} 1
shoal_scheduler_beat_lag_seconds_bucket{le="60"} 1
shoal_scheduler_beat_lag_seconds_bucket{le="90"} 1
shoal_scheduler_beat_lag_seconds_bucket{le="120"} 1
shoal_scheduler_beat_lag_seconds_bucket{le="150"} 1
shoal_scheduler_beat_lag_seconds_bucket{le="180"} 1
shoal_scheduler_beat_lag_seconds_bucket{le="240"} 1
shoal_scheduler_beat_lag_seconds_bucket{le="300"} 1
shoal_scheduler_beat_lag_seconds_bucket{le="360"} 1
shoal_scheduler_beat_lag_seconds_bucket{le="600"} 1
shoal_scheduler_beat_lag_seconds_bucket{le="+Inf"} 1
shoal_scheduler_beat_lag_seconds_sum 30
shoal_scheduler_beat_lag_seconds_count 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "shoal_scheduler_beat_lag_seconds"); err != nil {
		t.Error(err)
	}

	// Worker 2 gives up, worker 3 reports an odd number of games, worker 4 plays all its games.
	if _, err := s.FailedTask(ctx, id, tasks[2].TaskID, "engine crashed"); err != nil {
		t.Fatal(err)
	}
	if got := update(t, s, worker(3), id, tasks[3].TaskID, rundb.Results{Wins: 1, Pentanomial: []int{0, 0, 0, 0, 0}}); *got.TaskAlive {
		t.Fatalf("a task with an odd report lives on: %+v", got)
	}
	if got := update(t, s, worker(4), id, tasks[4].TaskID, pairs(tasks[4].Task.NumGames/2, 0)); *got.TaskAlive {
		t.Fatalf("a task with all its games played lives on: %+v", got)
	}
	// Worker 1 asks for a new task while still holding one: the old one is stale.
	if got := request(t, s, worker(1)); got.Waiting {
		t.Fatalf("worker 1's second request: %+v", got)
	}
	s.UpdateNPS(ctx)
	fleet := map[string]float64{"shoal_scheduler_unfinished_runs": 1, "shoal_scheduler_active_runs": 1,
		"shoal_scheduler_active_workers": 1, "shoal_scheduler_active_cores": 8, "shoal_scheduler_nodes_per_second": 8e6}
	for name, v := range fleet {
		if got := metricstest.Value(t, reg, name); got != v {
			t.Errorf("%s = %g, want %g", name, got, v)
		}
	}

	// Worker 1's new task goes silent and is reclaimed as dead.
	clk.advance(400 * time.Second)
	if n := s.Scavenge(ctx); n != 1 {
		t.Fatalf("scavenged %d tasks, want 1", n)
	}
	s.UpdateNPS(ctx)
	if got := metricstest.Value(t, reg, "shoal_scheduler_active_workers"); got != 0 {
		t.Errorf("active workers after the scavenge = %g, want 0", got)
	}
	if got := metricstest.Value(t, reg, "shoal_scheduler_active_runs"); got != 0 {
		t.Errorf("active runs after the scavenge = %g, want 0", got)
	}

	reclaimed := map[string]int{"dead": 1, "stale": 1, "failed": 1, "invalid": 1}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(taskCounters(5, 1, 1, reclaimed)), taskCounterNames...); err != nil {
		t.Error(err)
	}
	// Every task handed out has ended once, finished or reclaimed: 5 = 1 + 4.
	r := snapshot(t, s, id)
	if r.Workers != 0 || len(r.Tasks) != 5 {
		t.Errorf("run has %d workers and %d tasks, want 0 and 5", r.Workers, len(r.Tasks))
	}
}

func TestSchedulerMetricsCountAPurge(t *testing.T) {
	s, _, reg := newMeteredScheduler(t)
	id := addRun(t, s, runSpec{numGames: 9 * 466, approved: true, autoPurge: true})
	normal := rundb.Results{Wins: 133, Losses: 133, Draws: 200, Pentanomial: []int{10, 50, 113, 50, 10}}
	outlier := rundb.Results{Wins: 333, Losses: 33, Draws: 100, Pentanomial: []int{0, 0, 33, 100, 100}}
	for i := range 9 {
		w := worker(i)
		task := request(t, s, w)
		st := normal
		if i == 4 {
			st = outlier
		}
		update(t, s, w, id, task.TaskID, st)
	}
	// Nine tasks played out; the auto-purge then marks the outlier's task bad and revives the
	// run, whose last task a tenth worker plays.
	w := worker(20)
	task := request(t, s, w)
	update(t, s, w, id, task.TaskID, normal)
	if r := snapshot(t, s, id); !r.Finished || len(r.BadTasks) != 1 {
		t.Fatalf("run finished=%v with %d bad tasks, want finished with 1", r.Finished, len(r.BadTasks))
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(taskCounters(10, 10, 0, map[string]int{"purge": 1})), taskCounterNames...); err != nil {
		t.Error(err)
	}
}
