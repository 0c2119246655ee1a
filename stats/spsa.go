package stats

import (
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"strings"
)

// Defaults of the SPSA form: A as a fraction of the iterations, and the exponents of the step
// sequences a_k = a/(A+k)^alpha and c_k = c/k^gamma (Spall's recommended values).
const (
	DefaultSPSAARatio = 0.1
	DefaultSPSAAlpha  = 0.602
	DefaultSPSAGamma  = 0.101
)

// spsaFields is the number of comma-separated fields of a raw_params line:
// name,start,min,max,c_end,r_end.
const spsaFields = 6

// ErrSPSASignature means the signature a worker sent back does not match the flips stored with
// its task, so its result cannot be attributed to the right perturbation.
var ErrSPSASignature = errors.New("spsa signature does not match the task's flips")

// SPSAParam is one tuned parameter of a classic SPSA run.
type SPSAParam struct {
	Name            string
	Start, Min, Max float64
	// CEnd and REnd are the user's final perturbation size and final learning rate.
	CEnd, REnd float64
	// C and A scale the perturbation and step sequences so that they reach CEnd and REnd at the
	// last iteration; AEnd = REnd*CEnd^2.
	C, AEnd, A float64
	// Theta is the current value.
	Theta float64
}

// SPSASample is one parameter's entry in the history kept for the run's chart.
type SPSASample struct {
	Theta, R, C float64
}

// SPSAState is the SPSA part of a run (run.args.spsa). Its methods are not safe for concurrent
// use; callers hold the run's lock, as fishtest does.
type SPSAState struct {
	// A is the stability constant of the step sequence, in iterations.
	A, Alpha, Gamma float64
	RawParams       string
	// Iter counts game pairs played so far; NumIter is the total, num_games/2.
	Iter, NumIter int
	Params        []SPSAParam
	// History holds snapshots of all parameters, taken about every NumIter/100 iterations
	// (fewer for runs with many parameters).
	History [][]SPSASample
}

// SPSAGain is the perturbation size C and learning rate R of one parameter at one iteration.
type SPSAGain struct {
	C, R float64
}

// SPSAWorkerParam is a parameter value sent to a worker for the engine under test ("New"),
// with the gain and the sign of the perturbation that produced it.
type SPSAWorkerParam struct {
	Name  string
	Value float64
	C, R  float64
	// Flip is +1 or -1.
	Flip int
}

// SPSABaseParam is a parameter value sent to a worker for the base engine.
type SPSABaseParam struct {
	Name  string
	Value float64
}

// SPSABatch is the answer to one request_spsa: the two perturbed parameter sets, and what the
// task must store (Iter and PackedFlips) so that the result can be applied later.
type SPSABatch struct {
	Iter        int
	PackedFlips []byte
	// Sig is the CRC-32 of PackedFlips; the worker sends it back with its result.
	Sig     uint32
	WParams []SPSAWorkerParam
	BParams []SPSABaseParam
}

// SPSAResult is a worker's result for one SPSA batch, as sent in update_task.
type SPSAResult struct {
	Wins, Losses, Draws int
	NumGames            int
	Sig                 uint32
}

// ParseSPSAParams reads raw_params, one parameter per line written name,start,min,max,c_end,r_end,
// and derives each parameter's gain constants for a run of numIter iterations with stability
// constant a and exponents alpha and gamma. Blank lines are skipped. An error names the first
// bad line: a wrong number of fields, a number that is not finite, c_end <= 0 or r_end < 0, or
// a c_end so small or so large that the gains are not finite numbers (C, A or a_end overflow,
// or c_k^2 overflows or underflows to 0 at the first or last iteration). fishtest raises on
// those too, at parsing or at the first request for a batch.
//
// Like fishtest, it accepts min > max and a start outside [min, max]; the value is then clipped
// at the first update.
func ParseSPSAParams(raw string, a, alpha, gamma float64, numIter int) ([]SPSAParam, error) {
	params := []SPSAParam{}
	for i, line := range strings.Split(raw, "\n") {
		lineNo := i + 1
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		fields := strings.Split(line, ",")
		if len(fields) != spsaFields {
			return nil, fmt.Errorf("spsa params line %d %q: want %d comma-separated fields (name,start,min,max,c_end,r_end), got %d",
				lineNo, line, spsaFields, len(fields))
		}
		var v [spsaFields - 1]float64
		names := [...]string{"start", "min", "max", "c_end", "r_end"}
		for j := range v {
			x, err := parsePythonFloat(fields[j+1])
			if err != nil {
				return nil, fmt.Errorf("spsa params line %d %q: field %s: %w", lineNo, line, names[j], err)
			}
			v[j] = x
		}
		p := SPSAParam{Name: fields[0], Start: v[0], Min: v[1], Max: v[2], CEnd: v[3], REnd: v[4]}
		if !(p.CEnd > 0) {
			return nil, fmt.Errorf("spsa params line %d %q: c_end must be > 0", lineNo, line)
		}
		if p.REnd < 0 {
			return nil, fmt.Errorf("spsa params line %d %q: r_end must be >= 0", lineNo, line)
		}
		p.C = p.CEnd * math.Pow(float64(numIter), gamma)
		p.AEnd = p.REnd * p.CEnd * p.CEnd
		p.A = p.AEnd * math.Pow(a+float64(numIter), alpha)
		p.Theta = p.Start
		if err := checkSPSAParamGains(p, a, alpha, gamma, numIter); err != nil {
			return nil, fmt.Errorf("spsa params line %d %q: c_end %g and r_end %g give unusable gains: %w",
				lineNo, line, p.CEnd, p.REnd, err)
		}
		params = append(params, p)
	}
	return params, nil
}

// checkSPSAParamGains says why p cannot be tuned: a constant that is not finite, or a gain that
// is not usable at the first or the last of numIter iterations. The gains in between are
// products of factors monotonic in k, so they are usable too.
func checkSPSAParamGains(p SPSAParam, a, alpha, gamma float64, numIter int) error {
	for _, f := range []struct {
		name  string
		value float64
	}{{"c", p.C}, {"a_end", p.AEnd}, {"a", p.A}} {
		if !isFinite(f.value) {
			return fmt.Errorf("%s = %g is not finite", f.name, f.value)
		}
	}
	for _, k := range []float64{1, float64(max(numIter, 1))} {
		if err := spsaGain(p, a, alpha, gamma, k).check(); err != nil {
			return fmt.Errorf("at iteration %g: %w", k, err)
		}
	}
	return nil
}

// spsaGain is p's gain at iteration k (counted from 1): c_k = C/k^gamma and
// R_k = A/(a+k)^alpha/c_k^2.
func spsaGain(p SPSAParam, a, alpha, gamma, k float64) SPSAGain {
	c := p.C / math.Pow(k, gamma)
	return SPSAGain{C: c, R: p.A / math.Pow(a+k, alpha) / (c * c)}
}

// check says why g cannot drive a step. fishtest computes c_k**2, which raises in Python when
// it overflows, and divides by it, which raises when it has underflowed to 0.
func (g SPSAGain) check() error {
	if c2 := g.C * g.C; !isFinite(c2) || c2 == 0 {
		return fmt.Errorf("c_k = %g: c_k^2 = %g is not a positive finite number", g.C, c2)
	}
	if !isFinite(g.R) {
		return fmt.Errorf("R_k = %g is not finite", g.R)
	}
	return nil
}

// Gains returns each parameter's perturbation size c_k and learning rate R_k = a_k/c_k^2 for
// the batch that starts after iter iterations (k = iter+1).
func (s *SPSAState) Gains(iter int) []SPSAGain {
	k := float64(iter) + 1
	gains := make([]SPSAGain, len(s.Params))
	for i, p := range s.Params {
		gains[i] = spsaGain(p, s.A, s.Alpha, s.Gamma, k)
	}
	return gains
}

// NewBatch draws a perturbation for the next batch: for each parameter in order, flip decides
// the sign (true for +1), and New gets theta + c_k*flip, Base theta - c_k*flip, both clipped to
// [min, max]. A nil flip uses math/rand/v2's global source. The state is not changed; the caller
// stores Iter and PackedFlips with the task.
//
// It fails, without drawing flips, if a parameter's gain at this iteration or one of the values
// to send is not a finite number: a state that ParseSPSAParams would not have built, or whose
// theta is already broken. (fishtest raises when c_k^2 overflows or is 0, and sends NaN
// otherwise.)
func (s *SPSAState) NewBatch(flip func() bool) (SPSABatch, error) {
	if flip == nil {
		flip = func() bool { return rand.IntN(2) == 1 }
	}
	gains := s.Gains(s.Iter)
	for i, g := range gains {
		if err := g.check(); err != nil {
			return SPSABatch{}, fmt.Errorf("spsa batch: param %s at iteration %d: %w", s.Params[i].Name, s.Iter, err)
		}
		p := s.Params[i]
		if up, down := spsaClip(p, g.C), spsaClip(p, -g.C); !isFinite(up) || !isFinite(down) {
			return SPSABatch{}, fmt.Errorf("spsa batch: param %s: values %g and %g are not finite", p.Name, up, down)
		}
	}
	b := SPSABatch{
		Iter:    s.Iter,
		WParams: make([]SPSAWorkerParam, len(s.Params)),
		BParams: make([]SPSABaseParam, len(s.Params)),
	}
	flips := make([]int, len(s.Params))
	for i, p := range s.Params {
		flips[i] = -1
		if flip() {
			flips[i] = 1
		}
		g := gains[i]
		step := g.C * float64(flips[i])
		b.WParams[i] = SPSAWorkerParam{Name: p.Name, Value: spsaClip(p, step), C: g.C, R: g.R, Flip: flips[i]}
		b.BParams[i] = SPSABaseParam{Name: p.Name, Value: spsaClip(p, -step)}
	}
	b.PackedFlips = PackFlips(flips)
	b.Sig = SPSASignature(b.PackedFlips)
	return b, nil
}

// Update applies a worker's result to the parameters. iter and packedFlips are what the task
// stored when the batch was drawn; the caller must drop them from the task whatever the outcome,
// so that a result cannot be applied twice.
//
// Each theta moves by R_k*c_k*(wins-losses)*flip, with the gains of the stored iteration, and is
// clipped to [min, max]; Iter advances by the pairs played; a history snapshot is appended when
// one is due. Nothing changes on error: ErrSPSASignature (wrapped) when r.Sig does not match the
// flips, or an error for inconsistent counts, too few stored flips, or a gain of the stored
// iteration or a new theta that is not a finite number.
func (s *SPSAState) Update(iter int, packedFlips []byte, r SPSAResult) error {
	if got, want := r.Sig, SPSASignature(packedFlips); got != want {
		return fmt.Errorf("spsa update: %w (got %d, want %d)", ErrSPSASignature, got, want)
	}
	if iter < 0 {
		return fmt.Errorf("spsa update: negative stored iteration %d", iter)
	}
	if r.Wins < 0 || r.Losses < 0 || r.Draws < 0 || r.Wins+r.Losses+r.Draws != r.NumGames || r.NumGames%2 != 0 {
		return fmt.Errorf("spsa update: inconsistent result wins=%d losses=%d draws=%d num_games=%d",
			r.Wins, r.Losses, r.Draws, r.NumGames)
	}
	flips, err := UnpackFlips(packedFlips, len(s.Params))
	if err != nil {
		return fmt.Errorf("spsa update: %w", err)
	}

	gains := s.Gains(iter)
	result := float64(r.Wins - r.Losses)
	thetas := make([]float64, len(s.Params))
	for i, p := range s.Params {
		g := gains[i]
		if err := g.check(); err != nil {
			return fmt.Errorf("spsa update: param %s at iteration %d: %w", p.Name, iter, err)
		}
		thetas[i] = spsaClip(p, g.R*g.C*result*float64(flips[i]))
		if !isFinite(thetas[i]) {
			return fmt.Errorf("spsa update: param %s: new theta %g is not finite", p.Name, thetas[i])
		}
	}
	s.Iter += r.NumGames / 2
	for i := range s.Params {
		s.Params[i].Theta = thetas[i]
	}

	// fishtest derives the period from the run's num_games/2, which is NumIter: SPSA runs have
	// an even number of games.
	period := SPSAHistoryPeriod(s.NumIter, len(s.Params))
	if period > 0 && float64(len(s.History)+1) <= float64(s.Iter)/period {
		sample := make([]SPSASample, len(s.Params))
		for i, p := range s.Params {
			sample[i] = SPSASample{Theta: p.Theta, R: gains[i].R, C: gains[i].C}
		}
		s.History = append(s.History, sample)
	}
	return nil
}

// SPSAHistoryPeriod is the number of iterations between two history snapshots: the run is
// sampled 100 times with fewer than 100 parameters, 10000/n times with n < 1000 parameters and
// once beyond, which bounds the history at about 10000 entries. It is 0 (no history) for an
// empty run.
func SPSAHistoryPeriod(numIter, paramCount int) float64 {
	if numIter <= 0 || paramCount <= 0 {
		return 0
	}
	samples := 1.0
	switch {
	case paramCount < 100:
		samples = 100
	case paramCount < 1000:
		samples = 10000 / float64(paramCount)
	}
	return float64(numIter) / samples
}

// PackFlips packs perturbation signs into bits, eight per byte, most significant bit first, a
// set bit meaning +1 (numpy.packbits layout, which fishtest stores). The last byte is padded
// with zeros.
func PackFlips(flips []int) []byte {
	packed := make([]byte, (len(flips)+7)/8)
	for i, f := range flips {
		if f == 1 {
			packed[i/8] |= 0x80 >> (i % 8)
		}
	}
	return packed
}

// UnpackFlips is the inverse of PackFlips for n signs. It fails if packed holds fewer than n
// bits.
func UnpackFlips(packed []byte, n int) ([]int, error) {
	if n < 0 || len(packed)*8 < n {
		return nil, fmt.Errorf("stored flips hold %d bits, need %d", len(packed)*8, n)
	}
	flips := make([]int, n)
	for i := range flips {
		flips[i] = -1
		if packed[i/8]&(0x80>>(i%8)) != 0 {
			flips[i] = 1
		}
	}
	return flips, nil
}

// SPSASignature is the CRC-32 (IEEE) of packed flips, the check value of an SPSA batch.
func SPSASignature(packed []byte) uint32 {
	return crc32.ChecksumIEEE(packed)
}

// spsaClip is theta+step limited to [p.Min, p.Max], comparing in the same order as fishtest so
// that even min > max gives the same answer (max).
func spsaClip(p SPSAParam, step float64) float64 {
	v := p.Theta + step
	if p.Min > v {
		v = p.Min
	}
	if p.Max < v {
		v = p.Max
	}
	return v
}
