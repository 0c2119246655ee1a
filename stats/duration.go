package stats

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/gonum/stat/distuv"
)

// Game-length model behind every time estimate: fishtest measured that an average game lasts 68
// moves and stops, on average, at 92 % of the two players' full clocks.
const (
	gameMoves     = 68
	gameTimeScale = 2 * 0.92
)

// STCTimeControl is the standard short time control that TC ratios are measured against.
const STCTimeControl = "10+0.1"

// Constants of the SPRT remaining-time model. averageSPRTGames is fishtest's running average
// length of an SPRT run in games; bookPositions is the size of the default opening book
// (UHO_Lichess_4852_v1), which sets how fast the estimate shifts from that average to an
// extrapolation of the LLR.
const (
	averageSPRTGames = 95000
	bookPositions    = 2632036
)

// EstimateGameDuration is the expected wall-clock length in seconds of one game at time control
// tc, written [moves/]time[+inc], where time is seconds or m:s (for example "10+0.1",
// "40/60+0.6", "1:30+1"). A repeating control (moves/) is scaled to a 68-move game.
//
// A tc that does not follow that grammar, has a negative or non-finite number, or whose games
// would take no time is an error. fishtest silently ignores extra '+', '/' or ':' fields and
// accepts such numbers (dividing by zero later for "0"); its run schema never lets them in.
func EstimateGameDuration(tc string) (float64, error) {
	seconds, err := parseTimeControl(tc)
	if err != nil {
		return 0, fmt.Errorf("time control %q: %w", tc, err)
	}
	return seconds, nil
}

func parseTimeControl(tc string) (float64, error) {
	head, incText, hasInc := strings.Cut(tc, "+")
	increment := 0.0
	if hasInc {
		if strings.Contains(incText, "+") {
			return 0, errors.New("more than one '+'")
		}
		inc, err := parseTCNumber("increment", incText)
		if err != nil {
			return 0, err
		}
		increment = inc
	}

	moves := 0
	timeText := head
	if movesText, rest, ok := strings.Cut(head, "/"); ok {
		if strings.Contains(rest, "/") {
			return 0, errors.New("more than one '/'")
		}
		n, err := parsePythonInt(movesText)
		if err != nil {
			return 0, fmt.Errorf("moves: %w", err)
		}
		if n <= 0 {
			return 0, errors.New("moves must be positive")
		}
		moves, timeText = n, rest
	}

	var base float64
	if minText, secText, ok := strings.Cut(timeText, ":"); ok {
		if strings.Contains(secText, ":") {
			return 0, errors.New("more than one ':'")
		}
		minutes, err := parseTCNumber("minutes", minText)
		if err != nil {
			return 0, err
		}
		secs, err := parseTCNumber("seconds", secText)
		if err != nil {
			return 0, err
		}
		base = minutes*60 + secs
	} else {
		t, err := parseTCNumber("time", timeText)
		if err != nil {
			return 0, err
		}
		base = t
	}
	if moves > 0 {
		// Same association as fishtest, so that the last bit agrees.
		base *= float64(gameMoves) / float64(moves)
	}
	seconds := (base + increment*gameMoves) * gameTimeScale
	if !(seconds > 0) || math.IsInf(seconds, 0) {
		return 0, errors.New("games would take no time")
	}
	return seconds, nil
}

// parseTCNumber reads one non-negative number of a time control.
func parseTCNumber(what, s string) (float64, error) {
	v, err := parsePythonFloat(s)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	if v < 0 {
		return 0, fmt.Errorf("%s: negative", what)
	}
	return v, nil
}

// TCRatio is how much longer than a one-thread STC game ("10+0.1") a game at tc with threads
// threads takes, counting thread time: standard LTC "60+0.6" is 6, SMP STC "5+0.05" with 8
// threads is 4. A threads value below 1 counts as 1, as in fishtest. Errors are those of
// EstimateGameDuration.
func TCRatio(tc string, threads int) (float64, error) {
	d, err := EstimateGameDuration(tc)
	if err != nil {
		return 0, err
	}
	stc, err := EstimateGameDuration(STCTimeControl)
	if err != nil {
		return 0, err
	}
	t := float64(threads)
	if threads <= 0 {
		t = 1
	}
	return t * d / stc, nil
}

// SPRTBatchSize is the number of game pairs between two SPRT updates for a run of the given TC
// ratio, 16/ratio rounded half up: 16 pairs at STC, 3 at LTC, at least 1. A ratio that is not
// positive (which TCRatio never returns) gives 1, and the result is capped at MaxInt32.
func SPRTBatchSize(tcRatio float64) int {
	if !(tcRatio > 0) {
		return 1
	}
	n := math.Trunc(0.5 + 16/tcRatio)
	if n < 1 {
		return 1
	}
	if n > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(n)
}

// RemainingInput is what RemainingHours needs to know about a run. It is a plain copy of a few
// run fields so that this package does not depend on how runs are stored.
type RemainingInput struct {
	// SPRT is the run's test, nil for a fixed-games run. Only its LLR, Alpha, Beta and overshoot
	// data are read; without overshoot data (dropped after an illegal update or lost samples)
	// the correction is zero.
	SPRT *SPRT
	// Pentanomial holds the pair counts; SPRT runs always have them.
	Pentanomial         []int
	Wins, Losses, Draws int
	// NumGames is the run's game budget (800000 for SPRT runs).
	NumGames int
	TC       string
	// Threads below 1 counts as 1 (a run without a threads field).
	Threads int
}

// RemainingHours estimates how many core-hours a run still needs, following fishtest's model:
// a fixed-games run needs its unplayed games; an SPRT run is expected to last a blend of the
// games that extrapolating its LLR to the nearer bound predicts and fishtest's average SPRT
// length, the extrapolation gaining weight as more of the opening book is played
// (beta(1, 15) distribution function of pairs/book size). An SPRT run already past its bound
// needs 0 hours. The only error is a malformed TC.
func RemainingHours(in RemainingInput) (float64, error) {
	gameSecs, err := EstimateGameDuration(in.TC)
	if err != nil {
		return 0, fmt.Errorf("remaining hours: %w", err)
	}
	threads := in.Threads
	if threads <= 0 {
		threads = 1
	}

	var remaining int
	if s := in.SPRT; s != nil {
		playedPairs := 0
		for _, n := range in.Pentanomial {
			playedPairs += n
		}
		playedGames := 2 * playedPairs

		o0, o1 := s.OvershootCorrections()
		// As fishtest does, the bounds come from alpha and beta, not from the stored ones.
		var bound float64
		if s.LLR > 0 {
			bound = math.Log((1-s.Beta)/s.Alpha) - o1
		} else {
			bound = math.Log(s.Beta/(1-s.Alpha)) + o0
		}
		// An LLR near zero would extrapolate to an absurd length; 0.1 caps it.
		llr := math.Max(0.1, math.Abs(s.LLR))
		bound = math.Abs(bound)
		if llr >= bound {
			return 0, nil
		}

		t := distuv.Beta{Alpha: 1, Beta: 15}.CDF(math.Min(float64(playedPairs)/bookPositions, 1))
		fromLLR := truncToInt(float64(playedGames) * bound / llr)
		expected := min(in.NumGames, truncToInt(float64(fromLLR)*t+averageSPRTGames*(1-t)))
		remaining = max(0, expected-playedGames)
	} else {
		played := in.Wins + in.Losses + in.Draws
		remaining = max(0, in.NumGames-played)
	}
	return gameSecs * float64(remaining) * float64(threads) / 3600, nil
}

// truncToInt is Python's int() on a float, saturated instead of overflowing.
func truncToInt(x float64) int {
	switch {
	case math.IsNaN(x):
		return 0
	case x >= math.MaxInt64:
		return math.MaxInt64
	case x <= math.MinInt64:
		return math.MinInt64
	}
	return int(math.Trunc(x))
}

// parsePythonFloat reads a number the way Python's float() does for the inputs fishtest sees:
// surrounding white space is ignored and an underscore may sit between two digits. Hexadecimal
// and non-finite values are refused.
func parsePythonFloat(s string) (float64, error) {
	t, err := stripPythonNumber(s)
	if err != nil {
		return 0, err
	}
	if strings.ContainsAny(t, "xX") {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("%q is not a finite number", s)
	}
	return v, nil
}

// parsePythonInt reads a decimal integer the way Python's int() does.
func parsePythonInt(s string) (int, error) {
	t, err := stripPythonNumber(s)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not an integer", s)
	}
	return int(v), nil
}

// stripPythonNumber trims white space and removes the digit-separating underscores that Python
// accepts in numeric literals, refusing misplaced ones.
func stripPythonNumber(s string) (string, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return "", errors.New("empty number")
	}
	if !strings.Contains(t, "_") {
		return t, nil
	}
	isDigit := func(c byte) bool { return '0' <= c && c <= '9' }
	var b strings.Builder
	for i := 0; i < len(t); i++ {
		if t[i] == '_' {
			if i == 0 || i == len(t)-1 || !isDigit(t[i-1]) || !isDigit(t[i+1]) {
				return "", fmt.Errorf("%q is not a number", s)
			}
			continue
		}
		b.WriteByte(t[i])
	}
	return b.String(), nil
}
