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
		// 14 in 400 games on two runs; the fleet's 2e-4 is under the floor of 1e-3, so 0.4 are
		// predicted, and the test is against three times that: P(X >= 14 | 1.2) = 4.8193e-11
		// (e^-1.2 sum_{k>=14} 1.2^k/k!).
		{"fourteen time losses in 400 games on two runs", 2, 200, 7, 20, true, 4.8193e-11},
		// P(X >= 12 | 1.2) = 6.17e-9: not below 1e-9.
		{"twelve are not enough", 2, 200, 6, 20, false, 0},
		{"the same on one run only", 1, 400, 14, 20, false, 0},
		{"too few games", 2, 99, 7, 20, false, 0},
		// The fleet loses 2% on time there too (a time control too short for everyone): 8
		// expected, 10 seen, an ordinary count.
		{"the whole fleet loses as often", 2, 200, 4, 2000, false, 0},
		// 2.5% where the fleet loses 1%: 250 predicted, 625 seen: far from chance, but 2.5
		// times is under the ratio of 3.
		{"far outside but under the ratio", 2, 12500, 313, 1000, false, 0},
		// 4 in 400 where 0.4 are predicted: ten times, but P(X >= 4 | 1.2) = 0.034.
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
			want := "quarantined: 14 time losses and 0 crashes in 400 games on 2 runs, where the rest of the fleet's rates on those runs predict 0.4 (p = 4.8e-11)"
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
	// At n failures of n tasks the prediction is 0.05 n and the test is against 0.15 n:
	// P(X >= 17 | 2.55) = 2.08e-9 is not below 1e-9, P(X >= 18 | 2.7) = 7.1056e-10 is.
	if v == nil || tasks != 18 || v.Count != 18 || v.Trials != 18 || v.Kind != FailedTasks {
		t.Fatalf("verdict %+v after %d tasks, want one after 18", v, tasks)
	}
	if math.Abs(v.Expected-0.9) > 1e-9 || math.Abs(v.P-7.1056e-10) > 1e-3*7.1056e-10 {
		t.Errorf("expected %v p %.5g, want 0.9 and 7.1056e-10", v.Expected, v.P)
	}
	if !strings.HasPrefix(v.Reason(), "quarantined: 18 failed tasks (failed_task or stop_run) in 18 tasks on 2 runs") {
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
