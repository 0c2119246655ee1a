package match

// fishtest's worker has its match runner adjudicate (unless a run sets adjudication off):
//
//   - resign: a side whose own score is 600 centipawns or more below zero on 3 of its moves in
//     a row loses;
//   - draw: once 34 full moves have been played, a game in which both sides' scores stayed
//     within 20 centipawns of zero for the last 8 moves of each (16 plies in a row) is a draw;
//     a capture or a pawn move starts the count again (it counts from that move).
//
// A mate score counts as lost or won by far. A move without a score (the engine reported none)
// breaks both runs, as a book move does. These are the rules of fishtest's match runner
// (fastchess: -resign movecount=3 score=600, -draw movenumber=34 movecount=8 score=20).
const (
	resignMoves    = 3
	resignScore    = -600
	drawMoveNumber = 34
	drawMoves      = 8
	drawScore      = 20
)

// mateScore stands for a mate score in the rules above: beyond any resign threshold.
const mateScore = 100_000

// adjudicator follows a game's scores.
type adjudicator struct {
	resignRun [2]int // moves in a row each side (0 white, 1 black) scored itself lost
	drawRun   int    // plies in a row both sides scored near zero
}

// verdict is what adjudication decided after a move.
type verdict int

const (
	playOn  verdict = iota
	resigns         // the side that just moved loses
	drawn
)

// add takes the score the side that just moved (0 white, 1 black) reported for its move, from
// its own point of view (known false: it reported none), with plies the number of plies played
// in the game so far, that move included, and zeroing whether the move was a capture or a pawn
// move.
func (a *adjudicator) add(side int, known bool, score, plies int, zeroing bool) verdict {
	if !known {
		a.drawRun, a.resignRun[side] = 0, 0
		return playOn
	}
	if zeroing {
		a.drawRun = 0
	}
	if abs(score) <= drawScore {
		a.drawRun++
	} else {
		a.drawRun = 0
	}
	if plies/2 >= drawMoveNumber && a.drawRun >= 2*drawMoves {
		return drawn
	}
	if score <= resignScore {
		a.resignRun[side]++
	} else {
		a.resignRun[side] = 0
	}
	if a.resignRun[side] >= resignMoves {
		return resigns
	}
	return playOn
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}
