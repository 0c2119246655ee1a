package fleet

import "testing"

// RecoveredAfter is the first of three consecutive seconds that were steady (at most the share
// of their beats slow), counted from the span's start.
func TestRecoveredAfter(t *testing.T) {
	slow := func(pct int64) TimelineSecond { return TimelineSecond{Beats: 100, SlowBeats: pct} }
	tl := []TimelineSecond{
		slow(50), // 0: before the span
		slow(90), // 1: the span starts here
		slow(0),  // 2: a quiet second inside the recovery
		slow(80), // 3
		slow(1),  // 4: steady (1 %), the first of three
		slow(0),  // 5
		slow(0),  // 6
		slow(30), // 7: a burst after the recovery
		slow(0),  // 8
	}
	for _, c := range []struct {
		from, until, want int
		ok                bool
	}{
		{1, 9, 3, true},  // second 4, 3 s after the span's start
		{4, 7, 0, true},  // steady from its start
		{1, 6, 0, false}, // the span ends before a third steady second
		{7, 9, 0, false}, // two steady seconds after the burst are not enough
		{-5, 9, 4, true}, // from before the timeline: counted from its start
	} {
		if got, ok := RecoveredAfter(tl, c.from, c.until, 0.01); got != c.want || ok != c.ok {
			t.Errorf("RecoveredAfter(from %d, until %d) = %d, %v; want %d, %v", c.from, c.until, got, ok, c.want, c.ok)
		}
	}
}
