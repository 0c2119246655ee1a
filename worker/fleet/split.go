package fleet

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"runtime/trace"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker"
)

// A split fleet (Options.Processes) runs its workers in child processes, each started with
// Options.ShardCommand. The parent writes the child a shardSpec as one JSON line on its standard
// input; the child answers that it is ready, and once every child is, the parent writes each a
// line "start EPOCH", the first arrival's time in Unix nanoseconds, so that a child slow to start
// does not start its workers late. When the fleet is to stop, the parent writes a line "stop"
// (stop over StopRamp, as a whole fleet does) or "interrupt" (stop at once); the end of its
// input counts as "interrupt". The child writes JSON lines on its standard output: a
// shardMessage saying it is ready, one with its progress every ProgressPeriod, and last one with
// its tally, everything its recorder holds, which the parent merges with the others' into one
// recorder and so into one report.

// ShardSubcommand is the shoal-bench subcommand that runs ServeShard: how `shoal-bench fleet
// --processes` and the bench start the processes of a split fleet. It is not for people.
const ShardSubcommand = "fleet-shard"

// shardLead is how far ahead of the first arrival the parent tells its children, ready, when it
// is: time for the start line to reach each of them.
const shardLead = 200 * time.Millisecond

// shardReadyWithin bounds the wait for the children to be ready.
const shardReadyWithin = time.Minute

// ShardProfile asks the first process of a split fleet to profile itself, as a bench profiles a
// fleet in its own process (ProfileProcess, into Dir under Name): After the first arrival, for
// For, with an execution trace over the first TraceFor (0: none).
type ShardProfile struct {
	Dir, Name            string
	After, For, TraceFor time.Duration
}

// shardSpec is what the parent tells a child first: the fleet's options, which share of the
// workers is the child's (those whose index is Shard modulo Shards), and the runtime settings to
// take over.
type shardSpec struct {
	Options   Options       `json:"options"`
	Shard     int           `json:"shard"`
	Shards    int           `json:"shards"`
	GCPercent int           `json:"gc_percent,omitempty"`
	MaxProcs  int           `json:"max_procs,omitempty"`
	Profile   *ShardProfile `json:"profile,omitempty"`
}

// shardMessage is one line of a child's output.
type shardMessage struct {
	Ready    bool      `json:"ready,omitempty"`
	Progress *snapshot `json:"progress,omitempty"`
	Tally    *tally    `json:"tally,omitempty"`
}

// ServeShard runs one process's share of a split fleet: it reads its shardSpec from in, runs its
// workers until told to stop, and writes its progress and, at the end, its tally to out. It is
// what Options.ShardCommand runs (`shoal-bench fleet-shard`); ctx ending stops it as "interrupt" does.
func ServeShard(ctx context.Context, in io.Reader, out io.Writer) error {
	r := bufio.NewReader(in)
	line, err := r.ReadBytes('\n')
	if err != nil && len(line) == 0 {
		return fmt.Errorf("fleet shard: no specification on standard input: %w", err)
	}
	var spec shardSpec
	if err := json.Unmarshal(line, &spec); err != nil {
		return fmt.Errorf("fleet shard: invalid specification: %w", err)
	}
	if spec.Shards < 2 || spec.Shard < 0 || spec.Shard >= spec.Shards {
		return fmt.Errorf("fleet shard: invalid share %d of %d", spec.Shard, spec.Shards)
	}
	opts := spec.Options
	if err := opts.validate(); err != nil {
		return fmt.Errorf("fleet shard: %w", err)
	}
	if spec.GCPercent != 0 {
		debug.SetGCPercent(spec.GCPercent)
	}
	if spec.MaxProcs > 0 {
		runtime.GOMAXPROCS(spec.MaxProcs)
	}
	f, closeIdle := newFleet(opts)
	defer closeIdle()
	roles, _ := assignRoles(opts)
	enc := json.NewEncoder(out)
	if err := enc.Encode(shardMessage{Ready: true}); err != nil {
		return fmt.Errorf("fleet shard: %w", err)
	}
	l, _ := r.ReadString('\n')
	var epoch int64
	if _, err := fmt.Sscanf(l, "start %d", &epoch); err != nil || epoch <= 0 {
		// Stopped before it started (another process failed, or the fleet was interrupted):
		// nothing ran, and the tally says so.
		return enc.Encode(shardMessage{Tally: f.rec.tally(0, 0)})
	}
	start := time.Unix(0, epoch)
	workersCtx, cancelWorkers := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWorkers()
	f.begin(start)
	allDone := f.startWorkers(workersCtx, start, roles, spec.Shard, spec.Shards)

	word := make(chan string, 1)
	go func() { // ends with the parent's word or its end of input
		l, _ := r.ReadString('\n')
		word <- strings.TrimSpace(l)
	}()
	var profiled chan error
	profCtx, stopProfile := context.WithCancel(ctx)
	defer stopProfile()
	if p := spec.Profile; p != nil && spec.Shard == 0 {
		profiled = make(chan error, 1)
		go func() { profiled <- profileShard(profCtx, start, *p) }()
	}
	tick := time.NewTicker(opts.ProgressPeriod)
	defer tick.Stop()
	stopCtx := ctx
	for stopping := false; !stopping; {
		select {
		case <-tick.C:
			s := f.snapshot()
			if err := enc.Encode(shardMessage{Progress: &s}); err != nil {
				return fmt.Errorf("fleet shard: %w", err)
			}
		case w := <-word:
			stopping = true
			if w != "stop" {
				done, cancel := context.WithCancel(ctx)
				cancel()
				stopCtx = done
			}
		case <-ctx.Done():
			stopping = true
		}
	}
	f.end(stopCtx, allDone, time.Now(), cancelWorkers)
	stopProfile() // a profile still running ends with the workers
	if profiled != nil {
		if err := <-profiled; err != nil {
			fmt.Fprintf(os.Stderr, "fleet shard %d: profile: %v\n", spec.Shard, err)
		}
	}
	t := f.rec.tally(f.startedCount(), time.Since(start))
	if err := enc.Encode(shardMessage{Tally: t}); err != nil {
		return fmt.Errorf("fleet shard: %w", err)
	}
	return nil
}

// profileShard profiles this process as p asks, its times counted from start.
func profileShard(ctx context.Context, start time.Time, p ShardProfile) error {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(time.Until(start.Add(p.After))):
	}
	_, err := ProfileProcess(ctx, p.Dir, p.Name, p.For, p.TraceFor)
	return err
}

// CPUProfileFile is where ProfileProcess writes its CPU profile: dir/<name>-fleet-cpu.pprof.
func CPUProfileFile(dir, name string) string { return filepath.Join(dir, name+"-fleet-cpu.pprof") }

// ProfileProcess records a CPU profile of this process for d into dir as CPUProfileFile says and
// returns it; over the first traceFor of it (0: none) it writes an execution trace as
// <name>-fleet.trace, and at its end the heap profile as <name>-fleet-heap.pprof (the heap as of
// the last collection: what each of the collector's cycles has to mark). ctx ending cuts it
// short.
func ProfileProcess(ctx context.Context, dir, name string, d, traceFor time.Duration) ([]byte, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		return nil, err
	}
	wait := func(d time.Duration) {
		select {
		case <-ctx.Done():
		case <-time.After(d):
		}
	}
	traceFor = min(traceFor, d)
	var tbuf bytes.Buffer
	traced := traceFor > 0 && trace.Start(&tbuf) == nil // fails only while another trace runs
	wait(traceFor)
	if traced {
		trace.Stop()
		_ = os.WriteFile(filepath.Join(dir, name+"-fleet.trace"), tbuf.Bytes(), 0o644)
	}
	wait(d - traceFor)
	pprof.StopCPUProfile()
	var heap bytes.Buffer
	if err := pprof.Lookup("heap").WriteTo(&heap, 0); err == nil {
		_ = os.WriteFile(filepath.Join(dir, name+"-fleet-heap.pprof"), heap.Bytes(), 0o644)
	}
	return buf.Bytes(), os.WriteFile(CPUProfileFile(dir, name), buf.Bytes(), 0o644)
}

// shard is the parent's view of one child.
type shard struct {
	index  int
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stderr *tailBuffer
	ready  chan struct{} // closed once it has said it is ready
	done   chan struct{} // closed once its output has ended and it has exited

	mu    sync.Mutex
	last  snapshot
	tally *tally
	err   error
}

// runSplit runs the fleet in f.opts.Processes children (see the top of this file) and merges
// their tallies into f's recorder, then reports as Run does.
func (f *fleet) runSplit(ctx context.Context) (*Report, error) {
	opts := f.opts
	_, nBad := assignRoles(opts)
	rep := newReport(opts, nBad)
	spec := shardSpec{Options: opts, Shards: opts.Processes, MaxProcs: runtime.GOMAXPROCS(0),
		GCPercent: gcPercent(), Profile: opts.ShardProfile}
	spec.Options.Processes = 0
	shards := make([]*shard, 0, opts.Processes)
	stopShards := func(word string) {
		for _, s := range shards {
			_, _ = io.WriteString(s.stdin, word+"\n")
			_ = s.stdin.Close()
		}
	}
	for i := range opts.Processes {
		spec.Shard = i
		s, err := startShard(opts.ShardCommand, spec)
		if err != nil {
			stopShards("interrupt")
			for _, s := range shards {
				<-s.done
			}
			return nil, fmt.Errorf("fleet: start process %d of %d: %w", i+1, opts.Processes, err)
		}
		shards = append(shards, s)
	}
	allDone := make(chan struct{})
	go func() { // joined below, through allDone
		for _, s := range shards {
			<-s.done
		}
		close(allDone)
	}()
	status := func() snapshot {
		sum := snapshot{Launched: true}
		for _, s := range shards {
			s.mu.Lock()
			sum = sum.add(s.last)
			s.mu.Unlock()
		}
		return sum
	}
	start, started := startShards(ctx, shards)
	if started {
		select { // the watch counts from the first arrival
		case <-time.After(time.Until(start)):
		case <-ctx.Done():
		}
		rep.StoppedBecause = f.watch(ctx, start, allDone, status)
	} else {
		rep.StoppedBecause = "interrupted"
	}
	stopAt := time.Now()
	word := "stop"
	if !started || ctx.Err() != nil {
		word = "interrupt"
	}
	stopShards(word)
	// Each child stops over the stop ramp and its grace; one that takes much longer is stuck.
	bound := time.NewTimer(opts.StopRamp + opts.StopGrace + time.Minute)
	defer bound.Stop()
	select {
	case <-allDone:
	case <-bound.C:
		for _, s := range shards {
			_ = s.cmd.Process.Kill()
		}
		<-allDone
	}
	elapsed := max(time.Since(start), 0)
	var errs []error
	workers := 0
	f.rec = newRecorder()
	f.rec.timeline = opts.timeline(start)
	for _, s := range shards {
		if s.err != nil || s.tally == nil {
			err := s.err
			if err == nil {
				err = errors.New("ended without its tally")
			}
			if tail := s.stderr.String(); tail != "" {
				err = fmt.Errorf("%w; its last output: %s", err, tail)
			}
			errs = append(errs, fmt.Errorf("process %d of %d: %w", s.index+1, len(shards), err))
			continue
		}
		f.rec.merge(s.tally)
		workers += s.tally.Started
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("fleet: %w", errors.Join(errs...))
	}
	f.progress(elapsed, true, f.snapshot().add(snapshot{Started: int64(workers), Launched: true}))
	f.complete(ctx, rep, max(stopAt.Sub(start), 0), elapsed, workers)
	return rep, nil
}

// startShards waits until every child is ready, then tells each the first arrival's time, which
// it returns. started is false, and no child is told, if a child ended first, the wait took
// longer than shardReadyWithin, or ctx ended.
func startShards(ctx context.Context, shards []*shard) (start time.Time, started bool) {
	bound := time.NewTimer(shardReadyWithin)
	defer bound.Stop()
	for _, s := range shards {
		select {
		case <-s.ready:
		case <-s.done:
			return time.Now(), false
		case <-bound.C:
			return time.Now(), false
		case <-ctx.Done():
			return time.Now(), false
		}
	}
	start = time.Now().Add(shardLead)
	line := fmt.Sprintf("start %d\n", start.UnixNano())
	for _, s := range shards {
		_, _ = io.WriteString(s.stdin, line) // a child gone meanwhile fails the fleet on its exit
	}
	return start, true
}

// gcPercent is this process's collector setting (GOGC), 0 if unknown.
func gcPercent() int {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int(s[0].Value.Uint64())
}

// startShard starts a child with command, gives it spec and follows its output.
func startShard(command []string, spec shardSpec) (*shard, error) {
	line, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	s := &shard{index: spec.Shard, cmd: exec.Command(command[0], command[1:]...), stderr: &tailBuffer{max: 4096},
		ready: make(chan struct{}), done: make(chan struct{})}
	s.cmd.Stderr = s.stderr
	if s.stdin, err = s.cmd.StdinPipe(); err != nil {
		return nil, err
	}
	stdout, err := s.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go s.follow(stdout) // joined through s.done
	if _, err := s.stdin.Write(append(line, '\n')); err != nil {
		_ = s.stdin.Close()
		return s, nil // its exit, and what it wrote on stderr, will say why
	}
	return s, nil
}

// follow reads the child's messages until its output ends, then waits for it to exit.
func (s *shard) follow(stdout io.Reader) {
	defer close(s.done)
	dec := json.NewDecoder(stdout)
	var readErr error
	readied := false
	for {
		var m shardMessage
		if err := dec.Decode(&m); err != nil {
			if !errors.Is(err, io.EOF) {
				readErr = fmt.Errorf("its output: %w", err)
				_, _ = io.Copy(io.Discard, stdout)
			}
			break
		}
		if m.Ready && !readied {
			readied = true
			close(s.ready)
		}
		s.mu.Lock()
		if m.Progress != nil {
			s.last = *m.Progress
		}
		if m.Tally != nil {
			s.tally = m.Tally
		}
		s.mu.Unlock()
	}
	err := s.cmd.Wait()
	s.mu.Lock()
	s.err = errors.Join(readErr, err)
	s.mu.Unlock()
}

// tailBuffer keeps the last max bytes written to it. Safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = slices.Delete(b.buf, 0, over)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(string(b.buf))
}

// tally is everything a recorder holds, in a form that crosses a pipe: what a process of a split
// fleet hands its parent.
type tally struct {
	Started   int                      `json:"started"` // workers started
	Endpoints map[string]endpointTally `json:"endpoints"`

	TooBusy      int64 `json:"too_busy"`
	TasksStarted int64 `json:"tasks_started"`
	Cancelled    int64 `json:"cancelled"`
	BadReplies   int64 `json:"bad_replies"`
	InDoubt      int64 `json:"in_doubt"`
	WinTooBusy   int64 `json:"window_too_busy"`

	HTTPErrors       map[int]int64    `json:"http_errors"`
	TransportErrors  int64            `json:"transport_errors"`
	TransportSamples []string         `json:"transport_samples"`
	AppErrors        map[string]int64 `json:"app_errors"`
	Accepted         []taskStats      `json:"accepted"`
	Unanswered       []taskStats      `json:"unanswered"`
	StartedTasks     []taskRef        `json:"started_tasks"`
	SharedTasks      int              `json:"shared_tasks"`
	Reclaimed        []taskRef        `json:"reclaimed"`
	Vanished         int              `json:"vanished"`
	BadBatches       int64            `json:"bad_batches"`
	ExitErrors       map[string]int   `json:"exit_errors"`
	FirstTasks       []time.Duration  `json:"first_tasks"`
	TasksEnded       map[string]int64 `json:"tasks_ended"`

	Timeline []TimelineSecond `json:"timeline,omitempty"`
	Sched    *schedHist       `json:"sched,omitempty"`
}

// taskRef names a task in a tally.
type taskRef struct {
	Run  string `json:"run"`
	Task int    `json:"task"`
}

// taskStats is a task's cumulative stats in a tally.
type taskStats struct {
	taskRef
	Stats protocol.Stats `json:"stats"`
}

// endpointTally is an endpointStats in a tally.
type endpointTally struct {
	Lat, Win                                              histTally
	Requests, WinRequests, HTTPErrors, Transport, AppErrs int64
}

// histTally is a histogram in a tally: its non-empty buckets, as (bucket, count) pairs.
type histTally struct {
	Buckets [][2]uint64 `json:"buckets"`
	N       uint64      `json:"n"`
	Sum     int64       `json:"sum_ns"`
	Max     int64       `json:"max_ns"`
}

func (h *histogram) tally() histTally {
	t := histTally{N: h.n.Load(), Sum: h.sum.Load(), Max: h.max.Load()}
	for i := range h.counts {
		if n := h.counts[i].Load(); n > 0 {
			t.Buckets = append(t.Buckets, [2]uint64{uint64(i), n})
		}
	}
	return t
}

// merge adds t's durations to h.
func (h *histogram) merge(t histTally) {
	for _, b := range t.Buckets {
		if b[0] < nBuckets {
			h.counts[b[0]].Add(b[1])
		}
	}
	h.n.Add(t.N)
	h.sum.Add(t.Sum)
	for m := h.max.Load(); t.Max > m && !h.max.CompareAndSwap(m, t.Max); m = h.max.Load() {
	}
}

// tally is what r holds, once its workers have stopped; started is how many started and
// elapsed how long they ran (for the timeline).
func (r *recorder) tally(started int, elapsed time.Duration) *tally {
	t := &tally{Started: started, Endpoints: map[string]endpointTally{},
		TooBusy: r.tooBusy.Load(), TasksStarted: r.tasksStarted.Load(),
		Cancelled: r.cancelled.Load(), BadReplies: r.badReplies.Load(), InDoubt: r.inDoubt.Load(),
		WinTooBusy: r.winTooBusy.Load(), Sched: r.sched.result()}
	if r.timeline != nil {
		t.Timeline = r.timeline.seconds(elapsed)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for name, e := range r.endpoints {
		t.Endpoints[name] = endpointTally{Lat: e.lat.tally(), Win: e.win.tally(),
			Requests: e.requests.Load(), WinRequests: e.winRequests.Load(),
			HTTPErrors: e.httpErrs.Load(), Transport: e.transport.Load(), AppErrs: e.appErrs.Load()}
	}
	t.HTTPErrors, t.AppErrors, t.ExitErrors = r.httpErrors, r.appErrors, r.exitErrors
	t.TransportErrors, t.TransportSamples = r.transportErrors, r.transportSamples
	for k, st := range r.accepted {
		t.Accepted = append(t.Accepted, taskStats{taskRef{k.run, k.task}, st})
	}
	for k, st := range r.unanswered {
		t.Unanswered = append(t.Unanswered, taskStats{taskRef{k.run, k.task}, st})
	}
	for k := range r.started {
		t.StartedTasks = append(t.StartedTasks, taskRef{k.run, k.task})
	}
	for k := range r.reclaimed {
		t.Reclaimed = append(t.Reclaimed, taskRef{k.run, k.task})
	}
	t.SharedTasks, t.Vanished, t.BadBatches = r.sharedTasks, r.vanished, r.badBatches
	t.FirstTasks = r.firstTasks
	t.TasksEnded = make(map[string]int64, len(r.tasksEnded))
	for how, n := range r.tasksEnded {
		t.TasksEnded[string(how)] = n
	}
	return t
}

// merge adds a process's tally to r, as if its workers had been r's own. A task whose updates
// two processes had accepted was handed out twice, and counts as shared.
func (r *recorder) merge(t *tally) {
	for name, et := range t.Endpoints {
		e := r.endpoint(name)
		e.lat.merge(et.Lat)
		e.win.merge(et.Win)
		e.requests.Add(et.Requests)
		e.winRequests.Add(et.WinRequests)
		e.httpErrs.Add(et.HTTPErrors)
		e.transport.Add(et.Transport)
		e.appErrs.Add(et.AppErrs)
	}
	r.tooBusy.Add(t.TooBusy)
	r.tasksStarted.Add(t.TasksStarted)
	r.cancelled.Add(t.Cancelled)
	r.badReplies.Add(t.BadReplies)
	r.inDoubt.Add(t.InDoubt)
	r.winTooBusy.Add(t.WinTooBusy)
	r.sched.set(r.sched.result().merge(t.Sched))
	if r.timeline != nil {
		r.timeline.add(t.Timeline)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for code, n := range t.HTTPErrors {
		r.httpErrors[code] += n
	}
	for kind, n := range t.AppErrors {
		r.appErrors[kind] += n
	}
	for msg, n := range t.ExitErrors {
		r.exitErrors[msg] += n
	}
	r.transportErrors += t.TransportErrors
	for _, msg := range t.TransportSamples {
		if len(r.transportSamples) < maxTransportSamples && !contains(r.transportSamples, msg) {
			r.transportSamples = append(r.transportSamples, msg)
		}
	}
	for _, a := range t.Accepted {
		k := taskKey{a.Run, a.Task}
		prev, ok := r.accepted[k]
		if ok {
			r.sharedTasks++
			if games(a.Stats) < games(prev) {
				continue
			}
		}
		r.accepted[k] = a.Stats
		r.games.Add(int64(games(a.Stats) - games(prev))) // each game once, as accept counts them
	}
	for _, u := range t.Unanswered {
		k := taskKey{u.Run, u.Task}
		if games(u.Stats) > games(r.unanswered[k]) {
			r.unanswered[k] = u.Stats
		}
	}
	for _, k := range t.StartedTasks {
		r.started[taskKey{k.Run, k.Task}] = true
	}
	for _, k := range t.Reclaimed {
		r.reclaimed[taskKey{k.Run, k.Task}] = true
	}
	r.sharedTasks += t.SharedTasks
	r.vanished += t.Vanished
	r.badBatches += t.BadBatches
	r.firstTasks = append(r.firstTasks, t.FirstTasks...)
	if r.tasksEnded == nil {
		r.tasksEnded = map[worker.TaskEnd]int64{}
	}
	for how, n := range t.TasksEnded {
		r.tasksEnded[worker.TaskEnd(how)] += n
	}
}
