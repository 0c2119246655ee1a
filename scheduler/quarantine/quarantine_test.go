package quarantine

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

// fleetOn gives run the reports of 50 other machines, games each, with bad time losses among
// all of them, spread as evenly as they go.
func fleetOn(r *Record, run string, games, bad int) {
	for i := range 50 {
		tl := bad / 50
		if i < bad%50 {
			tl++
		}
		r.Games(fmt.Sprintf("other-%d", i), run, games, tl, 0)
		r.TaskEnded(fmt.Sprintf("other-%d", i), run, false)
	}
}

func TestGamesRule(t *testing.T) {
	// Each case: the fleet's 50 other machines play 2,000 games each on every run, with
	// fleetBad time losses in all; then the machine reports its games in one go per run.
	tests := []struct {
		name      string
		runs      int
		perRun    int // the machine's games on each run
		badPerRun int // its time losses on each run
		fleetBad  int // the rest of the fleet's time losses per run (of 100,000 games)
		want      bool
		wantP     float64 // the verdict's p-value, when want
	}{
		// 10 in 400 games on two runs; the fleet's 2e-4 is under the floor of 1e-3, so 0.4 are
		// expected: P(X >= 10 | 0.4) = 2.0098e-11 (e^-0.4 sum_{k>=10} 0.4^k/k!).
		{"ten time losses in 400 games on two runs", 2, 200, 5, 20, true, 2.0098e-11},
		{"the same on one run only", 1, 400, 10, 20, false, 0},
		{"too few games", 2, 99, 5, 20, false, 0},
		// The fleet loses 2% on time there too (a time control too short for everyone): 8
		// expected, 10 seen, an ordinary count.
		{"the whole fleet loses as often", 2, 200, 4, 2000, false, 0},
		// 2.5% where the fleet loses 1%: 250 expected, 625 seen: p is tiny, but 2.5 times
		// is under the ratio of 3.
		{"far outside but under the ratio", 2, 12500, 313, 1000, false, 0},
		// 4 in 400 at an expected 0.4: P(X >= 4 | 0.4) = 7.8e-4, nothing unusual enough.
		{"a few more than expected", 2, 200, 2, 20, false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := New(DefaultSettings())
			var v *Verdict
			for i := range tc.runs {
				run := fmt.Sprintf("run-%d", i)
				fleetOn(r, run, 2000, tc.fleetBad)
				if got := r.Games("alice-8cores-bad1", run, tc.perRun, tc.badPerRun, 0); got != nil {
					v = got
				}
			}
			if (v != nil) != tc.want {
				t.Fatalf("verdict %+v, want quarantined %v", v, tc.want)
			}
			if v == nil {
				if r.Flagged("alice-8cores-bad1") {
					t.Error("flagged without a verdict")
				}
				return
			}
			if math.Abs(v.P-tc.wantP) > 1e-3*tc.wantP {
				t.Errorf("p %.5g, want %.5g", v.P, tc.wantP)
			}
			want := "quarantined: 10 time losses and 0 crashes in 400 games on 2 runs, where the rest of the fleet's rates on those runs predict 0.4 (p = 2e-11)"
			if v.Reason() != want {
				t.Errorf("reason\n%q, want\n%q", v.Reason(), want)
			}
			if !r.Flagged("alice-8cores-bad1") {
				t.Error("not flagged after its verdict")
			}
			if again := r.Games("alice-8cores-bad1", "run-0", 2, 2, 0); again != nil {
				t.Errorf("a second verdict for a flagged machine: %+v", again)
			}
		})
	}
}

func TestFailedTasksRule(t *testing.T) {
	r := New(DefaultSettings())
	for i := range 2 {
		fleetOn(r, fmt.Sprintf("run-%d", i), 200, 0)
	}
	// Every task fails, on two runs the fleet played without a failure: the floor of 0.05 per
	// task is the rate, and the verdict comes at the least count whose tail is below 1e-9.
	var v *Verdict
	tasks := 0
	for v == nil && tasks < 100 {
		v = r.TaskEnded("bob-4cores-flaky1", fmt.Sprintf("run-%d", tasks%2), true)
		tasks++
	}
	// At n failures of n tasks the mean is 0.05 n: P(X >= 9 | 0.45) = 1.39e-9 is not below
	// 1e-9, P(X >= 10 | 0.5) = 1.7097e-10 is, and 10 is the minimum of tasks.
	if v == nil || tasks != 10 || v.Count != 10 || v.Trials != 10 || v.Kind != FailedTasks {
		t.Fatalf("verdict %+v after %d tasks, want one after 10", v, tasks)
	}
	if math.Abs(v.Expected-0.5) > 1e-9 || math.Abs(v.P-1.7097e-10) > 1e-3*1.7097e-10 {
		t.Errorf("expected %v p %.5g, want 0.5 and 1.7097e-10", v.Expected, v.P)
	}
	if !strings.HasPrefix(v.Reason(), "quarantined: 10 failed tasks (failed_task or stop_run) in 10 tasks on 2 runs") {
		t.Errorf("reason %q", v.Reason())
	}
}

func TestClearStartsAfresh(t *testing.T) {
	r := New(DefaultSettings())
	for i := range 2 {
		fleetOn(r, fmt.Sprintf("run-%d", i), 2000, 0)
	}
	if r.Clear("carol-1cores-x1") {
		t.Error("Clear of a machine never flagged reported true")
	}
	var v *Verdict
	for i := 0; v == nil && i < 100; i++ {
		v = r.Games("carol-1cores-x1", fmt.Sprintf("run-%d", i%2), 20, 2, 1)
	}
	if v == nil {
		t.Fatal("no verdict for a machine losing 15% of its games")
	}
	if !r.Clear("carol-1cores-x1") || r.Flagged("carol-1cores-x1") {
		t.Fatal("Clear did not clear a flagged machine")
	}
	// After the lift it starts from nothing: one more bad report on each run is no verdict.
	for i := range 2 {
		if v := r.Games("carol-1cores-x1", fmt.Sprintf("run-%d", i), 200, 1, 0); v != nil {
			t.Errorf("verdict right after a lift: %+v", v)
		}
	}
}

func TestWindowSlidesAndBounds(t *testing.T) {
	r := New(DefaultSettings())
	for i := range WindowRuns + 4 {
		r.Games("dave-2cores-w1", fmt.Sprintf("run-%d", i), 10, 0, 0)
	}
	r.mu.Lock()
	m := r.machines["dave-2cores-w1"]
	first := m.runs[0].run
	n := len(m.runs)
	r.mu.Unlock()
	if n != WindowRuns || first != "run-4" {
		t.Errorf("window of %d runs from %s, want %d from run-4", n, first, WindowRuns)
	}
	for i := range MaxMachines + 10 {
		r.Games(fmt.Sprintf("m%d-1cores-x", i), "run-0", 2, 0, 0)
	}
	if machines, _ := r.Size(); machines > MaxMachines {
		t.Errorf("%d machines held, at most %d allowed", machines, MaxMachines)
	}
}

func TestDisabledRecordsNothing(t *testing.T) {
	s := DefaultSettings()
	s.Enabled = false
	r := New(s)
	for i := range 50 {
		if v := r.Games("eve-1cores-y", fmt.Sprintf("run-%d", i%2), 100, 100, 0); v != nil {
			t.Fatal("a verdict with the rule off")
		}
	}
	if m, runs := r.Size(); m != 0 || runs != 0 {
		t.Errorf("held %d machines, %d runs with the rule off", m, runs)
	}
}

func TestValidate(t *testing.T) {
	if err := DefaultSettings().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	bad := []func(*Settings){
		func(s *Settings) { s.P = 0 },
		func(s *Settings) { s.P = 0.5 },
		func(s *Settings) { s.MinRuns = 1 },
		func(s *Settings) { s.MinGames = 0 },
		func(s *Settings) { s.MinRatio = 0.5 },
		func(s *Settings) { s.RateFloor = 0 },
		func(s *Settings) { s.FailureFloor = 1 },
	}
	for i, change := range bad {
		s := DefaultSettings()
		change(&s)
		if s.Validate() == nil {
			t.Errorf("case %d: %+v accepted", i, s)
		}
	}
}
