package demo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/protocol/apiclient"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/worker"
	"github.com/shoal-chess/shoal/worker/build"
)

// Source is what `shoal-bench demo --source` plays: a patch submitted by branch name in a
// repository the server mirrors, built from the server's sources by a local worker and played
// for a fixed number of games.
type Source struct {
	// Repo is the repository, a local path the server allows; NewTag and BaseTag its branches.
	Repo, NewTag, BaseTag string
	// Games is how many games are played before the run is stopped (a run's smallest budget
	// is 1,000 games; a patch worth an Elo or two is not decided in minutes anyway).
	Games int
	TC    string
	// Speed is EngineSource.Factor: the worker plays the time control this many times as long.
	Speed float64
	// Concurrency is the worker's cores; WorkerDir its directory (built engines, books).
	Concurrency int
	WorkerDir   string
	Limit       time.Duration
	// Stop stops run id as its owner would (the web UI's stop).
	Stop func(ctx context.Context, id rundb.ObjectID, username string) error
}

// sourceRun is what the demo reads of GET /api/get_run/{id}.
type sourceRun struct {
	Finished bool             `json:"finished"`
	Failed   bool             `json:"failed"`
	Results  protocol.Stats   `json:"results"`
	Args     protocol.RunArgs `json:"args"`
}

func (r *sourceRun) games() int { return r.Results.Wins + r.Results.Losses + r.Results.Draws }

func getRun(ctx context.Context, base, id string) (*sourceRun, error) {
	return getRunJSON[sourceRun](ctx, base, "get_run", id, 64<<20)
}

// RunSource submits the patch by branch names alone, shows what the server resolved them to,
// lets a local worker build both engines from the server's sources and play them, stops the run
// after d.Games games and shows the result, checking every uploaded game.
func RunSource(ctx context.Context, base string, db *rundb.DB, d Source, stdout io.Writer) error {
	users, err := CreateUsers(ctx, db, 1)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	id, args, err := submitSource(ctx, base, users, d, stdout)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	logger := slog.New(slog.NewTextHandler(stdout, &slog.HandlerOptions{Level: slog.LevelInfo}))
	builder, err := build.New(build.Config{Dir: d.WorkerDir, Jobs: d.Concurrency, Logger: logger})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer builder.Close()
	w, err := worker.New(worker.Config{ServerURL: base, Username: users.Workers.Name, Password: users.Workers.Password,
		Concurrency: d.Concurrency, UniqueKey: worker.NewUniqueKey("demo"), Logger: logger},
		&worker.EngineSource{Build: builder, Dir: d.WorkerDir, Concurrency: d.Concurrency, Factor: d.Speed})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	played := fmt.Sprintf("%s played %g times as long", d.TC, d.Speed)
	fmt.Fprintf(stdout, "A local worker (%d cores, directory %s) builds both commits from the server's sources and plays %d games at %s...\n",
		d.Concurrency, d.WorkerDir, d.Games, played)
	rw := startWorker(ctx, w)
	defer rw.stopHard()
	start := time.Now()
	if err := playGames(ctx, base, id, users.Submitter.Name, d, rw, stdout); err != nil {
		return err
	}
	if err := rw.stop(); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("demo: the worker: %w", err)
	}
	return showSourceResult(ctx, base, id, args.NewTag, start, stdout)
}

// submitSource submits the patch by branch names alone and approves it, showing on stdout what
// the server resolved the branches to. It returns the run's id and arguments.
func submitSource(ctx context.Context, base string, users Users, d Source, stdout io.Writer) (string, protocol.RunArgs, error) {
	req := RunRequest("")
	req.TestsRepo, req.NewTag, req.BaseTag, req.TC = d.Repo, d.NewTag, d.BaseTag, d.TC
	req.ResolvedNew, req.ResolvedBase, req.NewSignature, req.BaseSignature = "", "", "", ""
	req.NumGames = 1000
	fmt.Fprintf(stdout, "%s submits %s against %s by branch name, in %s...\n", users.Submitter.Name, d.NewTag, d.BaseTag, d.Repo)
	id, err := SubmitRun(ctx, base, users, req)
	if err != nil {
		return "", protocol.RunArgs{}, err
	}
	r, err := getRun(ctx, base, id)
	if err != nil {
		return "", protocol.RunArgs{}, err
	}
	a := r.Args
	fmt.Fprintf(stdout, "The server resolved them from its mirror of the repository:\n")
	fmt.Fprintf(stdout, "  new  %-26s %s  bench %s  %q\n", a.NewTag, a.ResolvedNew, a.NewSignature, a.MsgNew)
	fmt.Fprintf(stdout, "  base %-26s %s  bench %s  %q\n", a.BaseTag, a.ResolvedBase, a.BaseSignature, a.MsgBase)
	fmt.Fprintf(stdout, "%s approved it after reading the patch: %s/tests/view/%s#patch\n", users.Approver.Name, base, id)
	return id, a, nil
}

// runningWorker is a worker running in a goroutine of its own; done gets what its Run returns.
type runningWorker struct {
	w        *worker.Worker
	done     chan error
	stopHard context.CancelFunc
}

// startWorker runs w until it is stopped: it runs on past ctx's end, since the demo stops it
// itself.
func startWorker(ctx context.Context, w *worker.Worker) *runningWorker {
	wctx, stopHard := context.WithCancel(context.WithoutCancel(ctx))
	rw := &runningWorker{w: w, done: make(chan error, 1), stopHard: stopHard}
	go func() { rw.done <- w.Run(wctx) }() // joined by stop, or by the demo's end
	return rw
}

// stop asks the worker to finish and returns what its Run returned; after two minutes it stops
// it at once.
func (rw *runningWorker) stop() error {
	rw.w.Stop()
	select {
	case err := <-rw.done:
		return err
	case <-time.After(2 * time.Minute):
		rw.stopHard()
		return <-rw.done
	}
}

// playGames shows run id's games every 5 s, when their number changed, and stops the run as
// owner once d.Games are played. The worker's end, the run's, ctx's or d.Limit passing first is
// an error; all but the worker's own end stop the worker.
func playGames(ctx context.Context, base, id, owner string, d Source, rw *runningWorker, stdout io.Writer) error {
	start := time.Now()
	deadline := time.After(d.Limit)
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	shown := -1
	for {
		select {
		case <-ctx.Done():
			_ = rw.stop()
			return ctx.Err()
		case <-deadline:
			_ = rw.stop()
			return fmt.Errorf("demo: %d games not played in %v", d.Games, d.Limit)
		case err := <-rw.done:
			return fmt.Errorf("demo: the worker stopped: %v", err)
		case <-tick.C:
		}
		r, err := getRun(ctx, base, id)
		if err != nil {
			_ = rw.stop()
			return fmt.Errorf("demo: %w", err)
		}
		if r.Finished {
			_ = rw.stop()
			return fmt.Errorf("demo: the run stopped after %d games (failed: %v): see %s/tests/view/%s", r.games(), r.Failed, base, id)
		}
		if n := r.games(); n != shown {
			shown = n
			fmt.Fprintf(stdout, "  %4.0f s  games %d (W %d L %d D %d)\n", time.Since(start).Seconds(), n,
				r.Results.Wins, r.Results.Losses, r.Results.Draws)
		}
		if r.games() >= d.Games {
			oid, _ := rundb.ParseObjectID(id)
			if err := d.Stop(ctx, oid, owner); err != nil {
				_ = rw.stop()
				return fmt.Errorf("demo: stop the run: %w", err)
			}
			return nil
		}
	}
}

// showSourceResult shows the stopped run's games, played since start, and their Elo, and checks
// every uploaded game: it replays, and the results add up to the run's.
func showSourceResult(ctx context.Context, base, id, newTag string, start time.Time, stdout io.Writer) error {
	r, err := getRun(ctx, base, id)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	res := r.Results
	fmt.Fprintf(stdout, "\nRun %s: %d games in %.0f s, stopped as planned\n", id, r.games(), time.Since(start).Seconds())
	fmt.Fprintf(stdout, "  W %d, L %d, D %d; pentanomial %v\n", res.Wins, res.Losses, res.Draws, res.Pentanomial)
	if r.games() > 0 {
		q := url.Values{}
		for i, k := range []string{"LL", "LD", "DDWL", "WD", "WW"} {
			q.Set(k, strconv.Itoa(res.Pentanomial[i]))
		}
		var e struct {
			Elo float64    `json:"elo"`
			CI  [2]float64 `json:"ci"`
			LOS float64    `json:"LOS"`
		}
		if data, err := apiclient.Get(ctx, http.DefaultClient, base+"/api/calc_elo?"+q.Encode(), 1<<16); err == nil && json.Unmarshal(data, &e) == nil {
			fmt.Fprintf(stdout, "  Elo %+.1f [%+.1f, %+.1f] (95%%), LOS %.1f%%: a few hundred games do not decide a patch worth an Elo or two\n",
				e.Elo, e.CI[0], e.CI[1], 100*e.LOS)
		}
	}
	pgns, err := checkRunPGNs(ctx, base, id, newTag)
	if err != nil {
		return fmt.Errorf("demo: the uploaded games: %w", err)
	}
	fmt.Fprintf(stdout, "  PGNs: %d games uploaded, every one replays by the rules of chess; by their results W %d, L %d, D %d\n",
		pgns.games, pgns.wins, pgns.losses, pgns.draws)
	if pgns.wins != res.Wins || pgns.losses != res.Losses || pgns.draws != res.Draws {
		return errors.New("demo: the uploaded games' results differ from the run's")
	}
	fmt.Fprintf(stdout, "  The run's page, with the patch: %s/tests/view/%s (the server stops with the demo)\n", base, id)
	return nil
}

// Unpack unpacks the gzipped tarball of one repository (such as Stockfish 11's fixture, which
// holds stockfish.git/) into dir with the system's tar, and returns the repository's path.
func Unpack(tarball, dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	out, err := exec.Command("tar", "-xzf", tarball, "-C", dir, "--no-same-owner").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("unpack %s: %v: %s", tarball, err, strings.TrimSpace(string(out)))
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	if len(entries) != 1 || !entries[0].IsDir() {
		return "", fmt.Errorf("unpack %s: want one repository directory, found %d entries", tarball, len(entries))
	}
	return filepath.Join(dir, entries[0].Name()), nil
}
