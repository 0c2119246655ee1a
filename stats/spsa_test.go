package stats

import (
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

type spsaReferenceParam struct {
	Name            string
	Start, Min, Max float64
	CEnd            float64 `json:"c_end"`
	REnd            float64 `json:"r_end"`
	C, A, Theta     float64
	AEnd            float64 `json:"a_end"`
}

type spsaReference struct {
	Parse []struct {
		Name      string
		RawParams string  `json:"raw_params"`
		NumGames  int     `json:"num_games"`
		ARatio    float64 `json:"A_ratio"`
		Alpha     float64
		Gamma     float64
		Error     bool
		A         float64 `json:"A"`
		NumIter   int     `json:"num_iter"`
		Params    []spsaReferenceParam
	}
	Runs []struct {
		Name      string
		RawParams string  `json:"raw_params"`
		NumGames  int     `json:"num_games"`
		ARatio    float64 `json:"A_ratio"`
		Alpha     float64
		Gamma     float64
		Steps     []struct {
			Op          string
			Task        int
			Flips       []int
			Iter        int
			PackedFlips string `json:"packed_flips"`
			Sig         uint32
			WParams     []struct {
				Name     string
				Value, C float64
				R        float64 `json:"R"`
				Flip     int
			} `json:"w_params"`
			BParams []struct {
				Name  string
				Value float64
			} `json:"b_params"`
			Wins, Losses, Draws int
			NumGames            int `json:"num_games"`
			Applied             bool
			HistoryLen          int `json:"history_len"`
			Theta               []float64
		}
		Final struct {
			Iter         int
			Theta        []float64
			ParamHistory [][]struct {
				Theta, C float64
				R        float64 `json:"R"`
			} `json:"param_history"`
		}
	}
}

func loadSPSAReference(t *testing.T) spsaReference {
	var ref spsaReference
	readReferenceJSON(t, "spsa_reference.json", &ref)
	if len(ref.Parse) == 0 || len(ref.Runs) == 0 {
		t.Fatal("spsa reference is empty")
	}
	return ref
}

func TestNewSPSAStateMatchesFishtest(t *testing.T) {
	for _, c := range loadSPSAReference(t).Parse {
		t.Run(c.Name, func(t *testing.T) {
			s, err := newSPSAState(c.RawParams, c.NumGames, c.ARatio, c.Alpha, c.Gamma)
			switch {
			case c.Error:
				if err == nil {
					t.Fatalf("got %+v, fishtest raised an error", s.Params)
				}
				return
			case len(c.Params) == 0:
				// fishtest's form, not build_spsa_state, refuses a run without parameters.
				if err == nil {
					t.Fatalf("got a state without parameters, want an error")
				}
				params, err := ParseSPSAParams(c.RawParams, c.A, c.Alpha, c.Gamma, c.NumIter)
				if err != nil || len(params) != 0 {
					t.Fatalf("ParseSPSAParams = %v, %v; want no parameters and no error", params, err)
				}
				return
			case err != nil:
				t.Fatal(err)
			}
			if s.A != c.A || s.NumIter != c.NumIter || s.Iter != 0 || s.RawParams != c.RawParams {
				t.Errorf("A %g, num_iter %d, iter %d; fishtest %g, %d, 0", s.A, s.NumIter, s.Iter, c.A, c.NumIter)
			}
			if len(s.Params) != len(c.Params) {
				t.Fatalf("%d params, fishtest %d", len(s.Params), len(c.Params))
			}
			for i, w := range c.Params {
				g := s.Params[i]
				if g.Name != w.Name {
					t.Errorf("param %d name %q, fishtest %q", i, g.Name, w.Name)
				}
				for _, f := range []struct {
					name      string
					got, want float64
				}{
					{"start", g.Start, w.Start}, {"min", g.Min, w.Min}, {"max", g.Max, w.Max},
					{"c_end", g.CEnd, w.CEnd}, {"r_end", g.REnd, w.REnd}, {"c", g.C, w.C},
					{"a_end", g.AEnd, w.AEnd}, {"a", g.A, w.A}, {"theta", g.Theta, w.Theta},
				} {
					checkClose(t, fmt.Sprintf("%s.%s", w.Name, f.name), f.got, f.want, tolExact)
				}
			}
		})
	}
}

func TestSPSARunsMatchFishtest(t *testing.T) {
	for _, run := range loadSPSAReference(t).Runs {
		t.Run(run.Name, func(t *testing.T) {
			s, err := newSPSAState(run.RawParams, run.NumGames, run.ARatio, run.Alpha, run.Gamma)
			if err != nil {
				t.Fatal(err)
			}
			type stored struct {
				iter   int
				packed []byte
			}
			tasks := map[int]stored{}
			for i, st := range run.Steps {
				where := fmt.Sprintf("step %d (%s task %d)", i, st.Op, st.Task)
				switch st.Op {
				case "request":
					next := 0
					b := mustBatch(t, s, func() bool { next++; return st.Flips[next-1] == 1 })
					if next != len(s.Params) {
						t.Fatalf("%s: drew %d flips for %d params", where, next, len(s.Params))
					}
					if b.Iter != st.Iter || hex.EncodeToString(b.PackedFlips) != st.PackedFlips || b.Sig != st.Sig {
						t.Fatalf("%s: iter %d packed %x sig %d; fishtest %d %s %d",
							where, b.Iter, b.PackedFlips, b.Sig, st.Iter, st.PackedFlips, st.Sig)
					}
					for j, w := range st.WParams {
						g := b.WParams[j]
						if g.Name != w.Name || g.Flip != w.Flip {
							t.Fatalf("%s: w_param %d is %s/%d, fishtest %s/%d", where, j, g.Name, g.Flip, w.Name, w.Flip)
						}
						checkClose(t, where+" w value of "+w.Name, g.Value, w.Value, tolExact)
						checkClose(t, where+" c of "+w.Name, g.C, w.C, tolExact)
						checkClose(t, where+" R of "+w.Name, g.R, w.R, tolExact)
						bp := b.BParams[j]
						if bp.Name != st.BParams[j].Name {
							t.Fatalf("%s: b_param %d is %s, fishtest %s", where, j, bp.Name, st.BParams[j].Name)
						}
						checkClose(t, where+" b value of "+w.Name, bp.Value, st.BParams[j].Value, tolExact)
					}
					tasks[st.Task] = stored{b.Iter, b.PackedFlips}
				case "update":
					task, ok := tasks[st.Task]
					if !ok {
						t.Fatalf("%s: no stored flips", where)
					}
					delete(tasks, st.Task) // fishtest drops them whatever happens next
					err := s.Update(task.iter, task.packed, SPSAResult{
						Wins: st.Wins, Losses: st.Losses, Draws: st.Draws, NumGames: st.NumGames, Sig: st.Sig,
					})
					if st.Applied && err != nil {
						t.Fatalf("%s: %v", where, err)
					}
					if !st.Applied && !errors.Is(err, ErrSPSASignature) {
						t.Fatalf("%s: got error %v, want ErrSPSASignature", where, err)
					}
					if s.Iter != st.Iter || len(s.History) != st.HistoryLen {
						t.Fatalf("%s: iter %d with %d history samples, fishtest %d with %d",
							where, s.Iter, len(s.History), st.Iter, st.HistoryLen)
					}
					for j, want := range st.Theta {
						checkClose(t, fmt.Sprintf("%s theta of %s", where, s.Params[j].Name), s.Params[j].Theta, want, tolExact)
					}
				default:
					t.Fatalf("%s: unknown op", where)
				}
			}

			if s.Iter != run.Final.Iter {
				t.Errorf("final iter %d, fishtest %d", s.Iter, run.Final.Iter)
			}
			for j, want := range run.Final.Theta {
				checkClose(t, "final theta of "+s.Params[j].Name, s.Params[j].Theta, want, tolExact)
			}
			if len(s.History) != len(run.Final.ParamHistory) {
				t.Fatalf("%d history samples, fishtest %d", len(s.History), len(run.Final.ParamHistory))
			}
			for k, sample := range run.Final.ParamHistory {
				for j, w := range sample {
					g := s.History[k][j]
					where := fmt.Sprintf("history %d of %s", k, s.Params[j].Name)
					checkClose(t, where+" theta", g.Theta, w.Theta, tolExact)
					checkClose(t, where+" R", g.R, w.R, tolExact)
					checkClose(t, where+" c", g.C, w.C, tolExact)
				}
			}
		})
	}
}

func TestParseSPSAParamsNamesTheBadLine(t *testing.T) {
	for _, c := range []struct {
		name, raw, want string
	}{
		{"too few fields", "a,1,0,10,1,0.002\nb,1,0,10,1", "line 2"},
		{"too many fields", "a,1,0,10,1,0.002,x", "line 1"},
		{"blank lines still count", "\n\n\nc,1,0,10,1", "line 4"},
		{"text for a number", "a,1,0,10,1,0.002\nb,1,zero,10,1,0.002", "line 2"},
		{"NaN", "a,nan,0,10,1,0.002", "line 1"},
		{"infinity", "a,1,-inf,10,1,0.002", "line 1"},
		{"empty field", "a,1,0,,1,0.002", "line 1"},
		{"zero c_end", "a,1,0,10,0,0.002\n", "line 1"},
		{"negative c_end", "x,1,0,10,1,0\ny,1,0,10,-2,0.002", "line 2"},
		{"negative r_end", "x,1,0,10,1,0\ny,1,0,10,2,0\nz,1,0,10,2,-1e-9", "line 3"},
		// fishtest's build_spsa_state accepts this line but its first request divides by
		// c_k^2 == 0; a_end underflows to 0 and R_k would be NaN.
		{"c_end so small that c_k^2 underflows", "a,1,0,10,1,0.002\nb,1,0,10,1e-200,0.002", "line 2"},
		// fishtest overflows computing c_end^2; a_end, and so A, would be infinite.
		{"c_end so large that a_end overflows", "a,1,0,10,1e200,0.002", "line 1"},
		{"c_end so large that c_k^2 overflows, without a learning rate", "a,1,0,10,1,0\nb,1,0,10,1e200,0", "line 2"},
		{"c_k^2 overflows though c_end^2 does not", "a,1,0,10,1e154,0.002", "line 1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			params, err := ParseSPSAParams(c.raw, 10, DefaultSPSAAlpha, DefaultSPSAGamma, 100)
			if err == nil {
				t.Fatalf("got %+v, want an error", params)
			}
			if !strings.Contains(err.Error(), c.want+" ") {
				t.Errorf("error %q does not name %q", err, c.want)
			}
		})
	}
}

func TestPackFlipsLayout(t *testing.T) {
	for _, c := range []struct {
		name  string
		flips []int
		want  []byte
	}{
		{"no params", nil, []byte{}},
		{"one param up", []int{1}, []byte{0x80}},
		{"one param down", []int{-1}, []byte{0x00}},
		{"eight params fill a byte, first flip in the high bit", []int{1, -1, 1, 1, -1, -1, -1, 1}, []byte{0xb1}},
		{"nine params spill into a second byte", []int{-1, -1, -1, -1, -1, -1, -1, -1, 1}, []byte{0x00, 0x80}},
		{"nine params all up", []int{1, 1, 1, 1, 1, 1, 1, 1, 1}, []byte{0xff, 0x80}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := PackFlips(c.flips)
			if !slices.Equal(got, c.want) || got == nil {
				t.Fatalf("PackFlips(%v) = %#v, want %#v", c.flips, got, c.want)
			}
			back, err := UnpackFlips(got, len(c.flips))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(back, c.flips) {
				t.Errorf("UnpackFlips = %v, want %v", back, c.flips)
			}
			if sig := SPSASignature(got); sig != crc32.ChecksumIEEE(c.want) {
				t.Errorf("signature %d, want the CRC-32 of the packed bytes", sig)
			}
		})
	}
}

func TestUnpackFlipsRejectsTooFewBits(t *testing.T) {
	for _, c := range []struct {
		name   string
		packed []byte
		n      int
	}{
		{"nothing stored for one param", nil, 1},
		{"one byte for nine params", []byte{0xff}, 9},
		{"negative count", []byte{0xff}, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got, err := UnpackFlips(c.packed, c.n); err == nil {
				t.Errorf("got %v, want an error", got)
			}
		})
	}
}

// mustBatch draws a batch that must succeed.
func mustBatch(t *testing.T, s *SPSAState, flip func() bool) SPSABatch {
	t.Helper()
	b, err := s.NewBatch(flip)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// newTestSPSA is a run of 1000 games (500 iterations) with one parameter in [0, 100].
func newTestSPSA(t *testing.T, start float64) *SPSAState {
	t.Helper()
	s, err := newSPSAState(fmt.Sprintf("p,%g,0,100,5,0.01", start), 1000, DefaultSPSAARatio, DefaultSPSAAlpha, DefaultSPSAGamma)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSPSABatchValuesAreClipped(t *testing.T) {
	for _, c := range []struct {
		name         string
		start        float64
		up           bool
		wantW, wantB float64
	}{
		{"at max, New is held at max", 100, true, 100, -1},
		{"at max, Base is held at max", 100, false, -1, 100},
		{"at min, Base is held at min", 0, true, -1, 0},
		{"at min, New is held at min", 0, false, 0, -1},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newTestSPSA(t, c.start)
			b := mustBatch(t, s, func() bool { return c.up })
			w, base := b.WParams[0].Value, b.BParams[0].Value
			if c.wantW >= 0 && w != c.wantW {
				t.Errorf("New value %g, want %g", w, c.wantW)
			}
			if c.wantB >= 0 && base != c.wantB {
				t.Errorf("Base value %g, want %g", base, c.wantB)
			}
			// The other side moves by c_k inside the range.
			checkClose(t, "distance between New and Base", math.Max(w, base)-math.Min(w, base), b.WParams[0].C, tolerance{rel: 1e-12})
		})
	}
}

func TestSPSAUpdateClipsTheta(t *testing.T) {
	for _, c := range []struct {
		name         string
		start        float64
		up           bool
		wins, losses int
		want         float64
	}{
		{"big win on +1 stops at max", 90, true, 400, 0, 100},
		{"big win on -1 stops at min", 10, false, 400, 0, 0},
		{"big loss on +1 stops at min", 10, true, 0, 400, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newTestSPSA(t, c.start)
			b := mustBatch(t, s, func() bool { return c.up })
			err := s.Update(b.Iter, b.PackedFlips, SPSAResult{Wins: c.wins, Losses: c.losses, NumGames: c.wins + c.losses, Sig: b.Sig})
			if err != nil {
				t.Fatal(err)
			}
			if got := s.Params[0].Theta; got != c.want {
				t.Errorf("theta %g, want %g", got, c.want)
			}
			if s.Iter != (c.wins+c.losses)/2 {
				t.Errorf("iter %d, want %d", s.Iter, (c.wins+c.losses)/2)
			}
		})
	}
}

func TestSPSAUpdateMovesThetaByTheStoredGains(t *testing.T) {
	s := newTestSPSA(t, 50)
	b := mustBatch(t, s, func() bool { return true })
	g := s.Gains(0)[0]
	if g != (SPSAGain{C: b.WParams[0].C, R: b.WParams[0].R}) {
		t.Fatalf("Gains(0) = %+v, batch has c %g R %g", g, b.WParams[0].C, b.WParams[0].R)
	}
	// Another batch advances the run before this one reports.
	other := mustBatch(t, s, func() bool { return false })
	if err := s.Update(other.Iter, other.PackedFlips, SPSAResult{Wins: 10, Losses: 10, NumGames: 20, Sig: other.Sig}); err != nil {
		t.Fatal(err)
	}
	before := s.Params[0].Theta
	if err := s.Update(b.Iter, b.PackedFlips, SPSAResult{Wins: 7, Losses: 3, Draws: 2, NumGames: 12, Sig: b.Sig}); err != nil {
		t.Fatal(err)
	}
	want := before + g.R*g.C*4
	// The gains of iteration 0, not 10.
	checkClose(t, "theta", s.Params[0].Theta, want, tolerance{rel: 1e-12})
	if s.Iter != 16 {
		t.Errorf("iter %d, want 16", s.Iter)
	}
}

func TestSPSAUpdateRejectsBadInputWithoutChange(t *testing.T) {
	s := newTestSPSA(t, 50)
	b := mustBatch(t, s, nil)
	for _, c := range []struct {
		name   string
		iter   int
		packed []byte
		r      SPSAResult
		sig    bool
	}{
		{"wrong signature", b.Iter, b.PackedFlips, SPSAResult{Wins: 2, NumGames: 2, Sig: b.Sig ^ 1}, true},
		{"signature of other flips", b.Iter, []byte{^b.PackedFlips[0]}, SPSAResult{Wins: 2, NumGames: 2, Sig: b.Sig}, true},
		{"counts do not add up", b.Iter, b.PackedFlips, SPSAResult{Wins: 2, Losses: 1, NumGames: 2, Sig: b.Sig}, false},
		{"odd number of games", b.Iter, b.PackedFlips, SPSAResult{Wins: 2, Losses: 1, NumGames: 3, Sig: b.Sig}, false},
		{"negative count", b.Iter, b.PackedFlips, SPSAResult{Wins: 4, Losses: -2, NumGames: 2, Sig: b.Sig}, false},
		{"negative iteration", -1, b.PackedFlips, SPSAResult{Wins: 2, NumGames: 2, Sig: b.Sig}, false},
		{"no stored flips", b.Iter, []byte{}, SPSAResult{Wins: 2, NumGames: 2, Sig: 0}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := *s
			before.Params = slices.Clone(s.Params)
			err := s.Update(c.iter, c.packed, c.r)
			if err == nil {
				t.Fatal("got no error")
			}
			if errors.Is(err, ErrSPSASignature) != c.sig {
				t.Errorf("error %q: signature error %v, want %v", err, errors.Is(err, ErrSPSASignature), c.sig)
			}
			if !reflect.DeepEqual(*s, before) {
				t.Errorf("state changed: %+v, was %+v", *s, before)
			}
		})
	}
}

// A state whose gains or theta are not numbers (one ParseSPSAParams refuses to build, or a
// stored one) must not feed NaN to workers or into theta: NewBatch and Update fail and change
// nothing.
func TestSPSAStateRefusesNumbersThatAreNotFinite(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(p *SPSAParam)
	}{
		{"c_k^2 underflows to 0", func(p *SPSAParam) { p.C, p.AEnd, p.A = 1e-200, 0, 0 }},
		{"c_k^2 overflows", func(p *SPSAParam) { p.C = 1e200 }},
		{"infinite a", func(p *SPSAParam) { p.A = math.Inf(1) }},
		{"NaN theta", func(p *SPSAParam) { p.Theta = math.NaN() }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newTestSPSA(t, 50)
			pending := mustBatch(t, s, func() bool { return true })
			c.spoil(&s.Params[0])
			// %v prints NaN, which reflect.DeepEqual never finds equal to itself.
			before := fmt.Sprintf("%+v", *s)
			if b, err := s.NewBatch(func() bool { return true }); err == nil {
				t.Errorf("NewBatch = %+v, want an error", b.WParams)
			}
			err := s.Update(pending.Iter, pending.PackedFlips, SPSAResult{Wins: 3, Losses: 1, NumGames: 4, Sig: pending.Sig})
			if err == nil {
				t.Errorf("Update moved theta to %g, want an error", s.Params[0].Theta)
			}
			if after := fmt.Sprintf("%+v", *s); after != before {
				t.Errorf("state changed: %s, was %s", after, before)
			}
		})
	}
}

func TestNewBatchDoesNotChangeTheState(t *testing.T) {
	s, err := newSPSAState("a,1,0,10,1,0.002\nb,5,0,10,2,0.002\nc,9,0,10,1,0.002", 1000, 0.1, 0.602, 0.101)
	if err != nil {
		t.Fatal(err)
	}
	before := *s
	before.Params = slices.Clone(s.Params)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		b := mustBatch(t, s, func() bool { return rng.IntN(2) == 1 })
		flips, err := UnpackFlips(b.PackedFlips, 3)
		if err != nil {
			t.Fatal(err)
		}
		for i, w := range b.WParams {
			if w.Flip != flips[i] || (w.Flip != 1 && w.Flip != -1) {
				t.Fatalf("param %d: flip %d, packed %d", i, w.Flip, flips[i])
			}
		}
		if b.Sig != SPSASignature(b.PackedFlips) {
			t.Fatalf("sig %d does not match the packed flips", b.Sig)
		}
	}
	if !reflect.DeepEqual(*s, before) {
		t.Errorf("state changed: %+v, was %+v", *s, before)
	}
}

func TestSPSAHistoryPeriod(t *testing.T) {
	for _, c := range []struct {
		name            string
		numIter, params int
		want            float64
	}{
		{"few params sample 100 times", 30000, 10, 300},
		{"99 params still 100 times", 30000, 99, 300},
		{"100 params sample 10000/n times", 30000, 100, 300},
		{"400 params sample 25 times", 30000, 400, 1200},
		{"1000 params sample once", 30000, 1000, 30000},
		{"no params keep no history", 30000, 0, 0},
		{"no iterations keep no history", 0, 5, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			checkClose(t, "period", SPSAHistoryPeriod(c.numIter, c.params), c.want, tolerance{rel: 1e-12})
		})
	}
}

func TestSPSAHistorySkipsUpdatesBetweenSamples(t *testing.T) {
	s := newTestSPSA(t, 50) // 500 iterations, one sample every 5
	for i, want := range []int{0, 0, 1, 1, 2, 3} {
		b := mustBatch(t, s, func() bool { return i%2 == 0 })
		if err := s.Update(b.Iter, b.PackedFlips, SPSAResult{Wins: 2, Losses: 1, Draws: 1, NumGames: 4, Sig: b.Sig}); err != nil {
			t.Fatal(err)
		}
		if i == 5 {
			// A big batch still adds a single sample.
			b = mustBatch(t, s, nil)
			if err := s.Update(b.Iter, b.PackedFlips, SPSAResult{Wins: 50, Losses: 50, NumGames: 100, Sig: b.Sig}); err != nil {
				t.Fatal(err)
			}
		}
		if len(s.History) != want {
			t.Fatalf("after update %d (iter %d): %d samples, want %d", i, s.Iter, len(s.History), want)
		}
	}
	last := s.History[len(s.History)-1][0]
	if last.Theta != s.Params[0].Theta {
		t.Errorf("last sample theta %g, current %g", last.Theta, s.Params[0].Theta)
	}
}

// newSPSAState builds, for these tests, the SPSA state of a new run of numGames games from
// raw_params, the A ratio (A as a fraction of the iterations), alpha and gamma, with the checks
// the server's run creation makes: each number finite and >= 0, an iteration to play, good
// lines and a parameter at least.
func newSPSAState(rawParams string, numGames int, aRatio, alpha, gamma float64) (*SPSAState, error) {
	for _, f := range []float64{aRatio, alpha, gamma} {
		if !isFinite(f) || f < 0 {
			return nil, fmt.Errorf("new spsa state: %v is not a finite number >= 0", f)
		}
	}
	if numGames < 2 {
		return nil, fmt.Errorf("new spsa state: num_games must be at least 2, got %d", numGames)
	}
	s := &SPSAState{
		A:         math.Trunc(aRatio * float64(numGames) / 2),
		Alpha:     alpha,
		Gamma:     gamma,
		RawParams: rawParams,
		NumIter:   numGames / 2,
	}
	params, err := ParseSPSAParams(rawParams, s.A, alpha, gamma, s.NumIter)
	if err != nil {
		return nil, err
	}
	if len(params) == 0 {
		return nil, errors.New("new spsa state: raw_params defines no parameter")
	}
	s.Params = params
	return s, nil
}
