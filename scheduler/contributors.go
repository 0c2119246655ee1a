package scheduler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/stats"
)

// Contributor statistics: what fishtest's external delta_update_users script computes, done by
// the primary as a periodic job.
//
// For each user, and over tasks by worker username:
//
//	games          = Σ wins+losses+draws of the user's tasks
//	cpu_hours      = Σ games × run threads × EstimateGameDuration(run tc) / 3600
//	tests          = runs the user submitted
//	last_updated   = the latest last_updated of the user's tasks
//	games_per_hour = Σ over the user's active tasks of
//	                 nps/628000 × 3600/EstimateGameDuration(tc) × ⌊concurrency/threads⌋
//
// user_cache holds the all-time totals of finished runs (deleted ones too). It is incremental,
// as in fishtest: the deltas collection lists the finished runs already counted, and an update
// adds only the runs that finished since, to the totals already stored. Unlike fishtest, which
// walks the finished runs newest first until it has passed ten counted ones, Shoal bounds the walk
// with a time marker in the kvstore (the start of the previous update, less an hour for runs
// written late); the deltas list still decides what is counted, so a run is never counted
// twice. Like fishtest, a run that finishes, is resumed and finishes again is not counted again
// (its later games are lost to user_cache but not to top_month).
//
// top_month is recomputed on every update, as in fishtest: unfinished runs plus finished runs
// started in the last 30 days (a sliding window, not the calendar month). The shares of those
// finished runs are kept in memory, so an update reads only the runs finished since the previous
// one; the first update after a start reads the month's.
//
// With no deltas (a new database, or an operator clearing them to force it) an update rebuilds
// user_cache from every finished run, as fishtest's full scan does. CPU hours granted by an
// administrator (`shoal user add --cpu-hours`, an entry with CPU hours but neither games nor
// tests, which this job never writes) are kept in either mode: incrementally they are part of
// the stored total, and the job records them as granted_cpu_hours so that a rebuild starts
// from them instead of from zero. user_cache entries are written one user at a time and only
// when they change, and never deleted except by a rebuild that leaves them empty, so an entry
// written meanwhile by `shoal user add` is not lost. fishtest's script also deletes idle
// accounts and strips group:admins; this job does neither.
//
// Only users of the users collection are counted, with tests_repo taken from their profile.
// fishtest drops a whole run whose submitter is gone; Shoal still credits its workers.

// contributorsMarker is the kvstore key of the time the previous update began.
const contributorsMarker = "contributors_updated"

// contributorsSlack is how far before the previous update an update looks for finished runs:
// a run is stamped before it is written, so one can reach the database a little after a later
// one was read.
const contributorsSlack = time.Hour

// contributorsMonth is top_month's window: fishtest counts finished runs whose start is less than
// 30 days old.
const contributorsMonth = 30 * 24 * time.Hour

// grantedKey is the user_cache field recording CPU hours an administrator granted.
const grantedKey = "granted_cpu_hours"

// share is what one run gives one user.
type share struct {
	games    int
	cpuHours float64
	last     time.Time
}

// runShare is what one run gives each of its workers' users, and its submitter.
type runShare struct {
	id     rundb.ObjectID
	start  time.Time
	author string
	users  map[string]*share
}

// contributors is the job that keeps user_cache and top_month up to date. Only one may run per
// database, one update at a time (a Periodic job is never run concurrently with itself).
type contributors struct {
	s *Scheduler
	// month holds the shares of the finished runs started in the last 30 days, by run; nil
	// until an update has read them all.
	month map[rundb.ObjectID]*runShare
	// noneCredited says that the previous update ended with no run credited: there was no
	// finished run to rebuild from, and an empty credited set is no reason to rebuild.
	noneCredited bool
}

func newContributors(s *Scheduler) *contributors { return &contributors{s: s} }

// shareOf computes what r gives each user. A time control that does not parse gives no CPU
// hours (fishtest's script fails on the run).
func shareOf(r *rundb.Run, logger *slog.Logger) *runShare {
	sh := &runShare{id: r.ID, start: r.StartTime, author: r.Args.Username, users: map[string]*share{}}
	gameTime, err := stats.EstimateGameDuration(r.Args.TC)
	if err != nil {
		logger.Warn("contributor statistics: no CPU hours for run", "run_id", r.ID, "err", err)
		gameTime = 0
	}
	threads := float64(max(r.Args.Threads, 1))
	for _, t := range r.Tasks {
		name := t.WorkerInfo.Username
		if name == "" {
			continue
		}
		u := sh.users[name]
		if u == nil {
			u = &share{}
			sh.users[name] = u
		}
		games := played(t.Stats)
		u.games += games
		u.cpuHours += float64(games) * threads * gameTime / 3600
		// The database keeps milliseconds; rounding here lets an unchanged total compare equal.
		if last := t.LastUpdated.UTC().Truncate(time.Millisecond); last.After(u.last) {
			u.last = last
		}
	}
	return sh
}

// gamesPer is how many games a task's worker plays in period seconds, fishtest's estimate, at
// gameTime seconds a game of the run's time control and threads threads a game.
func gamesPer(period, gameTime float64, threads int, wi rundb.WorkerInfo) float64 {
	return wi.NPS / referenceNPS * (period / gameTime) * float64(wi.Concurrency/max(threads, 1))
}

// add counts sh into totals, for the users in known only; a new total starts at zero.
func add(totals map[string]*rundb.UserStats, sh *runShare, known map[string]string) {
	get := func(name string) *rundb.UserStats {
		if _, ok := known[name]; !ok {
			return nil
		}
		st := totals[name]
		if st == nil {
			st = &rundb.UserStats{Username: name}
			totals[name] = st
		}
		return st
	}
	if st := get(sh.author); st != nil {
		st.Tests++
	}
	for _, name := range slices.Sorted(maps.Keys(sh.users)) {
		st := get(name)
		if st == nil {
			continue
		}
		u := sh.users[name]
		st.Games += u.games
		st.CPUHours += u.cpuHours
		if u.last.After(st.LastUpdated) {
			st.LastUpdated = u.last
		}
	}
}

func byID(a, b *runShare) int { return a.id.Compare(b.id) }

// granted returns the CPU hours an administrator granted to the user of st: those recorded as
// such, or all of an entry's CPU hours when it has neither games nor tests.
func granted(st *rundb.UserStats) (float64, bool) {
	switch v := st.Extra[grantedKey].(type) {
	case float64:
		return v, true
	case int32:
		return float64(v), true
	case int64:
		return float64(v), true
	}
	if st.Games == 0 && st.Tests == 0 && st.CPUHours > 0 {
		return st.CPUHours, false
	}
	return 0, false
}

// sameStats reports whether writing b over a would change nothing.
func sameStats(a, b *rundb.UserStats) bool {
	ga, _ := granted(a)
	gb, _ := granted(b)
	_, ra := a.Extra[grantedKey]
	_, rb := b.Extra[grantedKey]
	return a.Username == b.Username && a.CPUHours == b.CPUHours && a.Games == b.Games &&
		a.GamesPerHour == b.GamesPerHour && a.Tests == b.Tests && a.TestsRepo == b.TestsRepo &&
		a.LastUpdated.Equal(b.LastUpdated) && ga == gb && ra == rb
}

func cloneStats(st *rundb.UserStats) *rundb.UserStats {
	c := *st
	c.Extra = maps.Clone(st.Extra)
	return &c
}

// update brings user_cache and top_month up to date.
//
// The first update of a primary's term reads the finished runs from the database: every one
// when rebuilding (nothing credited yet), else those last updated since the previous update (an hour's slack) or in
// the month, whichever reaches further back, as the previous primary may have finished some.
// Later updates read only the runs that this scheduler has seen finished since (noteFinished),
// by ID: on the embedded database a query for finished runs reads every run, the unfinished
// ones with all their tasks included.
func (c *contributors) update(ctx context.Context) (err error) {
	s := c.s
	now := s.now().UTC()
	changed := s.takeFinished()
	defer func() {
		if err != nil {
			s.noteFinished(changed...) // for the next update
		}
	}()
	u := &contributorsUpdate{c: c, now: now, monthStart: now.Add(-contributorsMonth)}
	for _, step := range []func(context.Context) error{
		u.plan,
		u.readUnfinished,
		func(ctx context.Context) error { return u.readFinished(ctx, changed) },
		u.sumAllTime,
		u.write,
	} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	s.writeActions(ctx, []*rundb.Action{{Action: "system_event", Username: "fishtest.system",
		Message: "Update user statistics"}})
	s.logger.Info("updated contributor statistics", "new_finished_runs", len(u.freshIDs),
		"contributors", len(u.totals), "monthly_contributors", len(u.monthly), "rebuild", u.rebuild)
	c.noneCredited = len(u.credited) == 0 && len(u.freshIDs) == 0
	return nil
}

// contributorsUpdate is one update of the contributor statistics, step by step.
type contributorsUpdate struct {
	c               *contributors
	now, monthStart time.Time

	known    map[string]string // tests_repo by username, for the users of the users collection
	credited map[rundb.ObjectID]bool
	rebuild  bool
	since    time.Time // finished runs last updated from then are read; zero: every one
	month    map[rundb.ObjectID]*runShare

	live   []*runShare // the unfinished runs'
	isLive map[rundb.ObjectID]bool
	rates  map[string]float64 // games per hour, by username

	fresh    []*runShare // finished runs not yet credited
	freshIDs []rundb.ObjectID

	before, totals map[string]*rundb.UserStats // all time: stored, and to store
	monthly        map[string]*rundb.UserStats
}

// plan reads what was credited and when the previous update ran, and so which finished runs
// to read.
func (u *contributorsUpdate) plan(ctx context.Context) error {
	s := u.c.s
	var err error
	if u.known, err = s.db.contributors.TestsRepos(ctx); err != nil {
		return err
	}
	if u.credited, err = s.db.contributors.CreditedRuns(ctx); err != nil {
		return err
	}
	// Nothing credited: the totals are rebuilt from every finished run (a database fishtest
	// left, Shoal's first update, or the credited runs lost), unless the previous update found
	// no finished run either.
	u.rebuild = len(u.credited) == 0 && !u.c.noneCredited
	var mark time.Time
	if err := s.db.kv.Get(ctx, contributorsMarker, &mark); err != nil && !errors.Is(err, rundb.ErrNotFound) {
		return err
	}
	if !u.rebuild && !mark.IsZero() {
		u.since = mark.Add(-contributorsSlack)
	}
	u.month = u.c.month
	if u.month == nil {
		u.month = map[rundb.ObjectID]*runShare{}
		if !u.since.IsZero() && u.monthStart.Before(u.since) {
			u.since = u.monthStart
		}
	}
	return nil
}

// readUnfinished reads the unfinished runs from the run cache, which is fresher than the
// database: they count for the month, and their active tasks for games_per_hour.
func (u *contributorsUpdate) readUnfinished(ctx context.Context) error {
	s := u.c.s
	u.isLive = map[rundb.ObjectID]bool{}
	u.rates = map[string]float64{}
	for _, id := range s.unfinishedIDs() {
		var sh *runShare
		err := s.runs.View(ctx, id, func(r *rundb.Run) {
			if r.Finished {
				return
			}
			sh = shareOf(r, s.logger)
			gameTime, err := stats.EstimateGameDuration(r.Args.TC)
			for _, t := range r.Tasks {
				if !t.Active {
					continue
				}
				rate := 0.0
				if err == nil && gameTime > 0 {
					rate = gamesPer(3600, gameTime, r.Args.Threads, t.WorkerInfo)
				}
				u.rates[t.WorkerInfo.Username] += rate
			}
		})
		if errors.Is(err, rundb.ErrNotFound) {
			continue // purged meanwhile
		}
		if err != nil {
			return fmt.Errorf("read unfinished run %s: %w", id, err)
		}
		if sh != nil {
			u.live = append(u.live, sh)
			u.isLive[id] = true
		}
	}
	return nil
}

// readFinished reads the finished runs: the uncounted ones for the totals, the month's for
// top_month. After the first update of a term, those are the runs this scheduler saw finish
// (changed), read by ID.
func (u *contributorsUpdate) readFinished(ctx context.Context, changed []rundb.ObjectID) error {
	s := u.c.s
	seen := map[rundb.ObjectID]bool{}
	visit := func(r *rundb.Run) error {
		if seen[r.ID] || !r.Finished {
			return nil
		}
		seen[r.ID] = true
		sh := shareOf(r, s.logger)
		if !u.credited[r.ID] {
			u.fresh = append(u.fresh, sh)
			u.freshIDs = append(u.freshIDs, r.ID)
		}
		if r.StartTime.After(u.monthStart) {
			u.month[r.ID] = sh
		}
		return nil
	}
	var err error
	if u.c.month != nil && !u.rebuild {
		err = s.db.contributors.EachByID(ctx, changed, visit)
	} else {
		err = s.db.contributors.EachFinished(ctx, u.since, visit)
	}
	if err != nil {
		return err
	}
	maps.DeleteFunc(u.month, func(_ rundb.ObjectID, sh *runShare) bool { return !sh.start.After(u.monthStart) })
	u.c.month = u.month
	return nil
}

// sumAllTime computes the all-time totals (the stored ones, or, rebuilding, the granted hours,
// plus the new runs) and the month's, recomputed.
func (u *contributorsUpdate) sumAllTime(ctx context.Context) error {
	stored, err := u.c.s.db.allTime.All(ctx)
	if err != nil {
		return err
	}
	u.before = map[string]*rundb.UserStats{}
	u.totals = map[string]*rundb.UserStats{}
	for _, st := range stored {
		u.before[st.Username] = st
		next := cloneStats(st)
		if g, recorded := granted(st); g > 0 && !recorded {
			if next.Extra == nil {
				next.Extra = rundb.Extra{}
			}
			next.Extra[grantedKey] = g
		}
		if u.rebuild && (st.Games != 0 || st.Tests != 0) {
			g, _ := granted(next)
			next.CPUHours, next.Games, next.Tests, next.LastUpdated = g, 0, 0, time.Time{}
		}
		next.GamesPerHour = 0
		u.totals[st.Username] = next
	}
	slices.SortFunc(u.fresh, byID)
	for _, sh := range u.fresh {
		add(u.totals, sh, u.known)
	}

	u.monthly = map[string]*rundb.UserStats{}
	shares := append([]*runShare(nil), u.live...)
	for id, sh := range u.month {
		if !u.isLive[id] { // resumed since it finished: counted above as unfinished
			shares = append(shares, sh)
		}
	}
	slices.SortFunc(shares, byID)
	for _, sh := range shares {
		add(u.monthly, sh, u.known)
	}

	for _, m := range []map[string]*rundb.UserStats{u.totals, u.monthly} {
		for name, st := range m {
			if repo, ok := u.known[name]; ok {
				st.TestsRepo = repo
			}
			st.GamesPerHour = u.rates[name]
		}
	}
	return nil
}

// write stores the update: the counted runs first, so that a failure part way loses an
// update's runs rather than counting them twice; then the totals, the month and the marker.
func (u *contributorsUpdate) write(ctx context.Context) error {
	s := u.c.s
	if err := s.db.contributors.AddCreditedRuns(ctx, u.freshIDs); err != nil {
		return err
	}
	if err := writeStats(ctx, s.db.allTime, u.before, u.totals, u.rebuild); err != nil {
		return err
	}
	monthStore := s.db.monthly
	storedMonth, err := monthStore.All(ctx)
	if err != nil {
		return err
	}
	beforeMonth := map[string]*rundb.UserStats{}
	for _, st := range storedMonth {
		beforeMonth[st.Username] = st
	}
	for name, st := range u.monthly {
		if old := beforeMonth[name]; old != nil {
			st.Extra = maps.Clone(old.Extra)
		}
	}
	if err := writeStats(ctx, monthStore, beforeMonth, u.monthly, true); err != nil {
		return err
	}
	return s.db.kv.Put(ctx, contributorsMarker, u.now)
}

// writeStats writes the entries of next that differ from before. New entries are written only
// with games or tests; with prune, stored entries left with neither games, tests nor CPU hours
// are deleted, as are those missing from next.
func writeStats(ctx context.Context, store contributorStats, before, next map[string]*rundb.UserStats, prune bool) error {
	var drop []string
	for _, name := range slices.Sorted(maps.Keys(next)) {
		st := next[name]
		old := before[name]
		empty := st.Games == 0 && st.Tests == 0
		switch {
		case old == nil && empty:
			continue
		case old != nil && prune && empty && st.CPUHours == 0:
			drop = append(drop, name)
			continue
		case old != nil && sameStats(old, st):
			continue
		}
		if err := store.Put(ctx, st); err != nil {
			return err
		}
	}
	if prune {
		for name := range before {
			if _, ok := next[name]; !ok {
				drop = append(drop, name)
			}
		}
	}
	return store.Delete(ctx, drop...)
}
