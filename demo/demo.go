// Package demo is `shoal-bench demo` once its server runs: an SPRT test submitted and approved
// through the API and decided by a simulated fleet (RunSimulated) or by local workers playing
// real games (RunReal). It also holds what every simulation against a server needs, which the
// bench and the end-to-end tests share: the demo's accounts (Users, CreateUsers, AddUsersCLI)
// and a plausible test submitted and approved as people would (RunRequest, SubmitRun).
//
// The package starts no server: its caller hands it the server's base URL and its database.
package demo

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/protocol/apiclient"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/worker/fleet"
)

// Account is a user's name and password.
type Account struct{ Name, Password string }

// Users are the demo's accounts, with random passwords: a submitter, an approver (runs need
// someone else's approval) and the account the simulated workers log in with.
type Users struct {
	Submitter, Approver, Workers Account
}

// CreateUsers creates the demo's users in db; machineLimit lets that many workers hold tasks
// from this one address.
func CreateUsers(ctx context.Context, db *rundb.DB, machineLimit int) (Users, error) {
	var u Users
	u.Submitter.Name, u.Approver.Name, u.Workers.Name = "alice", "bob", "fleet"
	for _, acct := range []struct {
		who      *Account
		approver bool
		limit    int
	}{{&u.Submitter, false, 0}, {&u.Approver, true, 0}, {&u.Workers, false, machineLimit}} {
		acct.who.Password = rand.Text()
		_, err := db.Users.Create(ctx, rundb.NewUser{Username: acct.who.Name, Password: acct.who.Password,
			Approver: acct.approver, Accepted: true, MachineLimit: acct.limit})
		if err != nil {
			return u, fmt.Errorf("create user %s: %w", acct.who.Name, err)
		}
	}
	return u, nil
}

// AddUsersCLI creates the demo's users (Users) with `shoal user add`, as an operator
// would before the first start: exe is the binary, dbArgs where the database is (--data or
// --mongo-uri), password each user's password. Passwords reach the child through its
// environment, out of ps.
func AddUsersCLI(ctx context.Context, exe string, dbArgs []string, machineLimit int, password func(name string) string) (Users, error) {
	var u Users
	u.Submitter.Name, u.Approver.Name, u.Workers.Name = "alice", "bob", "fleet"
	for _, acct := range []struct {
		who   *Account
		extra []string
	}{{&u.Submitter, nil}, {&u.Approver, []string{"--approver"}},
		{&u.Workers, []string{"--machine-limit", strconv.Itoa(machineLimit)}}} {
		acct.who.Password = password(acct.who.Name)
		args := append(append([]string{"user", "add", "--username", acct.who.Name}, dbArgs...), acct.extra...)
		cmd := exec.CommandContext(ctx, exe, args...)
		cmd.Env = append(os.Environ(), "SHOAL_USER_PASSWORD="+acct.who.Password)
		if out, err := cmd.CombinedOutput(); err != nil {
			return u, fmt.Errorf("shoal user add %s: %w: %s", acct.who.Name, err, bytes.TrimSpace(out))
		}
	}
	return u, nil
}

// SubmitRun creates a run through the API as submitter and approves it as approver, as
// `shoal run new` and `shoal run approve` do, and returns its id.
func SubmitRun(ctx context.Context, base string, u Users, req protocol.RunRequest) (string, error) {
	c := &apiclient.Client{Server: base, HTTP: &http.Client{Timeout: 30 * time.Second}}
	var created struct {
		RunID string `json:"run_id"`
	}
	body := map[string]any{"username": u.Submitter.Name, "password": u.Submitter.Password, "run": req}
	if err := c.Post(ctx, "/api/create_run", body, &created); err != nil {
		return "", fmt.Errorf("create run: %w", err)
	}
	if created.RunID == "" {
		return "", errors.New("create run: the reply has no run_id")
	}
	var approved struct {
		Approved bool `json:"approved"`
	}
	body = map[string]any{"username": u.Approver.Name, "password": u.Approver.Password, "run_id": created.RunID}
	if err := c.Post(ctx, "/api/approve_run", body, &approved); err != nil {
		return "", fmt.Errorf("approve run %s: %w", created.RunID, err)
	}
	if !approved.Approved {
		return "", fmt.Errorf("approve run %s: not confirmed", created.RunID)
	}
	return created.RunID, nil
}

// engineOptions are the engine options `shoal run new` sends when given none.
const engineOptions = "Hash=16"

// RunRequest is a plausible test: the arguments `shoal run new` would send.
func RunRequest(info string) protocol.RunRequest {
	return protocol.RunRequest{
		BaseTag: "master", NewTag: "demo-patch",
		ResolvedBase: "0123456789abcdef0123456789abcdef01234567",
		ResolvedNew:  "89abcdef0123456789abcdef0123456789abcdef",
		TC:           "10+0.1", BaseOptions: engineOptions, NewOptions: engineOptions,
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
	return getRunJSON[eloReply](ctx, base, "get_elo", id, apiclient.MaxReplyBytes)
}

// getRunJSON decodes the read API's endpoint (get_elo, get_run) of run id, a reply of at most
// limit bytes.
func getRunJSON[T any](ctx context.Context, base, endpoint, id string, limit int64) (*T, error) {
	data, err := apiclient.Get(ctx, http.DefaultClient, base+"/api/"+endpoint+"/"+id, limit)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", endpoint, id, err)
	}
	var v T
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%s %s: %w", endpoint, id, err)
	}
	return &v, nil
}

// Simulated is the demo with simulated games: Workers simulated workers playing a patch worth
// Elo (logistic) with DrawRatio draws, their clocks TimeScale times faster than fishtest's,
// until the test is decided or Limit passes.
type Simulated struct {
	Workers        int
	Elo, DrawRatio float64
	TimeScale      float64
	Limit          time.Duration
	Seed           uint64 // the fleet's random seed (0: random)
	// Report, if set, is given the fleet's report as soon as the fleet stops, before the
	// verdict is read (`shoal-bench demo --json` writes it to a file); its error ends the demo.
	Report func(*fleet.Report) error
	// Terminal says stdout is a terminal, where the fleet's progress redraws one line.
	Terminal bool
}

// RunSimulated is the demo once the server at base (on database db) runs: it creates the
// demo's users, submits and approves an SPRT test, and lets a simulated fleet play it until it
// is decided, telling the story on stdout. A test not decided, or a failed exactly-once check,
// is an error.
func RunSimulated(ctx context.Context, base string, db *rundb.DB, d Simulated, stdout io.Writer) error {
	users, err := CreateUsers(ctx, db, d.Workers)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	req := RunRequest(fmt.Sprintf("Shoal demo: a patch worth %+.1f Elo", d.Elo))
	req.SPRT = &protocol.SPRTRequest{Elo0: new(0.0), Elo1: new(2.0)}
	id, err := SubmitRun(ctx, base, users, req)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	fmt.Fprintf(stdout, "%s submitted SPRT[0, 2] at 10+0.1 as run %s; %s approved it (%s/tests/view/%s).\n",
		users.Submitter.Name, id, users.Approver.Name, base, id)
	fmt.Fprintf(stdout, "Starting %d simulated workers (true Elo %+.1f, draw ratio %.2f)...\n", d.Workers, d.Elo, d.DrawRatio)

	rep, err := fleet.Run(ctx, fleet.Options{
		ServerURL: base, Username: users.Workers.Name, Password: users.Workers.Password,
		Workers: d.Workers, Elo: d.Elo, DrawRatio: d.DrawRatio, TimeScale: d.TimeScale,
		UntilFinished: []string{id}, Duration: d.Limit, Seed: d.Seed,
		Progress: stdout, Terminal: d.Terminal, StopGrace: 10 * time.Second,
	})
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if d.Report != nil {
		if err := d.Report(rep); err != nil {
			return fmt.Errorf("demo: %w", err)
		}
	}

	e, err := getElo(context.WithoutCancel(ctx), base, id)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	verdict := printVerdict(stdout, id, e, rep.StoppedBecause, rep.ElapsedSeconds)
	fmt.Fprintf(stdout, "  Elo %+.2f [%+.2f, %+.2f] (LOS %.1f%%); the simulated truth is %+.1f\n",
		e.Elo.Elo, e.Elo.CI[0], e.Elo.CI[1], 100*e.Elo.LOS, d.Elo)
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
