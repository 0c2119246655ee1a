package stats

import (
	"errors"
	"fmt"
	"math"
)

// Elo models of an SPRT's bounds.
const (
	ModelNormalized = "normalized" // the default for new tests
	ModelLogistic   = "logistic"
	ModelBayesElo   = "BayesElo" // legacy; converted to logistic with a draw Elo from the data
)

// SPRT decisions.
const (
	Accepted = "accepted"
	Rejected = "rejected"
)

// SPRT is the state of a sequential test, the stats-side twin of the stored run's args.sprt.
// Overshoot holds the data of the overshoot correction until an update breaks its contract; it
// is then dropped for good, and IllegalUpdate (an update that was not a whole number of
// batches) or LostSamples (a purge) records why. After an illegal update both Overshoot and
// LostSamples are nil. Its methods are not safe for concurrent use.
type SPRT struct {
	Alpha, Beta   float64
	Elo0, Elo1    float64
	EloModel      string
	State         string // "", Accepted or Rejected
	LLR           float64
	BatchSize     int // samples (games or game pairs) per worker update
	LowerBound    float64
	UpperBound    float64
	Overshoot     *Overshoot
	LostSamples   *int // samples lost at the update that dropped the overshoot data
	IllegalUpdate *int // sample count of an update that was not a multiple of BatchSize
}

// Overshoot is the running data of the dynamic overshoot correction (Siegmund, Sequential
// Analysis, corollary 8.33): the sums of the LLR's new lows and highs.
type Overshoot struct {
	LastUpdate     int
	SkippedUpdates int
	Ref0, M0, Sq0  float64
	Ref1, M1, Sq1  float64
}

// Results are a run's cumulative counts. Pentanomial is nil for runs that predate it.
type Results struct {
	Wins, Losses, Draws int
	Pentanomial         []int
}

// trinomial returns [losses, draws, wins].
func (r Results) trinomial() []float64 {
	return []float64{float64(r.Losses), float64(r.Draws), float64(r.Wins)}
}

// samples returns the counts the SPRT works on: the pentanomial if there is one.
func (r Results) samples() []float64 {
	if r.Pentanomial != nil {
		return floats(r.Pentanomial)
	}
	return r.trinomial()
}

// NewSPRT returns the state of a new test with bounds ln(beta/(1-alpha)) and ln((1-beta)/alpha).
func NewSPRT(alpha, beta, elo0, elo1 float64, eloModel string, batchSize int) *SPRT {
	return &SPRT{
		Alpha: alpha, Beta: beta, Elo0: elo0, Elo1: elo1, EloModel: eloModel, BatchSize: batchSize,
		LowerBound: math.Log(beta / (1 - alpha)),
		UpperBound: math.Log((1 - beta) / alpha),
		Overshoot:  &Overshoot{},
	}
}

// logisticBounds returns the test's bounds in the model the LLR is computed in: BayesElo bounds
// are converted to logistic Elo with the draw Elo of the results.
func logisticBounds(model string, elo0, elo1 float64, r Results) (string, float64, float64, error) {
	switch model {
	case ModelLogistic, ModelNormalized:
		return model, elo0, elo1, nil
	case ModelBayesElo:
		drawElo, err := drawEloOf(regularize(r.trinomial()))
		if err != nil {
			return "", 0, 0, err
		}
		return ModelLogistic, bayesEloToElo(elo0, drawElo), bayesEloToElo(elo1, drawElo), nil
	}
	return "", 0, 0, fmt.Errorf("unknown elo model %q", model)
}

// llr computes the LLR of results in the given (logistic or normalized) model.
func llr(model string, elo0, elo1 float64, results []float64) (float64, error) {
	if model == ModelLogistic {
		return LLRLogistic(elo0, elo1, results)
	}
	return LLRNormalized(elo0, elo1, results)
}

// Update recomputes the LLR from a run's cumulative results, feeds the overshoot correction and
// sets State. It is meant to be called after each batch, and calling it again with the same
// results changes nothing. An update that is not a whole number of batches, or that has fewer
// samples than the last one (a purge), voids the overshoot correction for good and is recorded.
//
// An error means the elo model is unknown or the LLR of the results cannot be computed (or is
// not finite). LLR, State and the overshoot sums are then left as they were, but, as in
// fishtest, an illegal update has already been recorded and its overshoot data dropped: the
// batch contract was broken whatever the LLR does.
func (s *SPRT) Update(r Results) error {
	model, elo0, elo1, err := logisticBounds(s.EloModel, s.Elo0, s.Elo1, r)
	if err != nil {
		return err
	}
	samples := r.samples()
	n := 0
	for _, x := range samples {
		n += int(x)
	}
	if s.BatchSize > 0 && n%s.BatchSize != 0 {
		s.IllegalUpdate = &n
		s.Overshoot = nil
	}
	value, err := llr(model, elo0, elo1, samples)
	if err != nil {
		return fmt.Errorf("sprt llr: %w", err)
	}
	if !isFinite(value) {
		return errors.New("sprt llr is not finite")
	}
	s.LLR = value
	if o := s.Overshoot; o != nil {
		switch {
		case n < o.LastUpdate:
			lost := o.LastUpdate - n
			s.LostSamples = &lost
			s.Overshoot = nil
		case n == o.LastUpdate:
		case n == o.LastUpdate+s.BatchSize:
			if value < o.Ref0 {
				d := value - o.Ref0
				o.M0 += d
				o.Sq0 += d * d
				o.Ref0 = value
			}
			if value > o.Ref1 {
				d := value - o.Ref1
				o.M1 += d
				o.Sq1 += d * d
				o.Ref1 = value
			}
		default: // updates were lost: start collecting again
			o.Ref0, o.Ref1 = value, value
			o.SkippedUpdates += (n - o.LastUpdate) - 1
		}
		if s.Overshoot != nil {
			o.LastUpdate = n
		}
	}
	o0, o1 := s.OvershootCorrections()
	switch {
	case s.LLR < s.LowerBound+o0:
		s.State = Rejected
	case s.LLR > s.UpperBound-o1:
		s.State = Accepted
	default:
		s.State = ""
	}
	return nil
}

// OvershootCorrections returns how far the lower bound is raised (o0 >= 0) and the upper bound
// lowered (o1 >= 0) to make up for the LLR's overshoot at a batch.
func (s *SPRT) OvershootCorrections() (o0, o1 float64) {
	o := s.Overshoot
	if o == nil {
		return 0, 0
	}
	if o.M0 != 0 {
		o0 = -o.Sq0 / o.M0 / 2
	}
	if o.M1 != 0 {
		o1 = o.Sq1 / o.M1 / 2
	}
	return o0, o1
}

// FormatBounds writes SPRT bounds in the brackets of their Elo model, as fishtest shows them:
// <> normalized, {} logistic, [] BayesElo (and runs from before the model was stored).
func FormatBounds(model string, elo0, elo1 float64) string {
	open, closing := "[", "]"
	switch model {
	case ModelLogistic:
		open, closing = "{", "}"
	case ModelNormalized:
		open, closing = "<", ">"
	}
	return fmt.Sprintf("%s%.2f,%.2f%s", open, elo0, elo1, closing)
}
