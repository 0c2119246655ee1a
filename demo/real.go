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

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
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
	bench, err := uci.Bench(ctx, d.Engine, 16, 1, 13)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	sig := strconv.FormatInt(bench.Nodes, 10)
	req := RunRequest(fmt.Sprintf("Shoal demo: %s (%s) against itself (%s)", d.Engine, d.NewOptions, d.BaseOptions))
	req.TC, req.NewOptions, req.BaseOptions = d.TC, d.NewOptions, d.BaseOptions
	req.BaseSignature, req.NewSignature = sig, sig
	req.Book = "shoal_openings_v1.epd"
	req.SPRT = &scheduler.SPRTRequest{Elo0: new(0.0), Elo1: new(10.0)}
	id, err := SubmitRun(ctx, base, users, req)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
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

	wctx, stopHard := context.WithCancel(context.WithoutCancel(ctx))
	defer stopHard()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var workers []*worker.Worker
	var wg sync.WaitGroup
	errs := make(chan error, d.Workers)
	for i := range d.Workers {
		w, err := worker.New(worker.Config{ServerURL: base, Username: users.Workers.Name, Password: users.Workers.Password,
			Concurrency: 1, UniqueKey: worker.NewUniqueKey(fmt.Sprintf("demo%d", i)), Logger: quiet},
			&worker.EngineSource{Engine: d.Engine, Concurrency: 1, Factor: d.Speed})
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		workers = append(workers, w)
		wg.Go(func() {
			if err := w.Run(wctx); err != nil && wctx.Err() == nil {
				errs <- err
			}
		})
	}
	stopWorkers := func() {
		for _, w := range workers {
			w.Stop()
		}
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			stopHard()
			<-done
		}
	}

	start := time.Now()
	deadline := time.After(d.Limit)
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	var e *eloReply
	shown := -1
	for decided := false; !decided; {
		select {
		case <-ctx.Done():
			stopWorkers()
			return ctx.Err()
		case <-deadline:
			decided = true
		case err := <-errs:
			stopWorkers()
			return fmt.Errorf("demo: a worker stopped: %w", err)
		case <-tick.C:
		}
		if e, err = getElo(ctx, base, id); err != nil {
			stopWorkers()
			return fmt.Errorf("demo: %w", err)
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
	stopWorkers()

	verdict := printVerdict(stdout, id, e, "out of time", time.Since(start).Seconds())
	fmt.Fprintf(stdout, "  Elo %+.2f [%+.2f, %+.2f] (LOS %.1f%%)\n", e.Elo.Elo, e.Elo.CI[0], e.Elo.CI[1], 100*e.Elo.LOS)
	pgns, err := checkRunPGNs(ctx, base, id, req.NewTag)
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
	fmt.Fprintf(stdout, "  The run's page: %s/tests/view/%s (the server stops with the demo)\n", base, id)
	if verdict != "ACCEPTED" && verdict != "REJECTED" {
		return errors.New("demo: the test was not decided in time")
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
