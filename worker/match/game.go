package match

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/corentings/chess/v2"

	"github.com/shoal-chess/shoal/worker/uci"
)

// Player is one side of a game: its engine, ready for a new game, and the time control it
// plays at (the two differ for a run with time odds).
type Player struct {
	Name   string
	Engine *uci.Engine
	TC     TimeControl
}

// Termination says how a game ended other than by the rules, in the words of the PGN tag.
type Termination string

const (
	ByRules       Termination = ""             // mate, stalemate, repetition, fifty moves, no mating material
	Adjudicated   Termination = "adjudication" // fishtest's resign or draw rule
	TimeForfeit   Termination = "time forfeit" // a side ran out of time, or did not answer
	IllegalMove   Termination = "illegal move" // a side named a move the rules do not allow
	EngineCrashed Termination = "abandoned"    // a side's engine exited
)

// Game is a played game.
type Game struct {
	Outcome     chess.Outcome // "1-0", "0-1" or "1/2-1/2"
	Termination Termination
	Reason      string // e.g. "Black mates", "White loses on time", "Draw by adjudication"
	// Loser is the side whose failure ended the game (time, crash, illegal move): chess.White
	// or chess.Black, chess.NoColor otherwise.
	Loser chess.Color
	// Unanswered is a loss on time by a side that did not answer at all: its engine may hang.
	Unanswered bool
	Moves      []string // in UCI notation
	PGN        string
}

// moveMargin is how long past its remaining time a side's answer is waited for: an answer in
// it still loses on time, but is told apart from no answer at all.
const moveMargin = time.Second

// Play plays one game from startFEN (the standard position if empty) between white and black.
// adjudicate applies fishtest's resign and draw rules. A side whose engine fails loses the game;
// the error is only ctx's, when the game was abandoned.
func Play(ctx context.Context, white, black Player, startFEN string, adjudicate bool, tags map[string]string) (Game, error) {
	g, err := newGame(startFEN)
	if err != nil {
		return Game{}, fmt.Errorf("start position: %w", err)
	}
	players := [2]Player{white, black}
	left := [2]time.Duration{white.TC.Base, black.TC.Base}
	var played [2]int // moves each side has made
	var adj adjudicator
	res := Game{Loser: chess.NoColor}
	end := func(loser chess.Color, why Termination, reason string) {
		g.Resign(loser)
		res.Loser, res.Termination, res.Reason = loser, why, reason
	}
	for g.Outcome() == chess.NoOutcome {
		if err := ctx.Err(); err != nil {
			return Game{}, err
		}
		turn := g.Position().Turn()
		side := sideIndex(turn)
		p := players[side]
		limits := uci.Limits{WTime: left[0], BTime: left[1], WInc: white.TC.Inc, BInc: black.TC.Inc}
		if p.TC.Moves > 0 {
			limits.MovesToGo = p.TC.Moves - played[side]%p.TC.Moves
		}
		s, err := p.Engine.Go(ctx, startFEN, res.Moves, limits, left[side]+moveMargin)
		switch {
		case ctx.Err() != nil:
			return Game{}, ctx.Err()
		case errors.Is(err, uci.ErrCrashed):
			end(turn, EngineCrashed, fmt.Sprintf("%s's engine exited", turn.Name()))
			continue
		case errors.Is(err, uci.ErrTimeout):
			end(turn, TimeForfeit, fmt.Sprintf("%s did not answer in its time", turn.Name()))
			res.Unanswered = true
			continue
		case err != nil:
			end(turn, EngineCrashed, fmt.Sprintf("%s's engine failed: %v", turn.Name(), err))
			continue
		}
		if left[side] -= s.Elapsed; left[side] < 0 {
			end(turn, TimeForfeit, fmt.Sprintf("%s loses on time", turn.Name()))
			continue
		}
		m, err := chess.UCINotation{}.Decode(g.Position(), s.BestMove)
		if err == nil {
			err = g.Move(m, nil)
		}
		if err != nil {
			end(turn, IllegalMove, fmt.Sprintf("%s makes an illegal move: %q", turn.Name(), s.BestMove))
			continue
		}
		res.Moves = append(res.Moves, s.BestMove)
		played[side]++
		left[side] += p.TC.Inc
		if p.TC.Moves > 0 && played[side]%p.TC.Moves == 0 {
			left[side] += p.TC.Base
		}
		if g.Outcome() != chess.NoOutcome {
			break // mate, stalemate, no mating material, fivefold repetition
		}
		for _, method := range g.EligibleDraws() {
			if method == chess.ThreefoldRepetition || method == chess.FiftyMoveRule {
				_ = g.Draw(method)
				break
			}
		}
		if g.Outcome() != chess.NoOutcome || !adjudicate {
			continue
		}
		score := s.Score.Centipawns
		if s.Score.Mate > 0 {
			score = mateScore
		} else if s.Score.Mate < 0 {
			score = -mateScore
		}
		switch adj.add(side, s.Score.Known, score, len(res.Moves), g.Position().HalfMoveClock() == 0) {
		case resigns:
			g.Resign(turn)
			res.Termination, res.Reason = Adjudicated, fmt.Sprintf("%s resigns by adjudication", turn.Name())
		case drawn:
			_ = g.Draw(chess.DrawOffer)
			res.Termination, res.Reason = Adjudicated, "Draw by adjudication"
		}
	}
	res.Outcome = g.Outcome()
	if res.Reason == "" {
		res.Reason = ruleReason(g)
	}
	// The seven tags every PGN has, then the caller's, then the game's own.
	for k, v := range map[string]string{"Event": "?", "Site": "?", "Date": time.Now().UTC().Format("2006.01.02"), "Round": "?"} {
		g.AddTagPair(k, v)
	}
	for k, v := range tags {
		g.AddTagPair(k, v)
	}
	g.AddTagPair("Result", string(res.Outcome))
	g.AddTagPair("White", white.Name)
	g.AddTagPair("Black", black.Name)
	g.AddTagPair("TimeControl", white.TC.String())
	if startFEN != "" {
		g.AddTagPair("FEN", startFEN)
		g.AddTagPair("SetUp", "1")
	}
	if res.Termination != ByRules {
		g.AddTagPair("Termination", string(res.Termination))
	}
	res.PGN = g.String()
	return res, nil
}

func sideIndex(c chess.Color) int {
	if c == chess.Black {
		return 1
	}
	return 0
}

// ruleReason says which rule ended g.
func ruleReason(g *chess.Game) string {
	switch g.Method() {
	case chess.Checkmate:
		if g.Outcome() == chess.WhiteWon {
			return "White mates"
		}
		return "Black mates"
	case chess.Stalemate:
		return "Draw by stalemate"
	case chess.ThreefoldRepetition, chess.FivefoldRepetition:
		return "Draw by repetition"
	case chess.FiftyMoveRule, chess.SeventyFiveMoveRule:
		return "Draw by fifty moves rule"
	case chess.InsufficientMaterial:
		return "Draw by insufficient mating material"
	}
	return g.Method().String()
}
