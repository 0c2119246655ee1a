package fleet

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/shoal-chess/shoal/protocol"
)

// Report is what a fleet run did and found. Its JSON form (the keys below) is what
// `shoal-bench fleet --json` writes; WriteText renders it for a person.
type Report struct {
	// The fleet: its size, the cores each worker announced, how the workers arrived and how
	// time was compressed.
	Workers     int     `json:"workers"`
	Concurrency int     `json:"concurrency"`
	Arrival     string  `json:"arrival"`
	TimeScale   float64 `json:"time_scale"`
	// The simulated truth: the Elo of the tested engine over its base, and the draw ratio.
	Elo       float64 `json:"elo"`
	DrawRatio float64 `json:"draw_ratio"`
	// ElapsedSeconds is the wall time from the first worker's start to the last one's end;
	// StoppedBecause is "duration", "runs finished", "interrupted" or "workers exited".
	ElapsedSeconds float64 `json:"elapsed_s"`
	StoppedBecause string  `json:"stopped_because"`

	// Requests counts every HTTP call the workers made (cancelled ones aside); Endpoints splits
	// them by API name, with latency percentiles.
	Requests  int64                     `json:"requests"`
	Endpoints map[string]EndpointReport `json:"endpoints"`
	// TooBusy counts replies whose info says the server is too busy (request_task's semaphore).
	TooBusy int64 `json:"too_busy"`
	// HTTPErrors counts non-200 replies by status code; TransportErrors calls without any
	// reply (refused, reset, timed out), quoted in TransportErrorSamples; AppErrors 200 replies
	// carrying "error", by message with ids and numbers blanked; BadReplies 200 replies that
	// were not a JSON object with a duration.
	HTTPErrors            map[string]int64 `json:"http_errors"`
	TransportErrors       int64            `json:"transport_errors"`
	TransportErrorSamples []string         `json:"transport_error_samples,omitempty"`
	AppErrors             map[string]int64 `json:"app_errors"`
	BadReplies            int64            `json:"bad_replies"`
	// CancelledRequests were cut short on the workers' side: a beat still in flight when its
	// task ended, the calls of a worker made to vanish, or the end of the stop grace. They are in
	// no latency or error figure.
	CancelledRequests int64 `json:"cancelled_requests"`
	// UpdatesInDoubt are update_task calls that got no reply (transport error or cancelled):
	// the server may have applied them without the fleet knowing. Non-zero makes a failed
	// exactly-once check explicable; zero makes it a server bug.
	UpdatesInDoubt int64 `json:"updates_in_doubt"`

	// TasksStarted counts tasks request_task handed out; TasksReclaimed the tasks abandoned by
	// the WorkersVanished workers (the server must reclaim them after its dead-task timeout).
	TasksStarted int64 `json:"tasks_started"`
	// FirstTask is how long the workers waited from their start to their first task: the
	// percentiles over every worker started, those that never got one counted as waiting
	// forever (a percentile they reach is -1), and how many never got one.
	FirstTaskP50S   float64 `json:"first_task_p50_s"`
	FirstTaskP99S   float64 `json:"first_task_p99_s"`
	FirstTaskMaxS   float64 `json:"first_task_max_s"`
	WorkersUntasked int     `json:"workers_untasked"`
	TasksReclaimed  int     `json:"tasks_reclaimed"`
	WorkersVanished int     `json:"workers_vanished"`
	// TasksEnded counts the tasks the workers were done with, by how each ended
	// (worker.TaskEnd: "finished", "failed", "abandoned", ...).
	TasksEnded map[string]int64 `json:"tasks_ended"`
	// ReclaimedTasks names those tasks, "RUN_ID/TASK_ID", sorted.
	ReclaimedTasks []string `json:"reclaimed_tasks"`
	// BadDataWorkers were given a source that spoils batches; BadBatches is how many it spoiled.
	BadDataWorkers int   `json:"bad_data_workers"`
	BadBatches     int64 `json:"bad_batches"`
	// BadMachines are the short names of the workers made bad machines (Options.BadWorkers).
	BadMachines []string `json:"bad_machines,omitempty"`
	// GamesReported counts the games of every update the server accepted, each game once (the
	// sum over tasks of the last accepted cumulative stats); GamesPerSecond divides it by the
	// elapsed time.
	GamesReported  int64   `json:"games_reported"`
	GamesPerSecond float64 `json:"games_per_second"`
	// WorkerExitErrors counts workers whose Run ended with an error, by message.
	WorkerExitErrors map[string]int `json:"worker_exit_errors,omitempty"`

	// Runs is the exactly-once check of every run the fleet reported games for (and every run
	// it was told to wait for); ExactlyOnce is true when every run passed.
	Runs        []RunReport `json:"runs"`
	ExactlyOnce bool        `json:"exactly_once"`
	// SharedTasks counts tasks for which updates from two different workers were accepted: a
	// task handed out twice. Any makes the exactly-once check fail.
	SharedTasks int `json:"shared_tasks"`

	// Window covers the requests of Options.Window, or is nil.
	Window *WindowReport `json:"window,omitempty"`
	// Timeline is the run second by second (Options.SlowBeat), or nil.
	Timeline []TimelineSecond `json:"timeline,omitempty"`
}

// WindowReport covers the requests that started in the window, FromSeconds to
// UntilSeconds after the first arrival, and ended before the fleet began to stop.
type WindowReport struct {
	FromSeconds  float64                   `json:"from_s"`
	UntilSeconds float64                   `json:"until_s"`
	Requests     int64                     `json:"requests"`
	Endpoints    map[string]EndpointReport `json:"endpoints"`
	TooBusy      int64                     `json:"too_busy"`
	// SchedLatencyP99MS is the fleet's own scheduling latency p99 over the window: how long its
	// workers' goroutines waited for a CPU once runnable (the Go runtime's histogram, every
	// process of a split fleet together; the upper bound of the bucket holding it). Absent
	// when unknown.
	SchedLatencyP99MS *float64 `json:"sched_latency_p99_ms,omitempty"`
}

// EndpointReport is one API endpoint's requests and latency (milliseconds; percentiles from a
// log-linear histogram, at most 1.6 % high; the maximum is exact).
type EndpointReport struct {
	Requests        int64   `json:"requests"`
	HTTPErrors      int64   `json:"http_errors"`
	TransportErrors int64   `json:"transport_errors"`
	AppErrors       int64   `json:"app_errors"`
	MeanMS          float64 `json:"mean_ms"`
	P50MS           float64 `json:"p50_ms"`
	P95MS           float64 `json:"p95_ms"`
	P99MS           float64 `json:"p99_ms"`
	MaxMS           float64 `json:"max_ms"`
}

// RunReport is the exactly-once check of one run: the server's results (GET /api/get_run) must
// equal the sum over the run's tasks of the last cumulative stats the server accepted from the
// fleet, vanished workers included. An update that got no reply (the fleet stopped, the
// connection broke) may or may not have been recorded: for its task the server may hold up to
// what it adds, cell by cell, and no more. It assumes the fleet is the only source of the
// run's games.
type RunReport struct {
	RunID string `json:"run_id"`
	// Tasks is the number of the run's tasks the fleet had an update accepted for.
	Tasks    int    `json:"tasks"`
	Finished bool   `json:"finished"`
	State    string `json:"sprt_state,omitempty"`
	// ServerResults is nil when the run could not be read (Error says why).
	ServerResults *protocol.Stats `json:"server_results"`
	FleetResults  protocol.Stats  `json:"fleet_results"`
	ServerGames   int             `json:"server_games"`
	FleetGames    int             `json:"fleet_games"`
	// GamesInDoubt are the games of updates that got no reply beyond what the fleet was told
	// for the same tasks: the server may hold any part of them.
	GamesInDoubt int    `json:"games_in_doubt"`
	ExactlyOnce  bool   `json:"exactly_once"`
	Error        string `json:"error,omitempty"`
	// Mismatches, for a run that fails the check, are its first tasks (up to maxMismatches)
	// whose results on the server are not what the fleet was told plus part of what got no
	// reply: where to look.
	Mismatches []TaskMismatch `json:"mismatches,omitempty"`
}

// TaskMismatch is one task the exactly-once check cannot account for.
type TaskMismatch struct {
	TaskID int            `json:"task_id"`
	Server protocol.Stats `json:"server"`
	// Accepted is the newest report the server acknowledged; Unanswered the newest that got
	// no reply (zero when there was none).
	Accepted   protocol.Stats `json:"accepted"`
	Unanswered protocol.Stats `json:"unanswered"`
	// Known is whether one of the fleet's workers got this task from request_task.
	Known bool `json:"known"`
}

// maxMismatches bounds the tasks a failing run's report lists.
const maxMismatches = 5

// fillWindow copies the window's figures into the report. Error counts are the whole
// run's only.
func (rep *Report) fillWindow(rec *recorder, from, until time.Duration) {
	st := &WindowReport{FromSeconds: from.Seconds(), UntilSeconds: until.Seconds(),
		Endpoints: make(map[string]EndpointReport), TooBusy: rec.winTooBusy.Load()}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for name, e := range rec.endpoints {
		n := e.winRequests.Load()
		if n == 0 {
			continue
		}
		st.Requests += n
		st.Endpoints[name] = latencyReport(n, &e.win)
	}
	if q, ok := rec.sched.result().quantile(0.99); ok {
		st.SchedLatencyP99MS = new(q * 1000)
	}
	rep.Window = st
}

// latencyReport is an EndpointReport of n requests with the latencies of h, errors left out.
func latencyReport(n int64, h *histogram) EndpointReport {
	return EndpointReport{Requests: n,
		MeanMS: ms(h.mean()), P50MS: ms(h.quantile(0.50)), P95MS: ms(h.quantile(0.95)),
		P99MS: ms(h.quantile(0.99)), MaxMS: ms(time.Duration(h.max.Load()))}
}

// ms is d in milliseconds, rounded to microseconds.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// fill copies the recorder's figures into the report; started is how many workers started.
func (rep *Report) fill(rec *recorder, elapsed time.Duration, started int) {
	rep.ElapsedSeconds = elapsed.Seconds()
	rep.Endpoints = make(map[string]EndpointReport)
	rec.mu.Lock()
	endpoints := make(map[string]*endpointStats, len(rec.endpoints))
	for name, e := range rec.endpoints {
		endpoints[name] = e
	}
	rep.HTTPErrors = make(map[string]int64, len(rec.httpErrors))
	for code, n := range rec.httpErrors {
		rep.HTTPErrors[strconv.Itoa(code)] = n
	}
	rep.TransportErrors = rec.transportErrors
	rep.TransportErrorSamples = append([]string(nil), rec.transportSamples...)
	rep.AppErrors = make(map[string]int64, len(rec.appErrors))
	for k, n := range rec.appErrors {
		rep.AppErrors[k] = n
	}
	rep.TasksReclaimed = len(rec.reclaimed)
	rep.ReclaimedTasks = make([]string, 0, len(rec.reclaimed))
	for k := range rec.reclaimed {
		rep.ReclaimedTasks = append(rep.ReclaimedTasks, k.run+"/"+strconv.Itoa(k.task))
	}
	sort.Strings(rep.ReclaimedTasks)
	rep.WorkersVanished = rec.vanished
	rep.BadBatches = rec.badBatches
	rep.TasksEnded = make(map[string]int64, len(rec.tasksEnded))
	for how, n := range rec.tasksEnded {
		rep.TasksEnded[string(how)] = n
	}
	if len(rec.exitErrors) > 0 {
		rep.WorkerExitErrors = make(map[string]int, len(rec.exitErrors))
		for k, n := range rec.exitErrors {
			rep.WorkerExitErrors[k] = n
		}
	}
	rec.mu.Unlock()

	for name, e := range endpoints {
		n := e.requests.Load()
		rep.Requests += n
		er := latencyReport(n, &e.lat)
		er.HTTPErrors, er.TransportErrors, er.AppErrors = e.httpErrs.Load(), e.transport.Load(), e.appErrs.Load()
		rep.Endpoints[name] = er
	}
	rep.TooBusy = rec.tooBusy.Load()
	rep.BadReplies = rec.badReplies.Load()
	rep.CancelledRequests = rec.cancelled.Load()
	rep.UpdatesInDoubt = rec.inDoubt.Load()
	rep.TasksStarted = rec.tasksStarted.Load()
	rep.firstTasks(rec, started)
	rep.GamesReported = rec.games.Load()
	if elapsed > 0 {
		rep.GamesPerSecond = float64(rep.GamesReported) / elapsed.Seconds()
	}
}

// runState is what the fleet reads of a run: GET /api/get_run/{id}.
type runState struct {
	Finished bool           `json:"finished"`
	Results  protocol.Stats `json:"results"`
	Args     struct {
		SPRT *struct {
			State string `json:"state"`
		} `json:"sprt"`
	} `json:"args"`
}

// getRun reads a run through the read API.
func getRun(ctx context.Context, client *http.Client, base, id string) (*runState, error) {
	var rs runState
	if err := getJSON(ctx, client, base+"/api/get_run/"+url.PathEscape(id), "get run "+id, &rs); err != nil {
		return nil, err
	}
	return &rs, nil
}

// getJSON decodes the JSON at u into v; what names the read in errors, which carry the
// server's "error" when it gave one.
func getJSON(ctx context.Context, client *http.Client, u, what string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("%s: %s: %s", what, resp.Status, e.Error)
		}
		return fmt.Errorf("%s: %s", what, resp.Status)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// findMismatches reads run's tasks one by one (GET /api/get_task) and returns the first that the
// fleet's reports do not account for.
func findMismatches(ctx context.Context, rec *recorder, client *http.Client, base, run string) []TaskMismatch {
	var out []TaskMismatch
	for task := 0; len(out) < maxMismatches && ctx.Err() == nil; task++ {
		server, err := getTaskStats(ctx, client, base, run, task)
		if err != nil {
			break // past the last task, or the server does not answer: nothing more to list
		}
		k := taskKey{run, task}
		rec.mu.Lock()
		acked, ackedOK := rec.accepted[k]
		unanswered, unansweredOK := rec.unanswered[k]
		m := TaskMismatch{TaskID: task, Server: server, Accepted: acked, Unanswered: unanswered,
			Known: rec.started[k] || ackedOK || unansweredOK}
		doubt := rec.doubtOf(k)
		rec.mu.Unlock()
		if !accountedFor(server, m.Accepted, doubt) {
			out = append(out, m)
		}
	}
	return out
}

// getTaskStats reads one task's results through the read API.
func getTaskStats(ctx context.Context, client *http.Client, base, run string, task int) (protocol.Stats, error) {
	var t struct {
		Stats protocol.Stats `json:"stats"`
	}
	err := getJSON(ctx, client, fmt.Sprintf("%s/api/get_task/%s/%d", base, url.PathEscape(run), task),
		fmt.Sprintf("get task %s/%d", run, task), &t)
	return t.Stats, err
}

// checkRuns does the exactly-once check of every run the fleet touched and of extra.
func (rep *Report) checkRuns(ctx context.Context, rec *recorder, client *http.Client, base string, extra []string) {
	ids := rec.runsTouched()
	for _, id := range extra {
		if !contains(ids, id) {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	rep.Runs = make([]RunReport, 0, len(ids))
	rec.mu.Lock()
	rep.SharedTasks = rec.sharedTasks
	rec.mu.Unlock()
	// No games at all prove nothing: a fleet whose every request failed must not pass.
	rep.ExactlyOnce = rec.games.Load() > 0 && rep.SharedTasks == 0
	for _, id := range ids {
		fleet, doubt, tasks := rec.acceptedSum(id)
		rr := RunReport{RunID: id, Tasks: tasks, FleetResults: fleet, FleetGames: games(fleet), GamesInDoubt: games(doubt)}
		rs, err := getRun(ctx, client, base, id)
		if err != nil {
			rr.Error = err.Error()
		} else {
			res := rs.Results
			rr.ServerResults = &res
			rr.ServerGames = games(res)
			rr.Finished = rs.Finished
			if rs.Args.SPRT != nil {
				rr.State = rs.Args.SPRT.State
			}
			rr.ExactlyOnce = accountedFor(res, fleet, doubt)
			if !rr.ExactlyOnce {
				rr.Mismatches = findMismatches(ctx, rec, client, base, id)
			}
		}
		rep.ExactlyOnce = rep.ExactlyOnce && rr.ExactlyOnce
		rep.Runs = append(rep.Runs, rr)
	}
}

// WriteJSON writes the report as indented JSON.
func (rep *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

// WriteText writes the report for a person, as Markdown.
func (rep *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# Fleet report\n\n")
	fmt.Fprintf(&b, "%s workers (%d core%s each, %s arrival), time scale %g, true Elo %+.1f, draw ratio %.2f; ran %s, stopped: %s.\n\n",
		humanize.Comma(int64(rep.Workers)), rep.Concurrency, plural(rep.Concurrency), rep.Arrival, rep.TimeScale,
		rep.Elo, rep.DrawRatio, time.Duration(rep.ElapsedSeconds*float64(time.Second)).Round(100*time.Millisecond).String(), rep.StoppedBecause)

	fmt.Fprintf(&b, "| endpoint | requests | errors | mean ms | p50 ms | p95 ms | p99 ms | max ms |\n")
	fmt.Fprintf(&b, "|---|---:|---:|---:|---:|---:|---:|---:|\n")
	names := make([]string, 0, len(rep.Endpoints))
	for name := range rep.Endpoints {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		e := rep.Endpoints[name]
		fmt.Fprintf(&b, "| %s | %s | %s | %.1f | %.1f | %.1f | %.1f | %.1f |\n", name, humanize.Comma(e.Requests),
			humanize.Comma(e.HTTPErrors+e.TransportErrors+e.AppErrors), e.MeanMS, e.P50MS, e.P95MS, e.P99MS, e.MaxMS)
	}
	fmt.Fprintf(&b, "| **all** | %s | | | | | | |\n\n", humanize.Comma(rep.Requests))

	fmt.Fprintf(&b, "- Games reported: %s (%s/s); tasks started %s\n", humanize.Comma(rep.GamesReported),
		humanize.Comma(int64(rep.GamesPerSecond+0.5)), humanize.Comma(rep.TasksStarted))
	fmt.Fprintf(&b, "- Tasks ended: %s\n", countsByKey(rep.TasksEnded))
	fmt.Fprintf(&b, "- Too busy: %s\n", humanize.Comma(rep.TooBusy))
	fmt.Fprintf(&b, "- Vanished workers: %d, holding %d tasks to be reclaimed; bad-data workers: %d, spoiled batches: %d\n",
		rep.WorkersVanished, rep.TasksReclaimed, rep.BadDataWorkers, rep.BadBatches)
	if len(rep.BadMachines) > 0 {
		fmt.Fprintf(&b, "- Bad machines (for the server's quarantine to catch): %s\n", strings.Join(rep.BadMachines, ", "))
	}
	fmt.Fprintf(&b, "- HTTP errors: %s\n", countsByKey(rep.HTTPErrors))
	fmt.Fprintf(&b, "- Transport errors: %s", humanize.Comma(rep.TransportErrors))
	if len(rep.TransportErrorSamples) > 0 {
		fmt.Fprintf(&b, " (e.g. %s)", strings.Join(rep.TransportErrorSamples, "; "))
	}
	fmt.Fprintf(&b, "\n- Replies that were not JSON: %d; requests cancelled by the workers: %s; updates in doubt: %d\n",
		rep.BadReplies, humanize.Comma(rep.CancelledRequests), rep.UpdatesInDoubt)
	if len(rep.AppErrors) == 0 {
		fmt.Fprintf(&b, "- Application errors: none\n")
	} else {
		fmt.Fprintf(&b, "- Application errors:\n")
		for _, k := range sortedByCount(rep.AppErrors) {
			fmt.Fprintf(&b, "  - %s × %s\n", humanize.Comma(rep.AppErrors[k]), k)
		}
	}
	if len(rep.WorkerExitErrors) > 0 {
		fmt.Fprintf(&b, "- Workers that quit with an error:\n")
		for k, n := range rep.WorkerExitErrors {
			fmt.Fprintf(&b, "  - %d × %s\n", n, k)
		}
	}

	verdict := "PASS"
	if !rep.ExactlyOnce {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "\n## Exactly-once check: %s\n\n", verdict)
	if rep.SharedTasks > 0 {
		fmt.Fprintf(&b, "%d task(s) had updates accepted from two different workers: the server handed them out twice.\n\n", rep.SharedTasks)
	}
	if len(rep.Runs) == 0 {
		fmt.Fprintf(&b, "No run got games from the fleet.\n")
	} else {
		fmt.Fprintf(&b, "| run | tasks | server games | fleet games | finished | equal |\n|---|---:|---:|---:|---|---|\n")
		for _, r := range rep.Runs {
			state := strconv.FormatBool(r.Finished)
			if r.State != "" {
				state += " (" + r.State + ")"
			}
			equal := strconv.FormatBool(r.ExactlyOnce)
			if r.Error != "" {
				equal = "error: " + r.Error
			} else if !r.ExactlyOnce {
				equal = fmt.Sprintf("NO: server %+v, fleet %+v", *r.ServerResults, r.FleetResults)
			}
			fleetGames := humanize.Comma(int64(r.FleetGames))
			if r.GamesInDoubt > 0 {
				fleetGames += fmt.Sprintf(" (+%s in doubt)", humanize.Comma(int64(r.GamesInDoubt)))
			}
			fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", r.RunID, r.Tasks, humanize.Comma(int64(r.ServerGames)),
				fleetGames, state, equal)
		}
		for _, r := range rep.Runs {
			for _, m := range r.Mismatches {
				fmt.Fprintf(&b, "\n- run %s, task %d: the server holds %+v; the fleet was told %+v, and sent %+v without a reply; a task of the fleet's: %v",
					r.RunID, m.TaskID, m.Server, m.Accepted, m.Unanswered, m.Known)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// countsByKey renders {"400": 3, "503": 1} as "400: 3, 503: 1", or "none".
func countsByKey(m map[string]int64) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + ": " + humanize.Comma(m[k])
	}
	return strings.Join(parts, ", ")
}

// sortedByCount returns m's keys, most frequent first.
func sortedByCount(m map[string]int64) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if m[keys[i]] != m[keys[j]] {
			return m[keys[i]] > m[keys[j]]
		}
		return keys[i] < keys[j]
	})
	return keys
}

// firstTasks fills the FirstTask figures from the waits of the workers that got a task, out of
// started workers.
func (rep *Report) firstTasks(rec *recorder, started int) {
	rec.mu.Lock()
	waits := slices.Sorted(slices.Values(rec.firstTasks))
	rec.mu.Unlock()
	rep.WorkersUntasked = max(started-len(waits), 0)
	at := func(q float64) float64 {
		if started == 0 {
			return 0
		}
		i := int(math.Ceil(q*float64(started))) - 1
		if i >= len(waits) {
			return -1
		}
		return waits[max(i, 0)].Seconds()
	}
	rep.FirstTaskP50S, rep.FirstTaskP99S = at(0.50), at(0.99)
	if rep.WorkersUntasked > 0 {
		rep.FirstTaskMaxS = -1
	} else if len(waits) > 0 {
		rep.FirstTaskMaxS = waits[len(waits)-1].Seconds()
	}
}
