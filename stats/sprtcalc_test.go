package stats

import (
	"errors"
	"math"
	"testing"
)

// The reference values come from fishtest's SPRT calculator (static/js/sprt.js), run under
// node with alpha = beta = 0.05.
func TestSPRTOCMatchesFishtestCalculator(t *testing.T) {
	type point struct{ elo, pass, games float64 }
	cases := []struct {
		name       string
		plan       SPRTPlan
		elo0, elo1 float64 // in logistic Elo
		points     []point
	}{
		{
			name: "normalized [0, 2], the default STC plan",
			plan: SPRTPlan{Alpha: 0.05, Beta: 0.05, Elo0: 0, Elo1: 2, Model: ModelNormalized, DrawRatio: 0.49, RMSBias: 191},
			elo0: 0, elo1: 1.0191651859447268,
			points: []point{
				{-1, 0.00016284018424785225, 59970.45852006247},
				{0.5, 0.4861627190389774, 261566.91639938616},
				{1, 0.9444699990948261, 164150.5038634856},
				{3, 0.9999994367808709, 36364.24811743277},
			},
		},
		{
			name: "logistic [0, 2]",
			plan: SPRTPlan{Alpha: 0.05, Beta: 0.05, Elo0: 0, Elo1: 2, Model: ModelLogistic, DrawRatio: 0.49, RMSBias: 191},
			elo0: 0, elo1: 2,
			points: []point{
				{-1, 0.0027623637443195113, 22946.667625178936},
				{0.5, 0.18660781084764208, 57850.89568628258},
				{1, 0.5000060980585386, 67940.69888074054},
				{3, 0.997237233070696, 22947.219299920103},
			},
		},
		{
			name: "normalized [-1.75, 0.25], a simplification at LTC",
			plan: SPRTPlan{Alpha: 0.05, Beta: 0.05, Elo0: -1.75, Elo1: 0.25, Model: ModelNormalized, DrawRatio: 0.6, RMSBias: 250},
			elo0: -0.24600330678525603, elo1: 0.035143323787676775,
			points: []point{
				{-1, 7.284280813867873e-9, 27926.144022500415},
				{0, 0.9009949893028829, 190032.91814981928},
				{2, 1, 11865.546316912234},
			},
		},
	}
	near := func(got, want, rel float64) bool {
		return math.Abs(got-want) <= rel*math.Max(math.Abs(want), 1e-12)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			oc, err := NewSPRTOC(c.plan)
			if err != nil {
				t.Fatal(err)
			}
			if !near(oc.LogisticElo0, c.elo0, 1e-9) || !near(oc.LogisticElo1, c.elo1, 1e-9) {
				t.Errorf("logistic bounds = [%v, %v], want [%v, %v]", oc.LogisticElo0, oc.LogisticElo1, c.elo0, c.elo1)
			}
			// By construction the test passes with probability alpha at elo0 and 1-beta at
			// elo1, and takes as long at both (alpha = beta).
			p0, g0 := oc.At(oc.LogisticElo0)
			p1, g1 := oc.At(oc.LogisticElo1)
			if !near(p0, 0.05, 1e-9) || !near(p1, 0.95, 1e-9) || !near(g0, g1, 1e-9) {
				t.Errorf("at the bounds: pass %v and %v over %v and %v games, want 0.05 and 0.95 over equal games", p0, p1, g0, g1)
			}
			for _, p := range c.points {
				pass, games := oc.At(p.elo)
				// Near the midpoint fishtest's formula loses digits to cancellation (this one
				// uses expm1), hence the looser tolerance on games.
				if math.Abs(pass-p.pass) > 1e-9 || !near(games, p.games, 1e-6) {
					t.Errorf("At(%v) = %v pass over %v games, want %v over %v", p.elo, pass, games, p.pass, p.games)
				}
			}
		})
	}
}

func TestSPRTOCMidpointAndExtremes(t *testing.T) {
	oc, err := NewSPRTOC(SPRTPlan{Alpha: 0.05, Beta: 0.05, Elo0: 0, Elo1: 2, Model: ModelLogistic, DrawRatio: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	// Halfway between the bounds (in score) the test is a coin toss; the h = 0 branch gives
	// ln(19)^2 / w2 games.
	mid := ScoreToElo((LogisticScore(0) + LogisticScore(2)) / 2)
	pass, games := oc.At(mid)
	d := LogisticScore(2) - LogisticScore(0)
	want := math.Log(19) * math.Log(19) / (d * d / 0.125)
	if math.Abs(pass-0.5) > 1e-9 || math.Abs(games-want) > 1e-6*want {
		t.Errorf("At(midpoint) = %v over %v games, want 0.5 over %v", pass, games, want)
	}
	// Far from the bounds nothing overflows: the answer is certain and quick.
	for _, elo := range []float64{-2000, -400, 400, 2000} {
		pass, games := oc.At(elo)
		if math.IsNaN(pass) || math.IsNaN(games) || pass < 0 || pass > 1 || games < 0 {
			t.Errorf("At(%v) = %v over %v games", elo, pass, games)
		}
		if wantPass := 0.0; elo > 0 {
			wantPass = 1
			if math.Abs(pass-wantPass) > 1e-9 {
				t.Errorf("At(%v) pass = %v, want %v", elo, pass, wantPass)
			}
		} else if math.Abs(pass-wantPass) > 1e-9 {
			t.Errorf("At(%v) pass = %v, want %v", elo, pass, wantPass)
		}
	}
}

func TestNewSPRTOCRefusesBadPlans(t *testing.T) {
	good := SPRTPlan{Alpha: 0.05, Beta: 0.05, Elo0: 0, Elo1: 2, Model: ModelNormalized, DrawRatio: 0.49, RMSBias: 191}
	for _, c := range []struct {
		name   string
		change func(*SPRTPlan)
	}{
		{"bounds in the wrong order", func(p *SPRTPlan) { p.Elo0, p.Elo1 = 2, 0 }},
		{"equal bounds", func(p *SPRTPlan) { p.Elo1 = 0 }},
		{"a draw ratio of 1", func(p *SPRTPlan) { p.DrawRatio = 1 }},
		{"a negative draw ratio", func(p *SPRTPlan) { p.DrawRatio = -0.1 }},
		{"a negative RMS bias", func(p *SPRTPlan) { p.RMSBias = -1 }},
		{"NaN bounds", func(p *SPRTPlan) { p.Elo0 = math.NaN() }},
		{"alpha of 0", func(p *SPRTPlan) { p.Alpha = 0 }},
		{"an unknown model", func(p *SPRTPlan) { p.Model = "BayesElo" }},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := good
			c.change(&p)
			if _, err := NewSPRTOC(p); err == nil {
				t.Errorf("NewSPRTOC(%+v) accepted the plan", p)
			}
		})
	}
	t.Run("a bias too large for the draw ratio", func(t *testing.T) {
		p := good
		p.DrawRatio, p.RMSBias = 0.9, 191
		if _, err := NewSPRTOC(p); !errors.Is(err, ErrSPRTPlanVariance) {
			t.Errorf("err = %v, want ErrSPRTPlanVariance", err)
		}
	})
}
