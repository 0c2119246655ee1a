// Package gen makes the opening book the worker ships (see genbook).
package gen

import (
	"math/rand/v2"
	"strings"

	"github.com/corentings/chess/v2"
)

// Shape of the shipped book.
const (
	Positions = 1000
	Plies     = 8
	Seed      = 2026
)

// Book is the shipped book's lines: EPD positions (board, side, castling, en passant).
func Book() []string {
	r := rand.New(rand.NewPCG(Seed, Seed))
	seen := map[string]bool{}
	var lines []string
	for len(lines) < Positions {
		pos := chess.StartingPosition()
		check := false
		for range Plies {
			moves := pos.ValidMoves()
			if len(moves) == 0 {
				break
			}
			m := moves[r.IntN(len(moves))]
			check = m.HasTag(chess.Check)
			pos = pos.Update(&m)
		}
		epd := strings.Join(strings.Fields(pos.String())[:4], " ")
		if len(pos.ValidMoves()) == 0 || check || material(pos) != 0 || seen[epd] {
			continue
		}
		seen[epd] = true
		lines = append(lines, epd)
	}
	return lines
}

func material(pos *chess.Position) int {
	values := map[chess.PieceType]int{chess.Pawn: 1, chess.Knight: 3, chess.Bishop: 3, chess.Rook: 5, chess.Queen: 9}
	total := 0
	for _, p := range pos.Board().SquareMap() {
		if p.Color() == chess.White {
			total += values[p.Type()]
		} else {
			total -= values[p.Type()]
		}
	}
	return total
}
