package stats

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"
)

// The reference values in testdata/sprt_reference.json were computed by fishtest's own code;
// testdata/README.md says how.

// refFloat reads a number that may be written as "inf", "-inf" or "nan".
type refFloat float64

func (f *refFloat) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case `"inf"`:
		*f = refFloat(math.Inf(1))
	case `"-inf"`:
		*f = refFloat(math.Inf(-1))
	case `"nan"`:
		*f = refFloat(math.NaN())
	default:
		var x float64
		if err := json.Unmarshal(b, &x); err != nil {
			return err
		}
		*f = refFloat(x)
	}
	return nil
}

// outcome is a reference call's result: a value, or the error fishtest raised.
type outcome[T any] struct {
	OK    *T     `json:"ok"`
	Error string `json:"error"`
}

type refR struct {
	Wins, Losses, Draws int
	Pentanomial         []int
}

func (r refR) results() Results {
	return Results{Wins: r.Wins, Losses: r.Losses, Draws: r.Draws, Pentanomial: r.Pentanomial}
}

type refSPRT struct {
	Alpha, Beta float64
	Elo0, Elo1  float64
	EloModel    string `json:"elo_model"`
	State       string
	LLR         refFloat
	BatchSize   int     `json:"batch_size"`
	LowerBound  float64 `json:"lower_bound"`
	UpperBound  float64 `json:"upper_bound"`
	Overshoot   *struct {
		LastUpdate     int `json:"last_update"`
		SkippedUpdates int `json:"skipped_updates"`
		Ref0, M0, Sq0  float64
		Ref1, M1, Sq1  float64
	}
	LostSamples   *int `json:"lost_samples"`
	IllegalUpdate *int `json:"illegal_update"`
}

type reference struct {
	GetElo []struct {
		Results []int
		Want    outcome[[3]refFloat]
	} `json:"get_elo"`
	LLR []struct {
		Results              []float64
		Elo0, Elo1           float64
		Logistic, Normalized outcome[refFloat]
		NormalAlt            outcome[refFloat] `json:"normalized_alt"`
	} `json:"llr"`
	SPRTElo []struct {
		R          refR
		Elo0, Elo1 float64
		Model      string
		Want       outcome[struct {
			A, B, Elo, LOS, LLR refFloat
			CI                  [2]refFloat
		}]
	} `json:"sprt_elo"`
	UpdateSPRT []struct {
		Name       string
		Elo0, Elo1 float64
		Model      string
		BatchSize  int `json:"batch_size"`
		Steps      []struct {
			Pentanomial []int
			Trinomial   []int
			SPRT        *refSPRT // only every few steps, to keep the file small
		}
	} `json:"update_sprt"`
}

func loadReference(t testing.TB) *reference {
	t.Helper()
	b, err := os.ReadFile("testdata/sprt_reference.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref reference
	if err := json.Unmarshal(b, &ref); err != nil {
		t.Fatal(err)
	}
	return &ref
}

// closeTo compares at a relative tolerance, with an absolute floor of tol for values near 0.
func closeTo(got, want, tol float64) bool {
	if math.IsNaN(want) || math.IsInf(want, 0) {
		return got == want || (math.IsNaN(got) && math.IsNaN(want))
	}
	return math.Abs(got-want) <= tol*math.Max(1, math.Abs(want))
}

// Tolerances of the issue: LLR and Elo to 1e-6 relative, intervals solved numerically to 1e-4.
const (
	tolExact  = 1e-6
	tolSolved = 1e-4
)

func check(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if !closeTo(got, want, tol) {
		t.Errorf("%s = %.12g, fishtest %.12g", what, got, want)
	}
}

func TestGetEloMatchesFishtest(t *testing.T) {
	for _, c := range loadReference(t).GetElo {
		t.Run(fmt.Sprint(c.Results), func(t *testing.T) {
			got, err := GetElo(c.Results)
			if err != nil {
				t.Fatal(err)
			}
			w := c.Want.OK
			check(t, "elo", got.Elo, float64(w[0]), tolExact)
			check(t, "elo95", got.Elo95, float64(w[1]), tolExact)
			check(t, "LOS", got.LOS, float64(w[2]), tolExact)
		})
	}
}

func TestLLRMatchesFishtest(t *testing.T) {
	ref := loadReference(t)
	for _, c := range ref.LLR {
		t.Run(fmt.Sprint(c.Results, c.Elo0, c.Elo1), func(t *testing.T) {
			for _, m := range []struct {
				name string
				fn   func(float64, float64, []float64) (float64, error)
				want outcome[refFloat]
			}{
				{"logistic", LLRLogistic, c.Logistic},
				{"normalized", LLRNormalized, c.Normalized},
				{"normalized approximation", LLRNormalizedApprox, c.NormalAlt},
			} {
				got, err := m.fn(c.Elo0, c.Elo1, c.Results)
				if m.want.OK == nil {
					if err == nil {
						t.Errorf("%s: got %g where fishtest failed (%s)", m.name, got, m.want.Error)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v, fishtest %g", m.name, err, float64(*m.want.OK))
					continue
				}
				check(t, m.name, got, float64(*m.want.OK), tolExact)
			}
		})
	}
}

func TestSPRTEloMatchesFishtest(t *testing.T) {
	for _, c := range loadReference(t).SPRTElo {
		t.Run(fmt.Sprintf("%+v %v-%v %s", c.R, c.Elo0, c.Elo1, c.Model), func(t *testing.T) {
			got, err := EstimateSPRTElo(c.R.results(), 0.05, 0.05, 0.05, c.Elo0, c.Elo1, c.Model)
			w := c.Want.OK
			if w == nil {
				if err == nil {
					t.Errorf("got %+v where fishtest failed (%s)", got, c.Want.Error)
				}
				return
			}
			if err != nil {
				t.Fatalf("%v; fishtest %+v", err, *w)
			}
			check(t, "a", got.A, float64(w.A), tolExact)
			check(t, "b", got.B, float64(w.B), tolExact)
			check(t, "LLR", got.LLR, float64(w.LLR), tolExact)
			check(t, "elo", got.Elo, float64(w.Elo), tolSolved)
			check(t, "ci[0]", got.CI[0], float64(w.CI[0]), tolSolved)
			check(t, "ci[1]", got.CI[1], float64(w.CI[1]), tolSolved)
			check(t, "LOS", got.LOS, float64(w.LOS), tolSolved)
		})
	}
}

func TestSPRTUpdatesMatchFishtest(t *testing.T) {
	for _, seq := range loadReference(t).UpdateSPRT {
		t.Run(seq.Name, func(t *testing.T) {
			s := NewSPRT(0.05, 0.05, seq.Elo0, seq.Elo1, seq.Model, seq.BatchSize)
			for i, step := range seq.Steps {
				r := Results{Pentanomial: step.Pentanomial}
				if step.Trinomial != nil {
					r = Results{Losses: step.Trinomial[0], Draws: step.Trinomial[1], Wins: step.Trinomial[2]}
				}
				if err := s.Update(r); err != nil {
					t.Fatalf("step %d: %v", i, err)
				}
				w := step.SPRT
				if w == nil {
					continue
				}
				where := fmt.Sprintf("step %d", i)
				check(t, where+" llr", s.LLR, float64(w.LLR), tolExact)
				if s.State != w.State {
					t.Fatalf("%s: state %q, fishtest %q", where, s.State, w.State)
				}
				if (s.Overshoot == nil) != (w.Overshoot == nil) {
					t.Fatalf("%s: overshoot present %v, fishtest %v", where, s.Overshoot != nil, w.Overshoot != nil)
				}
				if o, wo := s.Overshoot, w.Overshoot; o != nil {
					if o.LastUpdate != wo.LastUpdate || o.SkippedUpdates != wo.SkippedUpdates {
						t.Fatalf("%s: overshoot counts %d/%d, fishtest %d/%d", where, o.LastUpdate, o.SkippedUpdates, wo.LastUpdate, wo.SkippedUpdates)
					}
					for _, f := range []struct {
						name      string
						got, want float64
					}{{"ref0", o.Ref0, wo.Ref0}, {"m0", o.M0, wo.M0}, {"sq0", o.Sq0, wo.Sq0},
						{"ref1", o.Ref1, wo.Ref1}, {"m1", o.M1, wo.M1}, {"sq1", o.Sq1, wo.Sq1}} {
						check(t, where+" overshoot "+f.name, f.got, f.want, tolExact)
					}
				}
				if !sameIntPtr(s.LostSamples, w.LostSamples) || !sameIntPtr(s.IllegalUpdate, w.IllegalUpdate) {
					t.Fatalf("%s: lost_samples %v illegal_update %v, fishtest %v %v", where,
						deref(s.LostSamples), deref(s.IllegalUpdate), deref(w.LostSamples), deref(w.IllegalUpdate))
				}
			}
			last := seq.Steps[len(seq.Steps)-1].SPRT
			if last == nil {
				t.Fatal("the reference does not record the final step")
			}
			t.Logf("%d updates, final state %q", len(seq.Steps), last.State)
		})
	}
}

func sameIntPtr(a, b *int) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}
