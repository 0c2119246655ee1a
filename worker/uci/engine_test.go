package uci_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
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

// The handshake gives the engine's name and the options it declares, with their types and
// bounds, names with spaces included.
func TestHandshakeReadsNameAndOptions(t *testing.T) {
	e := fakeucitest.Start(t, nil)
	if e.Name != fakeuci.Name {
		t.Errorf("name %q, want %q", e.Name, fakeuci.Name)
	}
	want := map[string]uci.Option{
		"Skill":     {Name: "Skill", Type: "spin", Default: "10", Min: 0, Max: 20},
		"Misbehave": {Name: "Misbehave", Type: "combo", Default: "none", Vars: []string{"none", "crash", "hang", "illegal", "slow", "nomove"}},
	}
	for name, w := range want {
		if got := e.Options[name]; !reflect.DeepEqual(got, w) {
			t.Errorf("option %s: %+v, want %+v", name, got, w)
		}
	}
}

// Two engines play a game through Go: every move they name is legal in the position the game
// is in, and the game reaches its end by the rules.
func TestTwoEnginesPlayAGame(t *testing.T) {
	ctx := context.Background()
	engines := [2]*uci.Engine{fakeucitest.Start(t, map[string]string{"Skill": "20"}), fakeucitest.Start(t, map[string]string{"Skill": "0"})}
	g := chess.NewGame()
	var moves []string
	for ply := 0; g.Outcome() == chess.NoOutcome && ply < 400; ply++ {
		s, err := engines[ply%2].Go(ctx, "", moves, uci.Limits{WTime: time.Minute, BTime: time.Minute}, 10*time.Second)
		if err != nil {
			t.Fatalf("ply %d: %v", ply, err)
		}
		if !s.Score.Known || s.Depth != 1 {
			t.Errorf("ply %d: search %+v, want a score at depth 1", ply, s)
		}
		if err := g.PushNotationMove(s.BestMove, chess.UCINotation{}, nil); err != nil {
			t.Fatalf("ply %d: %s is not legal in %s: %v", ply, s.BestMove, g.FEN(), err)
		}
		moves = append(moves, s.BestMove)
	}
	if g.Outcome() == chess.NoOutcome {
		t.Fatalf("no result after %d plies", len(moves))
	}
	// The engine that always takes material should not lose to the one that never looks.
	if g.Outcome() == chess.BlackWon {
		t.Errorf("Skill 20 lost to Skill 0 (%s by %s)", g.Outcome(), g.Method())
	}
}

// A search from a FEN with moves after it is made in that position: here black's king alone,
// where an engine that ignored the FEN would answer a move of the starting position.
func TestGoFromAFEN(t *testing.T) {
	e := fakeucitest.Start(t, nil)
	const fen = "4k3/8/8/8/8/8/4P3/4K3 w - - 0 1"
	s, err := e.Go(context.Background(), fen, []string{"e2e4"}, uci.Limits{MoveTime: 100 * time.Millisecond}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := replay(t, fen, "e2e4", s.BestMove); err != nil {
		t.Fatalf("answered %s, not legal after e2e4 in %s: %v", s.BestMove, fen, err)
	}
}

// replay plays moves (UCI notation) from fen and returns why one is not legal, if one is not.
func replay(t *testing.T, fen string, moves ...string) error {
	t.Helper()
	opt, err := chess.FEN(fen)
	if err != nil {
		t.Fatal(err)
	}
	g := chess.NewGame(opt)
	for _, m := range moves {
		if err := g.PushNotationMove(m, chess.UCINotation{}, nil); err != nil {
			return fmt.Errorf("%s: %w", m, err)
		}
	}
	return nil
}

// Misbehaving engines are told apart: one that exits is ErrCrashed, one that does not answer in
// time is ErrTimeout (and Close still ends it), one that names a bad move returns it for the
// caller to refuse.
func TestMisbehavingEngines(t *testing.T) {
	ctx := context.Background()
	limits := uci.Limits{WTime: time.Second, BTime: time.Second}
	for _, tt := range []struct {
		misbehave string
		want      error
		move      string
	}{
		{"crash", uci.ErrCrashed, ""},
		{"hang", uci.ErrTimeout, ""},
		{"slow", uci.ErrTimeout, ""},
		{"illegal", nil, "a1a1"},
		{"nomove", nil, "(none)"},
	} {
		t.Run(tt.misbehave, func(t *testing.T) {
			e := fakeucitest.Start(t, map[string]string{"Misbehave": tt.misbehave, "MisbehaveAtPly": "2"})
			// The first two plies are played as usual.
			var moves []string
			for ply := range 2 {
				s, err := e.Go(ctx, "", moves, limits, 10*time.Second)
				if err != nil {
					t.Fatalf("ply %d, before misbehaving: %v", ply, err)
				}
				moves = append(moves, s.BestMove)
			}
			start := time.Now()
			s, err := e.Go(ctx, "", moves, limits, 300*time.Millisecond)
			if !errors.Is(err, tt.want) || (tt.want == nil && s.BestMove != tt.move) {
				t.Fatalf("search: %+v, %v; want move %q, error %v", s, err, tt.move, tt.want)
			}
			if errors.Is(err, uci.ErrTimeout) && time.Since(start) < 300*time.Millisecond {
				t.Errorf("timed out after %v, before its deadline", time.Since(start))
			}
			e.Close()
			if !e.Exited() {
				t.Error("the engine still runs after Close")
			}
		})
	}
}

// An engine that is not there, or that is not a UCI engine, is an error from Start, in time.
func TestStartFailures(t *testing.T) {
	if _, err := uci.Start(context.Background(), "/nonexistent/engine", nil, time.Second); err == nil {
		t.Error("started an engine that does not exist")
	}
	start := time.Now()
	_, err := uci.Start(context.Background(), "/bin/sh", []string{"-c", "sleep 5"}, 200*time.Millisecond)
	if !errors.Is(err, uci.ErrTimeout) {
		t.Errorf("a program that never answers uci: %v, want ErrTimeout", err)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Start took %v to give up on a silent program", took)
	}
	_, err = uci.Start(context.Background(), "/bin/sh", []string{"-c", "echo hello"}, 5*time.Second)
	if !errors.Is(err, uci.ErrCrashed) {
		t.Errorf("a program that exits: %v, want ErrCrashed", err)
	}
}

func ExampleLimits() {
	fmt.Println(uci.Limits{WTime: 10 * time.Second, BTime: 9500 * time.Millisecond, WInc: 100 * time.Millisecond, BInc: 100 * time.Millisecond}.Command())
	fmt.Println(uci.Limits{}.Command())
	// Output:
	// go wtime 10000 btime 9500 winc 100 binc 100
	// go infinite
}

// The bench reads Stockfish's report: the fake engine's nodes (its signature) and time.
func TestBench(t *testing.T) {
	b, err := uci.Bench(context.Background(), os.Args[0], 16, 1, 13)
	if err != nil {
		t.Fatal(err)
	}
	if b.Nodes != fakeuci.BenchNodes || b.TimeMs != 2000 || b.NPS(1) != float64(fakeuci.BenchNodes)/2 {
		t.Errorf("bench %+v (nps %v), want %d nodes in 2000 ms", b, b.NPS(1), fakeuci.BenchNodes)
	}
	if _, err := uci.Bench(context.Background(), "/bin/true", 16, 1, 13); err == nil {
		t.Error("a program that reports nothing gave a bench")
	}
}

// A search given up on (its engine answered too late) is never taken for the next one: the
// late bestmove is waited for and set aside, and the next search answers its own position.
func TestALateAnswerIsNotTheNextSearchs(t *testing.T) {
	ctx := context.Background()
	e := fakeucitest.Start(t, map[string]string{"Misbehave": "slow", "MisbehaveAtPly": "2"})
	moves := []string{"e2e4", "e7e5"}
	if _, err := e.Go(ctx, "", moves, uci.Limits{WTime: 500 * time.Millisecond, BTime: 500 * time.Millisecond}, 200*time.Millisecond); !errors.Is(err, uci.ErrTimeout) {
		t.Fatalf("a search answered after a second: %v, want ErrTimeout at 200 ms", err)
	}
	// Black's king alone against a pawn: no move of the game above is legal here.
	const fen = "4k3/8/8/8/8/8/4P3/4K3 b - - 0 1"
	s, err := e.Go(ctx, fen, nil, uci.Limits{WTime: time.Second, BTime: time.Second}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := replay(t, fen, s.BestMove); err != nil {
		t.Fatalf("answered %s, not legal in %s: the late answer was taken for this one", s.BestMove, fen)
	}
}
