package quarantine

import (
	"fmt"
	"testing"
)

// The record forgets the machines least recently reported on, an eighth of them and one more
// at a time, whatever order they were first seen in; a flagged machine it forgets no longer
// counts as flagged.
func TestForgetsTheLeastRecentlyReported(t *testing.T) {
	r := New(DefaultSettings())
	name := func(i int) string { return fmt.Sprintf("m%d-1cores-x", i) }
	for i := range MaxMachines {
		r.Games(name(i), "run-0", 2, 0, 0)
	}
	r.mu.Lock()
	r.machines[name(1)].flagged = true // as judge leaves it
	r.flagged.Add(1)
	r.mu.Unlock()
	r.Games(name(0), "run-1", 2, 0, 0) // the oldest becomes the newest
	r.Games("newcomer-1cores-x", "run-0", 2, 0, 0)

	forgotten := MaxMachines/8 + 1
	if n, _ := r.Size(); n != MaxMachines-forgotten+1 {
		t.Errorf("%d machines held, want %d", n, MaxMachines-forgotten+1)
	}
	for _, c := range []struct {
		i    int
		held bool
	}{{0, true}, {1, false}, {forgotten, false}, {forgotten + 1, true}, {MaxMachines - 1, true}} {
		r.mu.Lock()
		_, held := r.machines[name(c.i)]
		r.mu.Unlock()
		if held != c.held {
			t.Errorf("machine %d held %v, want %v", c.i, held, c.held)
		}
	}
	if r.Flagged(name(1)) || r.flagged.Load() != 0 || r.Clear(name(1)) {
		t.Errorf("a forgotten machine still counts as flagged (%d flagged)", r.flagged.Load())
	}
}

// Clear forgets a flagged machine only, and afterwards no machine counts as flagged.
func TestClearCountsFlagged(t *testing.T) {
	r := New(DefaultSettings())
	r.Games("a-1cores-x", "run-0", 2, 0, 0)
	r.Games("b-1cores-x", "run-0", 2, 0, 0)
	r.mu.Lock()
	r.machines["b-1cores-x"].flagged = true
	r.flagged.Add(1)
	r.mu.Unlock()
	if r.Clear("a-1cores-x") || !r.Clear("b-1cores-x") || r.Clear("b-1cores-x") {
		t.Fatal("Clear answered wrong")
	}
	if n, _ := r.Size(); n != 1 || r.flagged.Load() != 0 {
		t.Errorf("%d machines, %d flagged after a clear; want 1, 0", n, r.flagged.Load())
	}
	r.Games("c-1cores-x", "run-0", 2, 0, 0) // the list still links the rest
	if n, _ := r.Size(); n != 2 {
		t.Errorf("%d machines, want 2", n)
	}
}
