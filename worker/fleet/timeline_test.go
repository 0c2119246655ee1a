package fleet

import "testing"

// RecoveredAfter is the end of the last second, within the span, whose share of slow beats was
// over the limit, counted from the span's start; seconds without beats say nothing.
func TestRecoveredAfter(t *testing.T) {
	tl := []TimelineSecond{
		{Beats: 100, SlowBeats: 50}, // before the span
		{Beats: 100, SlowBeats: 90}, // span starts here (1)
		{Beats: 0},
		{Beats: 100, SlowBeats: 2},  // over 1 %: recovery ends with this second
		{Beats: 100, SlowBeats: 1},  // at 1 %: steady
		{Beats: 100, SlowBeats: 80}, // after the span
	}
	for _, c := range []struct {
		from, until, want int
		ok                bool
	}{
		{1, 5, 3, true},
		{4, 5, 0, true},
		{2, 3, 0, false}, // only a second without beats
		{1, 99, 5, true}, // until past the end: the timeline's end
	} {
		if got, ok := RecoveredAfter(tl, c.from, c.until, 0.01); got != c.want || ok != c.ok {
			t.Errorf("RecoveredAfter(from %d, until %d) = %d, %v; want %d, %v", c.from, c.until, got, ok, c.want, c.ok)
		}
	}
}
