// Package fakeuci is a tiny UCI engine for tests: deterministic, instant, of adjustable
// strength, and able to misbehave on request, so that the worker's game loop, clocks,
// adjudication and failure accounting can be tested without a real engine.
//
// It plays legal moves (the rules come from the chess library), chosen from a hash of the
// position: at Skill 0 any legal move, at Skill 20 always the greedy one (mate in one, else the
// capture that wins the most material, else the hashed choice), and in between the greedy one
// that often in twenty. It reports the material balance as its score.
//
// Options beyond Hash and Threads (accepted and ignored):
//   - Skill (spin 0..20, default 10): how often it plays the greedy move.
//   - Misbehave (combo none, crash, hang, illegal, slow, nomove): what it does from the search
//     at ply MisbehaveAtPly on: exit with status 3, never answer, name an illegal move, answer
//     only after twice the time it has left, answer "bestmove (none)".
//   - MisbehaveAtPly (spin 0..1000, default 0).
package fakeuci

import (
	"bufio"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/corentings/chess/v2"
)

// ErrCrash is what Run returns when the engine was told to crash: the process running it
// exits with CrashStatus.
var ErrCrash = errors.New("fakeuci: crashing as told")

// CrashStatus is the exit status of a crash.
const CrashStatus = 3

// TestEnv is the environment variable that makes a test binary the engine (see ServeIfAsked).
const TestEnv = "SHOAL_TEST_FAKE_UCI"

// ServeIfAsked makes a test binary its own engine: with TestEnv set to 1 it runs the engine on
// stdin and stdout and exits; otherwise it sets TestEnv, so that the test binary started as an
// engine (os.Args[0]) is one. A package's TestMain calls it first.
func ServeIfAsked() {
	if os.Getenv(TestEnv) != "1" {
		os.Setenv(TestEnv, "1")
		return
	}
	if len(os.Args) > 1 && os.Args[1] == "bench" {
		os.Exit(Bench(os.Args[2:], os.Stderr))
	}
	if err := Run(os.Stdin, os.Stdout); errors.Is(err, ErrCrash) {
		os.Exit(CrashStatus)
	}
	os.Exit(0)
}

// BenchNodes is the signature of the fake engine's bench: the nodes it says it searched.
const BenchNodes = 1_234_567

// Bench answers "bench [hash threads depth ...]" as Stockfish does, on w (its standard error):
// BenchNodes nodes in 2 seconds, whatever it is asked. It returns the exit status.
func Bench(args []string, w io.Writer) int {
	fmt.Fprintf(w, "\n===========================\nTotal time (ms) : 2000\nNodes searched  : %d\nNodes/second    : %d\n", BenchNodes, BenchNodes/2)
	return 0
}

// Name is the engine's id name.
const Name = "Shoal fake UCI engine"

type engine struct {
	out       io.Writer
	skill     int
	misbehave string
	atPly     int
	game      *chess.Game
	plies     int
}

// Run speaks UCI on in and out until "quit" or the end of in.
func Run(in io.Reader, out io.Writer) error {
	e := &engine{out: out, skill: 10, misbehave: "none", game: chess.NewGame()}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "uci":
			e.say("id name " + Name)
			e.say("id author Shoal")
			e.say("option name Hash type spin default 16 min 1 max 1024")
			e.say("option name Threads type spin default 1 min 1 max 64")
			e.say("option name Skill type spin default 10 min 0 max 20")
			e.say("option name Misbehave type combo default none var none var crash var hang var illegal var slow var nomove")
			e.say("option name MisbehaveAtPly type spin default 0 min 0 max 1000")
			e.say("uciok")
		case "isready":
			e.say("readyok")
		case "setoption":
			e.setOption(f[1:])
		case "ucinewgame":
			e.game, e.plies = chess.NewGame(), 0
		case "position":
			if err := e.position(f[1:]); err != nil {
				e.say("info string " + err.Error())
			}
		case "go":
			if err := e.search(f[1:]); err != nil {
				return err
			}
		case "quit":
			return nil
		}
	}
	return sc.Err()
}

func (e *engine) say(line string) { fmt.Fprintln(e.out, line) }

// setOption reads "name <name> value <value>".
func (e *engine) setOption(f []string) {
	if len(f) < 4 || f[0] != "name" || f[2] != "value" {
		return
	}
	switch f[1] {
	case "Skill":
		if v, err := strconv.Atoi(f[3]); err == nil {
			e.skill = min(max(v, 0), 20)
		}
	case "Misbehave":
		e.misbehave = f[3]
	case "MisbehaveAtPly":
		e.atPly, _ = strconv.Atoi(f[3])
	}
}

// position reads "startpos|fen <6 fields> [moves ...]".
func (e *engine) position(f []string) error {
	var fen string
	switch {
	case len(f) >= 1 && f[0] == "startpos":
		f = f[1:]
	case len(f) >= 7 && f[0] == "fen":
		fen, f = strings.Join(f[1:7], " "), f[7:]
	default:
		return errors.New("bad position command")
	}
	g := chess.NewGame()
	if fen != "" {
		opt, err := chess.FEN(fen)
		if err != nil {
			return err
		}
		g = chess.NewGame(opt)
	}
	plies := 0
	if len(f) > 0 && f[0] == "moves" {
		for _, m := range f[1:] {
			if err := g.PushNotationMove(m, chess.UCINotation{}, nil); err != nil {
				return fmt.Errorf("illegal move %s: %w", m, err)
			}
			plies++
		}
	}
	e.game, e.plies = g, plies
	return nil
}

// search answers "go ..." with a move, or misbehaves.
func (e *engine) search(f []string) error {
	pos := e.game.Position()
	if e.misbehave != "none" && e.plies >= e.atPly {
		switch e.misbehave {
		case "crash":
			return ErrCrash
		case "hang":
			for { // never answers; the client kills the process
				time.Sleep(time.Hour)
			}
		case "illegal":
			e.say("bestmove a1a1")
			return nil
		case "nomove":
			e.say("bestmove (none)")
			return nil
		case "slow":
			time.Sleep(2 * timeLeft(f, pos.Turn()))
		}
	}
	moves := e.game.ValidMoves()
	if len(moves) == 0 {
		e.say("bestmove (none)")
		return nil
	}
	h := fnv.New64a()
	h.Write([]byte(pos.String()))
	sum := h.Sum64()
	pick := moves[sum%uint64(len(moves))]
	if int((sum>>32)%20) < e.skill {
		pick = greedy(pos, moves, pick)
	}
	next := pos.Update(&pick)
	e.say(fmt.Sprintf("info depth 1 score cp %d nodes %d", -material(next), len(moves)))
	e.say("bestmove " + chess.UCINotation{}.Encode(pos, &pick))
	return nil
}

// greedy is a mate in one if there is one, else the move that leaves the side to move the most
// material, else fallback.
func greedy(pos *chess.Position, moves []chess.Move, fallback chess.Move) chess.Move {
	best, bestScore := fallback, -material(pos.Update(&fallback))
	for i := range moves {
		next := pos.Update(&moves[i])
		if next.Status() == chess.Checkmate {
			return moves[i]
		}
		if s := -material(next); s > bestScore {
			best, bestScore = moves[i], s
		}
	}
	return best
}

// material is the material balance, in centipawns, for the side to move in pos.
func material(pos *chess.Position) int {
	values := map[chess.PieceType]int{chess.Pawn: 100, chess.Knight: 300, chess.Bishop: 300, chess.Rook: 500, chess.Queen: 900}
	total := 0
	for _, p := range pos.Board().SquareMap() {
		v := values[p.Type()]
		if p.Color() != pos.Turn() {
			v = -v
		}
		total += v
	}
	return total
}

// timeLeft is the side to move's clock in a "go" command's arguments (a second if none).
func timeLeft(f []string, turn chess.Color) time.Duration {
	key := "wtime"
	if turn == chess.Black {
		key = "btime"
	}
	for i := 0; i+1 < len(f); i++ {
		if f[i] == key || f[i] == "movetime" {
			if ms, err := strconv.Atoi(f[i+1]); err == nil {
				return time.Duration(ms) * time.Millisecond
			}
		}
	}
	return time.Second
}
