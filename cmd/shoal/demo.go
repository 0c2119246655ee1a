package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/node"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/worker/fleet"
	"github.com/shoal-chess/shoal/worker/match"
)

// demoTimeScale is the demo's time compression: the server's knobs and the workers' clocks run
// 120 times faster than fishtest's (a 30.9 s STC game takes a quarter of a second).
const demoTimeScale = 120

// demoConfig is a server configuration for a simulation: an embedded database in dataDir, any
// free port, and fishtest's time knobs divided by scale. The dead-task timeout stays at least
// 5 s and the scavenge period at least half a second, so that a busy machine's pause does not
// reclaim live tasks.
//
// task_duration is the exception: the server sizes a task as task_duration divided by the
// estimated length of one game at the run's TC, and that estimate is not compressed (the
// simulated games are). Left at 1800 s, tasks keep fishtest's size in games (58 games per core
// at 10+0.1) and last 1800/scale seconds of wall time; divided by scale they would shrink to one
// SPRT batch or two games.
func demoConfig(dataDir string, scale float64) config.Config {
	cfg := config.DefaultConfig()
	cfg.DataDir = dataDir
	cfg.Addr = "127.0.0.1:0"
	cfg.LogLevel = "warn"
	div := func(d time.Duration) time.Duration { return time.Duration(float64(d) / scale) }
	cfg.HeartbeatPeriod = div(cfg.HeartbeatPeriod)
	cfg.DeadTaskTimeout = max(div(cfg.DeadTaskTimeout), 5*time.Second)
	cfg.ScavengePeriod = max(div(cfg.ScavengePeriod), 500*time.Millisecond)
	cfg.DuplicateWorkerWindow = div(cfg.DuplicateWorkerWindow)
	return cfg
}

// demoUsers are the demo's accounts, with random passwords: a submitter, an approver (runs need
// someone else's approval) and the account the simulated workers log in with.
type demoUsers struct {
	submitter, approver, workers struct{ name, password string }
}

// createDemoUsers creates the demo's users in inst's database; machineLimit lets that many
// workers hold tasks from this one address.
func createDemoUsers(ctx context.Context, db *rundb.DB, machineLimit int) (demoUsers, error) {
	var u demoUsers
	u.submitter.name, u.approver.name, u.workers.name = "alice", "bob", "fleet"
	for _, acct := range []struct {
		who      *struct{ name, password string }
		approver bool
		limit    int
	}{{&u.submitter, false, 0}, {&u.approver, true, 0}, {&u.workers, false, machineLimit}} {
		acct.who.password = rand.Text()
		_, err := db.Users.Create(ctx, rundb.NewUser{Username: acct.who.name, Password: acct.who.password,
			Approver: acct.approver, Accepted: true, MachineLimit: acct.limit})
		if err != nil {
			return u, fmt.Errorf("create user %s: %w", acct.who.name, err)
		}
	}
	return u, nil
}

// submitRun creates a run through the API as submitter and approves it as approver, as
// `shoal run new` and `shoal run approve` do, and returns its id.
func submitRun(ctx context.Context, base string, u demoUsers, req scheduler.RunRequest) (string, error) {
	httpc := &http.Client{Timeout: 30 * time.Second}
	sub := &apiClient{server: base, username: u.submitter.name, password: u.submitter.password, http: httpc}
	var created struct {
		RunID string `json:"run_id"`
	}
	body := map[string]any{"username": sub.username, "password": sub.password, "run": req}
	if err := sub.post(ctx, "/api/create_run", body, &created); err != nil {
		return "", fmt.Errorf("create run: %w", err)
	}
	if created.RunID == "" {
		return "", errors.New("create run: the reply has no run_id")
	}
	appr := &apiClient{server: base, username: u.approver.name, password: u.approver.password, http: httpc}
	var approved struct {
		Approved bool `json:"approved"`
	}
	body = map[string]any{"username": appr.username, "password": appr.password, "run_id": created.RunID}
	if err := appr.post(ctx, "/api/approve_run", body, &approved); err != nil {
		return "", fmt.Errorf("approve run %s: %w", created.RunID, err)
	}
	if !approved.Approved {
		return "", fmt.Errorf("approve run %s: not confirmed", created.RunID)
	}
	return created.RunID, nil
}

// demoRunRequest is a plausible test: the arguments `shoal run new` would send.
func demoRunRequest(info string) scheduler.RunRequest {
	return scheduler.RunRequest{
		BaseTag: "master", NewTag: "demo-patch",
		ResolvedBase: "0123456789abcdef0123456789abcdef01234567",
		ResolvedNew:  "89abcdef0123456789abcdef0123456789abcdef",
		TC:           "10+0.1", BaseOptions: defaultOptions, NewOptions: defaultOptions,
		BaseSignature: "2050811", NewSignature: "2061234",
		TestsRepo: "https://github.com/official-stockfish/Stockfish", Info: info,
	}
}

// eloReply is what the demo reads of GET /api/get_elo/{id}.
type eloReply struct {
	Finished bool `json:"finished"`
	Results  struct {
		Wins        int   `json:"wins"`
		Losses      int   `json:"losses"`
		Draws       int   `json:"draws"`
		Pentanomial []int `json:"pentanomial"`
	} `json:"results"`
	Args struct {
		SPRT struct {
			State      string  `json:"state"`
			LLR        float64 `json:"llr"`
			LowerBound float64 `json:"lower_bound"`
			UpperBound float64 `json:"upper_bound"`
			Elo0       float64 `json:"elo0"`
			Elo1       float64 `json:"elo1"`
		} `json:"sprt"`
	} `json:"args"`
	Elo struct {
		Elo float64    `json:"elo"`
		CI  [2]float64 `json:"ci"`
		LOS float64    `json:"LOS"`
	} `json:"elo"`
}

// getElo reads GET /api/get_elo/{id}.
func getElo(ctx context.Context, base, id string) (*eloReply, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/api/get_elo/"+id, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxReplyBytes))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get_elo %s: %s: %s", id, resp.Status, snippet(data))
	}
	var e eloReply
	if err := json.Unmarshal(data, &e); err != nil {
		return nil, fmt.Errorf("get_elo %s: %w", id, err)
	}
	return &e, nil
}

// demoCmd is `shoal demo`: a server on a temporary embedded database, an SPRT test submitted
// and approved through the API, and a simulated fleet that plays it until it is decided; with
// --engine, local workers playing real games with that engine decide it instead.
func demoCmd(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", stderr)
	workers := fs.Int("workers", 300, "simulated workers")
	elo := fs.Float64("elo", 5, "true Elo of the patch (logistic)")
	drawRatio := fs.Float64("draw-ratio", 0.6, "share of drawn games")
	scale := fs.Float64("time-scale", demoTimeScale, "time compression of the server and the workers")
	limit := fs.Duration("timeout", 5*time.Minute, "give up if the test is not decided by then")
	seed := fs.Uint64("seed", 0, "random seed (0: random)")
	jsonOut := fs.String("json", "", "write the fleet's report as JSON to this file")
	engine := fs.String("engine", "", "play real games with this UCI engine (e.g. /usr/games/stockfish) instead of simulated ones")
	newOptions := fs.String("new-options", "Hash=16", "real games: the tested side's UCI options")
	baseOptions := fs.String("base-options", "Hash=16 UCI_LimitStrength=true UCI_Elo=1500", "real games: the base side's UCI options")
	tc := fs.String("tc", "10+0.1", "real games: the test's time control")
	speed := fs.Float64("speed-factor", 0.04, "real games: the workers play the time control this many times as long (0: scaled by this machine's bench, as for a real test)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	realGames := *engine != ""
	if realGames {
		// Real games take real time: one worker a core, nothing compressed.
		*scale = 1
		workersSet := false
		fs.Visit(func(f *flag.Flag) { workersSet = workersSet || f.Name == "workers" })
		if !workersSet {
			*workers = runtime.NumCPU()
		}
		if _, err := match.ParseTC(*tc); err != nil {
			return fmt.Errorf("demo: --tc: %w", err)
		}
		if !(*speed >= 0) {
			return errors.New("demo: --speed-factor must not be negative")
		}
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("demo: unexpected arguments %q", fs.Args())
	}
	if *workers < 1 || !(*scale >= 1) {
		return errors.New("demo: --workers must be positive and --time-scale at least 1")
	}

	dir, err := os.MkdirTemp("", "shoal-demo-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(dir)
	cfg := demoConfig(dir, *scale)
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	// The server logs only warnings and errors, to stderr: stdout is the demo's story.
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	fmt.Fprintf(stdout, "Starting Shoal on a temporary embedded database (%s), time compressed %g×...\n", dir, *scale)
	inst, err := node.Start(ctx, cfg, node.Env{Logger: logger, Getenv: func(string) string { return "" }, Stdout: io.Discard, Version: version})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if realGames {
		err = runRealDemo(ctx, inst, realDemo{engine: *engine, newOptions: *newOptions, baseOptions: *baseOptions,
			tc: *tc, speed: *speed, workers: *workers, limit: *limit}, stdout)
	} else {
		err = runDemo(ctx, inst, cfg, *workers, *elo, *drawRatio, *scale, *limit, *seed, *jsonOut, stdout)
	}
	return errors.Join(err, inst.Shutdown())
}

// runDemo is the demo once the server runs.
func runDemo(ctx context.Context, inst *node.Instance, cfg config.Config, workers int, elo, drawRatio, scale float64,
	limit time.Duration, seed uint64, jsonOut string, stdout io.Writer) error {
	base := "http://" + inst.Addr()
	fmt.Fprintf(stdout, "Server ready at %s/ (heartbeat %v, dead task after %v, a task %v of wall time).\n",
		base, cfg.HeartbeatPeriod, cfg.DeadTaskTimeout, time.Duration(float64(cfg.TaskDuration)/scale).Round(100*time.Millisecond))
	users, err := createDemoUsers(ctx, inst.DB(), workers)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	req := demoRunRequest(fmt.Sprintf("Shoal demo: a patch worth %+.1f Elo", elo))
	req.SPRT = &scheduler.SPRTRequest{Elo0: ref(0.0), Elo1: ref(2.0)}
	id, err := submitRun(ctx, base, users, req)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	fmt.Fprintf(stdout, "%s submitted SPRT[0, 2] at 10+0.1 as run %s; %s approved it (%s/tests/view/%s).\n",
		users.submitter.name, id, users.approver.name, base, id)
	fmt.Fprintf(stdout, "Starting %d simulated workers (true Elo %+.1f, draw ratio %.2f)...\n", workers, elo, drawRatio)

	rep, err := fleet.Run(ctx, fleet.Options{
		ServerURL: base, Username: users.workers.name, Password: users.workers.password,
		Workers: workers, Elo: elo, DrawRatio: drawRatio, TimeScale: scale,
		UntilFinished: []string{id}, Duration: limit, Seed: seed,
		Progress: stdout, Terminal: isTerminal(stdout), StopGrace: 10 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if jsonOut != "" {
		if err := writeReportFile(jsonOut, rep); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}

	e, err := getElo(context.WithoutCancel(ctx), base, id)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	verdict := printVerdict(stdout, id, e, rep.StoppedBecause, rep.ElapsedSeconds)
	fmt.Fprintf(stdout, "  Elo %+.2f [%+.2f, %+.2f] (LOS %.1f%%); the simulated truth is %+.1f\n",
		e.Elo.Elo, e.Elo.CI[0], e.Elo.CI[1], 100*e.Elo.LOS, elo)
	upd := rep.Endpoints["update_task"]
	reqTask := rep.Endpoints["request_task"]
	fmt.Fprintf(stdout, "  Fleet: %d requests, %d tasks, %d too-busy replies; update_task p99 %.1f ms, request_task p99 %.1f ms\n",
		rep.Requests, rep.TasksStarted, rep.TooBusy, upd.P99MS, reqTask.P99MS)
	check := "PASS: the run's results equal the sum of what the workers reported"
	if !rep.ExactlyOnce {
		check = "FAIL"
	}
	fmt.Fprintf(stdout, "  Exactly-once check: %s\n", check)
	if verdict != "ACCEPTED" && verdict != "REJECTED" {
		return fmt.Errorf("demo: the test was not decided (%s)", strings.ToLower(rep.StoppedBecause))
	}
	if !rep.ExactlyOnce {
		return errors.New("demo: exactly-once check failed")
	}
	return nil
}

// printVerdict writes a demo's result: the SPRT's verdict after elapsed seconds (NOT DECIDED,
// because of why, if the test was not), its LLR, and the games. It returns the verdict.
func printVerdict(stdout io.Writer, id string, e *eloReply, why string, elapsed float64) string {
	s := e.Args.SPRT
	verdict := map[string]string{"accepted": "ACCEPTED", "rejected": "REJECTED"}[s.State]
	if verdict == "" {
		verdict = "NOT DECIDED (" + why + ")"
	}
	r := e.Results
	fmt.Fprintf(stdout, "\nRun %s: %s after %.0f s\n", id, verdict, elapsed)
	fmt.Fprintf(stdout, "  LLR %.2f (%.2f, %.2f) [%g, %g]\n", s.LLR, s.LowerBound, s.UpperBound, s.Elo0, s.Elo1)
	fmt.Fprintf(stdout, "  Games %d: W %d, L %d, D %d; pentanomial %v\n", r.Wins+r.Losses+r.Draws, r.Wins, r.Losses, r.Draws, r.Pentanomial)
	return verdict
}
