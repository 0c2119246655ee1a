package match

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/corentings/chess/v2"

	"github.com/shoal-chess/shoal/worker/uci"
	"github.com/shoal-chess/shoal/worker/uci/fakeuci"
	"github.com/shoal-chess/shoal/worker/uci/fakeuci/fakeucitest"
)

func TestMain(m *testing.M) {
	fakeuci.ServeIfAsked() // the test binary is its own engine
	os.Exit(m.Run())
}

func TestParseTC(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want TimeControl
	}{
		{"10+0.1", TimeControl{Base: 10 * time.Second, Inc: 100 * time.Millisecond}},
		{"60+0.6", TimeControl{Base: time.Minute, Inc: 600 * time.Millisecond}},
		{"40/60", TimeControl{Moves: 40, Base: time.Minute}},
		{"1:30+1", TimeControl{Base: 90 * time.Second, Inc: time.Second}},
	} {
		got, err := ParseTC(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseTC(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
	}
	for _, bad := range []string{"", "abc", "10+", "-1", "0", "0+1", "0/10", "x/10+1", "1:x", "NaN"} {
		if got, err := ParseTC(bad); err == nil {
			t.Errorf("ParseTC(%q) = %+v, want an error", bad, got)
		}
	}
}

// Scaling follows fishtest's worker: times multiplied by the factor and rounded to the
// millisecond.
func TestScaled(t *testing.T) {
	tc, _ := ParseTC("10+0.1")
	got := tc.Scaled(1.2345)
	if want := (TimeControl{Base: 12345 * time.Millisecond, Inc: 123 * time.Millisecond}); got != want {
		t.Errorf("scaled %+v, want %+v", got, want)
	}
	if got.String() != "12.345+0.123" {
		t.Errorf("written %q", got.String())
	}
	tc, _ = ParseTC("40/60")
	if got := tc.Scaled(0.5).String(); got != "40/30" {
		t.Errorf("40/60 halved written %q, want 40/30", got)
	}
}

// The resign rule needs three moves in a row of one side at -600 or worse; the draw rule 34
// full moves and 16 plies in a row within 20 centipawns; a move without a score breaks both.
func TestAdjudicator(t *testing.T) {
	var a adjudicator
	plies := 60
	step := func(side int, known bool, score int) verdict {
		plies++
		return a.add(side, known, score, plies, false)
	}
	// White sinks: -700, (black), -650, (black), -600 resigns; a break in between restarts it.
	for i, s := range []int{-700, -650, 100, -700, -650} {
		if v := step(0, true, s); v != playOn {
			t.Fatalf("white's move %d (%d): %v, want play on", i, s, v)
		}
		step(1, true, 650)
	}
	if v := step(0, true, -600); v != resigns {
		t.Fatalf("third move in a row at -600: %v, want resigns", v)
	}

	a = adjudicator{}
	plies = 0
	for i := range 67 { // 33.5 moves near zero: not yet
		if v := step(i%2, true, 15-i%31); v != playOn {
			t.Fatalf("ply %d: %v before move 34", plies, v)
		}
	}
	if v := step(1, true, 0); v != drawn {
		t.Fatalf("ply %d after 16 near zero: %v, want drawn", plies, v)
	}

	a = adjudicator{}
	for i := range 15 {
		step(i%2, true, 0)
	}
	if v := step(1, false, 0); v != playOn {
		t.Fatalf("a move without a score: %v", v)
	}
	for i := range 15 {
		if v := step(i%2, true, 0); v != playOn {
			t.Fatalf("ply %d, %d near zero since the break: %v", plies, i+1, v)
		}
	}
	if v := step(1, true, 0); v != drawn {
		t.Fatalf("16 near zero since the break: %v, want drawn", v)
	}

	// A capture or a pawn move starts the count again, from itself.
	a = adjudicator{}
	for i := range 15 {
		step(i%2, true, 0)
	}
	plies++
	if v := a.add(1, true, 0, plies, true); v != playOn {
		t.Fatalf("a capture after 15 near zero: %v, want play on", v)
	}
	for i := range 14 {
		if v := step(i%2, true, 0); v != playOn {
			t.Fatalf("%d near zero since the capture: %v", i+2, v)
		}
	}
	if v := step(0, true, 0); v != drawn {
		t.Fatalf("16 near zero counting the capture: %v, want drawn", v)
	}
}

// replay parses a game's PGN and checks it holds the game's moves, legally, and its result.
func replay(t *testing.T, g Game) {
	t.Helper()
	parsed, err := ParsePGN(g.PGN)
	if err != nil {
		t.Fatalf("the PGN does not parse: %v\n%s", err, g.PGN)
	}
	if n := len(parsed.Moves()); n != len(g.Moves) {
		t.Errorf("the PGN holds %d moves, the game %d", n, len(g.Moves))
	}
	// The library reads a drawn game's result as "*" (v2.3.2), so the tag is compared.
	if r := parsed.GetTagPair("Result"); r != string(g.Outcome) || !strings.HasSuffix(strings.TrimSpace(g.PGN), " "+r) {
		t.Errorf("the PGN's result %q, the game's %q:\n%s", r, g.Outcome, g.PGN)
	}
}

var quick = TimeControl{Base: 30 * time.Second, Inc: 100 * time.Millisecond}

// Without adjudication a game runs until a rule of chess ends it, and its PGN replays.
func TestPlayEndsByTheRules(t *testing.T) {
	g, err := Play(context.Background(), Player{Name: "strong", Engine: fakeucitest.Start(t, map[string]string{"Skill": "20"}), TC: quick},
		Player{Name: "weak", Engine: fakeucitest.Start(t, map[string]string{"Skill": "0"}), TC: quick}, "", false, map[string]string{"Event": "test"})
	if err != nil {
		t.Fatal(err)
	}
	if g.Termination != ByRules || g.Outcome == chess.NoOutcome || g.Loser != chess.NoColor {
		t.Fatalf("game %+v, want an end by the rules", g)
	}
	if g.Outcome == chess.BlackWon {
		t.Errorf("the greedy engine lost to the random one: %s", g.Reason)
	}
	replay(t, g)
}

// With fishtest's adjudication the random engine, once far behind, resigns.
func TestPlayAdjudicates(t *testing.T) {
	g, err := Play(context.Background(), Player{Name: "weak", Engine: fakeucitest.Start(t, map[string]string{"Skill": "0"}), TC: quick},
		Player{Name: "strong", Engine: fakeucitest.Start(t, map[string]string{"Skill": "20"}), TC: quick}, "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if g.Termination != Adjudicated || g.Outcome != chess.BlackWon {
		t.Fatalf("game ended %q (%s, %s), want white resigning by adjudication", g.Outcome, g.Termination, g.Reason)
	}
	if !strings.Contains(g.PGN, `[Termination "adjudication"]`) {
		t.Errorf("the PGN does not say it was adjudicated:\n%s", g.PGN)
	}
	replay(t, g)
}

// A side whose engine fails loses: on time when it answers late or not at all, for an illegal
// move or none, and as abandoned when its engine exits. Its opponent is not blamed.
func TestPlayFailuresLose(t *testing.T) {
	for _, tt := range []struct {
		misbehave string
		want      Termination
	}{
		{"slow", TimeForfeit},
		{"hang", TimeForfeit},
		{"illegal", IllegalMove},
		{"nomove", IllegalMove},
		{"crash", EngineCrashed},
	} {
		t.Run(tt.misbehave, func(t *testing.T) {
			t.Parallel()
			// The failing side's clock is short, so that waiting it out is quick; the other's
			// is long, so that a loaded machine cannot make it lose on time first.
			bad := fakeucitest.Start(t, map[string]string{"Misbehave": tt.misbehave, "MisbehaveAtPly": "5"})
			g, err := Play(context.Background(), Player{Name: "good", Engine: fakeucitest.Start(t, nil), TC: quick},
				Player{Name: "bad", Engine: bad, TC: TimeControl{Base: 2 * time.Second}}, "", true, nil)
			if err != nil {
				t.Fatal(err)
			}
			if g.Termination != tt.want || g.Loser != chess.Black || g.Outcome != chess.WhiteWon {
				t.Fatalf("game %q, %s (%s), loser %v; want black losing by %s", g.Outcome, g.Termination, g.Reason, g.Loser, tt.want)
			}
			if len(g.Moves) != 5 {
				t.Errorf("%d moves played, want 5 before black's failure", len(g.Moves))
			}
			replay(t, g)
		})
	}
}

// A game starts from the book position it is given, with black to move if the FEN says so.
func TestPlayFromAFEN(t *testing.T) {
	const fen = "4k3/8/8/8/8/8/4P3/4K3 b - - 0 1"
	g, err := Play(context.Background(), Player{Name: "w", Engine: fakeucitest.Start(t, nil), TC: quick},
		Player{Name: "b", Engine: fakeucitest.Start(t, nil), TC: quick}, fen, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(g.PGN, `[FEN "`+fen+`"]`) {
		t.Errorf("the PGN does not carry the start position:\n%s", g.PGN)
	}
	replay(t, g)
}

func seat(name string, tc TimeControl, options map[string]string) *Seat {
	return &Seat{Name: name, TC: tc, Start: func(ctx context.Context) (*uci.Engine, error) {
		e, err := uci.Start(ctx, os.Args[0], nil, 10*time.Second)
		if err != nil {
			return nil, err
		}
		for k, v := range options {
			if err := e.SetOption(k, v); err != nil {
				e.Close()
				return nil, err
			}
		}
		return e, nil
	}}
}

// A pair plays the opening with each engine white once and counts it for the new engine: the
// pentanomial index is its points doubled, and wins, losses and draws add up to two games.
func TestPlayPairCountsForTheNewEngine(t *testing.T) {
	strong, weak := seat("strong", quick, map[string]string{"Skill": "20"}), seat("weak", quick, map[string]string{"Skill": "0"})
	defer strong.Close()
	defer weak.Close()
	p, err := PlayPair(context.Background(), strong, weak, "", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.Wins+p.Losses+p.Draws != 2 || p.Penta != 2*p.Wins+p.Draws {
		t.Fatalf("pair %+v: counts that do not add up", p)
	}
	if p.Penta < 3 {
		t.Errorf("the greedy engine scored %d half-points of 4 against the random one", p.Penta)
	}
	for i, g := range p.Games {
		white := "strong"
		if i == 1 {
			white = "weak"
		}
		if !strings.Contains(g.PGN, `[White "`+white+`"]`) {
			t.Errorf("game %d: white is not %s:\n%s", i+1, white, g.PGN)
		}
	}
}

// An engine that crashes, or hangs, loses each game it does so in, counted as fishtest counts
// crashes and time losses, and is started again for the next game.
func TestPlayPairRestartsAFailedEngine(t *testing.T) {
	for _, tt := range []struct {
		misbehave           string
		crashes, timeLosses int
	}{
		{"crash", 2, 0},
		{"hang", 0, 2},
	} {
		t.Run(tt.misbehave, func(t *testing.T) {
			t.Parallel()
			good := seat("good", quick, nil)
			bad := seat("bad", TimeControl{Base: time.Second}, map[string]string{"Misbehave": tt.misbehave, "MisbehaveAtPly": "2"})
			defer good.Close()
			defer bad.Close()
			p, err := PlayPair(context.Background(), good, bad, "", false, nil)
			if err != nil {
				t.Fatal(err)
			}
			if p.Wins != 2 || p.Penta != 4 || p.Crashes != tt.crashes || p.TimeLosses != tt.timeLosses {
				t.Fatalf("pair %+v, want two wins for the good engine, %d crashes, %d time losses", p, tt.crashes, tt.timeLosses)
			}
		})
	}
}
