package stats

import (
	"math"
	"math/rand/v2"
	"testing"
)

func TestNewSPRTBounds(t *testing.T) {
	s := NewSPRT(0.05, 0.05, 0, 2, ModelNormalized, 16)
	if !closeTo(s.LowerBound, -2.9444389791664403, 1e-15) || !closeTo(s.UpperBound, 2.9444389791664403, 1e-15) {
		t.Errorf("bounds = %v, %v; want ∓ln 19", s.LowerBound, s.UpperBound)
	}
	if s.Overshoot == nil || s.State != "" || s.LLR != 0 {
		t.Errorf("a new SPRT = %+v", s)
	}
}

func TestLLRIsNearZeroWithoutGames(t *testing.T) {
	for _, model := range []string{ModelNormalized, ModelLogistic, ModelBayesElo} {
		s := NewSPRT(0.05, 0.05, 0, 2, model, 1)
		if err := s.Update(Results{Pentanomial: make([]int, 5)}); err != nil {
			t.Fatalf("%s: %v", model, err)
		}
		if math.Abs(s.LLR) > 1e-3 || s.State != "" {
			t.Errorf("%s: no games give LLR %g and state %q", model, s.LLR, s.State)
		}
	}
}

// The LLR grows with the score and changes sign between the two hypotheses' scores.
func TestLLRFollowsTheScore(t *testing.T) {
	for _, model := range []struct {
		name string
		fn   func(float64, float64, []float64) (float64, error)
	}{{"logistic", LLRLogistic}, {"normalized", LLRNormalized}} {
		prev := math.Inf(-1)
		var signs []bool
		for wins := 4000; wins <= 6000; wins += 100 {
			// 20000 pairs: shift pairs from the losing to the winning side.
			pairs := []float64{float64(6000 - wins/2), 4000, 4000, 4000, float64(2000 + wins/2)}
			llr, err := model.fn(0, 20, pairs)
			if err != nil {
				t.Fatal(err)
			}
			if llr <= prev {
				t.Errorf("%s: LLR %g at %d does not exceed %g below it", model.name, llr, wins, prev)
			}
			prev = llr
			signs = append(signs, llr > 0)
		}
		if signs[0] || !signs[len(signs)-1] {
			t.Errorf("%s: LLR signs %v: want negative for a losing score and positive for a winning one", model.name, signs)
		}
	}
}

// simulateSPRT plays game pairs of independent games at a true logistic Elo until the test
// decides, reporting in batches as workers do, and returns the decision.
func simulateSPRT(rng *rand.Rand, trueElo, elo0, elo1, drawRatio float64, batch int) string {
	s := NewSPRT(0.05, 0.05, elo0, elo1, ModelLogistic, batch)
	score := LogisticScore(trueElo)
	loss := 1 - score - drawRatio/2
	game := func() int { // 0 loss, 1 draw, 2 win
		x := rng.Float64()
		switch {
		case x < loss:
			return 0
		case x < loss+drawRatio:
			return 1
		}
		return 2
	}
	ptnml := make([]int, 5)
	for pairs := 0; pairs < 2_000_000; pairs += batch {
		for range batch {
			ptnml[game()+game()]++
		}
		if err := s.Update(Results{Pentanomial: ptnml}); err != nil {
			panic(err)
		}
		if s.State != "" {
			return s.State
		}
	}
	return ""
}

// The SPRT's error rates are what it promises: at the H1 Elo it accepts and at the H0 Elo it
// rejects about 95 % of the time. Fixed seeds keep the result the same on every run; the bounds
// are wide (0 and 10 Elo) so that a run takes a few thousand pairs.
func TestSPRTErrorRatesBySimulation(t *testing.T) {
	const runs = 1000
	if testing.Short() {
		t.Skip("Monte-Carlo test")
	}
	for _, c := range []struct {
		name    string
		trueElo float64
		want    string
	}{
		{"a patch at elo1 is accepted", 10, Accepted},
		{"a patch at elo0 is rejected", 0, Rejected},
	} {
		t.Run(c.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(2026, uint64(c.trueElo)))
			right := 0
			for range runs {
				if simulateSPRT(rng, c.trueElo, 0, 10, 0.4, 8) == c.want {
					right++
				}
			}
			rate := float64(right) / runs
			t.Logf("%d of %d runs %s (%.1f %%)", right, runs, c.want, 100*rate)
			// 95 % promised; with 1000 runs the standard error is 0.7 points.
			if rate < 0.925 || rate > 0.985 {
				t.Errorf("%s in %.1f %% of runs, want about 95 %%", c.want, 100*rate)
			}
		})
	}
}

func TestUpdateRecordsIrregularUpdates(t *testing.T) {
	s := NewSPRT(0.05, 0.05, 0, 2, ModelNormalized, 4)
	p := []int{1, 1, 1, 1, 0}
	if err := s.Update(Results{Pentanomial: p}); err != nil || s.Overshoot == nil || s.Overshoot.LastUpdate != 4 {
		t.Fatalf("a regular batch: %v, overshoot %+v", err, s.Overshoot)
	}
	p = []int{1, 1, 1, 1, 1}
	if err := s.Update(Results{Pentanomial: p}); err != nil {
		t.Fatal(err)
	}
	if s.IllegalUpdate == nil || *s.IllegalUpdate != 5 || s.Overshoot != nil {
		t.Errorf("5 pairs with batch size 4: illegal_update %v, overshoot %+v", deref(s.IllegalUpdate), s.Overshoot)
	}

	s = NewSPRT(0.05, 0.05, 0, 2, ModelNormalized, 4)
	for _, p := range [][]int{{1, 1, 1, 1, 0}, {2, 2, 2, 2, 0}, {1, 1, 1, 1, 0}} {
		if err := s.Update(Results{Pentanomial: p}); err != nil {
			t.Fatal(err)
		}
	}
	if s.LostSamples == nil || *s.LostSamples != 4 || s.Overshoot != nil {
		t.Errorf("8 then 4 pairs: lost_samples %v, overshoot %+v", deref(s.LostSamples), s.Overshoot)
	}
}

func TestUpdateRejectsUnknownModelWithoutChange(t *testing.T) {
	s := NewSPRT(0.05, 0.05, 0, 2, "Glicko", 1)
	before := *s
	if err := s.Update(Results{Wins: 3, Losses: 1}); err == nil {
		t.Fatal("an unknown elo model was accepted")
	}
	if s.LLR != before.LLR || s.State != before.State {
		t.Error("a failed update changed the state")
	}
}

// No input from the network may turn into a NaN or a panic: each function either returns finite
// numbers or an error.
func TestEdgeCasesGiveNumbersOrErrors(t *testing.T) {
	huge := 1 << 31
	cases := []struct {
		name string
		r    Results
	}{
		{"no games", Results{Pentanomial: make([]int, 5)}},
		{"all draws", Results{Draws: 1000, Pentanomial: []int{0, 0, 500, 0, 0}}},
		{"all wins", Results{Wins: 1000, Pentanomial: []int{0, 0, 0, 0, 500}}},
		{"all losses", Results{Losses: 1000, Pentanomial: []int{500, 0, 0, 0, 0}}},
		{"a single game pair", Results{Wins: 1, Draws: 1, Pentanomial: []int{0, 0, 0, 1, 0}}},
		{"2^31 draws", Results{Draws: huge, Pentanomial: []int{0, 0, huge / 2, 0, 0}}},
		{"2^31 games", Results{Wins: huge / 3, Losses: huge / 3, Draws: huge / 3, Pentanomial: []int{huge / 16, huge / 8, huge / 8, huge / 8, huge / 16}}},
		{"trinomial only, all wins", Results{Wins: 10}},
	}
	finite := func(xs ...float64) bool {
		for _, x := range xs {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return false
			}
		}
		return true
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, cells := range [][]int{{c.r.Losses, c.r.Draws, c.r.Wins}, c.r.Pentanomial} {
				if cells == nil {
					continue
				}
				if e, err := GetElo(cells); err == nil && !finite(e.Elo, e.Elo95, e.LOS) {
					t.Errorf("GetElo(%v) = %+v", cells, e)
				}
			}
			for _, model := range []string{ModelNormalized, ModelLogistic, ModelBayesElo} {
				s := NewSPRT(0.05, 0.05, 0, 2, model, 1)
				if err := s.Update(c.r); err == nil && !finite(s.LLR) {
					t.Errorf("%s: Update gives LLR %g", model, s.LLR)
				}
				e, err := EstimateSPRTElo(c.r, 0.05, 0.05, 0.05, 0, 2, model)
				if err == nil && !finite(e.A, e.B, e.Elo, e.CI[0], e.CI[1], e.LOS, e.LLR) {
					t.Errorf("%s: SPRT Elo %+v", model, e)
				}
			}
		})
	}
}

func TestEstimateSPRTEloRejectsBadBounds(t *testing.T) {
	if _, err := EstimateSPRTElo(Results{Wins: 10, Losses: 5, Draws: 5}, 0.05, 0.05, 0.05, 2, 2, ModelLogistic); err == nil {
		t.Error("elo0 == elo1 accepted (the interval search would never end)")
	}
}

// BenchmarkSPRTUpdate is the cost of the statistics of one update_task on a run that has played
// 100,000 games: the normalized LLR of its pentanomial and the overshoot bookkeeping.
func BenchmarkSPRTUpdate(b *testing.B) {
	ptnml := []int{1000, 11000, 26000, 11200, 800} // 50,000 pairs
	s := NewSPRT(0.05, 0.05, 0, 2, ModelNormalized, 16)
	for b.Loop() {
		ptnml[2] += 16
		if err := s.Update(Results{Pentanomial: ptnml}); err != nil {
			b.Fatal(err)
		}
	}
}
