package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/stats"
)

// Reply texts of request_task, as fishtest words them (workers print them).
const (
	TooBusy = "Request_task: the server is currently too busy..."
)

// TaskReply is request_task's answer: either a task (RunID, Args, Task, TaskID) or no task, with
// an optional Info or Error.
type TaskReply struct {
	Waiting bool // no task: {"task_waiting": false}
	Info    string
	Error   string

	RunID  rundb.ObjectID
	Args   json.RawMessage // the run's args, as the worker needs them
	TaskID int
	Task   TaskSummary

	stored func(context.Context) error // see Stored
}

// Stored waits until the task the reply hands out is stored, and returns why not if it cannot
// be: the reply must not be sent before Stored returned nil (see Reply.Stored).
func (r TaskReply) Stored(ctx context.Context) error {
	if r.stored == nil {
		return nil
	}
	return r.stored(ctx)
}

// TaskSummary is the part of the task a worker starts from.
type TaskSummary struct {
	NumGames int           `json:"num_games"`
	Start    int           `json:"start"`
	Stats    rundb.Results `json:"stats"`
}

// candidate is what the choice of a run needs to know about it, copied out under its lock.
type candidate struct {
	id                  rundb.ObjectID
	finished, approved  bool
	priority, itp       float64
	cores, threads      int
	numGames, committed int
	hashMB              int
	spsaParams          int
	archFilter          string
	compiler            string
}

// RequestTask finds a task for a worker, by fishtest's rules: at most TaskSemaphoreSize callers
// get in (the others are told at once that the server is busy), one of them chooses at a time,
// and the chosen run gets a new task sized to keep the worker busy for TaskDuration.
// machineLimit is the worker's user's limit of active tasks per IP address; hostURL goes into
// the blocked-worker message. The reply may be sent once its Stored returned nil.
func (s *Scheduler) RequestTask(ctx context.Context, wi rundb.WorkerInfo, machineLimit int, hostURL string) (TaskReply, error) {
	if err := s.calls.enter(); err != nil {
		return TaskReply{}, err
	}
	defer s.calls.leave()

	// Before the slot: is the worker blocked? An in-memory copy of the workers collection
	// answers; it is read from the database (through DBGate) only at the first call and by one
	// caller every UserCacheTTL, so a storm of new workers makes no database read. A slot
	// covers only the in-memory decision.
	name := wi.ShortName()
	w, err := s.db.workers.GetCached(ctx, name, s.dbGate)
	switch {
	case err == nil && w.Blocked:
		// The record notes when the blocked worker last tried.
		if err := s.dbGate(ctx, func(ctx context.Context) error { return s.db.workers.Put(ctx, w) }); err != nil {
			s.logger.Warn("update blocked worker", "worker", name, "err", err)
		}
		return TaskReply{Waiting: true, Error: blockedMessage(name, w.Message, hostURL)}, nil
	case err != nil && !errors.Is(err, rundb.ErrNotFound):
		return TaskReply{}, err
	}
	s.clearLifted(name)

	n := s.inside.Add(1)
	// The slot is given back once the decision is made: what follows it (the event log, the
	// wait for the task's journal record) must not turn other workers away as "too busy".
	var slotFreed bool
	freeSlot := func() {
		if !slotFreed {
			slotFreed = true
			s.inside.Add(-1)
		}
	}
	defer freeSlot()
	if n > s.taskLimit.Load() {
		s.cfg.Metrics.TooBusy()
		return TaskReply{Waiting: true, Info: TooBusy}, nil
	}
	for peak := s.peakInside.Load(); n > peak && !s.peakInside.CompareAndSwap(peak, n); peak = s.peakInside.Load() {
	}

	ev := newEvents()
	defer ev.release()
	reply, stored, ok := s.decide(ctx, wi, name, machineLimit, ev)
	freeSlot()
	if ok {
		s.cfg.Metrics.TaskAssigned()
	}
	// After the slot, the event log (rare: a worker whose architecture a run's filter cannot
	// read), once the scheduling lock is free: a slow database must not hold up the next worker.
	if len(ev.actions) > 0 {
		_ = s.dbGate(ctx, func(ctx context.Context) error { s.writeEvents(ctx, ev); return nil })
	}
	// The caller waits for the task's record with Stored once it lets go of its own token. If
	// the record is not stored the task stays made in memory but the worker is not told of it:
	// it is scavenged as dead in time, as one whose worker vanished would be.
	reply.stored = stored
	return reply, nil
}

// decide is request_task's critical section, under requestMu: the choice of a run, the new task,
// and the worker's entries in the scheduler's maps.
func (s *Scheduler) decide(ctx context.Context, wi rundb.WorkerInfo, name string, machineLimit int, ev *events) (TaskReply, func(context.Context) error, bool) {
	s.requestMu.Lock()
	defer s.requestMu.Unlock() // a panic here must not block every later request_task
	locked := time.Now()       // the real clock: s.now may be a test's
	defer func() { s.cfg.Metrics.ObserveCriticalSection(time.Since(locked)) }()
	now := s.now()
	reply, ref, stored, ok := s.choose(ctx, wi, name, machineLimit, now, ev)
	if ok {
		s.insertInWtt(ctx, name, ref, now, ev)
		s.mu.Lock()
		if s.workerRuns[name] == nil {
			s.workerRuns[name] = make(map[string]bool)
		}
		s.workerRuns[name][ref.run.Hex()] = true
		s.lastRun[name] = ref.run.Hex()
		s.mu.Unlock()
	}
	return reply, stored, ok
}

// choose picks a run and creates the task; ok is false when reply is a refusal. stored waits
// until the task is stored (see createTask).
func (s *Scheduler) choose(ctx context.Context, wi rundb.WorkerInfo, name string, machineLimit int, now time.Time, ev *events) (reply TaskReply, ref taskRef, stored func(context.Context) error, ok bool) {
	// A worker with the same name that is still working and reported recently means two
	// machines share a name.
	s.mu.Lock()
	prev, known := s.wtt[name]
	connections := s.connections[wi.RemoteAddr]
	lastRun := s.lastRun[name]
	var built map[string]bool
	if wi.NearGithubAPILimit {
		built = maps.Clone(s.workerRuns[name]) // CleanWorkerRuns prunes the original
	}
	s.mu.Unlock()
	if known {
		var dup string
		_ = s.runs.View(ctx, prev.run, func(r *rundb.Run) {
			if prev.task >= len(r.Tasks) {
				return
			}
			t := r.Tasks[prev.task]
			if !t.Active || t.WorkerInfo.UniqueKey == wi.UniqueKey {
				return
			}
			if ago := pySeconds(now.Sub(t.LastUpdated)); ago <= int(s.cfg.DuplicateWorkerWindow/time.Second) {
				dup = fmt.Sprintf(`Request_task: There is already a worker running with name "%s" which %d seconds ago sent an update for task %s/%d (my name is "%s")`,
					t.WorkerInfo.LongName(), ago, r.ID.Hex(), prev.task, wi.LongName())
			}
		})
		if dup != "" {
			return TaskReply{Waiting: true, Error: dup}, taskRef{}, nil, false
		}
	}
	if connections >= machineLimit {
		return TaskReply{Waiting: true, Error: "Request_task: Machine limit reached for user " + wi.Username}, taskRef{}, nil, false
	}

	maxThreads, minThreads, maxMemory := wi.Concurrency, max(wi.MinThreads, 1), wi.MaxMemory
	cands := s.candidates(ctx)
	for _, rk := range s.sortCandidates(cands, lastRun, maxThreads) {
		c := &cands[rk.i]
		if c.finished || !c.approved || c.threads > maxThreads || c.threads < minThreads {
			continue
		}
		if c.numGames-c.committed <= 0 {
			continue
		}
		perWorker := maxThreads / c.threads
		needTT := c.hashMB * perWorker
		needBase := 220 + 2*80 + 64 + 2*perWorker*(12+139+31*c.threads)
		if needBase+needTT > maxMemory {
			continue
		}
		if wi.NearGithubAPILimit && !built[c.id.Hex()] {
			continue
		}
		if c.spsaParams > 0 && float64(c.cores) > 200000/math.Sqrt(float64(c.spsaParams)) {
			continue
		}
		if c.archFilter != "" && !s.archMatches(c.archFilter, wi.WorkerArch, ev) {
			continue
		}
		if c.compiler != "" && c.compiler != wi.Compiler {
			continue
		}
		return s.createTask(ctx, c.id, wi, now)
	}
	return TaskReply{Waiting: true}, taskRef{}, nil, false
}

// rank is a candidate's place in the order runs are offered to a worker: its index in the
// candidates and its sort keys beyond priority (see sortCandidates). Sorting these small
// values rather than the candidates themselves moves a fifth of the bytes.
type rank struct {
	i        int
	busy     bool
	priority float64
	load     float64
}

// sortCandidates returns the order in which the runs are offered to a worker of maxThreads
// threads whose last task was in run lastRun (a hex ID, or ""): highest priority first, then
// runs no one works on, then the fewest cores (counting the worker's own in its last run) for
// the internal throughput. The sort is stable, so ties keep the runs' age order. The keys are
// computed once per run, not once per comparison. The result reuses s.ranks: requestMu must
// be held.
func (s *Scheduler) sortCandidates(cands []candidate, lastRun string, maxThreads int) []rank {
	last, err := rundb.ParseObjectID(lastRun)
	hasLast := err == nil
	order := s.ranks[:0]
	for i := range cands {
		c := &cands[i]
		cores := c.cores
		if hasLast && c.id == last {
			cores += maxThreads
		}
		order = append(order, rank{i: i, busy: cores > 0, priority: c.priority,
			load: (float64(cores) + float64(maxThreads)/2) / c.itp})
	}
	s.ranks = order
	// Only "a before b" (a negative result) matters to the sort; the comparisons are written
	// as the less-than they replace, so that NaNs order as they always did.
	slices.SortStableFunc(order, func(a, b rank) int {
		switch {
		case a.priority != b.priority:
			if a.priority > b.priority {
				return -1
			}
			return 1
		case a.busy != b.busy:
			if !a.busy {
				return -1
			}
			return 1
		case a.load < b.load:
			return -1
		}
		return 1
	})
	return order
}

// candidates copies out what the choice needs from every unfinished run, in age order. The
// result reuses s.cands, kept between calls: requestMu must be held.
func (s *Scheduler) candidates(ctx context.Context) []candidate {
	out := s.cands[:0]
	s.runs.ViewEach(ctx, s.unfinishedIDs(), func(id rundb.ObjectID, r *rundb.Run, err error) {
		if err != nil {
			s.logger.Warn("read run for scheduling", "run_id", id, "err", err)
			return
		}
		c := candidate{
			id: id, finished: r.Finished, approved: r.Approved, priority: r.Args.Priority,
			itp: r.Args.ITP, cores: r.Cores, threads: r.Args.Threads, numGames: r.Args.NumGames,
			committed: r.CommittedGames, archFilter: r.Args.ArchFilter, compiler: r.Args.Compiler,
			hashMB: hashMB(r.Args.NewOptions) + hashMB(r.Args.BaseOptions),
		}
		if r.Args.SPSA != nil {
			c.spsaParams = len(r.Args.SPSA.Params)
		}
		if c.itp <= 0 {
			c.itp = 1
		}
		if c.threads < 1 {
			c.threads = 1
		}
		out = append(out, c)
	})
	s.cands = out
	return out
}

// createTask appends a task for the worker to the run, re-checking that the run still needs
// games now that its lock is held. It returns as soon as the task is made; stored waits for its
// journal record, which the caller does once it no longer holds the scheduling lock.
func (s *Scheduler) createTask(ctx context.Context, id rundb.ObjectID, wi rundb.WorkerInfo, now time.Time) (TaskReply, taskRef, func(context.Context) error, bool) {
	var reply TaskReply
	var ref taskRef
	stored, err := s.runs.ChangeDurably(ctx, id, -1, func(r *rundb.Run) (runcache.Prio, error) {
		remaining := r.Args.NumGames - r.CommittedGames
		if r.Finished || remaining <= 0 {
			reply = TaskReply{Waiting: true, Info: fmt.Sprintf(
				"Request_task: alas the run %s corresponding to the assigned task no longer needs games. Please try again...", id.Hex())}
			return 0, runcache.ErrUnchanged
		}
		if r.Args.SPRT != nil {
			b := batchGames(r)
			remaining = b * ((remaining + b - 1) / b)
		}
		size := min(s.workerCap(r, wi), remaining)
		t := rundb.Task{NumGames: size, Active: true, WorkerInfo: wi, LastUpdated: now,
			Start: r.TotalGames, Stats: rundb.NewResults()}
		// The worker checks the book it downloads against book_sri, added when the book is
		// known, as fishtest does.
		args, err := taskArgs(&r.Args, s.bookChecksum(r.Args.Book))
		if err != nil {
			return 0, fmt.Errorf("encode args of run %s: %w", id, err)
		}
		r.Tasks = append(r.Tasks, t)
		r.Workers++
		r.Cores += wi.Concurrency
		r.CommittedGames += size
		r.TotalGames += size
		s.mu.Lock()
		s.connections[wi.RemoteAddr]++
		s.mu.Unlock()
		ref = taskRef{run: id, task: len(r.Tasks) - 1}
		reply = TaskReply{RunID: id, Args: args, TaskID: ref.task,
			Task: TaskSummary{NumGames: size, Start: t.Start, Stats: rundb.NewResults()}}
		return runcache.PrioHigh, nil
	})
	if err != nil {
		s.logger.Error("create task", "run_id", id, "err", err)
		return TaskReply{Waiting: true}, taskRef{}, nil, false
	}
	return reply, ref, stored, !reply.Waiting
}

// taskArgs is the args of request_task's reply: the run's, with book_sri when the book's
// checksum is known. The args are embedded by pointer, which encoding/json writes as it does
// the value, so that the run's args (some 450 bytes) are not copied to the heap.
func taskArgs(args *rundb.RunArgs, bookSRI string) ([]byte, error) {
	return json.Marshal(&struct {
		*rundb.RunArgs
		BookSRI string `json:"book_sri,omitempty"`
	}{args, bookSRI})
}

// workerCap is the number of games that keeps a worker busy for TaskDuration: a whole number
// of SPRT batches (or pairs), at least one.
func (s *Scheduler) workerCap(r *rundb.Run, wi rundb.WorkerInfo) int {
	gameTime, err := stats.EstimateGameDuration(r.Args.TC)
	if err != nil || gameTime <= 0 {
		gameTime = 1
	}
	concurrency := max(wi.Concurrency/max(r.Args.Threads, 1), 1)
	games := min(s.cfg.TaskDuration.Seconds()/gameTime*float64(concurrency), maxTaskGames)
	b := batchGames(r)
	return max(b, b*int(games/float64(b)+0.5))
}

// maxTaskGames caps a task's games, whatever its worker's size: one task must not take a
// run's games from every other worker (a worker of a thousand cores at a short time control
// would otherwise be handed about a hundred thousand).
const maxTaskGames = 20_000

// batchGames is the number of games a task's size is a multiple of: the SPRT's batch of game
// pairs, or one pair for other runs.
func batchGames(r *rundb.Run) int {
	if r.Args.SPRT == nil {
		return 2
	}
	return 2 * max(r.Args.SPRT.BatchSize, 1)
}

// insertInWtt records the worker's new task; a still-active older task of the same worker
// (same short name) is failed as stale, since the worker has evidently moved on.
func (s *Scheduler) insertInWtt(ctx context.Context, name string, ref taskRef, now time.Time, ev *events) {
	s.mu.Lock()
	prev, known := s.wtt[name]
	s.wtt[name] = ref
	s.mu.Unlock()
	if known && prev != ref {
		s.failTask(ctx, prev, "Stale active task", metrics.ReasonStale, buildReport{}, now, ev)
	}
}

// archMatches reports whether the run's arch filter (a regular expression) finds the worker's
// arch. A filter that does not compile does not exclude anyone; it is logged once.
func (s *Scheduler) archMatches(filter, arch string, ev *events) bool {
	s.mu.Lock()
	re, seen := s.archRE[filter]
	if !seen {
		var err error
		re, err = regexp.Compile(filter)
		if err != nil {
			re = nil
			msg := fmt.Sprintf("Matching %s against %s failed: %v", arch, filter, err)
			s.logger.Warn(msg)
			ev.add(&rundb.Action{Action: "log_message", Username: systemUser, Message: msg})
		}
		s.archRE[filter] = re
	}
	s.mu.Unlock()
	return re == nil || re.MatchString(arch)
}

// hashMB is the Hash=N option of an engine option string, in MiB (0 if absent).
func hashMB(options string) int {
	i := strings.Index(options, "Hash=")
	if i < 0 {
		return 0
	}
	j := i + len("Hash=")
	k := j
	for k < len(options) && options[k] >= '0' && options[k] <= '9' {
		k++
	}
	n, _ := strconv.Atoi(options[j:k])
	return n
}

// pySeconds is Python's timedelta.seconds: whole seconds modulo a day, floored, so that the
// duplicate-worker check behaves exactly as fishtest's (which reads .seconds, not the total).
func pySeconds(d time.Duration) int {
	secs := int64(math.Floor(d.Seconds()))
	m := secs % 86400
	if m < 0 {
		m += 86400
	}
	return int(m)
}

// blockedMessage is the banner a blocked worker prints.
func blockedMessage(name, message, hostURL string) string {
	return fmt.Sprintf(`

**********************************************************************
Request_task: This worker has been blocked!
%s
You may possibly find more information at
%s/actions?text=%%22%s%%22.
After fixing the issues you can unblock the worker at
%s/workers/%s.
**********************************************************************
`, wrap("Message: "+message, 70), hostURL, name, hostURL, name)
}

// wrap folds text at spaces into lines of at most width characters.
func wrap(text string, width int) string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	return strings.Join(append(lines, line), "\n")
}
