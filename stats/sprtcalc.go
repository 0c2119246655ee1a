package stats

import (
	"errors"
	"fmt"
	"math"
)

// SPRTPlan describes an SPRT before it runs, for predicting how it will behave: its error
// rates, its bounds in an Elo model, and what the games will look like (the draw ratio and the
// RMS bias of the openings, in logistic Elo).
type SPRTPlan struct {
	Alpha, Beta float64
	Elo0, Elo1  float64
	Model       string // ModelLogistic or ModelNormalized
	DrawRatio   float64
	RMSBias     float64
}

// SPRTOC is a planned SPRT's operating characteristic (the probability that it passes) and its
// average sample number (the games it takes), as functions of the true logistic Elo. They come
// from the Brownian-motion approximation of the LLR, without overshoot (M. Van den Bergh,
// "Sequential probability ratio tests", the note behind fishtest's SPRT calculator). Safe for
// concurrent use.
type SPRTOC struct {
	// LogisticElo0 and LogisticElo1 are the bounds in logistic Elo (equal to the plan's for a
	// logistic plan): the pass probability is Alpha at the first and 1-Beta at the second.
	LogisticElo0, LogisticElo1 float64

	score0, score1 float64
	w2             float64 // the LLR's variance per game
	la, lb         float64 // the stopping bounds
}

// ErrSPRTPlanVariance means the draw ratio and the RMS bias leave no variance per game: the
// openings' bias alone explains more spread than the non-drawn games give.
var ErrSPRTPlanVariance = errors.New("the draw ratio and the RMS bias are not compatible")

// NewSPRTOC checks a plan and prepares its characteristics.
func NewSPRTOC(p SPRTPlan) (*SPRTOC, error) {
	switch {
	case !(p.Alpha > 0 && p.Alpha < 1) || !(p.Beta > 0 && p.Beta < 1) || p.Alpha+p.Beta >= 1:
		return nil, fmt.Errorf("alpha %v and beta %v must be in (0, 1) with a sum below 1", p.Alpha, p.Beta)
	case !isFinite(p.Elo0) || !isFinite(p.Elo1) || !(p.Elo1 > p.Elo0):
		return nil, fmt.Errorf("elo1 %v must be above elo0 %v", p.Elo1, p.Elo0)
	case !(p.DrawRatio >= 0 && p.DrawRatio < 1):
		return nil, fmt.Errorf("draw ratio %v must be in [0, 1)", p.DrawRatio)
	case !(p.RMSBias >= 0) || !isFinite(p.RMSBias):
		return nil, fmt.Errorf("RMS bias %v must be a number at least 0", p.RMSBias)
	}
	// The variance of one game's score: that of the game outcome given the draw ratio, less
	// what the openings' bias accounts for.
	biasScore := LogisticScore(p.RMSBias) - 0.5
	variance := (1-p.DrawRatio)/4 - biasScore*biasScore
	if variance <= 0 {
		return nil, ErrSPRTPlanVariance
	}
	oc := &SPRTOC{la: math.Log(p.Beta / (1 - p.Alpha)), lb: math.Log((1 - p.Beta) / p.Alpha)}
	switch p.Model {
	case ModelLogistic:
		oc.LogisticElo0, oc.LogisticElo1 = p.Elo0, p.Elo1
		oc.score0, oc.score1 = LogisticScore(p.Elo0), LogisticScore(p.Elo1)
	case ModelNormalized:
		// Normalized Elo scales with the spread of the scores: the same bounds mean the same
		// test duration, whatever the draw ratio.
		sigma := math.Sqrt(variance)
		oc.score0 = p.Elo0/neloPerNT*sigma + 0.5
		oc.score1 = p.Elo1/neloPerNT*sigma + 0.5
		if !(oc.score0 > 0 && oc.score1 < 1) {
			return nil, fmt.Errorf("bounds [%v, %v] are outside the possible scores", p.Elo0, p.Elo1)
		}
		oc.LogisticElo0, oc.LogisticElo1 = ScoreToElo(oc.score0), ScoreToElo(oc.score1)
	default:
		return nil, fmt.Errorf("unknown Elo model %q", p.Model)
	}
	d := oc.score1 - oc.score0
	oc.w2 = d * d / variance
	return oc, nil
}

// At returns the probability that the test passes and the number of games it is expected to
// take when the true difference is elo (logistic Elo).
func (oc *SPRTOC) At(elo float64) (pass, games float64) {
	// h is the LLR's drift per unit of variance: -1 at elo0, +1 at elo1.
	h := (2*LogisticScore(elo) - (oc.score0 + oc.score1)) / (oc.score1 - oc.score0)
	var t float64
	if math.Abs(h*(oc.la-oc.lb)) < 1e-6 {
		// The limit at h = 0, where the general formula divides by zero.
		pass = -oc.la / (oc.lb - oc.la)
		t = -oc.la * oc.lb
	} else {
		// (1-e^(-h·la)) / (e^(-h·lb)-e^(-h·la)), written so that no exponential overflows:
		// la < 0 < lb, so for h > 0 the terms are divided by e^(-h·la).
		if h > 0 {
			pass = math.Expm1(h*oc.la) / math.Expm1(h*(oc.la-oc.lb))
		} else {
			pass = -math.Expm1(-h*oc.la) / (math.Expm1(-h*oc.lb) - math.Expm1(-h*oc.la))
		}
		t = 2 / h * (oc.lb*pass + oc.la*(1-pass))
	}
	return pass, t / oc.w2
}
