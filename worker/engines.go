package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/shoal-chess/shoal/worker/match"
	"github.com/shoal-chess/shoal/worker/uci"
)

// EngineSource is a GameSource that plays real games between UCI engines found on this machine:
// no builds, no downloads. A run's engine is the binary in Engines named by its tag (new_tag,
// base_tag) or its resolved commit, else Engine for both sides.
//
// Not yet: SPSA runs, and the bench that checks a run's signature and measures this machine's
// speed (Factor stands in for it).
type EngineSource struct {
	// Engine is the binary both sides run when Engines has none for them.
	Engine string
	// Engines is a directory of engine binaries named by tag or commit; may be empty.
	Engines string
	// Books is a directory of opening books beside the ones the worker ships; may be empty.
	Books string
	// Factor scales the run's time control, as fishtest's reference speed over this machine's;
	// zero means 1.
	Factor float64
	// Concurrency is how many games are played at once (pairs in parallel); zero means 1.
	Concurrency int
}

var _ GameSource = (*EngineSource)(nil)

// engineStart bounds an engine's handshake.
const engineStart = 30 * time.Second

// Play plays pairs game pairs of t: openings from the run's book from the batch's first pair
// on, the new engine white in one game of each pair and black in the other.
func (s *EngineSource) Play(ctx context.Context, t Task, pairs int, spsa *SPSAParams) (Batch, error) {
	if spsa != nil || t.Args.SPSA != nil {
		return Batch{}, errors.New("real games: SPSA runs are not supported yet")
	}
	book, err := match.LoadBook(t.Args.Book, s.Books)
	if err != nil {
		return Batch{}, fmt.Errorf("real games: %w", err)
	}
	factor := s.Factor
	if factor <= 0 {
		factor = 1
	}
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
	baseTC, newTC = baseTC.Scaled(factor), newTC.Scaled(factor)
	newBin, err := s.binary(t.Args.NewTag, t.Args.ResolvedNew)
	if err != nil {
		return Batch{}, err
	}
	baseBin, err := s.binary(t.Args.BaseTag, t.Args.ResolvedBase)
	if err != nil {
		return Batch{}, err
	}
	newOpts, err := engineOptions(t.Args.NewOptions, t.Args.Threads)
	if err != nil {
		return Batch{}, &RunError{Message: "real games: new_options: " + err.Error()}
	}
	baseOpts, err := engineOptions(t.Args.BaseOptions, t.Args.Threads)
	if err != nil {
		return Batch{}, &RunError{Message: "real games: base_options: " + err.Error()}
	}
	adjudicate := t.Args.Adjudication == nil || *t.Args.Adjudication
	tags := map[string]string{"Event": fmt.Sprintf("Batch %d: %s vs %s", t.TaskID, t.Args.NewTag, t.Args.BaseTag),
		"Site": "tests/view/" + t.RunID}

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
				fen := book.Opening(t.RunID, t.Start/2+i)
				p, err := match.PlayPair(ctx, newSeat, baseSeat, fen, adjudicate, tags)
				if err != nil {
					errs[slot] = err
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
