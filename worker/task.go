package worker

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker/build"
)

// taskRun is the state of the task being played. Only the task's goroutine touches it, except
// lastUpdated, which the heartbeat shares.
type taskRun struct {
	w       *Worker
	task    Task
	cum     protocol.Stats // cumulative for the task, what update_task sends
	played  int            // games in cum
	pgn     []string       // the PGN of every batch the server recorded
	spsa    bool
	stopped string // why a graceful stop ended the task, "" if it did not

	// lastUpdated is the unix-nano time of the last successful update or beat (or of the task's
	// start): the heartbeat beats when it is a heartbeat period old.
	lastUpdated atomic.Int64
	// beatPeriod is the heartbeat's period, and beatTimer the heartbeat's wake-up, which an update
	// moves to the new due time (reported): without that, the heartbeat would wake at the due time
	// of the report before, only to find it postponed and sleep again, a wake-up per update for
	// nothing. The heartbeat still beats by lastUpdated alone; the timer only wakes it.
	beatPeriod time.Duration
	beatTimer  *time.Timer
}

// reported records a successful update at the current time: the heartbeat's next beat is a
// period later. Its timer is moved there, so that the heartbeat sleeps through.
func (t *taskRun) reported() {
	t.lastUpdated.Store(time.Now().UnixNano())
	t.beatTimer.Reset(t.beatPeriod) // a period from now: from the time just stored, or later
}

// handleTask plays one task to its end and tells the server how it ended. success false means
// back off (the task failed). err is only ctx's: the worker vanished.
func (w *Worker) handleTask(ctx context.Context, run *protocol.TaskRun, taskID int) (success bool, err error) {
	args, err := run.ParseArgs()
	if err != nil {
		w.log.Warn("Invalid task", "run", run.ID, "task", taskID, "err", err)
		return false, w.failTask(ctx, "failed_task", run.ID, taskID, err.Error())
	}
	t := &taskRun{w: w, spsa: args.SPSA != nil, task: Task{
		RunID: run.ID, TaskID: taskID, NumGames: run.MyTask.NumGames, Start: run.MyTask.Start, Args: args,
	}}
	if run.MyTask.Stats != nil {
		t.cum = *run.MyTask.Stats // a resumed task: its games so far count
		t.played = t.cum.Wins + t.cum.Losses + t.cum.Draws
	}
	if w.obs != nil {
		w.obs.TaskStarted(run.ID, taskID, t.task.NumGames)
	}
	w.log.Info("Working on task", "run", run.ID, "task", taskID, "games", t.task.NumGames,
		"tc", args.TC, "threads", args.Threads, "sprt", args.SPRT != nil, "spsa", args.SPSA != nil)

	remaining := t.task.NumGames - t.played
	if remaining <= 0 || remaining%2 != 0 {
		msg := fmt.Sprintf("task %s/%d has %d games left (of %d): want a positive even number", run.ID, taskID, remaining, t.task.NumGames)
		if w.obs != nil {
			w.obs.TaskEnded(run.ID, taskID, TaskFailed)
		}
		return false, w.failTask(ctx, "failed_task", run.ID, taskID, msg)
	}

	taskCtx, cancelTask := context.WithCancelCause(ctx)
	t.lastUpdated.Store(time.Now().UnixNano())
	t.beatPeriod = max(w.scaled(heartbeatPeriod), minHeartbeat)
	t.beatTimer = time.NewTimer(t.beatPeriod)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t.heartbeat(taskCtx, cancelTask)
	}()
	endpoint, message, err := t.play(ctx, taskCtx, remaining)
	abandoned := t.abandoned(taskCtx)
	cancelTask(nil)
	<-done
	if w.obs != nil {
		w.obs.TaskEnded(run.ID, taskID, taskEnd(err, endpoint, t.stopped, abandoned))
	}
	if err != nil {
		return false, err
	}
	switch {
	case endpoint != "":
		w.log.Warn("Exception running games: "+message, "run", run.ID, "task", taskID)
		if err := w.failTask(ctx, endpoint, run.ID, taskID, message); err != nil {
			return false, err
		}
	case t.stopped != "":
		if err := w.failTask(ctx, "failed_task", run.ID, taskID, "Task stopped by "+t.stopped+"."); err != nil {
			return false, err
		}
	}
	if err := t.uploadPGN(ctx); err != nil {
		return false, err
	}
	w.log.Info("Task exited", "run", run.ID, "task", taskID, "games", t.played)
	return endpoint == "", nil
}

// taskEnd names how a task ended from what play returned.
func taskEnd(err error, endpoint, stopped string, abandoned bool) TaskEnd {
	switch {
	case err != nil:
		return TaskInterrupted
	case endpoint == "stop_run":
		return TaskStoppedRun
	case endpoint != "":
		return TaskFailed
	case stopped != "":
		return TaskStopped
	case abandoned:
		return TaskAbandoned
	}
	return TaskFinished
}

// play plays the task's remaining games in batches, reporting each. It returns the endpoint and
// message to tell the server when the task failed ("failed_task" or "stop_run"), or "" when it
// ended normally: all games played, the server said task_alive false, a beat abandoned it, or a
// graceful stop (t.stopped). err is ctx's.
func (t *taskRun) play(ctx, taskCtx context.Context, remaining int) (endpoint, message string, err error) {
	w := t.w
	batchGames := w.batchGames(t.task.Args)
	for remaining > 0 {
		if reason := w.stopReason(); reason != "" {
			t.stopped = reason
			return "", "", nil
		}
		games := min(batchGames, remaining)
		batchTask := t.task
		batchTask.Start = t.task.Start + t.played

		var params *SPSAParams
		if t.spsa {
			var alive bool
			params, alive, message = t.requestSPSA(taskCtx)
			switch {
			case ctx.Err() != nil:
				return "", "", ctx.Err()
			case t.abandoned(taskCtx):
				return "", "", nil
			case message != "":
				return "failed_task", message, nil
			case !alive:
				w.log.Info("The server told us that no more games are needed for the current task.")
				return "", "", nil
			}
		}

		batch, err := w.src.Play(taskCtx, batchTask, games/2, params)
		switch {
		case ctx.Err() != nil:
			return "", "", ctx.Err()
		case t.abandoned(taskCtx):
			return "", "", nil
		case err != nil:
			if re := (*RunError)(nil); errors.As(err, &re) {
				return "stop_run", re.Message, nil
			}
			if be := (*build.Error)(nil); errors.As(err, &be) {
				// The server counts the workers that failed to build a run by this message.
				return "failed_task", be.Message(), nil
			}
			return "failed_task", err.Error(), nil
		}
		if msg := checkBatch(batch.Stats, games); msg != "" {
			return "failed_task", "game source: " + msg, nil
		}
		prev := t.cum
		t.cum = t.cum.Add(batch.Stats)
		t.played += games
		remaining -= games

		var spsaResult *protocol.SPSAResult
		if params != nil {
			spsaResult = &protocol.SPSAResult{Wins: batch.Stats.Wins, Losses: batch.Stats.Losses,
				Draws: batch.Stats.Draws, NumGames: games, Sig: int(params.Sig)}
		}
		alive, recorded, failure, err := t.update(ctx, spsaResult)
		if err != nil {
			return "", "", err
		}
		if recorded {
			t.pgn = append(t.pgn, batch.PGN)
		}
		if failure != "" {
			t.cum, t.played = prev, t.played-games
			return "failed_task", failure, nil
		}
		if !alive {
			w.log.Info("The server told us that no more games are needed for the current task.")
			return "", "", nil
		}
		if t.abandoned(taskCtx) {
			return "", "", nil
		}
	}
	return "", "", nil
}

// abandoned reports whether a beat told the worker to drop the task.
func (t *taskRun) abandoned(taskCtx context.Context) bool {
	return errors.Is(context.Cause(taskCtx), errAbandoned)
}

// batchGames is how many games are played between two updates: 2*batch_size for SPRT (the server
// refuses other multiples), else fishtest's 4 games per concurrent game (its LTC-ratio factor is
// left out: a batch is sized by games here, and a simulated game has no TC).
func (w *Worker) batchGames(a protocol.RunArgs) int {
	if a.SPRT != nil {
		return 2 * max(a.SPRT.BatchSize, 1)
	}
	return 4 * max(w.info.Concurrency/max(a.Threads, 1), 1)
}

// requestSPSA asks for the perturbed parameters of the next batch. message is set when the task
// must fail (transport error, invalid reply, an "error" key); alive false ends the task normally.
func (t *taskRun) requestSPSA(taskCtx context.Context) (params *SPSAParams, alive bool, message string) {
	r, err := t.w.postRetrying(taskCtx, "request_spsa", t.w.taskRequest(t.task.RunID, t.task.TaskID))
	if err != nil {
		return nil, false, "request_spsa: " + err.Error()
	}
	if msg, bad := r.errorMessage(); bad {
		return nil, false, msg
	}
	var sr protocol.SPSAReply
	if err := r.decode(&sr); err != nil {
		return nil, false, "request_spsa: invalid reply: " + err.Error()
	}
	if !r.has("task_alive") {
		return nil, false, "request_spsa: invalid reply: no task_alive"
	}
	if !sr.TaskAlive {
		return nil, false, ""
	}
	if msg := t.checkSPSAParams(sr); msg != "" {
		return nil, false, "request_spsa: invalid reply: " + msg
	}
	return &SPSAParams{W: sr.WParams, B: sr.BParams, Sig: sr.Sig}, true, ""
}

// checkSPSAParams returns what is wrong with request_spsa's parameters, "" if nothing: one
// named value for white and one for black per parameter of the run, as fishtest's worker reads
// them (it fails the task on a missing key).
func (t *taskRun) checkSPSAParams(sr protocol.SPSAReply) string {
	var want []string
	if a := t.task.Args.SPSA; a != nil {
		for _, p := range a.Params {
			want = append(want, p.Name)
		}
	}
	if len(sr.WParams) != len(want) || len(sr.BParams) != len(want) {
		return fmt.Sprintf("%d w_params and %d b_params for %d parameters", len(sr.WParams), len(sr.BParams), len(want))
	}
	for i, name := range want {
		if sr.WParams[i].Name != name || sr.BParams[i].Name != name {
			return fmt.Sprintf("parameter %d is %q (white) and %q (black), want %q", i, sr.WParams[i].Name, sr.BParams[i].Name, name)
		}
	}
	return ""
}

// update sends the cumulative stats, up to 5 times while the call fails in transport or the
// reply is not JSON (retryDelay apart: 15 s, scaled), as fishtest's worker. recorded: the server took the stats (Observer.Accepted
// was called). failure: the message for failed_task when no attempt succeeded or the server
// answered with an "error". err is ctx's.
func (t *taskRun) update(ctx context.Context, spsa *protocol.SPSAResult) (alive, recorded bool, failure string, err error) {
	w := t.w
	req := w.taskRequest(t.task.RunID, t.task.TaskID)
	stats := t.cum
	req.Stats = &stats
	req.SPSA = spsa
	for attempt := 1; attempt <= updateAttempts; attempt++ {
		r, err := w.post(ctx, "update_task", req)
		if err != nil {
			if w.obs != nil {
				w.obs.Unanswered(t.task.RunID, t.task.TaskID, stats)
			}
			if ctx.Err() != nil {
				return false, false, "", ctx.Err()
			}
		}
		// A reply that arrived is taken in even if ctx ended meanwhile: the server recorded
		// what it acknowledged, and the observer must hear of it. ctx's error, if any, still
		// ends the task.
		if err == nil && !r.hasError() && !r.has("task_alive") {
			err = fmt.Errorf("update_task: no task_alive: %w", errInvalidReply)
		}
		if err == nil {
			if msg, bad := r.errorMessage(); bad {
				return false, false, "update_task refused: " + msg, ctx.Err()
			}
			alive = r.taskAlive(false)
			// "task R/T is not active" comes with info and task_alive false: nothing recorded.
			recorded = alive || !r.has("info")
			if recorded && w.obs != nil {
				w.obs.Accepted(t.task.RunID, t.task.TaskID, stats, alive)
			}
			if alive {
				t.reported()
			}
			return alive, recorded, "", ctx.Err()
		}
		w.log.Warn("Exception calling update_task", "attempt", attempt, "err", err)
		if attempt < updateAttempts {
			if err := sleep(ctx, w.retryDelay()); err != nil {
				return false, false, "", err
			}
		}
	}
	return false, false, "Too many failed update attempts.", nil
}

// heartbeat beats while the task runs, whenever nothing was reported for a heartbeat period,
// and abandons the task when the server says it is no longer alive (or answers with an error),
// as fishtest's heartbeat thread. It returns when taskCtx ends.
func (t *taskRun) heartbeat(taskCtx context.Context, abandon context.CancelCauseFunc) {
	w := t.w
	period, timer := t.beatPeriod, t.beatTimer
	defer timer.Stop()
	for {
		due := time.Unix(0, t.lastUpdated.Load()).Add(period)
		if wait := time.Until(due); wait > 0 {
			timer.Reset(wait)
			select {
			case <-taskCtx.Done():
				return
			case <-timer.C:
			}
			continue
		}
		t.lastUpdated.Store(time.Now().UnixNano())
		r, err := w.post(taskCtx, "beat", w.taskRequest(t.task.RunID, t.task.TaskID))
		if taskCtx.Err() != nil {
			return
		}
		if err != nil {
			continue // fishtest only prints it; the next beat is a period later
		}
		if r.hasError() || !r.taskAlive(true) {
			w.log.Info("The server told us that no more games are needed for the current task.")
			abandon(errAbandoned)
			return
		}
	}
}

// failTask sends failed_task or stop_run with message, retried while the server is away
// (postRetrying); its failure is only logged, as in fishtest. The error is ctx's.
func (w *Worker) failTask(ctx context.Context, endpoint, runID string, taskID int, message string) error {
	req := w.taskRequest(runID, taskID)
	req.Message = &message
	_, _ = w.postRetrying(ctx, endpoint, req)
	return ctx.Err()
}

// uploadPGN sends the PGN of the batches the server recorded, for a non-SPSA task: base64 of
// gzip, as fishtest's upload_pgn_data, retried while the server is away (postRetrying). Its
// failure is only logged; the error is ctx's.
func (t *taskRun) uploadPGN(ctx context.Context) error {
	if t.spsa || !slices.ContainsFunc(t.pgn, func(p string) bool { return p != "" }) {
		return nil
	}
	req := t.w.taskRequest(t.task.RunID, t.task.TaskID)
	empty := ""
	req.Message = &empty
	var body any
	var size int
	gzipPGN(t.w.cfg.PGNCompression, fmt.Sprintf("%s-%d.pgn.gz", t.task.RunID, t.task.TaskID), t.pgn, func(gz []byte) {
		body, size = t.w.encodePGNUpload(req, gz)
	})
	t.w.log.Info("Uploading compressed PGN", "bytes", size)
	_, _ = t.w.postRetrying(ctx, "upload_pgn", body)
	return ctx.Err()
}

// gzipPGN compresses the batches' PGN at level, in a gzip stream named name, and hands it to
// use, which must not keep it: the buffer goes back to a pool.
func gzipPGN(level int, name string, pgn []string, use func(gz []byte)) {
	pool := &pgnZippers[level-gzip.HuffmanOnly]
	z, _ := pool.Get().(*pgnZipper)
	if z == nil {
		zw, _ := gzip.NewWriterLevel(nil, level) // New checked the level
		z = &pgnZipper{zw: zw}
	}
	z.out.Reset()
	z.zw.Reset(&z.out)
	z.zw.Name = name
	for _, p := range pgn { // batch by batch, a chunk at a time: the PGN is not copied whole
		for len(p) > 0 {
			n := copy(z.chunk[:], p)
			_, _ = z.zw.Write(z.chunk[:n]) // a bytes.Buffer does not fail
			p = p[n:]
		}
	}
	_ = z.zw.Close()
	z.zw.Reset(nil) // the pool keeps no upload alive
	use(z.out.Bytes())
	if z.out.Cap() <= maxPooledPGN {
		pool.Put(z)
	}
}

// pgnZipper is a gzip writer with its output buffer and a chunk to copy the PGN text through.
type pgnZipper struct {
	zw    *gzip.Writer
	out   bytes.Buffer
	chunk [4096]byte
}

// maxPooledPGN is the largest output buffer a pooled pgnZipper keeps: a rare huge upload's
// buffer is let go.
const maxPooledPGN = 1 << 20

// pgnZippers keeps gzip writers between PGN uploads, a pool per level (index: level minus
// gzip.HuffmanOnly): a writer's compressor takes hundreds of kilobytes to set up, more work
// than a task's PGN takes to compress, which a fleet of thousands of simulated workers in one
// process pays at every task's end.
var pgnZippers [gzip.BestCompression - gzip.HuffmanOnly + 1]sync.Pool

// taskRequest is the body shared by the calls about a task.
func (w *Worker) taskRequest(runID string, taskID int) protocol.Request {
	return protocol.Request{Password: w.cfg.Password, WorkerInfo: w.currentInfo(), RunID: &runID, TaskID: &taskID}
}

// checkBatch returns what is wrong with a batch's counts for the given number of games, "" if
// nothing: the server's valid_results rules, so that a bad source fails its task here instead of
// being refused by update_task.
func checkBatch(s protocol.Stats, games int) string {
	p := s.Pentanomial
	for _, n := range append(p[:], s.Wins, s.Losses, s.Draws, s.Crashes, s.TimeLosses) {
		if n < 0 {
			return fmt.Sprintf("negative count in %+v", s)
		}
	}
	pairs := p[0] + p[1] + p[2] + p[3] + p[4]
	switch {
	case s.Wins+s.Losses+s.Draws != games || 2*pairs != games:
		return fmt.Sprintf("%d wins, %d losses, %d draws and %d pairs for %d games", s.Wins, s.Losses, s.Draws, pairs, games)
	case s.Wins-s.Losses != 2*p[4]+p[3]-p[1]-2*p[0]:
		return fmt.Sprintf("wins-losses %d does not match the pentanomial %v", s.Wins-s.Losses, p)
	case s.Draws < p[3]+p[1] || s.Draws > p[3]+2*p[2]+p[1]:
		return fmt.Sprintf("%d draws do not fit the pentanomial %v", s.Draws, p)
	}
	return ""
}
