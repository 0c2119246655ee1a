package worker

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shoal-chess/shoal/worker/build"
	"github.com/shoal-chess/shoal/worker/match"
	"github.com/shoal-chess/shoal/worker/uci"
)

// EngineSource is a GameSource that plays real games between UCI engines. With Build set, a
// run's engines are built from its commits (resolved_new, resolved_base), their sources from
// the server. Without it, they are found on this machine: the binary in Engines named by the
// run's tag (new_tag, base_tag) or its resolved commit, else Engine for both sides.
//
// Before a task's first batch it finds the run's book (loadBook: the operator's, the worker's,
// the server's), builds or finds the engines and runs their bench, as fishtest's worker does: a
// run that names an engine's signature (new_signature, base_signature: the bench's nodes) must
// get that engine, or the run is stopped; and unless Factor is set, the bench measures this
// machine's speed, which scales the run's time control. An SPSA batch sets its perturbed
// parameters as options of each side.
type EngineSource struct {
	// Engine is the binary both sides run when Engines has none for them.
	Engine string
	// Engines is a directory of engine binaries named by tag or commit; may be empty.
	Engines string
	// Build, if set, builds the runs' engines from their commits instead; Engine and Engines
	// are not used then.
	Build *build.Builder
	// Server is where books the worker lacks (and Build's sources) come from; New sets it to
	// the worker when it is nil.
	Server build.Server
	// Books is a directory of the operator's opening books, used first and unchecked; may be
	// empty.
	Books string
	// Dir is the worker's own directory: books fetched from the server are kept in Dir/books.
	// Empty: they are kept in memory only.
	Dir string
	// Factor, if positive, scales the runs' time controls instead of the bench's measure.
	Factor float64
	// Concurrency is how many games are played at once (pairs in parallel); zero means 1.
	Concurrency int

	mu       sync.Mutex    // held through a task's preparation
	prepared taskSetup     // the last task's
	lastBook loadedBook    // the last book read, for the next task of the run; under mu
	nps      atomic.Uint64 // math.Float64bits of the last measured speed; read without mu
}

// taskSetup is what a task's batches share, made once before its first: its book, its
// engines and the factor its time controls are scaled by.
type taskSetup struct {
	key             string // "run/task"
	book            match.Book
	newBin, baseBin string
	factor          float64
}

// NPS is the last speed the bench measured, in nodes per second and thread (0 if none yet, or
// if Factor is set): the worker reports it in its worker_info, as fishtest's does. It does not
// wait for a bench in progress (the heartbeat calls it).
func (s *EngineSource) NPS() float64 { return math.Float64frombits(s.nps.Load()) }

// benchTimeout bounds a task's benches, as fishtest's worker bounds each.
const benchTimeout = 10 * time.Minute

// Fishtest's reference speed, and the slowest it lets play (for one game at a time), in nodes
// per second and thread of the bench at depth 13.
const (
	referenceNPS = 628_000
	minimumNPS   = 180_000
)

// prepare makes t's setup once, before its first batch: its book read, its engines built or
// found, each engine's signature checked and this machine's speed measured by the bench.
func (s *EngineSource) prepare(ctx context.Context, t Task, threads int) (taskSetup, error) {
	key := fmt.Sprintf("%s/%d", t.RunID, t.TaskID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.prepared.key == key {
		return s.prepared, nil
	}
	book, err := s.loadBook(ctx, t.Args.Book, t.Args.BookSRI)
	if err != nil {
		return taskSetup{}, fmt.Errorf("real games: %w", err)
	}
	newBin, baseBin, err := s.engines(ctx, t)
	if err != nil {
		return taskSetup{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, benchTimeout)
	defer cancel()
	for _, e := range []struct{ bin, signature string }{{newBin, t.Args.NewSignature}, {baseBin, t.Args.BaseSignature}} {
		if e.signature == "" {
			continue
		}
		b, err := uci.Bench(ctx, e.bin, 16, 1, 13)
		if err != nil {
			return taskSetup{}, fmt.Errorf("real games: %w", err)
		}
		if strconv.FormatInt(b.Nodes, 10) != strings.TrimSpace(e.signature) {
			return taskSetup{}, &RunError{Message: fmt.Sprintf("Wrong bench in %s, user expected: %s but worker got: %d",
				filepath.Base(e.bin), e.signature, b.Nodes)}
		}
	}
	factor := s.Factor
	if factor <= 0 {
		nps, err := measureNPS(ctx, baseBin, max(s.Concurrency, 1), threads)
		if err != nil {
			return taskSetup{}, fmt.Errorf("real games: %w", err)
		}
		concurrency := float64(max(s.Concurrency, 1))
		if least := minimumNPS / (1 + 3*math.Tanh((concurrency-1)/8)); nps < least {
			return taskSetup{}, fmt.Errorf("real games: this machine is too slow to play the task: %.0f nps per thread, %.0f needed", nps, least)
		}
		factor = referenceNPS / nps
		s.nps.Store(math.Float64bits(nps))
	}
	s.prepared = taskSetup{key: key, book: book, newBin: newBin, baseBin: baseBin, factor: factor}
	return s.prepared, nil
}

// engines are the task's engines: built from its commits with Build, else found by binary.
func (s *EngineSource) engines(ctx context.Context, t Task) (newBin, baseBin string, err error) {
	if s.Build == nil {
		if newBin, err = s.binary(t.Args.NewTag, t.Args.ResolvedNew); err != nil {
			return "", "", err
		}
		baseBin, err = s.binary(t.Args.BaseTag, t.Args.ResolvedBase)
		return newBin, baseBin, err
	}
	if s.Server == nil {
		return "", "", errors.New("real games: no server to fetch the sources from")
	}
	paths, err := s.Build.Engines(ctx, s.Server,
		build.Commit{SHA: t.Args.ResolvedNew, Role: "new"}, build.Commit{SHA: t.Args.ResolvedBase, Role: "base"})
	if err != nil {
		return "", "", err
	}
	return paths[0], paths[1], nil
}

// measureNPS is the bench's speed as fishtest's worker measures it: a warm-up at depth 11, then
// concurrency benches at once at depth 13, nodes per second and thread averaged.
func measureNPS(ctx context.Context, bin string, concurrency, threads int) (float64, error) {
	if _, err := uci.Bench(ctx, bin, 16, threads, 11); err != nil {
		return 0, err
	}
	nps := make([]float64, concurrency)
	errs := make([]error, concurrency)
	var wg sync.WaitGroup
	for i := range concurrency {
		wg.Go(func() {
			b, err := uci.Bench(ctx, bin, 16, threads, 13)
			nps[i], errs[i] = b.NPS(threads), err
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	sum := 0.0
	for _, v := range nps {
		sum += v
	}
	return sum / float64(concurrency), nil
}

var _ GameSource = (*EngineSource)(nil)

// engineStart bounds an engine's handshake.
const engineStart = 30 * time.Second

// Play plays pairs game pairs of t: openings from the run's book from the batch's first pair
// on, the new engine white in one game of each pair and black in the other.
func (s *EngineSource) Play(ctx context.Context, t Task, pairs int, spsa *SPSAParams) (Batch, error) {
	baseTC, err := match.ParseTC(t.Args.TC)
	if err != nil {
		return Batch{}, &RunError{Message: fmt.Sprintf("real games: %v", err)}
	}
	newTC := baseTC
	if t.Args.NewTC != "" {
		if newTC, err = match.ParseTC(t.Args.NewTC); err != nil {
			return Batch{}, &RunError{Message: fmt.Sprintf("real games: new_tc: %v", err)}
		}
	}
	setup, err := s.prepare(ctx, t, max(t.Args.Threads, 1))
	if err != nil {
		return Batch{}, err
	}
	newBin, baseBin := setup.newBin, setup.baseBin
	baseTC, newTC = baseTC.Scaled(setup.factor), newTC.Scaled(setup.factor)
	newOpts, err := engineOptions(t.Args.NewOptions, t.Args.Threads)
	if err != nil {
		return Batch{}, &RunError{Message: "real games: new_options: " + err.Error()}
	}
	baseOpts, err := engineOptions(t.Args.BaseOptions, t.Args.Threads)
	if err != nil {
		return Batch{}, &RunError{Message: "real games: base_options: " + err.Error()}
	}
	if spsa != nil {
		// The batch's perturbed parameters, rounded stochastically to whole option values
		// (v becomes floor(v) or floor(v)+1, the latter with probability v-floor(v)), as
		// fishtest's worker sets them.
		for _, p := range spsa.W {
			newOpts = append(newOpts, [2]string{p.Name, strconv.Itoa(stochasticRound(p.Value, rand.Float64()))})
		}
		for _, p := range spsa.B {
			baseOpts = append(baseOpts, [2]string{p.Name, strconv.Itoa(stochasticRound(p.Value, rand.Float64()))})
		}
	}
	adjudicate := t.Args.Adjudication == nil || *t.Args.Adjudication
	// TimeControl is the time control as played (scaled); RunTimeControl the run's own.
	tags := map[string]string{"Event": fmt.Sprintf("Batch %d: %s vs %s", t.TaskID, t.Args.NewTag, t.Args.BaseTag),
		"Site": "tests/view/" + t.RunID, "RunTimeControl": t.Args.TC}

	// The first slot that fails stops the others: the batch is lost anyway.
	pairsCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	slots := min(max(s.Concurrency, 1), pairs)
	results := make([]match.Pair, pairs)
	errs := make([]error, slots)
	next := make(chan int, pairs)
	for i := range pairs {
		next <- i
	}
	close(next)
	var wg sync.WaitGroup
	for slot := range slots {
		wg.Go(func() {
			newSeat := &match.Seat{Name: t.Args.NewTag, TC: newTC, Start: starter(newBin, newOpts)}
			baseSeat := &match.Seat{Name: t.Args.BaseTag, TC: baseTC, Start: starter(baseBin, baseOpts)}
			defer newSeat.Close()
			defer baseSeat.Close()
			for i := range next {
				fen := setup.book.Opening(t.RunID, t.Start/2+i)
				p, err := match.PlayPair(pairsCtx, newSeat, baseSeat, fen, adjudicate, tags)
				if err != nil {
					errs[slot] = err
					cancel()
					return
				}
				results[i] = p
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		if ctx.Err() != nil {
			return Batch{}, ctx.Err()
		}
		return Batch{}, fmt.Errorf("real games: %w", err)
	}
	var b Batch
	var pgn strings.Builder
	for _, p := range results {
		b.Stats.Wins += p.Wins
		b.Stats.Losses += p.Losses
		b.Stats.Draws += p.Draws
		b.Stats.Crashes += p.Crashes
		b.Stats.TimeLosses += p.TimeLosses
		b.Stats.Pentanomial[p.Penta]++
		for _, g := range p.Games {
			pgn.WriteString(g.PGN)
			pgn.WriteString("\n\n")
		}
	}
	b.PGN = pgn.String()
	return b, nil
}

// stochasticRound is v rounded down after adding u, a uniform draw from [0, 1).
func stochasticRound(v, u float64) int { return int(math.Floor(v + u)) }

// binary is the engine for a run's tag or commit: named by either in Engines, else Engine.
func (s *EngineSource) binary(tag, commit string) (string, error) {
	if s.Engines != "" {
		for _, name := range []string{tag, commit} {
			if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
				continue
			}
			p := filepath.Join(s.Engines, name)
			if info, err := os.Stat(p); err == nil && !info.IsDir() {
				return p, nil
			}
		}
	}
	if s.Engine == "" {
		// This worker's lack, not the run's fault: the task fails, the run goes on elsewhere.
		return "", fmt.Errorf("real games: no engine for %q (%s) on this worker", tag, commit)
	}
	return s.Engine, nil
}

// engineOptions reads a run's options, fishtest's "Name=value Name=value", and adds Threads
// (the run's threads) unless they set it.
func engineOptions(s string, threads int) ([][2]string, error) {
	var opts [][2]string
	hasThreads := false
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not Name=value", f)
		}
		hasThreads = hasThreads || k == "Threads"
		opts = append(opts, [2]string{k, v})
	}
	if !hasThreads {
		opts = append(opts, [2]string{"Threads", fmt.Sprint(max(threads, 1))})
	}
	return opts, nil
}

// starter starts bin with opts set.
func starter(bin string, opts [][2]string) func(context.Context) (*uci.Engine, error) {
	return func(ctx context.Context) (*uci.Engine, error) {
		e, err := uci.Start(ctx, bin, nil, engineStart)
		if err != nil {
			return nil, err
		}
		for _, o := range opts {
			if err := e.SetOption(o[0], o[1]); err != nil {
				e.Close()
				return nil, err
			}
		}
		return e, nil
	}
}
