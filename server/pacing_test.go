package server

import (
	"testing"
	"time"
)

// The workers turned away are asked back over a window that grows with how many were turned
// away in the last two seconds, within its bounds, and scaled with the server's time.
func TestRequestPacerSpreadsReturns(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	p := newRequestPacer(1)
	if w := p.turnedAway(at, 0); w != paceFloor.Seconds() {
		t.Errorf("the least wait = %v s, want the floor %v", w, paceFloor)
	}
	if w := p.turnedAway(at, 0.999); w > 2*paceFloor.Seconds() {
		t.Errorf("with two turned away the wait reaches %v s, want within the floor and the smallest window", w)
	}
	// A storm: 5,000 turned away within a second are asked back over 20 s.
	var most float64
	for range 4998 {
		most = p.turnedAway(at.Add(500*time.Millisecond), 0.999)
	}
	if want := paceFloor.Seconds() + 5000.0/pacedReturnsPerSecond; most < 0.99*want || most > want {
		t.Errorf("after 5,000 turned away the widest wait is %v s, want about %v", most, want)
	}
	// The second after still counts them; two seconds later they are forgotten.
	if w := p.turnedAway(at.Add(1500*time.Millisecond), 0.999); w < 10 {
		t.Errorf("a second after the storm the widest wait is %v s, want the storm's window still", w)
	}
	if w := p.turnedAway(at.Add(3*time.Second), 0.999); w > 2*paceFloor.Seconds() {
		t.Errorf("three seconds after the storm the widest wait is %v s, want the smallest window again", w)
	}
	// However many, the window has a bound.
	for range 100_000 {
		most = p.turnedAway(at.Add(10*time.Second), 0.999)
	}
	if most > (paceFloor + paceWindowMax).Seconds() {
		t.Errorf("after 100,000 turned away the wait reaches %v s, more than the bound %v", most, paceFloor+paceWindowMax)
	}
	// A server ten times faster than real time asks for a tenth of the wait.
	if w := newRequestPacer(10).turnedAway(at, 0); w != paceFloor.Seconds()/10 {
		t.Errorf("at ten times real time the least wait = %v s, want %v", w, paceFloor.Seconds()/10)
	}
}
