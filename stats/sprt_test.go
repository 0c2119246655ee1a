package stats

import (
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNewSPRTBounds(t *testing.T) {
	s := NewSPRT(0.05, 0.05, 0, 2, ModelNormalized, 16)
	checkClose(t, "lower bound", s.LowerBound, -math.Log(19), tolerance{rel: 1e-15})
	checkClose(t, "upper bound", s.UpperBound, math.Log(19), tolerance{rel: 1e-15})
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
		checkClose(t, model+" LLR", s.LLR, 0, tolerance{abs: 1e-3})
		if s.State != "" {
			t.Errorf("%s: no games give state %q", model, s.State)
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

// As in fishtest, an update that is not a whole number of batches is recorded, and voids the
// overshoot correction, before the LLR is computed: the record stands whatever the LLR does, and
// an LLR that cannot be computed leaves the previous LLR and state.
func TestIllegalUpdateIsRecordedBeforeTheLLR(t *testing.T) {
	s := NewSPRT(0.05, 0.05, 0, 2, ModelNormalized, 16)
	if err := s.Update(Results{Pentanomial: []int{1, 3, 8, 3, 1}}); err != nil {
		t.Fatal(err)
	}
	llr, state := s.LLR, s.State
	err := s.Update(Results{Pentanomial: []int{0, 0, 0, 0, 10000001}})
	if s.IllegalUpdate == nil || *s.IllegalUpdate != 10000001 || s.Overshoot != nil || s.LostSamples != nil {
		t.Errorf("illegal_update %v, overshoot %+v, lost_samples %v; want 10000001, none, none",
			deref(s.IllegalUpdate), s.Overshoot, deref(s.LostSamples))
	}
	if err != nil && (s.LLR != llr || s.State != state) {
		t.Errorf("the update failed (%v) but changed the LLR from %g to %g and the state from %q to %q",
			err, llr, s.LLR, state, s.State)
	}
}

func TestUpdateRejectsUnknownModelWithoutChange(t *testing.T) {
	s := NewSPRT(0.05, 0.05, 0, 2, ModelLogistic, 1)
	if err := s.Update(Results{Pentanomial: []int{1, 2, 4, 6, 3}}); err != nil || s.LLR == 0 {
		t.Fatalf("a known model gives LLR %g, error %v", s.LLR, err)
	}
	s.EloModel = "Glicko"
	before, overshoot := *s, *s.Overshoot
	err := s.Update(Results{Pentanomial: []int{1, 2, 5, 6, 3}})
	if err == nil || !strings.Contains(err.Error(), "Glicko") {
		t.Fatalf("error %v; want one that names the unknown model", err)
	}
	if !reflect.DeepEqual(*s, before) || *s.Overshoot != overshoot {
		t.Errorf("a failed update changed the state: %+v (overshoot %+v), was %+v (overshoot %+v)",
			*s, *s.Overshoot, before, overshoot)
	}
}

// No input from the network may turn into a NaN or a panic. Each function gives finite numbers
// wherever fishtest answers, and an error exactly where fishtest raises: 2^31 draws with the
// normalized and logistic models, whose LLR's secular equation has no sign change, in both
// update_SPRT and SPRT_elo. BayesElo bounds become almost 0 Elo there, and fishtest answers.
func TestEdgeCasesGiveNumbersOrErrors(t *testing.T) {
	huge := 1 << 31
	cases := []struct {
		name string
		r    Results
		// fishtestRaises lists the models for which update_SPRT and SPRT_elo raise.
		fishtestRaises []string
	}{
		{"no games", Results{Pentanomial: make([]int, 5)}, nil},
		{"all draws", Results{Draws: 1000, Pentanomial: []int{0, 0, 500, 0, 0}}, nil},
		{"all wins", Results{Wins: 1000, Pentanomial: []int{0, 0, 0, 0, 500}}, nil},
		{"all losses", Results{Losses: 1000, Pentanomial: []int{500, 0, 0, 0, 0}}, nil},
		{"a single game pair", Results{Wins: 1, Draws: 1, Pentanomial: []int{0, 0, 0, 1, 0}}, nil},
		{"2^31 draws", Results{Draws: huge, Pentanomial: []int{0, 0, huge / 2, 0, 0}}, []string{ModelNormalized, ModelLogistic}},
		{"2^31 games", Results{Wins: huge / 3, Losses: huge / 3, Draws: huge / 3, Pentanomial: []int{huge / 16, huge / 8, huge / 8, huge / 8, huge / 16}}, nil},
		{"trinomial only, all wins", Results{Wins: 10}, nil},
	}
	finite := func(xs ...float64) bool {
		for _, x := range xs {
			if !isFinite(x) {
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
				if e, err := GetElo(cells); err != nil || !finite(e.Elo, e.Elo95, e.LOS) {
					t.Errorf("GetElo(%v) = %+v, %v; fishtest gives numbers", cells, e, err)
				}
			}
			for _, model := range []string{ModelNormalized, ModelLogistic, ModelBayesElo} {
				raises := slices.Contains(c.fishtestRaises, model)

				s := NewSPRT(0.05, 0.05, 0, 2, model, 1)
				err := s.Update(c.r)
				switch {
				case raises && err == nil:
					t.Errorf("%s: Update gives LLR %g where fishtest raises", model, s.LLR)
				case raises && (s.LLR != 0 || s.State != ""):
					t.Errorf("%s: the failed update left LLR %g and state %q", model, s.LLR, s.State)
				case !raises && err != nil:
					t.Errorf("%s: Update: %v; fishtest gives an LLR", model, err)
				case !raises && !finite(s.LLR):
					t.Errorf("%s: Update gives LLR %g", model, s.LLR)
				}

				e, err := EstimateSPRTElo(c.r, 0.05, 0.05, 0.05, 0, 2, model)
				switch {
				case raises && err == nil:
					t.Errorf("%s: SPRT Elo %+v where fishtest raises", model, e)
				case !raises && err != nil:
					t.Errorf("%s: EstimateSPRTElo: %v; fishtest gives an estimate", model, err)
				case !raises && !finite(e.A, e.B, e.Elo, e.CI[0], e.CI[1], e.LOS, e.LLR):
					t.Errorf("%s: SPRT Elo %+v", model, e)
				}
			}
		})
	}
}

func TestEstimateSPRTEloRejectsBadBounds(t *testing.T) {
	r := Results{Wins: 10, Losses: 5, Draws: 5}
	for _, c := range []struct {
		name       string
		elo0, elo1 float64
		model      string
		ok         bool
	}{
		{"ordered bounds give an estimate", 0, 2, ModelLogistic, true},
		{"ordered BayesElo bounds give an estimate", 0, 2, ModelBayesElo, true},
		{"equal bounds", 2, 2, ModelLogistic, false},
		{"reversed bounds", 2, 0, ModelNormalized, false},
		{"a bound that is not a number", math.NaN(), 2, ModelLogistic, false},
		// Both clamp to 1199.8 logistic Elo; fishtest divides by zero.
		{"BayesElo bounds that collapse in logistic Elo", 2000, 3000, ModelBayesElo, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := EstimateSPRTElo(r, 0.05, 0.05, 0.05, c.elo0, c.elo1, c.model)
			switch {
			case c.ok && err != nil:
				t.Errorf("error %v", err)
			case c.ok && !(e.CI[0] <= e.Elo && e.Elo <= e.CI[1]):
				t.Errorf("estimate %+v", e)
			case !c.ok && !errors.Is(err, errBadBounds):
				t.Errorf("got %+v, %v; want errBadBounds", e, err)
			}
		})
	}
}

// The interval search of the SPRT Elo estimate widens as fishtest's does, far enough for bounds
// 1e-15 Elo apart, and gives up instead of searching forever when widening cannot help.
func TestWidenedRoot(t *testing.T) {
	for _, c := range []struct {
		name        string
		g           func(float64) float64
		avg, delta  float64
		want        float64
		wantFailure bool
	}{
		{"a root near the bounds", func(x float64) float64 { return x - 1.5 }, 1, 2, 1.5, false},
		{"a root far from close bounds", func(x float64) float64 { return x - 500 }, 0, 1e-15, 500, false},
		{"no root, positive: the upper end", func(float64) float64 { return 1 }, 0, 1, 1000, false},
		{"no root, negative: the lower end", func(float64) float64 { return -1 }, 0, 1, -1000, false},
		{"collapsed bounds", func(float64) float64 { return 1 }, 1, 0, 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			type answer struct {
				x   float64
				err error
			}
			done := make(chan answer, 1)
			go func() {
				x, err := widenedRoot(func(x float64) (float64, error) { return c.g(x), nil }, c.avg, c.delta)
				done <- answer{x, err}
			}()
			select {
			case a := <-done:
				if c.wantFailure {
					if a.err == nil {
						t.Errorf("got %g, want an error", a.x)
					}
					return
				}
				if a.err != nil {
					t.Fatal(a.err)
				}
				checkClose(t, "root", a.x, c.want, tolerance{abs: 1e-9})
			case <-time.After(10 * time.Second):
				t.Fatal("the search does not end")
			}
		})
	}
}

// BenchmarkSPRTUpdate is the cost of the statistics of one update_task on a run that has played
// 100,000 games: the normalized LLR of its pentanomial and the overshoot bookkeeping of a
// regular batch. Every iteration applies the same batch of 16 pairs to the same state.
func BenchmarkSPRTUpdate(b *testing.B) {
	s := NewSPRT(0.05, 0.05, 0, 2, ModelNormalized, 16)
	if err := s.Update(Results{Pentanomial: []int{1000, 11000, 26000, 11200, 800}}); err != nil { // 50,000 pairs
		b.Fatal(err)
	}
	start := *s.Overshoot
	next := Results{Pentanomial: []int{1000, 11004, 26008, 11204, 800}} // 16 more
	for b.Loop() {
		*s.Overshoot = start
		if err := s.Update(next); err != nil {
			b.Fatal(err)
		}
	}
	if s.Overshoot == nil || s.Overshoot.LastUpdate != 50_016 || s.Overshoot.SkippedUpdates != start.SkippedUpdates {
		b.Fatalf("not a regular batch update: overshoot %+v", s.Overshoot)
	}
}

func TestFormatBounds(t *testing.T) {
	for _, c := range []struct{ model, want string }{
		{ModelNormalized, "<0.00,2.00>"}, {ModelLogistic, "{0.00,2.00}"},
		{ModelBayesElo, "[0.00,2.00]"}, {"", "[0.00,2.00]"},
	} {
		if got := FormatBounds(c.model, 0, 2); got != c.want {
			t.Errorf("FormatBounds(%q, 0, 2) = %q, want %q", c.model, got, c.want)
		}
	}
}
