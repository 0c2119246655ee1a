package stats

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"testing"
)

// This file holds what every test against fishtest's numbers shares: the JSON number type, the
// loader and the tolerance. The reference files in testdata were computed by fishtest's own
// code; testdata/README.md says how.

// refFloat reads a reference number that may be written as "inf", "-inf" or "nan".
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

// readReferenceJSON decodes testdata/name into v.
func readReferenceJSON(t testing.TB, name string, v any) {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
}

// A tolerance is how far a number may be from the expected one: rel times its size, but at
// least abs, the absolute error the computation carries near zero. Infinities and NaN must
// match exactly.
type tolerance struct{ rel, abs float64 }

func (tol tolerance) allows(got, want float64) bool {
	if math.IsNaN(want) || math.IsInf(want, 0) {
		return got == want || (math.IsNaN(got) && math.IsNaN(want))
	}
	return math.Abs(got-want) <= math.Max(tol.rel*math.Abs(want), tol.abs)
}

// checkClose reports an error if got is not within tol of want.
func checkClose(t testing.TB, what string, got, want float64, tol tolerance) {
	t.Helper()
	if !tol.allows(got, want) {
		t.Errorf("%s = %.15g, want %.15g", what, got, want)
	}
}

// Tolerances against fishtest.
var (
	// tolExact is for values computed in closed form, or by a root finder run to the last
	// digits (the LLR's secular equation): 1e-6 relative, with no absolute floor, so that an
	// exact zero must stay zero.
	tolExact = tolerance{rel: 1e-6}
	// tolLOS is for the SPRT estimate's LOS, the outcome probability at 0 Elo evaluated
	// directly: 1e-6 relative, so that a LOS of 1e-45 is checked too, down to 1e-12, below
	// which a probability means nothing here.
	tolLOS = tolerance{rel: 1e-6, abs: 1e-12}
	// tolSolved is for the SPRT Elo estimate and its interval, found by inverting a
	// probability with a root finder: 1e-4 relative, and its absolute tolerance (an Elo of
	// 1e-13 where fishtest finds -1e-13 is the same root).
	tolSolved = tolerance{rel: 1e-4, abs: brentXTol}
)

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

func loadSPRTReference(t testing.TB) *reference {
	t.Helper()
	var ref reference
	readReferenceJSON(t, "sprt_reference.json", &ref)
	if len(ref.GetElo) == 0 || len(ref.SPRTElo) == 0 || len(ref.UpdateSPRT) == 0 {
		t.Fatal("sprt reference is empty")
	}
	return &ref
}

func TestGetEloMatchesFishtest(t *testing.T) {
	for _, c := range loadSPRTReference(t).GetElo {
		t.Run(fmt.Sprint(c.Results), func(t *testing.T) {
			got, err := GetElo(c.Results)
			if err != nil {
				t.Fatal(err)
			}
			w := c.Want.OK
			checkClose(t, "elo", got.Elo, float64(w[0]), tolExact)
			checkClose(t, "elo95", got.Elo95, float64(w[1]), tolExact)
			checkClose(t, "LOS", got.LOS, float64(w[2]), tolExact)
		})
	}
}

func TestLLRMatchesFishtest(t *testing.T) {
	ref := loadSPRTReference(t)
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
				checkClose(t, m.name, got, float64(*m.want.OK), tolExact)
			}
		})
	}
}

func TestSPRTEloMatchesFishtest(t *testing.T) {
	for _, c := range loadSPRTReference(t).SPRTElo {
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
			checkClose(t, "a", got.A, float64(w.A), tolExact)
			checkClose(t, "b", got.B, float64(w.B), tolExact)
			checkClose(t, "LLR", got.LLR, float64(w.LLR), tolExact)
			checkClose(t, "elo", got.Elo, float64(w.Elo), tolSolved)
			checkClose(t, "ci[0]", got.CI[0], float64(w.CI[0]), tolSolved)
			checkClose(t, "ci[1]", got.CI[1], float64(w.CI[1]), tolSolved)
			checkClose(t, "LOS", got.LOS, float64(w.LOS), tolLOS)
		})
	}
}

func TestSPRTUpdatesMatchFishtest(t *testing.T) {
	for _, seq := range loadSPRTReference(t).UpdateSPRT {
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
				checkClose(t, where+" llr", s.LLR, float64(w.LLR), tolExact)
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
						checkClose(t, where+" overshoot "+f.name, f.got, f.want, tolExact)
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
