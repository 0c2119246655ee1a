package worker

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker/match"
	"github.com/shoal-chess/shoal/worker/uci/fakeuci"
)

func TestMain(m *testing.M) {
	fakeuci.ServeIfAsked() // the test binary is the engine EngineSource runs
	os.Exit(m.Run())
}

func realTask() Task {
	return Task{RunID: "6543210fedcba98765432100", TaskID: 3, NumGames: 8, Start: 16, Args: protocol.RunArgs{
		NewTag: "strong", BaseTag: "weak", TC: "10+0.1", Threads: 1, Book: "shoal_openings_v1.epd",
		NewOptions: "Hash=16 Skill=20", BaseOptions: "Hash=16 Skill=0",
	}}
}

// A batch of real games: every game is played and counted once, pairs give the pentanomial,
// the run's options tell the engines apart (the greedy one wins), and the PGN holds every game.
func TestEngineSourcePlaysABatch(t *testing.T) {
	src := &EngineSource{Engine: os.Args[0], Concurrency: 2, Factor: 1}
	b, err := src.Play(context.Background(), realTask(), 4, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := b.Stats
	penta := 0
	for _, n := range s.Pentanomial {
		penta += n
	}
	if s.Wins+s.Losses+s.Draws != 8 || penta != 4 {
		t.Fatalf("stats %+v: want 8 games in 4 pairs", s)
	}
	if s.Wins <= s.Losses {
		t.Errorf("stats %+v: the engine at Skill 20 did not beat the one at Skill 0", s)
	}
	if n := strings.Count(b.PGN, "[Result "); n != 8 {
		t.Errorf("the PGN holds %d games, want 8", n)
	}
	if !strings.Contains(b.PGN, `[Event "Batch 3: strong vs weak"]`) || !strings.Contains(b.PGN, `[TimeControl "10+0.1"]`) ||
		strings.Count(b.PGN, `[RunTimeControl "10+0.1"]`) != 8 {
		t.Errorf("the PGN does not name the batch and the time controls, played and the run's:\n%.600s", b.PGN)
	}
}

// Before a task the bench runs: an engine whose bench does not give the run's signature stops
// the run; the measured speed scales the time control (fishtest's reference 628,000 nps over
// the fake engine's 617,284: 10+0.1 becomes 10.174+0.102).
func TestEngineSourceBench(t *testing.T) {
	task := realTask()
	task.Args.NewSignature = "1234567"
	task.Args.BaseSignature = "1234567"
	b, err := (&EngineSource{Engine: os.Args[0]}).Play(context.Background(), task, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.PGN, `[TimeControl "10.174+0.102"]`) {
		t.Errorf("the time control was not scaled by the measured speed:\n%.500s", b.PGN)
	}
	task.Args.BaseSignature = "7654321"
	_, err = (&EngineSource{Engine: os.Args[0]}).Play(context.Background(), task, 1, nil)
	var runErr *RunError
	if !errors.As(err, &runErr) || !strings.Contains(err.Error(), "user expected: 7654321 but worker got: 1234567") {
		t.Errorf("a wrong signature: %v, want the run stopped with fishtest's message", err)
	}
}

// A run the worker cannot play fails the task with a clear error: a book or an engine it does
// not have; a run whose time control cannot be read is the run's fault (stop_run).
func TestEngineSourceRefusals(t *testing.T) {
	src := &EngineSource{Engine: os.Args[0], Factor: 1}
	missing := realTask()
	missing.Args.Book = "UHO_Lichess_4852_v1.epd"
	_, err := src.Play(context.Background(), missing, 1, nil)
	var runErr *RunError
	if !errors.Is(err, match.ErrNoBook) || errors.As(err, &runErr) || !strings.Contains(err.Error(), "UHO_Lichess_4852_v1.epd") {
		t.Errorf("a missing book: %v, want ErrNoBook naming it, failing the task", err)
	}
	badTC := realTask()
	badTC.Args.TC = "ten minutes"
	if _, err := src.Play(context.Background(), badTC, 1, nil); !errors.As(err, &runErr) {
		t.Errorf("an unreadable time control: %v, want a RunError", err)
	}
	noEngine := &EngineSource{Engines: t.TempDir()}
	if _, err := noEngine.Play(context.Background(), realTask(), 1, nil); err == nil || errors.As(err, &runErr) {
		t.Errorf("no engine for the run: %v, want an error failing the task", err)
	}
}

// stockfish is Debian's Stockfish, which .ci/run installs: missing there, the test fails;
// elsewhere it is skipped.
func stockfish(t *testing.T) string {
	t.Helper()
	for _, p := range []string{"/usr/games/stockfish", "stockfish"} {
		if path, err := exec.LookPath(p); err == nil {
			return path
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no Stockfish: .ci/run installs Debian's stockfish package")
	}
	t.Skip("no Stockfish (Debian: apt-get install stockfish); the real-engine test needs it")
	return ""
}

// Real Stockfish plays a pair at a fast time control, one side limited in strength: two games
// with legal moves to a result by the rules or adjudication, none lost on time or to a crash.
func TestEngineSourceWithStockfish(t *testing.T) {
	src := &EngineSource{Engine: stockfish(t)}
	task := realTask()
	task.Args.TC = "2+0.02"
	task.Args.NewOptions = "Hash=16"
	task.Args.BaseOptions = "Hash=16 UCI_LimitStrength=true UCI_Elo=1350"
	b, err := src.Play(context.Background(), task, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := b.Stats
	if s.Wins+s.Losses+s.Draws != 2 || s.Crashes != 0 || s.TimeLosses != 0 {
		t.Fatalf("stats %+v: want two games, none lost to a crash or on time", s)
	}
	games := match.SplitPGN(b.PGN)
	if len(games) != 2 {
		t.Fatalf("%d games in the PGN, want 2:\n%s", len(games), b.PGN)
	}
	for i, pgn := range games {
		g, err := match.ParsePGN(pgn)
		if err != nil {
			t.Fatalf("game %d does not parse: %v\n%s", i+1, err, pgn)
		}
		if len(g.Moves()) < 10 {
			t.Errorf("game %d has %d moves:\n%s", i+1, len(g.Moves()), pgn)
		}
	}
}

// An SPSA batch plays with each side's perturbed parameters set as its engine's options: here
// the fake engine's Skill, near 20 for the engine under test and near 0 for its opponent.
func TestEngineSourcePlaysAnSPSABatch(t *testing.T) {
	task := realTask()
	task.Args.NewOptions, task.Args.BaseOptions = "Hash=16", "Hash=16"
	task.Args.SPSA = &protocol.SPSAArgs{}
	spsa := &SPSAParams{W: []protocol.SPSAWParam{{Name: "Skill", Value: 19.6, C: 1, R: 0.01}},
		B: []protocol.SPSABParam{{Name: "Skill", Value: 0.4}}}
	b, err := (&EngineSource{Engine: os.Args[0], Factor: 1}).Play(context.Background(), task, 3, spsa)
	if err != nil {
		t.Fatal(err)
	}
	if s := b.Stats; s.Wins+s.Losses+s.Draws != 6 || s.Wins <= s.Losses {
		t.Errorf("stats %+v: want 6 games won by the side near Skill 20", s)
	}
}

// Stochastic rounding gives floor(v) or floor(v)+1, the latter with probability v-floor(v).
func TestStochasticRound(t *testing.T) {
	for _, tt := range []struct {
		v, u float64
		want int
	}{{19.6, 0, 19}, {19.6, 0.39, 19}, {19.6, 0.4, 20}, {19.6, 0.99, 20}, {-0.25, 0.2, -1}, {-0.25, 0.25, 0}, {3, 0.999, 3}} {
		if got := stochasticRound(tt.v, tt.u); got != tt.want {
			t.Errorf("stochasticRound(%v, %v) = %d, want %d", tt.v, tt.u, got, tt.want)
		}
	}
}

// The engines of a run are found in the engines directory by the run's tags (or commits): here
// "strong" and "weak", both the fake engine, with no default engine at all.
func TestEngineSourceFindsEnginesByTag(t *testing.T) {
	dir := t.TempDir()
	for _, tag := range []string{"strong", "weak"} {
		if err := os.Symlink(os.Args[0], filepath.Join(dir, tag)); err != nil {
			t.Fatal(err)
		}
	}
	b, err := (&EngineSource{Engines: dir, Factor: 1}).Play(context.Background(), realTask(), 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s := b.Stats; s.Wins+s.Losses+s.Draws != 2 {
		t.Errorf("stats %+v: want one pair played", s)
	}
	task := realTask()
	task.Args.BaseTag, task.Args.ResolvedBase = "master", "0123456789abcdef0123456789abcdef01234567"
	if _, err := (&EngineSource{Engines: dir, Factor: 1}).Play(context.Background(), task, 1, nil); err == nil ||
		!strings.Contains(err.Error(), `no engine for "master"`) {
		t.Errorf("a base engine the directory lacks: %v, want an error naming it", err)
	}
}
