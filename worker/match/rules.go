package match

import (
	"strings"
	"sync"

	"github.com/corentings/chess/v2"
)

// fenMu serializes the chess library's FEN decoding, which writes a buffer shared by the whole
// process (github.com/corentings/chess/v2 v2.3.2, fen.go's rankBuffer; the race detector finds
// it): games played at once by one worker would otherwise corrupt each other's positions.
// Making a game decodes the starting position's FEN, and so does reading a PGN.
var fenMu sync.Mutex

// newGame is a game from fen, or from the standard position if fen is empty.
func newGame(fen string) (*chess.Game, error) {
	fenMu.Lock()
	defer fenMu.Unlock()
	if fen == "" {
		return chess.NewGame(), nil
	}
	opt, err := chess.FEN(fen)
	if err != nil {
		return nil, err
	}
	return chess.NewGame(opt), nil
}

// ParsePGN reads one game from pgn, checking each move against the rules.
func ParsePGN(pgn string) (*chess.Game, error) {
	fenMu.Lock()
	defer fenMu.Unlock()
	opt, err := chess.PGN(strings.NewReader(pgn))
	if err != nil {
		return nil, err
	}
	return chess.NewGame(opt), nil
}

// SplitPGN splits a text of several games, each starting with its Event tag (as the worker
// writes them and the server serves a run's), into one text a game.
func SplitPGN(text string) []string {
	var games []string
	for _, g := range strings.Split(text, "[Event ")[1:] {
		games = append(games, "[Event "+g)
	}
	return games
}
