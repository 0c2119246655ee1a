// Package match plays the games of a task between two UCI engines, as fishtest's worker has its
// match runner play them: from a book position, with the run's time control scaled by the
// worker's speed, by the rules of chess, with fishtest's adjudication, and with time losses,
// crashes and illegal moves decided as losses.
package match

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// TimeControl is a time control in the notation fishtest's runs use: "[moves/]time[+increment]",
// the time in seconds or as minutes:seconds, e.g. "10+0.1", "60+0.6", "40/60", "1:30+1".
type TimeControl struct {
	Moves int           // moves per period; 0: the whole game
	Base  time.Duration // time per period
	Inc   time.Duration // added after each move
}

// ParseTC reads a time control in fishtest's notation.
func ParseTC(s string) (TimeControl, error) {
	var tc TimeControl
	rest := strings.TrimSpace(s)
	if base, inc, ok := strings.Cut(rest, "+"); ok {
		v, err := seconds(inc)
		if err != nil {
			return tc, fmt.Errorf("time control %q: increment: %w", s, err)
		}
		tc.Inc, rest = v, base
	}
	if moves, base, ok := strings.Cut(rest, "/"); ok {
		n, err := strconv.Atoi(moves)
		if err != nil || n <= 0 {
			return tc, fmt.Errorf("time control %q: moves per period %q", s, moves)
		}
		tc.Moves, rest = n, base
	}
	if min, sec, ok := strings.Cut(rest, ":"); ok {
		m, err := strconv.ParseFloat(min, 64)
		if err != nil || m < 0 {
			return tc, fmt.Errorf("time control %q: minutes %q", s, min)
		}
		v, err := seconds(sec)
		if err != nil {
			return tc, fmt.Errorf("time control %q: %w", s, err)
		}
		tc.Base = time.Duration(m*float64(time.Minute)) + v
	} else {
		v, err := seconds(rest)
		if err != nil {
			return tc, fmt.Errorf("time control %q: %w", s, err)
		}
		tc.Base = v
	}
	if tc.Base <= 0 {
		// A clock that starts at zero loses on time at the first move, whatever the increment.
		return tc, fmt.Errorf("time control %q: no base time", s)
	}
	return tc, nil
}

func seconds(s string) (time.Duration, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, fmt.Errorf("seconds %q", s)
	}
	return time.Duration(v * float64(time.Second)), nil
}

// Scaled is tc for a machine factor times slower than fishtest's reference (factor = reference
// nps / the worker's nps): time and increment multiplied by factor and, as fishtest's worker
// writes them for its match runner, rounded to the millisecond.
func (tc TimeControl) Scaled(factor float64) TimeControl {
	scale := func(d time.Duration) time.Duration {
		return time.Duration(math.Round(d.Seconds()*factor*1000)) * time.Millisecond
	}
	return TimeControl{Moves: tc.Moves, Base: scale(tc.Base), Inc: scale(tc.Inc)}
}

// String is tc in fishtest's notation, in seconds with up to three decimals.
func (tc TimeControl) String() string {
	s := strconv.FormatFloat(tc.Base.Seconds(), 'f', -1, 64)
	if tc.Moves > 0 {
		s = strconv.Itoa(tc.Moves) + "/" + s
	}
	if tc.Inc > 0 {
		s += "+" + strconv.FormatFloat(tc.Inc.Seconds(), 'f', -1, 64)
	}
	return s
}
