package server

import (
	"testing"
	"time"
)

// The workers turned away are asked back over a window that grows with how many were turned
// away in the last two seconds, within its bound; the floor is scaled with the server's time,
// the spread is not (it follows the processor).
func TestRequestPacerSpreadsReturns(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	floor := paceFloor.Seconds()
	p := newRequestPacer(1)
	if w := p.turnedAway(at, 0); w != floor {
		t.Errorf("the least wait = %v s, want the floor %v", w, paceFloor)
	}
	if w := p.turnedAway(at, 0.999); w > floor+0.01 {
		t.Errorf("with two turned away the wait reaches %v s, want about the floor", w)
	}
	// A storm: 5,000 turned away within a second are asked back over 5 s.
	var most float64
	for range 4998 {
		most = p.turnedAway(at.Add(500*time.Millisecond), 0.999)
	}
	if want := floor + 5000.0/pacedReturnsPerSecond; most < 0.99*want || most > want {
		t.Errorf("after 5,000 turned away the widest wait is %v s, want about %v", most, want)
	}
	// The second after still counts them; two seconds later they are forgotten.
	if w := p.turnedAway(at.Add(1500*time.Millisecond), 0.999); w < floor+4 {
		t.Errorf("a second after the storm the widest wait is %v s, want the storm's window still", w)
	}
	if w := p.turnedAway(at.Add(3*time.Second), 0.999); w > floor+0.01 {
		t.Errorf("three seconds after the storm the widest wait is %v s, want about the floor again", w)
	}
	// However many, the window has a bound.
	for range 100_000 {
		most = p.turnedAway(at.Add(10*time.Second), 0.999)
	}
	if most > (paceFloor + paceWindowMax).Seconds() {
		t.Errorf("after 100,000 turned away the wait reaches %v s, more than the bound %v", most, paceFloor+paceWindowMax)
	}
	// A server ten times faster than real time asks for a tenth of the floor, and the same
	// spread.
	q := newRequestPacer(10)
	if w := q.turnedAway(at, 0); w != floor/10 {
		t.Errorf("at ten times real time the least wait = %v s, want %v", w, floor/10)
	}
	for range 4999 {
		most = q.turnedAway(at, 0.999)
	}
	if want := floor/10 + 5000.0/pacedReturnsPerSecond; most < 0.99*want || most > want {
		t.Errorf("at ten times real time, after 5,000 turned away the widest wait is %v s, want about %v", most, want)
	}
}
