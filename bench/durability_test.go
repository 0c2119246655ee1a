package bench

import (
	"slices"
	"testing"
)

func TestMedianAndMean(t *testing.T) {
	tests := []struct {
		vs           []float64
		median, mean float64
	}{
		{[]float64{3}, 3, 3},
		{[]float64{5, 1, 3}, 3, 3},
		{[]float64{4, 1, 3, 100}, 3.5, 27},
	}
	for _, tc := range tests {
		in := slices.Clone(tc.vs)
		if got := median(in); got != tc.median {
			t.Errorf("median(%v) = %v, want %v", tc.vs, got, tc.median)
		}
		if !slices.Equal(in, tc.vs) {
			t.Errorf("median reordered its argument: %v", in)
		}
		if got := mean(tc.vs); got != tc.mean {
			t.Errorf("mean(%v) = %v, want %v", tc.vs, got, tc.mean)
		}
	}
}

// Each round is off, on, on, off, so that a drift over a round weighs on both sides alike; the
// legs are numbered from 1 over all rounds.
func TestDurabilityLegs(t *testing.T) {
	var names []string
	for i := range 8 {
		names = append(names, durabilityLeg(i))
	}
	want := []string{"durability-1-journal-off", "durability-2-journal-on", "durability-3-journal-on", "durability-4-journal-off",
		"durability-5-journal-off", "durability-6-journal-on", "durability-7-journal-on", "durability-8-journal-off"}
	if !slices.Equal(names, want) {
		t.Errorf("legs %v, want %v", names, want)
	}
	for i, name := range want {
		if legNumber(name) != i+1 {
			t.Errorf("legNumber(%s) = %d", name, legNumber(name))
		}
	}
}

func TestUnitOf(t *testing.T) {
	legs := []*scenarioReport{{}, {Figures: []benchFigure{{"steady: beat p99", 3, "ms"}}}}
	if got := unitOf(legs, "steady: beat p99"); got != "ms" {
		t.Errorf("unitOf = %q, want ms from the leg that has it", got)
	}
	if got := unitOf(legs, "missing"); got != "" {
		t.Errorf("unitOf a missing figure = %q", got)
	}
}
