package demo

import (
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/worker"
	"github.com/shoal-chess/shoal/worker/match"
	"github.com/shoal-chess/shoal/worker/uci"
)

// Real is what `shoal-bench demo --engine` plays: an SPRT between two configurations of one
// engine, decided by local workers playing real games.
type Real struct {
	Engine, NewOptions, BaseOptions, TC string
	Speed                               float64 // EngineSource.Factor
	Workers                             int
	Limit                               time.Duration
}

// RunReal submits the SPRT (the engine's bench as both signatures) to the server at base (on
// database db), starts the workers, shows the test's progress until it is decided, then checks
// every uploaded game.
func RunReal(ctx context.Context, base string, db *rundb.DB, d Real, stdout io.Writer) error {
	users, err := CreateUsers(ctx, db, d.Workers)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	id, req, err := submitReal(ctx, base, users, d, stdout)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	pool, err := startWorkers(ctx, base, users.Workers, d)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer pool.stopHard()
	start := time.Now()
	e, err := followSPRT(ctx, base, id, d.Limit, pool.errs, stdout)
	pool.stop()
	if err != nil {
		return err
	}
	verdict := printVerdict(stdout, id, e, "out of time", time.Since(start).Seconds())
	fmt.Fprintf(stdout, "  Elo %+.2f [%+.2f, %+.2f] (LOS %.1f%%)\n", e.Elo.Elo, e.Elo.CI[0], e.Elo.CI[1], 100*e.Elo.LOS)
	if err := checkRealPGNs(ctx, base, id, req.NewTag, d, e, stdout); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "  The run's page: %s/tests/view/%s (the server stops with the demo)\n", base, id)
	if verdict != "ACCEPTED" && verdict != "REJECTED" {
		return errors.New("demo: the test was not decided in time")
	}
	return nil
}

// submitReal submits and approves the real-games SPRT, the engine's bench as both signatures,
// and says so on stdout. It returns the run's id and what was submitted.
func submitReal(ctx context.Context, base string, users Users, d Real, stdout io.Writer) (string, protocol.RunRequest, error) {
	bench, err := uci.Bench(ctx, d.Engine, 16, 1, 13)
	if err != nil {
		return "", protocol.RunRequest{}, err
	}
	sig := strconv.FormatInt(bench.Nodes, 10)
	req := RunRequest(fmt.Sprintf("Shoal demo: %s (%s) against itself (%s)", d.Engine, d.NewOptions, d.BaseOptions))
	req.TC, req.NewOptions, req.BaseOptions = d.TC, d.NewOptions, d.BaseOptions
	req.BaseSignature, req.NewSignature = sig, sig
	req.Book = "shoal_openings_v1.epd"
	req.SPRT = &protocol.SPRTRequest{Elo0: new(0.0), Elo1: new(10.0)}
	id, err := SubmitRun(ctx, base, users, req)
	if err != nil {
		return "", req, err
	}
	fmt.Fprintf(stdout, "%s submitted SPRT[0, 10] at %s as run %s; %s approved it (%s/tests/view/%s).\n",
		users.Submitter.Name, d.TC, id, users.Approver.Name, base, id)
	played := "scaled by this machine's bench"
	if d.Speed > 0 {
		tc, _ := match.ParseTC(d.TC)
		played = "played at " + tc.Scaled(d.Speed).String()
	}
	fmt.Fprintf(stdout, "Starting %d workers playing real games with %s (bench %s nodes; %s %s)...\n",
		d.Workers, d.Engine, sig, d.TC, played)
	return id, req, nil
}

// workerPool is the real-games demo's local workers, each running in a goroutine of its own
// until stop. errs gets the error of a worker that stopped by itself.
type workerPool struct {
	workers  []*worker.Worker
	wg       sync.WaitGroup
	errs     chan error
	stopHard context.CancelFunc
}

// startWorkers starts d.Workers workers of one core each, logging in as account, playing with
// d.Engine. They run on past ctx's end until stopped: the demo stops them itself.
func startWorkers(ctx context.Context, base string, account Account, d Real) (*workerPool, error) {
	wctx, stopHard := context.WithCancel(context.WithoutCancel(ctx))
	p := &workerPool{errs: make(chan error, d.Workers), stopHard: stopHard}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for i := range d.Workers {
		w, err := worker.New(worker.Config{ServerURL: base, Username: account.Name, Password: account.Password,
			Concurrency: 1, UniqueKey: worker.NewUniqueKey(fmt.Sprintf("demo%d", i)), Logger: quiet},
			&worker.EngineSource{Engine: d.Engine, Concurrency: 1, Factor: d.Speed})
		if err != nil {
			stopHard()
			return nil, err
		}
		p.workers = append(p.workers, w)
		p.wg.Go(func() {
			if err := w.Run(wctx); err != nil && wctx.Err() == nil {
				p.errs <- err
			}
		})
	}
	return p, nil
}

// stop asks every worker to finish its game and waits for them; after 30 s it stops them at
// once.
func (p *workerPool) stop() {
	for _, w := range p.workers {
		w.Stop()
	}
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		p.stopHard()
		<-done
	}
}

// followSPRT shows run id's progress every 5 s, when it changed, until the SPRT is decided or
// limit passes, and returns its last state. A worker's error (from errs) or ctx's end stops it
// with an error.
func followSPRT(ctx context.Context, base, id string, limit time.Duration, errs <-chan error, stdout io.Writer) (*eloReply, error) {
	start := time.Now()
	deadline := time.After(limit)
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	var e *eloReply
	var err error
	shown := -1
	for decided := false; !decided; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-deadline:
			decided = true
		case err := <-errs:
			return nil, fmt.Errorf("demo: a worker stopped: %w", err)
		case <-tick.C:
		}
		if e, err = getElo(ctx, base, id); err != nil {
			return nil, fmt.Errorf("demo: %w", err)
		}
		r := e.Results
		decided = decided || e.Finished
		if n := r.Wins + r.Losses + r.Draws; n == shown && !decided {
			continue
		} else {
			shown = n
		}
		fmt.Fprintf(stdout, "  %4.0f s  games %d (W %d L %d D %d)  LLR %.2f (%.2f, %.2f)  Elo %+.1f [%+.1f, %+.1f]\n",
			time.Since(start).Seconds(), r.Wins+r.Losses+r.Draws, r.Wins, r.Losses, r.Draws,
			e.Args.SPRT.LLR, e.Args.SPRT.LowerBound, e.Args.SPRT.UpperBound, e.Elo.Elo, e.Elo.CI[0], e.Elo.CI[1])
	}
	return e, nil
}

// checkRealPGNs checks the run's uploaded games against its results e: every one replays, their
// results add up to the run's, and each carries the run's time control and, with d.Speed, the
// one played.
func checkRealPGNs(ctx context.Context, base, id, newTag string, d Real, e *eloReply, stdout io.Writer) error {
	pgns, err := checkRunPGNs(ctx, base, id, newTag)
	if err != nil {
		return fmt.Errorf("demo: the uploaded games: %w", err)
	}
	fmt.Fprintf(stdout, "  PGNs: %d games uploaded, every one replays by the rules of chess; by their results W %d, L %d, D %d; time controls %v (the run's %v)\n",
		pgns.games, pgns.wins, pgns.losses, pgns.draws, pgns.tcs, pgns.runTCs)
	if pgns.wins != e.Results.Wins || pgns.losses != e.Results.Losses || pgns.draws != e.Results.Draws {
		return errors.New("demo: the uploaded games' results differ from the run's")
	}
	if pgns.runTCs[d.TC] != pgns.games {
		return fmt.Errorf("demo: the games' run time controls %v, want %s in every one", pgns.runTCs, d.TC)
	}
	if d.Speed > 0 {
		tc, _ := match.ParseTC(d.TC)
		if want := tc.Scaled(d.Speed).String(); pgns.tcs[want] != pgns.games {
			return fmt.Errorf("demo: the games' time controls %v, want %s in every one", pgns.tcs, want)
		}
	}
	return nil
}

// pgnTally is what the uploaded games say: how many, the tested engine's wins, losses and draws
// by their Result tags, and the time controls in their tags.
type pgnTally struct {
	games, wins, losses, draws int
	tcs, runTCs                map[string]int // time controls as played, and the run's
}

// checkRunPGNs downloads the run's games (GET /api/run_pgns) and replays each by the rules,
// tallying them for newTag (the tested engine's name in the White and Black tags); the first
// that does not replay is an error.
func checkRunPGNs(ctx context.Context, base, id, newTag string) (pgnTally, error) {
	t := pgnTally{tcs: map[string]int{}, runTCs: map[string]int{}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/run_pgns/"+id+".pgn.gz", nil)
	if err != nil {
		return t, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return t, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return t, fmt.Errorf("run_pgns: %s", resp.Status)
	}
	zr, err := gzip.NewReader(resp.Body)
	if err != nil {
		return t, err
	}
	text, err := io.ReadAll(io.LimitReader(zr, 256<<20))
	if err != nil {
		return t, err
	}
	for i, pgn := range match.SplitPGN(string(text)) {
		g, err := match.ParsePGN(pgn)
		if err != nil {
			return t, fmt.Errorf("game %d: %w", i+1, err)
		}
		t.games++
		t.tcs[g.GetTagPair("TimeControl")]++
		t.runTCs[g.GetTagPair("RunTimeControl")]++
		newWhite := g.GetTagPair("White") == newTag
		switch g.GetTagPair("Result") {
		case "1/2-1/2":
			t.draws++
		case "1-0":
			if newWhite {
				t.wins++
			} else {
				t.losses++
			}
		case "0-1":
			if newWhite {
				t.losses++
			} else {
				t.wins++
			}
		default:
			return t, fmt.Errorf("game %d has no result", i+1)
		}
	}
	return t, nil
}
