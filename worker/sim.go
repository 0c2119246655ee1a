package worker

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"
)

// defaultSPSAEloPerStep is SimSource.SPSAEloPerStep's default: about 10 Elo between the two sides
// of a perturbation when a lone parameter is far from its optimum.
const defaultSPSAEloPerStep = 5

// SimSource is a GameSource that draws game results from a model instead of playing chess: every
// game is independently a win, draw or loss for the new engine, with the logistic expected score
// of Elo and a draw probability of DrawRatio. Pairs give the pentanomial counts, and each game
// gets a small PGN text.
//
// With SPSA parameters and SPSAOptimum set, a batch is played at Elo + SPSAEloPerStep *
// (distance of the B values to the optimum - distance of the W values), distances measured in
// each parameter's perturbation step c (from W), so the engine closer to the optimum wins more and
// SPSA moves the parameters toward it. Parameters missing from SPSAOptimum are ignored.
//
// A *SimSource is safe for concurrent use: a mutex guards Rand. Several workers may share one,
// but then a seeded Rand gives results that depend on scheduling; give each worker its own
// SimSource for reproducible runs. Do not copy a SimSource after first use.
type SimSource struct {
	// Elo is the true Elo difference of the new engine over the base engine.
	Elo float64
	// DrawRatio is the probability of a draw, clamped to what Elo allows (a draw ratio of 1 with a
	// non-zero Elo is impossible).
	DrawRatio float64
	// GameTime is slept per game pair, as if the pair took that long; the caller picks it to
	// compress time. Zero plays instantly.
	GameTime time.Duration
	// Rand draws the results; nil uses a randomly seeded source.
	Rand *rand.Rand
	// SPSAOptimum is the simulated objective's optimum per parameter name; nil disables the
	// SPSA model (SPSA batches are then played at Elo).
	SPSAOptimum map[string]float64
	// SPSAEloPerStep is the Elo gained per step c of distance to the optimum; 0 means 5.
	SPSAEloPerStep float64
	// TimeLossRate and CrashRate are the chances that a game is lost on time or has an engine
	// crash, counted in the batch's time_losses and crashes as fishtest's worker counts them (the
	// game's result is drawn as usual). FailRate is the chance that a batch fails, which makes
	// the worker fail its task (failed_task). All 0: a machine that never does either.
	TimeLossRate, CrashRate, FailRate float64
	// FaultRand draws those faults, apart from Rand so that the games' results do not depend on
	// them; nil uses Rand.
	FaultRand *rand.Rand

	mu sync.Mutex // guards Rand
}

// gameResult is the new engine's score in a game, in half points: 0 loss, 1 draw, 2 win.
type gameResult uint8

// Play draws 2*pairs games at the model's Elo (adjusted for spsa), after sleeping
// pairs*GameTime. It fails only with ctx.Err() when ctx ends during the sleep.
func (s *SimSource) Play(ctx context.Context, t Task, pairs int, spsa *SPSAParams) (Batch, error) {
	if pairs <= 0 {
		return Batch{}, nil
	}
	if s.FailRate > 0 && s.faultDraw() < s.FailRate {
		return Batch{}, errors.New("simulated engine failure")
	}
	if s.GameTime > 0 {
		if err := sleep(ctx, time.Duration(pairs)*s.GameTime); err != nil {
			return Batch{}, err
		}
	}
	pWin, pDraw := outcomeProbabilities(s.Elo+s.spsaElo(spsa), s.DrawRatio)

	results := make([]gameResult, 2*pairs)
	s.mu.Lock()
	if s.Rand == nil {
		s.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	for i := range results {
		switch u := s.Rand.Float64(); {
		case u < pWin:
			results[i] = 2
		case u < pWin+pDraw:
			results[i] = 1
		}
	}
	s.mu.Unlock()

	var b Batch
	for i, r := range results {
		switch r {
		case 2:
			b.Stats.Wins++
		case 1:
			b.Stats.Draws++
		default:
			b.Stats.Losses++
		}
		if i%2 == 1 {
			b.Stats.Pentanomial[results[i-1]+r]++
		}
	}
	b.Stats.TimeLosses, b.Stats.Crashes = s.faults(len(results))
	b.PGN = simPGN(t, results)
	return b, nil
}

// faultDraw is one draw of the faults' source.
func (s *SimSource) faultDraw() float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.FaultRand != nil {
		return s.FaultRand.Float64()
	}
	if s.Rand == nil {
		s.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
	return s.Rand.Float64()
}

// faults draws how many of games were lost on time and how many had a crash.
func (s *SimSource) faults(games int) (timeLosses, crashes int) {
	if s.TimeLossRate <= 0 && s.CrashRate <= 0 {
		return 0, 0
	}
	for range games {
		if s.faultDraw() < s.TimeLossRate {
			timeLosses++
		}
		if s.CrashRate > 0 && s.faultDraw() < s.CrashRate {
			crashes++
		}
	}
	return timeLosses, crashes
}

// outcomeProbabilities returns the new engine's win and draw probabilities for an Elo difference
// and a draw ratio, guarded so that every probability is in [0, 1]: the expected score is
// pWin + pDraw/2 = 1/(1+10^(-elo/400)).
func outcomeProbabilities(elo, drawRatio float64) (pWin, pDraw float64) {
	if math.IsNaN(elo) {
		elo = 0
	}
	score := 1 / (1 + math.Pow(10, -elo/400))
	if math.IsNaN(drawRatio) {
		drawRatio = 0
	}
	pDraw = min(max(drawRatio, 0), 1, 2*min(score, 1-score))
	pWin = max(score-pDraw/2, 0)
	return pWin, pDraw
}

// spsaElo is the Elo the SPSA model adds for a batch, 0 without parameters or optimum.
func (s *SimSource) spsaElo(p *SPSAParams) float64 {
	if p == nil || len(s.SPSAOptimum) == 0 {
		return 0
	}
	step := make(map[string]float64, len(p.W))
	var dw float64
	for _, w := range p.W {
		c := math.Abs(w.C)
		if c == 0 || math.IsNaN(c) || math.IsInf(c, 0) {
			c = 1
		}
		step[w.Name] = c
		if opt, ok := s.SPSAOptimum[w.Name]; ok {
			d := (w.Value - opt) / c
			dw += d * d
		}
	}
	var db float64
	for _, b := range p.B {
		opt, ok := s.SPSAOptimum[b.Name]
		if !ok {
			continue
		}
		c, ok := step[b.Name]
		if !ok {
			c = 1
		}
		d := (b.Value - opt) / c
		db += d * d
	}
	k := s.SPSAEloPerStep
	if k == 0 {
		k = defaultSPSAEloPerStep
	}
	e := k * (math.Sqrt(db) - math.Sqrt(dw))
	if math.IsNaN(e) || math.IsInf(e, 0) {
		return 0
	}
	return e
}

// simOpenings are a few legal opening lines; a pair plays one with each colour, as fastchess's
// -repeat does.
var simOpenings = [...]string{
	"1. e4 e5 2. Nf3 Nc6 3. Bb5 a6",
	"1. d4 d5 2. c4 e6 3. Nc3 Nf6",
	"1. e4 c5 2. Nf3 d6 3. d4 cxd4",
	"1. d4 Nf6 2. c4 g6 3. Nc3 Bg7",
	"1. c4 e5 2. Nc3 Nf6 3. g3 d5",
	"1. Nf3 d5 2. g3 Nf6 3. Bg2 c6",
}

// simPGN renders the games of a batch, in fishtest's naming: "New-<sha>" against "Base-<sha>",
// event "Batch <task>: <new tag> vs <base tag>", rounds numbered from the opening offset.
func simPGN(t Task, results []gameResult) string {
	newName := "New-" + shortSHA(t.Args.ResolvedNew)
	baseName := "Base-" + shortSHA(t.Args.ResolvedBase)
	event := "Batch " + strconv.Itoa(t.TaskID) + ": " + tagOr(t.Args.NewTag, "new") + " vs " + tagOr(t.Args.BaseTag, "base")
	var b strings.Builder
	b.Grow(len(results) * 256)
	for i, r := range results {
		white, black := newName, baseName
		whiteScore := r
		if i%2 == 1 { // the pair's second game: colours reversed
			white, black = baseName, newName
			whiteScore = 2 - r
		}
		result := [...]string{"0-1", "1/2-1/2", "1-0"}[whiteScore]
		game := t.Start + i
		writeTag(&b, "Event", event)
		writeTag(&b, "Site", "?")
		writeTag(&b, "Date", "????.??.??")
		writeTag(&b, "Round", strconv.Itoa(game+1))
		writeTag(&b, "White", white)
		writeTag(&b, "Black", black)
		writeTag(&b, "Result", result)
		writeTag(&b, "Termination", "adjudication")
		b.WriteString("\n")
		b.WriteString(simOpenings[(game/2)%len(simOpenings)])
		b.WriteString(" ")
		b.WriteString(result)
		b.WriteString("\n\n")
	}
	return b.String()
}

func shortSHA(s string) string {
	if len(s) > 10 {
		s = s[:10]
	}
	if s == "" {
		return "sim"
	}
	return s
}

func tagOr(s, def string) string {
	if s, _, _ = strings.Cut(s, " "); s == "" {
		return def
	}
	return s
}

// writeTag writes a PGN tag pair, escaping the value as the PGN standard says (backslash and
// quote) and dropping control characters, which a tag value may not hold.
func writeTag(b *strings.Builder, name, value string) {
	b.WriteByte('[')
	b.WriteString(name)
	b.WriteString(` "`)
	if plainTagValue(value) {
		b.WriteString(value)
		b.WriteString("\"]\n")
		return
	}
	for _, r := range value {
		switch {
		case r == '\\' || r == '"':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r < ' ' || r == 0x7f:
		default:
			b.WriteRune(r)
		}
	}
	b.WriteString("\"]\n")
}

// plainTagValue says that value is printable ASCII without a backslash or a quote: writeTag
// writes it as it is, without its rune by rune loop.
func plainTagValue(value string) bool {
	for i := 0; i < len(value); i++ {
		if c := value[i]; c < ' ' || c >= 0x7f || c == '\\' || c == '"' {
			return false
		}
	}
	return true
}

var _ GameSource = (*SimSource)(nil)
