package fleet

import (
	"sync/atomic"
	"time"
)

// timeline counts, second by second from the fleet's start, the beats that started in that
// second and those among them that were slow (took longer than slow) or failed (no reply, a status
// other than 200, a reply that was not a JSON object with a duration), and samples how many
// workers held a task. The beat is every worker's steadiest call, one per heartbeat period while
// it holds a task, so a second's share of slow beats says how the server was doing then: what
// the percentiles over a whole run cannot say, such as when it recovered from a restart. Safe
// for concurrent use.
type timeline struct {
	start           time.Time
	slow            time.Duration
	beats, slowBeat []atomic.Int64
	busy            []atomic.Int64
}

// newTimeline is a timeline of seconds seconds from start; beats after them are not counted.
func newTimeline(start time.Time, slow time.Duration, seconds int) *timeline {
	return &timeline{start: start, slow: slow, beats: make([]atomic.Int64, seconds),
		slowBeat: make([]atomic.Int64, seconds), busy: make([]atomic.Int64, seconds)}
}

// beat counts one beat that ended now after took, in the second it started: a beat sent while
// the server was away belongs to that time, even if it took the connection's timeout to fail.
// ok says it got a proper reply. busy is the number of workers holding a task.
func (t *timeline) beat(took time.Duration, ok bool, busy int64) {
	s := int((time.Since(t.start) - took) / time.Second)
	if s < 0 || s >= len(t.beats) {
		return
	}
	t.beats[s].Add(1)
	if !ok || took > t.slow {
		t.slowBeat[s].Add(1)
	}
	t.busy[s].Store(busy)
}

// seconds is the timeline up to elapsed, for the report.
func (t *timeline) seconds(elapsed time.Duration) []TimelineSecond {
	n := min(int(elapsed/time.Second)+1, len(t.beats))
	out := make([]TimelineSecond, n)
	for i := range out {
		out[i] = TimelineSecond{Beats: t.beats[i].Load(), SlowBeats: t.slowBeat[i].Load(), Busy: t.busy[i].Load()}
	}
	return out
}

// add counts the seconds of another timeline from the same start (a process of a split fleet)
// in t; the workers holding a task add up, each process's being its own.
func (t *timeline) add(seconds []TimelineSecond) {
	for i, sec := range seconds[:min(len(seconds), len(t.beats))] {
		t.beats[i].Add(sec.Beats)
		t.slowBeat[i].Add(sec.SlowBeats)
		t.busy[i].Add(sec.Busy)
	}
}

// TimelineSecond is one second of the fleet's run (Report.Timeline): the beats that started in
// it, those of them slower than Options.SlowBeat or without a proper reply, and how many workers
// held a task when the last of them ended (0 when no beat started in it).
type TimelineSecond struct {
	Beats     int64 `json:"beats"`
	SlowBeats int64 `json:"slow_beats"`
	Busy      int64 `json:"busy"`
}

// steadyRun is how many consecutive steady seconds RecoveredAfter asks for.
const steadyRun = 3

// RecoveredAfter is how long after the start of second from of timeline the beats were steady
// again: the first of steadyRun consecutive seconds with beats, before second until, in each of
// which at most share of the beats were slow, counted in seconds from from. A lone quiet second
// inside a recovery does not end it, and a lone burst after it (the bench fleet's own collector
// holds its workers back for a few hundred milliseconds every dozen seconds) does not prolong
// it. ok is false when there are no such seconds.
func RecoveredAfter(timeline []TimelineSecond, from, until int, share float64) (secs int, ok bool) {
	until = min(until, len(timeline))
	from = max(from, 0)
	run := 0
	for t := from; t < until; t++ {
		s := timeline[t]
		if s.Beats == 0 || float64(s.SlowBeats) > share*float64(s.Beats) {
			run = 0
			continue
		}
		if run++; run == steadyRun {
			return t - steadyRun + 1 - from, true
		}
	}
	return 0, false
}
