package scheduler

import (
	"context"
	"maps"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/stats"
)

// Load caches the unfinished runs and rebuilds the scheduler's state from them: each
// run's aggregates are recomputed from its tasks and corrected if the stored ones disagree (a
// crash between a change and its write), the connection counts and the worker-to-task map are
// rebuilt, runs that are already decided are finished, and itp and nps are refreshed.
func (s *Scheduler) Load(ctx context.Context) error {
	ids, err := s.runs.Preload(ctx)
	if err != nil {
		return err
	}
	// Everything below is rebuilt from the runs, so that Load can also be called again.
	s.mu.Lock()
	s.unfinished = make(map[rundb.ObjectID]bool)
	s.sortedIDs = nil
	s.wtt = make(map[string]taskRef)
	s.connections = make(map[string]int)
	s.workerRuns = make(map[string]map[string]bool)
	s.lastRun = make(map[string]string)
	s.loadedAt = s.now()
	s.mu.Unlock()
	// latest is each worker's most recent task in the runs loaded so far, for lastRun.
	latest := make(map[string]taskSeen)
	var legacy []string
	if err := s.db.kv.Get(ctx, "legacy_usernames", &legacy); err == nil {
		s.mu.Lock()
		for _, u := range legacy {
			s.legacy[u] = true
		}
		s.mu.Unlock()
	}
	s.loadBooks(ctx)
	now := s.now()
	ev := &events{}
	for _, id := range ids {
		// active are the run's active tasks and their workers' short names, for the worker map
		// once the run is unlocked.
		type activeTask struct {
			ref    taskRef
			worker string
		}
		var active []activeTask
		err := s.modify(ctx, id, func(r *rundb.Run) (runcache.Prio, error) {
			changed := false
			fix := func(what string, ok bool) {
				if !ok {
					s.logger.Warn("correcting run aggregate at start", "run_id", id, "field", what)
					changed = true
				}
			}
			results := computeResults(r)
			sameRes := sameResults(results, r.Results)
			fix("results", sameRes)
			r.Results = results
			if !sameRes {
				// Results the document lacked (journaled ones, replayed): the SPRT follows.
				if err := updateSPRT(r); err != nil {
					s.logger.Error("sprt update", "run_id", id, "err", err)
				}
			}
			cores, workers, committed, total := 0, 0, 0, 0
			for i, t := range r.Tasks {
				total += t.NumGames
				if t.Active {
					cores += t.WorkerInfo.Concurrency
					workers++
					committed += t.NumGames
					active = append(active, activeTask{taskRef{id, i}, t.WorkerInfo.ShortName()})
				} else {
					committed += played(t.Stats)
				}
			}
			fix("cores", cores == r.Cores)
			fix("workers", workers == r.Workers)
			fix("committed_games", committed == r.CommittedGames)
			fix("total_games", total == r.TotalGames)
			r.Cores, r.Workers, r.CommittedGames, r.TotalGames = cores, workers, committed, total
			green, yellow := computeFlags(r)
			fix("flags", green == r.IsGreen && yellow == r.IsYellow)
			r.IsGreen, r.IsYellow = green, yellow
			s.mu.Lock()
			s.addUnfinished(id)
			for _, a := range active {
				s.connections[r.Tasks[a.ref.task].WorkerInfo.RemoteAddr]++
			}
			// Which runs each worker has built: those it has a task in (see CleanWorkerRuns).
			for _, t := range r.Tasks {
				name := t.WorkerInfo.ShortName()
				if s.workerRuns[name] == nil {
					s.workerRuns[name] = make(map[string]bool)
				}
				s.workerRuns[name][id.Hex()] = true
				seen := taskSeen{t.Active, t.LastUpdated}
				if prev, ok := latest[name]; !ok || seen.later(prev) {
					latest[name] = seen
					s.lastRun[name] = id.Hex()
				}
			}
			s.mu.Unlock()
			if !undecided(r) {
				s.logger.Warn("unfinished run is already decided; finishing it", "run_id", id)
				s.setInactiveRun(r, now)
				active = nil // its tasks have ended
				return runcache.PrioSaveNow, nil
			}
			if !changed {
				return 0, runcache.ErrUnchanged
			}
			return runcache.PrioNormal, nil
		})
		if err != nil {
			return err
		}
		for _, a := range active {
			s.insertInWtt(ctx, a.worker, a.ref, now, ev)
		}
	}
	s.writeEvents(ctx, ev)
	s.UpdateITP(ctx)
	s.UpdateNPS(ctx)
	return nil
}

// taskSeen is what Load compares of a worker's tasks to find its last run.
type taskSeen struct {
	active  bool
	updated time.Time
}

// later reports whether a is the worker's more recent task than b: its active task (a worker
// holds at most one), else the one updated last.
func (a taskSeen) later(b taskSeen) bool {
	if a.active != b.active {
		return a.active
	}
	return a.updated.After(b.updated)
}

func sameResults(a, b rundb.Results) bool {
	if a.Wins != b.Wins || a.Losses != b.Losses || a.Draws != b.Draws || a.Crashes != b.Crashes || a.TimeLosses != b.TimeLosses {
		return false
	}
	for i := range 5 {
		if cell(a.Pentanomial, i) != cell(b.Pentanomial, i) {
			return false
		}
	}
	return true
}

// Scavenge ends the tasks whose worker has sent neither a result nor a beat for
// DeadTaskTimeout, and logs each as a dead task. It returns how many it ended.
//
// Only the time this scheduler has served counts: a worker cannot report to a server that is
// down, nor while a standby takes over, so for DeadTaskTimeout after Load no task is dead, and a
// task last heard of before the start gets that long from the start. Otherwise a restart that
// took longer than the timeout would end every task of a fleet that kept playing through it.
func (s *Scheduler) Scavenge(ctx context.Context) int {
	now := s.now()
	cutoff := now.Add(-s.cfg.DeadTaskTimeout)
	s.mu.Lock()
	serving := s.loadedAt
	s.mu.Unlock()
	if cutoff.Before(serving) {
		return 0
	}
	ev := &events{}
	n := 0
	for _, id := range s.unfinishedIDs() {
		err := s.modify(ctx, id, func(r *rundb.Run) (runcache.Prio, error) {
			dead := 0
			for i := range r.Tasks {
				t := &r.Tasks[i]
				if !t.Active || !t.LastUpdated.Before(cutoff) {
					continue
				}
				s.logger.Info("dead task", "run_id", id, "task_id", i, "worker", t.WorkerInfo.LongName())
				crashOrTime(r, i, ev)
				ev.add(taskAction("dead_task", r, i))
				s.setInactiveTask(r, i, now, metrics.ReasonDead)
				dead++
			}
			n += dead
			if dead == 0 {
				return 0, runcache.ErrUnchanged
			}
			return runcache.PrioMedium, nil
		})
		if err != nil {
			s.logger.Warn("scavenge run", "run_id", id, "err", err)
		}
	}
	s.writeEvents(ctx, ev)
	return n
}

// UpdateITP recomputes every unfinished run's internal throughput, which orders the runs for
// scheduling: the user's throughput, boosted for long time controls, shared among the user's
// runs that have workers, with a bonus for runs that have played long or are about to pass.
func (s *Scheduler) UpdateITP(ctx context.Context) {
	ids := s.unfinishedIDs()
	users := map[rundb.ObjectID]string{}
	active := map[string]int{}
	for _, id := range ids {
		_ = s.runs.View(ctx, id, func(r *rundb.Run) {
			users[id] = r.Args.Username
			if r.Workers > 0 {
				active[r.Args.Username]++
			}
		})
	}
	for _, id := range ids {
		count := active[users[id]]
		_ = s.modify(ctx, id, func(r *rundb.Run) (runcache.Prio, error) {
			r.Args.ITP = itp(r, count)
			return runcache.PrioNormal, nil
		})
	}
}

func itp(r *rundb.Run, count int) float64 {
	v := math.Max(math.Min(r.Args.Throughput, 500), 1)
	if ratio, err := stats.TCRatio(r.Args.TC, r.Args.Threads); err == nil && ratio > 1 {
		v *= math.Pow(ratio, 0.774)
	}
	v *= 36 / (36 + float64(count*count))
	bonus := math.Min(float64(played(r.Results))/200_000, 1)
	if sp := r.Args.SPRT; sp != nil && sp.LLR > 2 {
		bonus += 0.1
		if sp.Elo0 > 0 {
			bonus += 0.1
		}
	}
	return v * (1 + bonus)
}

// referenceNPS is the speed of the machine fishtest's time controls are calibrated on.
const referenceNPS = 628000

// UpdateNPS recomputes each unfinished run's nodes per second and games per minute from its
// active tasks' workers, and reports the fleet's totals to the metrics.
func (s *Scheduler) UpdateNPS(ctx context.Context) {
	var fleet metrics.Fleet
	for _, id := range s.unfinishedIDs() {
		_ = s.modify(ctx, id, func(r *rundb.Run) (runcache.Prio, error) {
			if r.Finished {
				return 0, runcache.ErrUnchanged
			}
			fleet.UnfinishedRuns++
			if r.Workers > 0 {
				fleet.ActiveRuns++
			}
			fleet.Workers += r.Workers
			fleet.Cores += r.Cores
			gameTime, err := stats.EstimateGameDuration(r.Args.TC)
			nps, gpm := 0.0, 0.0
			for _, t := range r.Tasks {
				if !t.Active || math.IsInf(float64(t.WorkerInfo.Concurrency)*t.WorkerInfo.NPS, 0) {
					continue // an absurd report must not make the run's speed infinite
				}
				nps += float64(t.WorkerInfo.Concurrency) * t.WorkerInfo.NPS
				if t.WorkerInfo.NPS != 0 && err == nil && gameTime > 0 {
					gpm += gamesPer(60, gameTime, r.Args.Threads, t.WorkerInfo)
				}
			}
			if math.IsInf(nps, 0) || math.IsInf(gpm, 0) {
				nps, gpm = 0, 0
			}
			r.NPS, r.GamesPerMinute = nps, gpm
			fleet.NPS += nps
			return runcache.PrioNormal, nil
		})
	}
	s.cfg.Metrics.SetFleet(fleet)
}

// CleanWtt forgets workers whose last task has ended.
//
// The worker path shares the server's processor with the periodic jobs (one core holds the
// whole fleet), so a job over every worker must not run for long without letting it in: at
// 10,000 workers a pass that looked at each worker's run on its own ran 5 ms at a stretch
// (docs/benchmarks). It reads each run once, for all of its workers, and lets others run
// between runs.
func (s *Scheduler) CleanWtt(ctx context.Context) {
	s.mu.Lock()
	byRun := make(map[rundb.ObjectID]map[string]taskRef)
	for name, ref := range s.wtt {
		if byRun[ref.run] == nil {
			byRun[ref.run] = make(map[string]taskRef)
		}
		byRun[ref.run][name] = ref
	}
	s.mu.Unlock()
	var ended []string
	for id, refs := range byRun {
		ended = ended[:0]
		err := s.runs.View(ctx, id, func(r *rundb.Run) {
			for name, ref := range refs {
				if ref.task >= len(r.Tasks) || !r.Tasks[ref.task].Active {
					ended = append(ended, name)
				}
			}
		})
		if err != nil { // a run no longer there: none of its tasks is active
			ended = slices.AppendSeq(ended[:0], maps.Keys(refs))
		}
		s.mu.Lock()
		for _, name := range ended {
			if s.wtt[name] == refs[name] {
				delete(s.wtt, name)
			}
		}
		s.mu.Unlock()
		runtime.Gosched()
	}
}

// cleanChunk is how many workers CleanWorkerRuns looks at under one hold of the scheduler's
// lock before it lets the worker path in.
const cleanChunk = 1000

// CleanWorkerRuns drops finished runs from the record of which runs each worker has built
// (workerRuns, which request_task consults for a worker near the GitHub API limit) and of each
// worker's last run.
//
// The record is not stored: Load rebuilds it from the unfinished runs' tasks, which hold the
// same facts, since a worker has built exactly the runs it was given a task in. fishtest
// stores it whole in the kvstore every five scavenge periods; a fleet of hundreds of thousands
// of workers would make that one document of tens of megabytes (past MongoDB's 16 MiB limit),
// rewritten while the worker path waits on the database.
//
// It goes through the workers cleanChunk at a time, letting the worker path in between (see
// CleanWtt): under one hold of the lock, parsing each entry's run id, 10,000 workers took up to
// 11 ms.
func (s *Scheduler) CleanWorkerRuns() {
	s.mu.Lock()
	names := slices.Collect(maps.Keys(s.workerRuns))
	for name := range s.lastRun {
		if _, ok := s.workerRuns[name]; !ok {
			names = append(names, name)
		}
	}
	s.mu.Unlock()
	for start := 0; start < len(names); start += cleanChunk {
		s.mu.Lock()
		live := make(map[string]bool, len(s.unfinished))
		for id, ok := range s.unfinished {
			if ok {
				live[id.Hex()] = true
			}
		}
		for _, name := range names[start:min(start+cleanChunk, len(names))] {
			if m := s.workerRuns[name]; m != nil {
				for id := range m {
					if !live[id] {
						delete(m, id)
					}
				}
				if len(m) == 0 {
					delete(s.workerRuns, name)
				}
			}
			if last, ok := s.lastRun[name]; ok && !live[last] {
				delete(s.lastRun, name)
			}
		}
		s.mu.Unlock()
		runtime.Gosched()
	}
}

// Jobs are the scheduler's periodic jobs, with fishtest's periods scaled to the configured
// scavenge period (60 s by default): scavenging, itp and nps every period, the worker map every
// three, the worker_runs record cleaned every five, the books' metadata and the contributors'
// statistics every fifteen.
func (s *Scheduler) Jobs() []Job {
	p := s.cfg.ScavengePeriod
	if p <= 0 {
		p = time.Minute
	}
	return []Job{
		{Name: "scavenge dead tasks", Period: p, Jitter: 0.05, Run: func(ctx context.Context) error { s.Scavenge(ctx); return nil }},
		{Name: "update itp", Period: p, Jitter: 0.05, Run: func(ctx context.Context) error { s.UpdateITP(ctx); return nil }},
		{Name: "update nps", Period: p, Jitter: 0.05, Run: func(ctx context.Context) error { s.UpdateNPS(ctx); return nil }},
		{Name: "clean worker map", Period: 3 * p, Initial: p, Jitter: 0.05, Run: func(ctx context.Context) error { s.CleanWtt(ctx); return nil }},
		{Name: "clean worker runs", Period: 5 * p, Initial: p, Jitter: 0.05, Run: func(context.Context) error { s.CleanWorkerRuns(); return nil }},
		{Name: "refresh books", Period: 15 * p, Initial: time.Second, Jitter: 0.05, Run: s.RefreshBooks},
		{Name: "update contributors", Period: 15 * p, Initial: p, Jitter: 0.05, Run: newContributors(s).update},
		{Name: "recount cores", Period: 5 * p, Initial: p, Jitter: 0.05, Run: func(ctx context.Context) error { s.RecountCores(ctx); return nil }},
	}
}

// RecountCores sets every unfinished run's cores and workers from its active tasks, where they
// differ: whatever went wrong with a count (a bug, a record written by another server) heals
// within a period, rather than skewing the run's share of workers for the rest of its life.
func (s *Scheduler) RecountCores(ctx context.Context) {
	for _, id := range s.unfinishedIDs() {
		_ = s.modify(ctx, id, func(r *rundb.Run) (runcache.Prio, error) {
			cores, workers := 0, 0
			for _, t := range r.Tasks {
				if t.Active {
					cores += t.WorkerInfo.Concurrency
					workers++
				}
			}
			if cores == r.Cores && workers == r.Workers {
				return 0, runcache.ErrUnchanged
			}
			s.logger.Warn("correcting a run's count of cores", "run_id", id, "cores", r.Cores, "counted", cores,
				"workers", r.Workers, "counted_workers", workers)
			r.Cores, r.Workers = cores, workers
			return runcache.PrioNormal, nil
		})
	}
}
