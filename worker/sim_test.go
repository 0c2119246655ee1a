package worker

import (
	"context"
	"math"
	"math/rand/v2"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
)

func expectedScore(elo float64) float64 { return 1 / (1 + math.Pow(10, -elo/400)) }

// Over many seeded games the score and draw ratio are the model's, within 4 standard errors, and
// every batch is one the server accepts.
func TestSimSourceMatchesTheModel(t *testing.T) {
	tests := []struct {
		name      string
		elo, draw float64
		wantDraw  float64
	}{
		{"equal engines", 0, 0.6, 0.6},
		{"a small gain", 6, 0.5, 0.5},
		{"a clear loss", -50, 0.3, 0.3},
		{"a draw ratio the Elo cannot have is clamped", 400, 0.9, 2 * (1 - expectedScore(400))},
		{"no draws", 20, 0, 0},
	}
	const pairs = 40000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := &SimSource{Elo: tt.elo, DrawRatio: tt.draw, Rand: rand.New(rand.NewPCG(42, uint64(len(tt.name))))}
			b, err := s.Play(context.Background(), Task{}, pairs, nil)
			if err != nil {
				t.Fatal(err)
			}
			st := b.Stats
			if msg := checkBatch(st, 2*pairs); msg != "" {
				t.Fatalf("invalid counts %+v: %s", st, msg)
			}
			n := float64(2 * pairs)
			score := (float64(st.Wins) + float64(st.Draws)/2) / n
			want := expectedScore(tt.elo)
			se := math.Sqrt(0.25 / n)
			if math.Abs(score-want) > 4*se {
				t.Errorf("score %.4f, want %.4f ± %.4f", score, want, 4*se)
			}
			draws := float64(st.Draws) / n
			if math.Abs(draws-tt.wantDraw) > 4*math.Sqrt(0.25/n) {
				t.Errorf("draw ratio %.4f, want %.4f", draws, tt.wantDraw)
			}
			// Games are independent, so both games of a pair are wins with probability pWin².
			pWin := want - tt.wantDraw/2
			ww := float64(st.Pentanomial[4]) / pairs
			if math.Abs(ww-pWin*pWin) > 4*math.Sqrt(0.25/pairs) {
				t.Errorf("WW pairs %.4f, want %.4f", ww, pWin*pWin)
			}
		})
	}
}

var (
	pgnWhite  = regexp.MustCompile(`\[White "([^"]*)"\]`)
	pgnResult = regexp.MustCompile(`\[Result "([^"]*)"\]`)
	pgnRound  = regexp.MustCompile(`\[Round "([^"]*)"\]`)
)

// The PGN has one game per result, colours alternating within a pair, and results that add up to
// the counts.
func TestSimSourcePGNAgreesWithTheCounts(t *testing.T) {
	s := &SimSource{Elo: 30, DrawRatio: 0.4, Rand: rand.New(rand.NewPCG(1, 2))}
	task := Task{RunID: testRunID, TaskID: 9, Start: 600, Args: protocol.RunArgs{
		NewTag: `my "patch"`, BaseTag: "master", ResolvedNew: strings.Repeat("a", 40), ResolvedBase: strings.Repeat("b", 40)}}
	b, err := s.Play(context.Background(), task, 500, nil)
	if err != nil {
		t.Fatal(err)
	}
	whites := pgnWhite.FindAllStringSubmatch(b.PGN, -1)
	results := pgnResult.FindAllStringSubmatch(b.PGN, -1)
	rounds := pgnRound.FindAllStringSubmatch(b.PGN, -1)
	if len(whites) != 1000 || len(results) != 1000 || len(rounds) != 1000 {
		t.Fatalf("%d games in the PGN, want 1000", len(whites))
	}
	if rounds[0][1] != "601" || rounds[999][1] != "1600" {
		t.Errorf("rounds %s..%s, want 601..1600 (from the opening offset)", rounds[0][1], rounds[999][1])
	}
	if !strings.Contains(b.PGN, `[Event "Batch 9: my vs master"]`) || !strings.Contains(b.PGN, `[White "New-aaaaaaaaaa"]`) {
		t.Errorf("unexpected header:\n%s", b.PGN[:300])
	}
	var got protocol.Stats
	for i := range whites {
		newIsWhite := strings.HasPrefix(whites[i][1], "New-")
		if newIsWhite != (i%2 == 0) {
			t.Fatalf("game %d: New plays white %v", i, newIsWhite)
		}
		switch r := results[i][1]; {
		case r == "1/2-1/2":
			got.Draws++
		case (r == "1-0") == newIsWhite:
			got.Wins++
		default:
			got.Losses++
		}
	}
	if got.Wins != b.Stats.Wins || got.Losses != b.Stats.Losses || got.Draws != b.Stats.Draws {
		t.Errorf("PGN results %+v, counts %+v", got, b.Stats)
	}
}

func TestSimSourceIsReproducible(t *testing.T) {
	play := func() Batch {
		s := &SimSource{Elo: 3, DrawRatio: 0.5, Rand: rand.New(rand.NewPCG(9, 9))}
		b, err := s.Play(context.Background(), Task{}, 200, nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if a, b := play(), play(); a.Stats != b.Stats || a.PGN != b.PGN {
		t.Errorf("two runs with one seed differ: %+v and %+v", a.Stats, b.Stats)
	}
}

func TestOutcomeProbabilitiesAreGuarded(t *testing.T) {
	for _, tt := range []struct{ elo, draw float64 }{
		{0, 0.5}, {1e6, 0.5}, {-1e6, 0.5}, {math.NaN(), 0.5}, {math.Inf(1), 0.2}, {math.Inf(-1), 0.2},
		{0, 2}, {0, -1}, {0, math.NaN()}, {800, 1}, {-800, 1},
	} {
		w, d := outcomeProbabilities(tt.elo, tt.draw)
		l := 1 - w - d
		if !(w >= 0 && w <= 1 && d >= 0 && d <= 1 && l >= -1e-12) {
			t.Errorf("Elo %v, draw ratio %v: win %v draw %v loss %v", tt.elo, tt.draw, w, d, l)
		}
	}
}

// The simulated objective rewards the side closer to the optimum, so fishtest's SPSA update
// (theta += R*c*(wins-losses)*flip) moves theta toward it.
func TestSimSourceSPSAMovesTowardTheOptimum(t *testing.T) {
	s := &SimSource{DrawRatio: 0.4, SPSAOptimum: map[string]float64{"A": 150}, Rand: rand.New(rand.NewPCG(3, 4))}
	params := func(theta, c float64, flip int) *SPSAParams {
		return &SPSAParams{
			W: []protocol.SPSAWParam{{Name: "A", Value: theta + c*float64(flip), C: c, Flip: flip}, {Name: "Unknown", Value: 1, C: 1}},
			B: []protocol.SPSABParam{{Name: "A", Value: theta - c*float64(flip)}},
		}
	}
	if e := s.spsaElo(params(100, 10, 1)); math.Abs(e-2*defaultSPSAEloPerStep) > 1e-9 {
		t.Errorf("W a step closer to the optimum on each side: %v Elo, want %v", e, 2*defaultSPSAEloPerStep)
	}
	if e := s.spsaElo(params(100, 10, -1)); e >= 0 {
		t.Errorf("W farther from the optimum: %v Elo, want negative", e)
	}
	if e := s.spsaElo(params(150, 10, 1)); e != 0 {
		t.Errorf("at the optimum: %v Elo, want 0", e)
	}
	if e := (&SimSource{}).spsaElo(params(100, 10, 1)); e != 0 {
		t.Errorf("without an optimum: %v Elo, want 0", e)
	}

	theta, c := 100.0, 10.0
	rng := rand.New(rand.NewPCG(5, 6))
	var sum float64
	const iters, tail = 3000, 1000
	for i := range iters {
		flip := 1
		if rng.IntN(2) == 0 {
			flip = -1
		}
		b, err := s.Play(context.Background(), Task{}, 8, params(theta, c, flip))
		if err != nil {
			t.Fatal(err)
		}
		theta += 0.5 * float64(b.Stats.Wins-b.Stats.Losses) * float64(flip)
		if i >= iters-tail {
			sum += theta
		}
	}
	if mean := sum / tail; math.Abs(mean-150) > 20 {
		t.Errorf("theta averaged %.1f over the last %d iterations, want near the optimum 150 (from 100)", mean, tail)
	}
}

func TestSimSourceSleepsPerPairAndStopsWithItsContext(t *testing.T) {
	s := &SimSource{GameTime: 20 * time.Millisecond}
	t0 := time.Now()
	if _, err := s.Play(context.Background(), Task{}, 3, nil); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(t0); d < 60*time.Millisecond {
		t.Errorf("3 pairs took %v, want at least 60 ms", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	s.GameTime = time.Hour
	if _, err := s.Play(ctx, Task{}, 1, nil); err != context.DeadlineExceeded {
		t.Errorf("Play: %v, want the context's error", err)
	}
}

// One SimSource shared by many workers: the race detector checks the locking.
func TestSimSourceIsSafeForConcurrentUse(t *testing.T) {
	s := &SimSource{Elo: 2, DrawRatio: 0.5} // nil Rand: made on first use, also under the lock
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				b, err := s.Play(context.Background(), Task{}, 4, nil)
				if err != nil || checkBatch(b.Stats, 8) != "" {
					t.Errorf("Play: %+v, %v", b.Stats, err)
				}
			}
		})
	}
	wg.Wait()
}

// A PGN tag's value is escaped (backslash, quote) and stripped of control characters, and
// invalid UTF-8 becomes U+FFFD, whether writeTag takes its plain path or not.
func TestWriteTagEscapes(t *testing.T) {
	reference := func(name, value string) string {
		var b strings.Builder
		b.WriteString("[" + name + ` "`)
		for _, r := range value {
			switch {
			case r == '\\' || r == '"':
				b.WriteByte('\\')
				b.WriteRune(r)
			case r < ' ' || r == 0x7f:
			default:
				b.WriteRune(r)
			}
		}
		b.WriteString("\"]\n")
		return b.String()
	}
	pieces := []string{"", "Batch 3: patch vs master", `"`, `\`, "\x00", "\n", "\x7f", "é", "\xff", "~", " "}
	rng := rand.New(rand.NewPCG(9, 10))
	for range 5000 {
		var value string
		for range rng.IntN(5) {
			value += pieces[rng.IntN(len(pieces))]
		}
		var b strings.Builder
		writeTag(&b, "Event", value)
		if want := reference("Event", value); b.String() != want {
			t.Fatalf("value %q: got %q, want %q", value, b.String(), want)
		}
	}
}
