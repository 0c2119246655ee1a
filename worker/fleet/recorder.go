package fleet

import (
	"context"
	"errors"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker"
)

// taskKey names one task of one run.
type taskKey struct {
	run  string
	task int
}

// endpointStats are one endpoint's counters. The histogram and the counters are atomic, so
// recording a request takes no lock once the entry exists.
type endpointStats struct {
	lat      histogram
	requests atomic.Int64
	// win and winRequests count the requests of the window (see recorder.inWindow).
	win         histogram
	winRequests atomic.Int64
	httpErrs    atomic.Int64
	transport   atomic.Int64
	appErrs     atomic.Int64
}

// maxAppErrorKinds bounds the distinct application-error messages kept; later kinds are
// counted under "other".
const maxAppErrorKinds = 40

// maxTransportSamples is how many distinct transport error messages the report quotes.
const maxTransportSamples = 5

// recorder gathers what every worker of the fleet did. Safe for concurrent use.
//
// Lock order: recorder.mu is never held while a workerObserver's mu is taken, and a
// workerObserver holds its own mu only around its own fields, calling the recorder after
// releasing it.
type recorder struct {
	tooBusy      atomic.Int64
	tasksStarted atomic.Int64
	games        atomic.Int64 // games in accepted updates, each game once
	busy         atomic.Int64 // workers holding a task
	running      atomic.Int64 // workers whose Run has not returned
	cancelled    atomic.Int64 // requests cut short on the worker's side (see Report.CancelledRequests)
	badReplies   atomic.Int64 // 200 replies that were not a JSON object with a duration
	inDoubt      atomic.Int64 // update_task calls with no answer: applied or not, nobody knows
	// The window (Options.Window), in Unix nanoseconds: requests that started at or after winStart and
	// ended before winEnd (0: not yet closed) count in it too. winStart 0: no window.
	winStart, winEnd atomic.Int64
	winTooBusy       atomic.Int64
	// timeline, if set (Options.SlowBeat), counts each second's beats.
	timeline *timeline
	// sched is the fleet's processes' scheduling latencies over the window (Options.Window).
	sched schedWindow

	mu               sync.Mutex
	endpoints        map[string]*endpointStats
	httpErrors       map[int]int64
	transportErrors  int64
	transportSamples []string
	appErrors        map[string]int64
	accepted         map[taskKey]protocol.Stats  // the last cumulative stats the server took
	unanswered       map[taskKey]protocol.Stats  // the largest cumulative stats sent without a reply
	started          map[taskKey]bool            // tasks request_task gave the fleet's workers
	owner            map[taskKey]*workerObserver // the worker whose updates were accepted for a task
	sharedTasks      int                         // tasks two workers had updates accepted for
	reclaimed        map[taskKey]bool            // tasks whose worker vanished while holding them
	vanished         int
	badBatches       int64
	exitErrors       map[string]int
	firstTasks       []time.Duration // each worker's wait from its start to its first task
	tasksEnded       map[worker.TaskEnd]int64
}

func newRecorder() *recorder {
	return &recorder{
		endpoints:  make(map[string]*endpointStats),
		httpErrors: make(map[int]int64),
		appErrors:  make(map[string]int64),
		accepted:   make(map[taskKey]protocol.Stats),
		unanswered: make(map[taskKey]protocol.Stats),
		started:    make(map[taskKey]bool),
		owner:      make(map[taskKey]*workerObserver),
		reclaimed:  make(map[taskKey]bool),
		exitErrors: make(map[string]int),
	}
}

func (r *recorder) endpoint(name string) *endpointStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.endpoints[name]
	if e == nil {
		e = &endpointStats{}
		r.endpoints[name] = e
	}
	return e
}

// request records one HTTP call (see worker.Observer.Request).
func (r *recorder) request(endpoint string, took time.Duration, status int, reply map[string]any, err error) {
	if status == 0 && err != nil && errors.Is(err, context.Canceled) {
		// A beat cut short by the end of its task, a worker told to vanish, or the fleet
		// cutting its workers off: not the server's doing.
		r.cancelled.Add(1)
		if endpoint == "update_task" {
			r.inDoubt.Add(1)
		}
		return
	}
	e := r.endpoint(endpoint)
	e.requests.Add(1)
	e.lat.record(took)
	if endpoint == "beat" && r.timeline != nil {
		r.timeline.beat(took, status == 200 && err == nil && reply != nil, r.busy.Load())
	}
	inWindow := r.inWindow(took)
	if inWindow {
		e.winRequests.Add(1)
		e.win.record(took)
	}
	switch {
	case status == 0:
		e.transport.Add(1)
		if endpoint == "update_task" {
			r.inDoubt.Add(1)
		}
		r.mu.Lock()
		r.transportErrors++
		if msg := errText(err); len(r.transportSamples) < maxTransportSamples && !contains(r.transportSamples, msg) {
			r.transportSamples = append(r.transportSamples, msg)
		}
		r.mu.Unlock()
		return
	case status != 200:
		e.httpErrs.Add(1)
		r.mu.Lock()
		r.httpErrors[status]++
		r.mu.Unlock()
		return
	case err != nil || reply == nil:
		// A 200 whose body was not a JSON object with a duration.
		r.badReplies.Add(1)
		return
	}
	if info, _ := reply["info"].(string); strings.Contains(strings.ToLower(info), "too busy") {
		r.tooBusy.Add(1)
		if inWindow {
			r.winTooBusy.Add(1)
		}
	}
	if msg, ok := reply["error"].(string); ok {
		e.appErrs.Add(1)
		kind := errorKind(msg)
		r.mu.Lock()
		if _, known := r.appErrors[kind]; !known && len(r.appErrors) >= maxAppErrorKinds {
			kind = "other"
		}
		r.appErrors[kind]++
		r.mu.Unlock()
	}
}

// inWindow reports whether a request that just ended after took lies in the window.
func (r *recorder) inWindow(took time.Duration) bool {
	from := r.winStart.Load()
	if from == 0 {
		return false
	}
	now := time.Now().UnixNano()
	until := r.winEnd.Load()
	return now-int64(took) >= from && (until == 0 || now < until)
}

func errText(err error) string {
	if err == nil {
		return "no reply"
	}
	return err.Error()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

var (
	objectIDPattern = regexp.MustCompile(`[0-9a-f]{24}`)
	quotedPattern   = regexp.MustCompile(`"[^"]*"`)
	numberPattern   = regexp.MustCompile(`[0-9]+`)
)

// errorKind is an application error message with its run ids, quoted names and numbers
// replaced, so that the same refusal to different workers counts as one kind.
func errorKind(msg string) string {
	msg, _, _ = strings.Cut(msg, "\n")
	msg = objectIDPattern.ReplaceAllString(msg, "RUN")
	msg = quotedPattern.ReplaceAllString(msg, `"…"`)
	msg = numberPattern.ReplaceAllString(msg, "N")
	if len(msg) > 160 {
		msg = msg[:160] + "…"
	}
	return msg
}

// taskStarted records a task handed out.
func (r *recorder) taskStarted() { r.tasksStarted.Add(1) }

// firstTask records how long a worker waited from its start to its first task.
func (r *recorder) firstTask(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.firstTasks = append(r.firstTasks, d)
}

// accept records cumulative stats the server took for a task. Reports are cumulative, so only
// the newest (largest) one counts, and the games counter grows by what it adds.
func (r *recorder) accept(k taskKey, st protocol.Stats, by *workerObserver) {
	r.mu.Lock()
	// A task is one worker's: updates accepted from a second worker mean the server handed the
	// task out twice, and the merged counts below would hide the loss.
	if first, ok := r.owner[k]; !ok {
		r.owner[k] = by
	} else if first != by && first != nil {
		r.sharedTasks++
		r.owner[k] = nil // count each task once
	}
	prev := r.accepted[k]
	if games(st) < games(prev) {
		r.mu.Unlock()
		return
	}
	r.accepted[k] = st
	r.mu.Unlock()
	r.games.Add(int64(games(st) - games(prev)))
}

func games(st protocol.Stats) int { return st.Wins + st.Losses + st.Draws }

// cells lists the counts of st, cell by cell.
func cells(st protocol.Stats) []int {
	return append([]int{st.Wins, st.Losses, st.Draws, st.Crashes, st.TimeLosses}, st.Pentanomial[:]...)
}

// beyond is st - base cell by cell; ok is false when a cell of st is below base's (cumulative
// stats of one task never shrink, so st is not a later report than base).
func beyond(st, base protocol.Stats) (protocol.Stats, bool) {
	d := protocol.Stats{
		Wins: st.Wins - base.Wins, Losses: st.Losses - base.Losses, Draws: st.Draws - base.Draws,
		Crashes: st.Crashes - base.Crashes, TimeLosses: st.TimeLosses - base.TimeLosses,
	}
	for i := range d.Pentanomial {
		d.Pentanomial[i] = st.Pentanomial[i] - base.Pentanomial[i]
	}
	for _, c := range cells(d) {
		if c < 0 {
			return protocol.Stats{}, false
		}
	}
	return d, true
}

// accountedFor says whether a run's server results are what the fleet was told plus part of
// what it sent without an answer: every acknowledged game there (nothing lost) and no more
// than the unanswered updates could add (nothing counted twice). Without unanswered updates
// the two must be equal.
func accountedFor(server, acked, doubt protocol.Stats) bool {
	extra, ok := beyond(server, acked)
	if !ok {
		return false
	}
	_, ok = beyond(doubt, extra)
	return ok
}

// vanish records a worker that vanished holding task k.
func (r *recorder) vanish(k taskKey) {
	r.mu.Lock()
	r.vanished++
	r.reclaimed[k] = true
	r.mu.Unlock()
}

// badBatch records a batch the bad-data wrapper spoiled.
func (r *recorder) badBatch() {
	r.mu.Lock()
	r.badBatches++
	r.mu.Unlock()
}

// workerExited records how a worker's Run ended; nil and cancellation are normal.
func (r *recorder) workerExited(err error) {
	if err == nil || errors.Is(err, context.Canceled) {
		return
	}
	msg := errorKind(err.Error())
	r.mu.Lock()
	if _, known := r.exitErrors[msg]; !known && len(r.exitErrors) >= maxAppErrorKinds {
		msg = "other"
	}
	r.exitErrors[msg]++
	r.mu.Unlock()
}

// errorsSoFar is the number of failed requests of every kind, for the progress line.
func (r *recorder) errorsSoFar() (httpErrs, transport, app int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.httpErrors {
		httpErrs += n
	}
	for _, n := range r.appErrors {
		app += n
	}
	return httpErrs, r.transportErrors, app
}

// runsTouched lists the runs the fleet got tasks of and had results accepted for, sorted.
func (r *recorder) runsTouched() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[string]bool{}
	for k := range r.accepted {
		seen[k.run] = true
	}
	for k := range r.unanswered {
		seen[k.run] = true
	}
	out := make([]string, 0, len(seen))
	for id := range seen {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

// acceptedSum is the sum over run's tasks of the last accepted cumulative stats, and the number
// of tasks. doubt is what the server may hold beyond sum: for each task whose newest update got
// no reply, what that update adds to the accepted stats.
func (r *recorder) acceptedSum(run string) (sum, doubt protocol.Stats, tasks int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k, st := range r.accepted {
		if k.run != run {
			continue
		}
		tasks++
		sum = sum.Add(st)
	}
	for k := range r.unanswered {
		if k.run == run {
			doubt = doubt.Add(r.doubtOf(k))
		}
	}
	return sum, doubt, tasks
}

// doubtOf is what task k's newest update without a reply adds to its accepted stats (zero when
// a later update was accepted). r.mu is held.
func (r *recorder) doubtOf(k taskKey) protocol.Stats {
	extra, _ := beyond(r.unanswered[k], r.accepted[k])
	return extra
}

// unanswer records cumulative stats sent for a task that got no reply; only the largest counts.
func (r *recorder) unanswer(k taskKey, st protocol.Stats) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if games(st) > games(r.unanswered[k]) {
		r.unanswered[k] = st
	}
}

// workerObserver is the Observer of one worker: it forwards to the fleet's recorder and keeps
// what the progress line and the failure injection need about this worker. Safe for concurrent
// use (the worker's heartbeat and its main loop both call it).
type workerObserver struct {
	rec *recorder
	// vanish, if set, is called once, after the first accepted update that leaves the worker's
	// task alive: it cancels the worker's context, so the worker disappears mid-task.
	vanish func()

	// arrived is when the worker started; hadTask is set once it first got a task.
	arrived time.Time

	mu       sync.Mutex
	busy     bool
	vanished bool
	hadTask  bool
}

// Request implements worker.Observer.
func (o *workerObserver) Request(endpoint string, took time.Duration, status int, reply map[string]any, err error) {
	o.rec.request(endpoint, took, status, reply, err)
	idle := false
	o.mu.Lock()
	switch endpoint {
	case "request_task", "failed_task", "stop_run":
		// Asking for a task, or giving one up: not holding one (TaskStarted follows a success).
		idle = true
	case "beat":
		alive, ok := reply["task_alive"].(bool)
		idle = ok && !alive
	}
	wasBusy := o.busy
	if idle {
		o.busy = false
	}
	o.mu.Unlock()
	if idle && wasBusy {
		o.rec.busy.Add(-1)
	}
}

// TaskStarted implements worker.Observer.
func (o *workerObserver) TaskStarted(runID string, taskID, numGames int) {
	o.rec.taskStarted()
	o.rec.mu.Lock()
	o.rec.started[taskKey{runID, taskID}] = true
	o.rec.mu.Unlock()
	o.mu.Lock()
	wasBusy, first := o.busy, !o.hadTask
	o.busy, o.hadTask = true, true
	o.mu.Unlock()
	if first && !o.arrived.IsZero() {
		o.rec.firstTask(time.Since(o.arrived))
	}
	if !wasBusy {
		o.rec.busy.Add(1)
	}
}

// TaskEnded implements worker.Observer.
func (o *workerObserver) TaskEnded(runID string, taskID int, how worker.TaskEnd) {
	o.rec.mu.Lock()
	defer o.rec.mu.Unlock()
	if o.rec.tasksEnded == nil {
		o.rec.tasksEnded = map[worker.TaskEnd]int64{}
	}
	o.rec.tasksEnded[how]++
}

// Unanswered records an update_task the server may or may not have recorded.
func (o *workerObserver) Unanswered(runID string, taskID int, cumulative protocol.Stats) {
	o.rec.unanswer(taskKey{runID, taskID}, cumulative)
}

// Accepted implements worker.Observer. The worker calls it only for updates the server
// recorded, so these are the stats the server's totals must contain.
func (o *workerObserver) Accepted(runID string, taskID int, cumulative protocol.Stats, alive bool) {
	o.mu.Lock()
	vanishNow := alive && o.vanish != nil && !o.vanished
	if vanishNow {
		o.vanished = true
	}
	wasBusy := o.busy
	if !alive {
		o.busy = false
	}
	o.mu.Unlock()
	k := taskKey{runID, taskID}
	o.rec.accept(k, cumulative, o)
	if !alive && wasBusy {
		o.rec.busy.Add(-1)
	}
	if vanishNow {
		o.rec.vanish(k)
		o.vanish()
	}
}

// stopped is called when the worker's Run has returned.
func (o *workerObserver) stopped() {
	o.mu.Lock()
	wasBusy := o.busy
	o.busy = false
	o.mu.Unlock()
	if wasBusy {
		o.rec.busy.Add(-1)
	}
}
