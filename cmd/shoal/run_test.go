package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/tokenpool"
)

const (
	cliShaBase = "0123456789abcdef0123456789abcdef01234567"
	cliShaNew  = "89abcdef0123456789abcdef0123456789abcdef"
)

// fakeAPI stands in for the server: it decodes create_run and approve_run bodies strictly,
// validates a run with the real scheduler.BuildRun and answers in the API's shapes.
type fakeAPI struct {
	mu       sync.Mutex
	requests map[string][]byte // path -> last body
	// approve answers approve_run; nil approves.
	approve func(runID string) (int, string)
}

func newFakeAPI(t *testing.T) (*fakeAPI, *httptest.Server) {
	f := &fakeAPI{requests: map[string][]byte{}}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	return f, srv
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	f.mu.Lock()
	f.requests[r.URL.Path] = body
	approve := f.approve
	f.mu.Unlock()
	reply := func(status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	fail := func(status int, msg string) {
		reply(status, map[string]any{"error": r.URL.Path + ": " + msg, "duration": 0.001})
	}
	if r.Method != http.MethodPost || r.Header.Get("Content-Type") != "application/json" {
		fail(http.StatusBadRequest, "want a JSON POST")
		return
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	switch r.URL.Path {
	case "/api/create_run":
		var req struct {
			Username string              `json:"username"`
			Password string              `json:"password"`
			Run      protocol.RunRequest `json:"run"`
		}
		if err := dec.Decode(&req); err != nil {
			fail(http.StatusBadRequest, err.Error())
			return
		}
		run, err := scheduler.BuildRun(req.Run, req.Username, time.Now())
		if err != nil {
			fail(http.StatusBadRequest, "run."+err.Error())
			return
		}
		reply(http.StatusOK, map[string]any{"run_id": run.ID.Hex(), "duration": 0.001})
	case "/api/approve_run":
		var req struct {
			Username string `json:"username"`
			Password string `json:"password"`
			RunID    string `json:"run_id"`
		}
		if err := dec.Decode(&req); err != nil {
			fail(http.StatusBadRequest, err.Error())
			return
		}
		if approve != nil {
			if status, msg := approve(req.RunID); status != http.StatusOK {
				fail(status, msg)
				return
			}
		}
		reply(http.StatusOK, map[string]any{"approved": true, "duration": 0.001})
	default:
		fail(http.StatusNotFound, "no such page")
	}
}

// created decodes the last create_run body.
func (f *fakeAPI) created(t *testing.T) (user, password string, run protocol.RunRequest) {
	t.Helper()
	f.mu.Lock()
	body := f.requests["/api/create_run"]
	f.mu.Unlock()
	var req struct {
		Username string              `json:"username"`
		Password string              `json:"password"`
		Run      protocol.RunRequest `json:"run"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		t.Fatalf("create_run body %s: %v", body, err)
	}
	return req.Username, req.Password, req.Run
}

// runCLI runs `shoal run ARGS` with env and returns stdout, stderr and the error.
func runCLI(t *testing.T, env map[string]string, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := runCmd(context.Background(), args, envOf(env), &stdout, &stderr)
	return stdout.String(), stderr.String(), err
}

// commonFlags are the flags of a valid run without a stop rule.
func commonFlags(server string) []string {
	return []string{"--server", server,
		"--base-tag", "master", "--new-tag", "patch",
		"--resolved-base", cliShaBase, "--resolved-new", cliShaNew,
		"--base-signature", "2050811", "--new-signature", "2061234",
		"--tests-repo", "https://github.com/alice/Stockfish", "--info", "try a patch"}
}

func writeTemp(t *testing.T, name, contents string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(contents), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

var credentials = map[string]string{"SHOAL_USERNAME": "alice", "SHOAL_PASSWORD": "secret"}

func TestRunNewFromFlags(t *testing.T) {
	api, srv := newFakeAPI(t)
	args := append([]string{"new"}, commonFlags(srv.URL+"/")...)
	args = append(args, "--tc", "60+0.6", "--threads", "8", "--sprt", "0.5, 2.5", "--elo-model", "normalized",
		"--base-nets", "nn-0123456789ab.nnue", "--new-nets", "nn-0123456789ab.nnue,nn-ba9876543210.nnue",
		"--priority", "-1", "--throughput", "50", "--auto-purge", "--adjudication=false", "--arch-filter", "avx2")
	stdout, stderr, err := runCLI(t, credentials, args...)
	if err != nil {
		t.Fatalf("run new: %v\n%s", err, stderr)
	}
	user, password, run := api.created(t)
	if len(stdout) != 25 || !strings.HasSuffix(stdout, "\n") {
		t.Errorf("stdout = %q, want the run id on a line", stdout)
	}
	if !strings.Contains(stderr, srv.URL+"/tests/view/"+strings.TrimSpace(stdout)) {
		t.Errorf("stderr = %q, want the run's page", stderr)
	}
	if user != "alice" || password != "secret" {
		t.Errorf("credentials %q %q, want them from the environment", user, password)
	}
	if run.TC != "60+0.6" || run.Threads == nil || *run.Threads != 8 || run.SPRT == nil ||
		*run.SPRT.Elo0 != 0.5 || *run.SPRT.Elo1 != 2.5 || run.SPRT.EloModel != "normalized" || run.NumGames != 0 ||
		run.BaseOptions != "Hash=16" || run.NewOptions != "Hash=16" || strings.Join(run.BaseNets, " ") != "nn-0123456789ab.nnue" ||
		strings.Join(run.NewNets, " ") != "nn-0123456789ab.nnue nn-ba9876543210.nnue" || run.Priority != -1 ||
		run.Throughput == nil || *run.Throughput != 50 || !run.AutoPurge || run.Adjudication == nil || *run.Adjudication ||
		run.ArchFilter != "avx2" || run.Info != "try a patch" || run.ResolvedNew != cliShaNew || run.SPSA != nil {
		t.Errorf("run sent = %+v", run)
	}

	// Flags not given are left to the server's defaults.
	args = append([]string{"new"}, commonFlags(srv.URL)...)
	if _, _, err := runCLI(t, credentials, append(args, "--tc", "10+0.1", "--num-games", "20000")...); err != nil {
		t.Fatal(err)
	}
	if _, _, run := api.created(t); run.NumGames != 20000 || run.Threads != nil || run.Throughput != nil ||
		run.Adjudication != nil || run.SPRT != nil || run.Book != "" {
		t.Errorf("fixed-games run sent = %+v", run)
	}
}

func TestRunNewFromFileAndFlags(t *testing.T) {
	api, srv := newFakeAPI(t)
	file := writeTemp(t, "run.json", `{
		"base_tag": "master", "new_tag": "tune", "resolved_base": "`+cliShaBase+`", "resolved_new": "`+cliShaNew+`",
		"base_signature": "2050811", "new_signature": "2061234", "tc": "10+0.1",
		"base_options": "Hash=64", "new_options": "Hash=64",
		"tests_repo": "https://github.com/alice/Stockfish", "info": "from the file",
		"spsa": {"num_games": 2000, "A_ratio": 0.2, "raw_params": "A,1,0,2,1,0.1"}
	}`)
	params := writeTemp(t, "params.txt", "Tempo,20,0,50,2,0.002\n")
	_, stderr, err := runCLI(t, credentials, "new", "--server", srv.URL, "--password", "other",
		"--file", file, "--info", "from a flag", "--num-games", "40000", "--spsa-params", params, "--spsa-gamma", "0.2")
	if err != nil {
		t.Fatalf("run new: %v\n%s", err, stderr)
	}
	_, password, run := api.created(t)
	if password != "other" {
		t.Errorf("password %q: --password must win over the environment", password)
	}
	if run.Info != "from a flag" || run.NewTag != "tune" || run.BaseOptions != "Hash=64" || run.NumGames != 0 ||
		run.SPSA == nil || run.SPSA.NumGames != 40000 || run.SPSA.RawParams != "Tempo,20,0,50,2,0.002\n" ||
		run.SPSA.ARatio == nil || *run.SPSA.ARatio != 0.2 || run.SPSA.Gamma == nil || *run.SPSA.Gamma != 0.2 ||
		run.SPSA.Alpha != nil {
		t.Errorf("run sent = %+v spsa %+v", run, run.SPSA)
	}
}

func TestRunNewErrors(t *testing.T) {
	_, srv := newFakeAPI(t)
	badGateway := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "upstream down", http.StatusBadGateway)
	}))
	t.Cleanup(badGateway.Close)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	unknownKey := writeTemp(t, "run.json", `{"tc": "10+0.1", "num_game": 2000}`)
	valid := append(commonFlags(srv.URL), "--tc", "10+0.1", "--num-games", "2000")
	with := func(server string) []string {
		return append([]string{"new"}, append(commonFlags(server), "--tc", "10+0.1", "--num-games", "2000")...)
	}
	cases := []struct {
		name string
		env  map[string]string
		args []string
		want string
	}{
		{"no username", map[string]string{"SHOAL_PASSWORD": "x"}, append([]string{"new"}, valid...), "--username (or SHOAL_USERNAME) is required"},
		{"no password", map[string]string{"SHOAL_USERNAME": "x"}, append([]string{"new"}, valid...), "--password (or SHOAL_PASSWORD) is required"},
		{"bad server URL", credentials, append([]string{"new"}, append(valid, "--server", "127.0.0.1:8000")...), `invalid --server "127.0.0.1:8000"`},
		{"bad sprt", credentials, append([]string{"new"}, append(valid, "--sprt", "2")...), `invalid --sprt "2"`},
		{"sprt not numbers", credentials, append([]string{"new"}, append(valid, "--sprt", "a,b")...), `invalid --sprt "a,b"`},
		{"elo model without sprt", credentials, append([]string{"new"}, append(valid, "--elo-model", "normalized")...), "--elo-model needs --sprt"},
		{"unknown key in the file", credentials, append([]string{"new"}, append(valid, "--file", unknownKey)...), `unknown field "num_game"`},
		{"missing file", credentials, append([]string{"new"}, append(valid, "--file", "/no/such/run.json")...), "no such file"},
		{"missing spsa params file", credentials, append([]string{"new"}, append(valid, "--spsa-params", "/no/such/params")...), "--spsa-params"},
		{"positional argument", credentials, append([]string{"new", "extra"}, valid...), `unexpected arguments ["extra"]`},
		{"unknown flag", credentials, append([]string{"new", "--tcc", "10+0.1"}, valid...), "flag provided but not defined: -tcc"},
		{"server refuses a field", credentials, append([]string{"new"}, append(valid, "--tc", "fast")...), "server refused (400 Bad Request): /api/create_run: run.tc: "},
		{"server refuses two stop rules", credentials, append([]string{"new"}, append(valid, "--sprt", "0,2")...), "run.num_games: "},
		{"server not speaking the API", credentials, with(badGateway.URL), "server answered 502 Bad Gateway: upstream down"},
		{"server unreachable", credentials, with(closed.URL), "cannot reach " + closed.URL},
		{"no subcommand", credentials, nil, "usage:"},
		{"unknown subcommand", credentials, []string{"delete"}, `unknown command "delete"`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			stdout, _, err := runCLI(t, c.env, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v, want it to contain %q", err, c.want)
			}
			if stdout != "" {
				t.Errorf("stdout = %q on failure", stdout)
			}
		})
	}
}

func TestRunHelp(t *testing.T) {
	for _, args := range [][]string{{"new", "--help"}, {"approve", "-h"}} {
		_, stderr, err := runCLI(t, nil, args...)
		if !errors.Is(err, flag.ErrHelp) || !strings.Contains(stderr, "-server") {
			t.Errorf("%v: err %v, stderr %q", args, err, stderr)
		}
	}
	stdout, _, err := runCLI(t, nil, "help")
	if err != nil || !strings.Contains(stdout, "shoal run approve") {
		t.Errorf("run help = %v %q", err, stdout)
	}
}

func TestRunNewTimesOut(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	args := append([]string{"new", "--timeout", "200ms"}, append(commonFlags(srv.URL), "--tc", "10+0.1", "--num-games", "2000")...)
	start := time.Now()
	_, _, err := runCLI(t, credentials, args...)
	if err == nil || !strings.Contains(err.Error(), "Timeout") || time.Since(start) > 10*time.Second {
		t.Errorf("err = %v after %v, want a timeout after 200ms", err, time.Since(start))
	}
}

func TestRunApprove(t *testing.T) {
	api, srv := newFakeAPI(t)
	id := "0123456789abcdef01234567"
	// Flags may follow the run id.
	stdout, stderr, err := runCLI(t, map[string]string{"SHOAL_USERNAME": "bob", "SHOAL_PASSWORD": "secret", "SHOAL_SERVER": srv.URL},
		"approve", id)
	if err != nil || stdout != "Approved run "+id+".\n" {
		t.Fatalf("approve = %v, stdout %q stderr %q", err, stdout, stderr)
	}
	api.mu.Lock()
	body := string(api.requests["/api/approve_run"])
	api.mu.Unlock()
	if body != `{"password":"secret","run_id":"`+id+`","username":"bob"}` {
		t.Errorf("approve_run body = %s", body)
	}

	api.mu.Lock()
	api.approve = func(runID string) (int, string) { return http.StatusConflict, "run " + runID + " already approved" }
	api.mu.Unlock()
	_, _, err = runCLI(t, credentials, "approve", id, "--server", srv.URL)
	if err == nil || !strings.Contains(err.Error(), "(409 Conflict): /api/approve_run: run "+id+" already approved") {
		t.Errorf("refused approval = %v", err)
	}
	for _, args := range [][]string{{"approve", "--server", srv.URL}, {"approve", "--server", srv.URL, id, id}} {
		if _, _, err := runCLI(t, credentials, args...); err == nil || !strings.Contains(err.Error(), "exactly one RUN_ID") {
			t.Errorf("%v = %v", args, err)
		}
	}
}

// runServer is a real server over a fresh embedded database holding alice (a user) and bob (an
// approver), each with password "secret".
func runServer(t *testing.T) (*rundb.DB, *httptest.Server) {
	t.Helper()
	ctx := context.Background()
	db, err := rundb.Open(ctx, rundb.Options{DataDir: t.TempDir(), PasswordHashCost: 4,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	for _, u := range []rundb.NewUser{
		{Username: "alice", Password: "secret", Accepted: true},
		{Username: "bob", Password: "secret", Accepted: true, Approver: true},
	} {
		if _, err := db.Users.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	sch := scheduler.New(scheduler.Config{TaskSemaphoreSize: 5}, db, runcache.New(db.Runs, runcache.Options{Logger: logger}), logger)
	s, err := server.New(server.Deps{Logger: logger, Tokens: tokenpool.New(4), DB: db, Runs: sch, Scheduler: sch})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return db, srv
}

// TestRunAgainstTheServer submits and approves a run through the real server and database.
func TestRunAgainstTheServer(t *testing.T) {
	ctx := context.Background()
	db, srv := runServer(t)
	args := append([]string{"new"}, append(commonFlags(srv.URL), "--tc", "10+0.1", "--sprt", "0,2")...)
	stdout, stderr, err := runCLI(t, credentials, args...)
	if err != nil {
		t.Fatalf("run new: %v\n%s", err, stderr)
	}
	id, err := rundb.ParseObjectID(strings.TrimSpace(stdout))
	if err != nil {
		t.Fatalf("stdout %q: %v", stdout, err)
	}
	r, err := db.Runs.Get(ctx, id)
	if err != nil || r.Args.SPRT == nil || r.Args.SPRT.BatchSize != 16 || r.Approved || r.Args.Username != "alice" {
		t.Fatalf("stored run: %v %+v", err, r)
	}

	if _, _, err := runCLI(t, credentials, "approve", "--server", srv.URL, id.Hex()); err == nil ||
		!strings.Contains(err.Error(), "user alice is not an approver") {
		t.Errorf("approval by alice = %v", err)
	}
	bob := map[string]string{"SHOAL_USERNAME": "bob", "SHOAL_PASSWORD": "secret", "SHOAL_SERVER": srv.URL}
	if _, _, err := runCLI(t, bob, "approve", id.Hex()); err != nil {
		t.Fatalf("approval by bob: %v", err)
	}
	if r, err := db.Runs.Get(ctx, id); err != nil || !r.Approved || r.Approver != "bob" {
		t.Errorf("after approval: %v %+v", err, r)
	}
	if _, _, err := runCLI(t, bob, "approve", id.Hex()); err == nil || !strings.Contains(err.Error(), "already approved") {
		t.Errorf("second approval = %v", err)
	}
}

// A script submits and approves with api tokens (--token, SHOAL_TOKEN) as with passwords; a
// worker token is refused.
func TestRunTokenAgainstTheServer(t *testing.T) {
	ctx := context.Background()
	db, srv := runServer(t)
	token := func(user, name string, scope rundb.TokenScope) string {
		tok, _, err := db.Users.CreateToken(ctx, user, rundb.NewToken{Name: name, Scope: scope})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	aliceAPI, aliceWorker, bobAPI := token("alice", "script", rundb.ScopeAPI), token("alice", "box", rundb.ScopeWorker), token("bob", "script", rundb.ScopeAPI)
	args := append([]string{"new"}, append(commonFlags(srv.URL), "--tc", "10+0.1", "--num-games", "1000")...)
	if _, _, err := runCLI(t, nil, append(args, "--token", aliceWorker)...); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("run new with a worker token = %v, want a 401", err)
	}
	if _, _, err := runCLI(t, credentials, append(args, "--token", aliceAPI)...); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("run new with a token and a password = %v", err)
	}
	stdout, stderr, err := runCLI(t, nil, append(args, "--token", aliceAPI)...)
	if err != nil {
		t.Fatalf("run new --token: %v\n%s", err, stderr)
	}
	id, err := rundb.ParseObjectID(strings.TrimSpace(stdout))
	if err != nil {
		t.Fatalf("stdout %q: %v", stdout, err)
	}
	if r, err := db.Runs.Get(ctx, id); err != nil || r.Args.Username != "alice" {
		t.Fatalf("stored run: %v %+v", err, r)
	}
	if _, _, err := runCLI(t, map[string]string{"SHOAL_TOKEN": bobAPI, "SHOAL_SERVER": srv.URL}, "approve", id.Hex()); err != nil {
		t.Fatalf("approval with bob's token from SHOAL_TOKEN: %v", err)
	}
	if r, err := db.Runs.Get(ctx, id); err != nil || !r.Approved || r.Approver != "bob" {
		t.Errorf("after approval: %v %+v", err, r)
	}
}

// A script stops and modifies its own run with an api token, as the run page's forms do; a
// worker token is refused and changes nothing.
func TestRunStopAndModifyAgainstTheServer(t *testing.T) {
	ctx := context.Background()
	db, srv := runServer(t)
	aliceAPI, _, err := db.Users.CreateToken(ctx, "alice", rundb.NewToken{Name: "script", Scope: rundb.ScopeAPI})
	if err != nil {
		t.Fatal(err)
	}
	aliceWorker, _, err := db.Users.CreateToken(ctx, "alice", rundb.NewToken{Name: "box", Scope: rundb.ScopeWorker})
	if err != nil {
		t.Fatal(err)
	}
	args := append([]string{"new"}, append(commonFlags(srv.URL), "--tc", "10+0.1", "--sprt", "0,2")...)
	stdout, stderr, err := runCLI(t, credentials, args...)
	if err != nil {
		t.Fatalf("run new: %v\n%s", err, stderr)
	}
	id := strings.TrimSpace(stdout)
	tokenEnv := map[string]string{"SHOAL_TOKEN": aliceAPI, "SHOAL_SERVER": srv.URL}

	if _, _, err := runCLI(t, tokenEnv, "modify", id); err == nil || !strings.Contains(err.Error(), "give one or more") {
		t.Errorf("modify without a change = %v", err)
	}
	if _, _, err := runCLI(t, tokenEnv, "modify", id, "--num-games", "1500"); err == nil || !strings.Contains(err.Error(), "num_games: 1500: must be a multiple of 1000") {
		t.Errorf("modify with a bad budget = %v", err)
	}
	if _, _, err := runCLI(t, map[string]string{"SHOAL_TOKEN": aliceWorker, "SHOAL_SERVER": srv.URL}, "modify", id, "--priority", "-1"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("modify with a worker token = %v, want a 401", err)
	}
	stdout, _, err = runCLI(t, tokenEnv, "modify", "--priority", "-1", id, "--num-games", "100000", "--auto-purge")
	if err != nil || !strings.Contains(stdout, "waits for approval") {
		t.Fatalf("modify = %q, %v", stdout, err)
	}
	rid, _ := rundb.ParseObjectID(id)
	if r, err := db.Runs.Get(ctx, rid); err != nil || r.Args.Priority != -1 || r.Args.NumGames != 100000 || !r.Args.AutoPurge || r.Args.Throughput != 100 {
		t.Errorf("after modify: %v %+v", err, r.Args)
	}
	if _, _, err := runCLI(t, map[string]string{"SHOAL_TOKEN": aliceWorker, "SHOAL_SERVER": srv.URL}, "stop", id); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("stop with a worker token = %v, want a 401", err)
	}
	if stdout, _, err := runCLI(t, tokenEnv, "stop", id); err != nil || !strings.Contains(stdout, "Stopped run "+id) {
		t.Fatalf("stop = %q, %v", stdout, err)
	}
	if r, err := db.Runs.Get(ctx, rid); err != nil || !r.Finished {
		t.Errorf("after stop: %v finished %v", err, r != nil && r.Finished)
	}
}
