// Package quarantine decides when a worker machine's results stand so far outside the rest of
// the fleet's that it must stop getting tasks: a machine that loses games on time or crashes
// engines, or whose tasks fail, far more often than the other machines on the same runs.
//
// A Record keeps, in memory and bounded in size, a sliding window of what each machine's tasks
// reported on its latest runs (games, time losses, crashes, tasks ended and tasks it failed or
// stopped), and the fleet's totals on each run. The rule (Settings, docs/QUARANTINE.md) is a
// one-sided Poisson test of the machine's count of bad events against MinRatio times the count
// the rest of the fleet's rates on the same runs predict, with floors under those rates, a
// minimum of games (or tasks) and more than one run. The package decides; storing the
// quarantine, refusing the machine and telling anyone are the scheduler's.
package quarantine

import (
	"container/list"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/shoal-chess/shoal/stats"
)

// Settings are the rule's thresholds; DefaultSettings gives the measured defaults
// (docs/QUARANTINE.md).
type Settings struct {
	// Enabled turns the rule on; off, Record records nothing and never quarantines.
	Enabled bool
	// P is the one-sided tail probability below which a machine's count is too many: the
	// chance that a machine whose true rate is MinRatio times the fleet's reports that many or
	// more.
	P float64
	// MinGames and MinTasks are the least games (for time losses and crashes) and tasks (for
	// failed tasks and stop_run reports) a machine must have played in the window, and MinRuns
	// the least runs, before it can be judged.
	MinGames, MinTasks, MinRuns int
	// MinRatio is how far outside the fleet a machine must stand: the test asks whether its
	// rate exceeds MinRatio times the fleet's (the spread of healthy machines stays under it).
	MinRatio float64
	// RateFloor is the least rate of time losses and crashes per game a prediction uses, and
	// FailureFloor the least rate of failed tasks per task: a fleet that reports almost none
	// does not make one or two a machine's fault.
	RateFloor, FailureFloor float64
}

// DefaultSettings are the rule's defaults, measured with the fleet simulator (docs/QUARANTINE.md).
func DefaultSettings() Settings {
	return Settings{Enabled: true, P: 1e-9, MinGames: 200, MinTasks: 10, MinRuns: 2, MinRatio: 3,
		RateFloor: 1e-3, FailureFloor: 0.05}
}

// Validate says what is wrong with s, if anything.
func (s Settings) Validate() error {
	var errs []error
	if !(s.P > 0 && s.P < 0.01) {
		errs = append(errs, fmt.Errorf("quarantine p %v: want above 0 and below 0.01", s.P))
	}
	if s.MinGames < 1 || s.MinTasks < 1 || s.MinRuns < 2 {
		errs = append(errs, fmt.Errorf("quarantine minimums (games %d, tasks %d, runs %d): want at least 1 game, 1 task and 2 runs", s.MinGames, s.MinTasks, s.MinRuns))
	}
	if !(s.MinRatio >= 1) || math.IsInf(s.MinRatio, 0) {
		errs = append(errs, fmt.Errorf("quarantine min ratio %v: want at least 1", s.MinRatio))
	}
	if !(s.RateFloor > 0 && s.RateFloor < 1) || !(s.FailureFloor > 0 && s.FailureFloor < 1) {
		errs = append(errs, fmt.Errorf("quarantine rate floors (%v per game, %v per task): want above 0 and below 1", s.RateFloor, s.FailureFloor))
	}
	return errors.Join(errs...)
}

// The record's bounds: runs remembered per machine, machines, and runs of fleet totals. A
// machine's window slides by run; the machines and runs least recently reported on are
// forgotten first, an eighth at a time. They are kept in the order they were last reported
// on (a container/list of their names), so that forgetting reads only those it forgets: a scan
// and sort of every machine took tens of milliseconds under the record's lock, which every
// update_task takes.
const (
	WindowRuns  = 16
	MaxMachines = 1 << 16
	MaxRuns     = 4096
)

// counts are what tasks reported on one run: by one machine, or by the whole fleet.
type counts struct {
	games, timeLosses, crashes int64
	tasks, failures            int64
}

func (c counts) bad() int64 { return c.timeLosses + c.crashes }

// machineRun is one machine's counts on one run.
type machineRun struct {
	run string
	counts
}

type machine struct {
	runs    []machineRun // oldest first, at most WindowRuns
	flagged bool         // quarantined: judged no more until cleared
	recent  *list.Element
}

type fleetRun struct {
	counts
	recent *list.Element
}

// Record is the sliding record of every machine and the fleet's totals per run. Its methods
// are O(WindowRuns) and take one mutex, a leaf: callers may hold their own locks. Safe for
// concurrent use.
type Record struct {
	set Settings

	// flagged counts the flagged machines held, so that Clear, which request_task calls on
	// every call, need not take mu while none is (almost always).
	flagged atomic.Int64

	mu       sync.Mutex
	machines map[string]*machine
	runs     map[string]*fleetRun
	// The machines' and runs' names from the most to the least recently reported on, each
	// element the recent of the machine or run it names.
	machineOrder, runOrder list.List
}

// New returns an empty record judging by s, which must be valid when enabled.
func New(s Settings) *Record {
	return &Record{set: s, machines: make(map[string]*machine), runs: make(map[string]*fleetRun)}
}

// Settings are the thresholds the record judges by.
func (r *Record) Settings() Settings { return r.set }

// Kind is what a verdict is about.
type Kind string

const (
	// BadGames are time losses and crashes, counted per game.
	BadGames Kind = "games"
	// FailedTasks are tasks the machine failed (failed_task) or reported a run broken on
	// (stop_run), counted per task.
	FailedTasks Kind = "tasks"
)

// Verdict is a machine found to stand outside the fleet: what it reported, over how much, and
// what the rest of the fleet's rates predicted.
type Verdict struct {
	Machine string
	Kind    Kind
	// Count is the machine's bad events: TimeLosses + Crashes for BadGames, failed tasks for
	// FailedTasks; Trials its games or tasks, over Runs runs, in the window.
	Count, TimeLosses, Crashes int64
	Trials                     int64
	Runs                       int
	// Expected is the count the fleet's rates on the same runs predict, P the chance of Count
	// or more at MinRatio times that mean.
	Expected, P float64
}

// Reason is the verdict in a sentence for the machine's owner, starting "quarantined:"; the
// worker prints it.
func (v *Verdict) Reason() string {
	if v.Kind == FailedTasks {
		return fmt.Sprintf("quarantined: %d failed tasks (failed_task or stop_run) in %d tasks on %d runs, where the rest of the fleet's rates on those runs predict %s (p = %.2g)",
			v.Count, v.Trials, v.Runs, approx(v.Expected), v.P)
	}
	return fmt.Sprintf("quarantined: %d time losses and %d crashes in %d games on %d runs, where the rest of the fleet's rates on those runs predict %s (p = %.2g)",
		v.TimeLosses, v.Crashes, v.Trials, v.Runs, approx(v.Expected), v.P)
}

// approx writes a predicted count for people: two significant digits, whole numbers from 10.
func approx(x float64) string {
	if x >= 10 {
		return fmt.Sprintf("%.0f", x)
	}
	return fmt.Sprintf("%.2g", x)
}

// Games records games a machine's task reported on a run (the difference from its previous
// report), with the time losses and crashes among them. When the machine's bad events grow it
// is judged, and a Verdict returned if it is to be quarantined, once: a flagged machine is
// judged no more until Clear.
func (r *Record) Games(mach, run string, games, timeLosses, crashes int) *Verdict {
	if !r.set.Enabled || games < 0 || timeLosses < 0 || crashes < 0 || games+timeLosses+crashes == 0 {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m, c, f := r.cell(mach, run)
	c.games += int64(games)
	c.timeLosses += int64(timeLosses)
	c.crashes += int64(crashes)
	f.games += int64(games)
	f.timeLosses += int64(timeLosses)
	f.crashes += int64(crashes)
	if timeLosses+crashes == 0 || m.flagged {
		return nil
	}
	return r.judge(mach, m, BadGames)
}

// TaskEnded records that a machine's task on a run ended: played out, or failed by the
// machine (failed_task, stop_run). A failure judges the machine as Games does.
func (r *Record) TaskEnded(mach, run string, failed bool) *Verdict {
	if !r.set.Enabled {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m, c, f := r.cell(mach, run)
	c.tasks++
	f.tasks++
	if !failed {
		return nil
	}
	c.failures++
	f.failures++
	if m.flagged {
		return nil
	}
	return r.judge(mach, m, FailedTasks)
}

// Clear forgets a flagged machine's record, so that a machine whose quarantine was lifted
// starts afresh; it reports whether the machine was flagged. An unflagged machine keeps its
// record.
func (r *Record) Clear(mach string) bool {
	if r.flagged.Load() == 0 {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.machines[mach]
	if m == nil || !m.flagged {
		return false
	}
	delete(r.machines, mach)
	r.machineOrder.Remove(m.recent)
	r.flagged.Add(-1)
	return true
}

// Flagged reports whether a machine has been found bad since it was last cleared.
func (r *Record) Flagged(mach string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := r.machines[mach]
	return m != nil && m.flagged
}

// Size is how many machines and runs the record holds.
func (r *Record) Size() (machines, runs int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.machines), len(r.runs)
}

// cell returns the machine, its counts on run and the fleet's, making them as needed and
// sliding the machine's window. It is called with mu held.
func (r *Record) cell(mach, run string) (*machine, *counts, *counts) {
	m := r.machines[mach]
	if m == nil {
		if len(r.machines) >= MaxMachines {
			forgetOldest(r.machines, &r.machineOrder, func(m *machine) {
				if m.flagged {
					r.flagged.Add(-1)
				}
			})
		}
		m = &machine{recent: r.machineOrder.PushFront(mach)}
		r.machines[mach] = m
	}
	r.machineOrder.MoveToFront(m.recent)
	f := r.runs[run]
	if f == nil {
		if len(r.runs) >= MaxRuns {
			forgetOldest(r.runs, &r.runOrder, nil)
		}
		f = &fleetRun{recent: r.runOrder.PushFront(run)}
		r.runs[run] = f
	}
	r.runOrder.MoveToFront(f.recent)
	i := slices.IndexFunc(m.runs, func(c machineRun) bool { return c.run == run })
	if i < 0 {
		if len(m.runs) == WindowRuns {
			m.runs = append(m.runs[:0], m.runs[1:]...)
		}
		m.runs = append(m.runs, machineRun{run: run})
		i = len(m.runs) - 1
	}
	return m, &m.runs[i].counts, &f.counts
}

// forgetOldest drops from all the eighth of it least recently reported on, and one more (the
// oldest names in order), calling forgotten (if not nil) with each.
func forgetOldest[V any](all map[string]V, order *list.List, forgotten func(V)) {
	for n := len(all)/8 + 1; n > 0 && order.Len() > 0; n-- {
		name := order.Remove(order.Back()).(string)
		v := all[name]
		delete(all, name)
		if forgotten != nil {
			forgotten(v)
		}
	}
}

// judge applies the rule of kind to machine m, flagging it and returning a Verdict if it
// stands outside the fleet. It is called with mu held.
func (r *Record) judge(mach string, m *machine, kind Kind) *Verdict {
	v := r.tally(mach, m, kind)
	if v == nil {
		return nil
	}
	minTrials, count := int64(r.set.MinGames), v.Count
	if kind == FailedTasks {
		minTrials = int64(r.set.MinTasks)
	}
	if v.Runs < r.set.MinRuns || v.Trials < minTrials || float64(count) < r.set.MinRatio*v.Expected {
		return nil
	}
	// The test is against MinRatio times the prediction: a machine whose true rate is under
	// MinRatio times the fleet's reaches P with a chance under P, however many games it plays.
	if v.P = stats.PoissonTail(int(count), r.set.MinRatio*v.Expected); v.P >= r.set.P {
		return nil
	}
	m.flagged = true
	r.flagged.Add(1)
	return v
}

// tally sums the machine's window for kind, with the count the rest of the fleet's rates on
// each run predict. A run no other machine reported on cannot be compared, and is left out.
func (r *Record) tally(mach string, m *machine, kind Kind) *Verdict {
	v := &Verdict{Machine: mach, Kind: kind}
	for _, c := range m.runs {
		f := r.runs[c.run]
		if f == nil {
			continue
		}
		trials, bad, otherTrials, otherBad, floor := c.games, c.bad(), f.games-c.games, f.bad()-c.bad(), r.set.RateFloor
		if kind == FailedTasks {
			trials, bad, otherTrials, otherBad, floor = c.tasks, c.failures, f.tasks-c.tasks, f.failures-c.failures, r.set.FailureFloor
		}
		if trials <= 0 || otherTrials <= 0 {
			continue
		}
		rate := max(floor, float64(otherBad)/float64(otherTrials))
		v.Trials += trials
		v.Count += bad
		v.Expected += float64(trials) * rate
		v.TimeLosses += c.timeLosses
		v.Crashes += c.crashes
		v.Runs++
	}
	if v.Runs == 0 {
		return nil
	}
	return v
}
