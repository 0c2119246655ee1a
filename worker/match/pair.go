package match

import (
	"context"
	"fmt"
	"time"

	"github.com/corentings/chess/v2"

	"github.com/shoal-chess/shoal/worker/uci"
)

// readyTimeout bounds an engine's answer to isready.
const readyTimeout = 10 * time.Second

// Seat is one of a match's two engines across its games: it starts the engine when a game needs
// it, and again after the engine crashed or hung, so that one bad game does not end the match.
type Seat struct {
	Name string
	TC   TimeControl
	// Start starts the engine with its options set.
	Start func(ctx context.Context) (*uci.Engine, error)

	engine *uci.Engine
}

// player is the seat's engine, started if need be and told a new game begins. An engine that
// is not ready (it may have died a moment ago, before its exit was seen) is started afresh,
// once.
func (s *Seat) player(ctx context.Context) (Player, error) {
	var err error
	for range 2 {
		if s.engine != nil && s.engine.Exited() {
			s.Close()
		}
		if s.engine == nil {
			e, err := s.Start(ctx)
			if err != nil {
				return Player{}, fmt.Errorf("start %s: %w", s.Name, err)
			}
			s.engine = e
		}
		if err = s.engine.NewGame(ctx, readyTimeout); err == nil {
			return Player{Name: s.Name, Engine: s.engine, TC: s.TC}, nil
		}
		s.Close()
		if ctx.Err() != nil {
			break
		}
	}
	return Player{}, fmt.Errorf("%s not ready for a new game: %w", s.Name, err)
}

// Close stops the seat's engine.
func (s *Seat) Close() {
	if s.engine != nil {
		s.engine.Close()
		s.engine = nil
	}
}

// Pair is the outcome of a game pair for the engine under test ("new"): its wins, losses and
// draws over both games, its points in the pair doubled (0 to 4, the pentanomial's index), and,
// as fishtest counts them, the games either engine lost by crashing or on time.
type Pair struct {
	Games               [2]Game
	Wins, Losses, Draws int
	Penta               int
	Crashes, TimeLosses int
}

// PlayPair plays the opening at fen twice, the new engine white then black, and counts the pair.
// Only ctx's end, or an engine that cannot be started, is an error.
func PlayPair(ctx context.Context, newSeat, baseSeat *Seat, fen string, adjudicate bool, tags map[string]string) (Pair, error) {
	var p Pair
	for i, white := range []*Seat{newSeat, baseSeat} {
		black := baseSeat
		if white == baseSeat {
			black = newSeat
		}
		w, err := white.player(ctx)
		if err != nil {
			return Pair{}, err
		}
		b, err := black.player(ctx)
		if err != nil {
			return Pair{}, err
		}
		g, err := Play(ctx, w, b, fen, adjudicate, tags)
		if err != nil {
			return Pair{}, err
		}
		p.Games[i] = g
		newColor := chess.White
		if i == 1 {
			newColor = chess.Black
		}
		switch {
		case g.Outcome == chess.Draw:
			p.Draws++
			p.Penta++
		case (g.Outcome == chess.WhiteWon) == (newColor == chess.White):
			p.Wins++
			p.Penta += 2
		default:
			p.Losses++
		}
		switch g.Termination {
		case EngineCrashed:
			p.Crashes++
		case TimeForfeit:
			p.TimeLosses++
		}
		// A side whose engine exited, or did not answer and may be hung, gets a new engine for
		// the next game.
		if g.Termination == EngineCrashed || g.Unanswered {
			if g.Loser == chess.White {
				white.Close()
			} else {
				black.Close()
			}
		}
	}
	return p, nil
}
