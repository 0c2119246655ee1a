package api

import (
	"testing"
	"time"
)

// The workers turned away are asked back over a window long enough for those turned away in
// the last two seconds to return at the rate tasks were given out lately, within its bound; the
// floor is scaled with the server's time, the spread is not (it follows the processor).
func TestRequestPacerSpreadsReturns(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	floor := paceFloor.Seconds()
	p := newRequestPacer(1)
	if w := p.turnedAway(at, 0); w != floor {
		t.Errorf("the least wait = %v s, want the floor %v", w, paceFloor)
	}
	// Nothing served yet: 1,000 turned away return at the least rate, over 10 s.
	var most float64
	for range 999 {
		most = p.turnedAway(at, 0.999)
	}
	if want := floor + 1000.0/minPacedReturns; most < 0.99*want || most > want {
		t.Errorf("1,000 turned away with no task given: widest wait %v s, want about %v", most, want)
	}
	// A server that gave 2,000 tasks in the last second asks 4,000 more back over 2 s.
	q := newRequestPacer(1)
	for range 2000 {
		q.gaveTask(at)
	}
	for range 4000 {
		most = q.turnedAway(at.Add(time.Second), 0.999)
	}
	if want := floor + 4000.0/2000; most < 0.99*want || most > want {
		t.Errorf("4,000 turned away after 2,000 tasks a second: widest wait %v s, want about %v", most, want)
	}
	// Two seconds later both counts are forgotten.
	if w := q.turnedAway(at.Add(3*time.Second), 0.999); w > floor+0.02 {
		t.Errorf("two seconds after the storm the widest wait is %v s, want about the floor", w)
	}
	// However many, the window has a bound.
	for range 100_000 {
		most = q.turnedAway(at.Add(10*time.Second), 0.999)
	}
	if most > (paceFloor + paceWindowMax).Seconds() {
		t.Errorf("after 100,000 turned away the wait reaches %v s, more than the bound %v", most, paceFloor+paceWindowMax)
	}
	// A server ten times faster than real time asks for a tenth of the floor, and the same
	// spread.
	r := newRequestPacer(10)
	if w := r.turnedAway(at, 0); w != floor/10 {
		t.Errorf("at ten times real time the least wait = %v s, want %v", w, floor/10)
	}
	for range 999 {
		most = r.turnedAway(at, 0.999)
	}
	if want := floor/10 + 1000.0/minPacedReturns; most < 0.99*want || most > want {
		t.Errorf("at ten times real time, 1,000 turned away: widest wait %v s, want about %v", most, want)
	}
}
