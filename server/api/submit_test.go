package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/api"
	"github.com/shoal-chess/shoal/server/servertest"
	"github.com/shoal-chess/shoal/tokenpool"
)

const (
	submitShaBase = "0123456789abcdef0123456789abcdef01234567"
	submitShaNew  = "89abcdef0123456789abcdef0123456789abcdef"
)

// newSubmitServer returns a server with the submission routes over a fresh database holding
// alice (a user), bob and carol (approvers) and dave (pending), each with password "secret".
func newSubmitServer(t *testing.T) (*server.Server, *rundb.DB) {
	t.Helper()
	ctx := context.Background()
	db := rundbtest.Open(t)
	for _, u := range []rundb.NewUser{
		{Username: "alice", Password: "secret", Accepted: true},
		{Username: "bob", Password: "secret", Accepted: true, Approver: true},
		{Username: "carol", Password: "secret", Accepted: true, Approver: true},
		{Username: "dave", Password: "secret"},
	} {
		if _, err := db.Users.Create(ctx, u); err != nil {
			t.Fatal(err)
		}
	}
	logger := servertest.DiscardLogger()
	sch := scheduler.New(scheduler.Config{TaskSemaphoreSize: 5}, db, runcache.New(db.Runs, runcache.Options{Logger: logger}), logger)
	s, err := server.New(server.Deps{
		Logger: logger, Tokens: tokenpool.New(4), Version: "test",
		DB: db, Runs: sch, Scheduler: sch,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s, db
}

func postSubmit(s *server.Server, path, body string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	s.Handler().ServeHTTP(w, req)
	return w
}

// submitRunArgs is a run's arguments without a time control or stop rule, plus extra.
func submitRunArgs(extra string) string {
	base := `"base_tag": "master", "new_tag": "patch", "resolved_base": "` + submitShaBase + `",
		"resolved_new": "` + submitShaNew + `", "base_signature": "2050811", "new_signature": "2061234",
		"base_options": "Hash=16", "new_options": "Hash=16",
		"tests_repo": "https://github.com/alice/Stockfish", "info": "try a patch"`
	if extra != "" {
		base += ", " + extra
	}
	return "{" + base + "}"
}

func submitBody(user, run string) string {
	return `{"username": "` + user + `", "password": "secret", "run": ` + run + `}`
}

// submitRun submits a run as alice and returns its id.
func submitRun(t *testing.T, s *server.Server, run string) rundb.ObjectID {
	t.Helper()
	w := postSubmit(s, "/api/create_run", submitBody("alice", run))
	if w.Code != http.StatusOK {
		t.Fatalf("create_run = %d %s", w.Code, w.Body)
	}
	var reply struct {
		RunID    string   `json:"run_id"`
		Duration *float64 `json:"duration"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &reply); err != nil || reply.Duration == nil {
		t.Fatalf("create_run reply %s: %v", w.Body, err)
	}
	id, err := rundb.ParseObjectID(reply.RunID)
	if err != nil {
		t.Fatalf("create_run reply %s: %v", w.Body, err)
	}
	return id
}

var submitTestTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func storedRunCount(t *testing.T, db *rundb.DB) int {
	t.Helper()
	runs, err := db.Runs.Unfinished(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return len(runs)
}

func TestCreateRunRejectsInvalidFields(t *testing.T) {
	s, db := newSubmitServer(t)
	sprt := `"sprt": {"elo0": 0, "elo1": 2}`
	cases := []struct {
		name   string
		body   string
		status int
		prefix string // of the error after "/api/create_run: "
	}{
		{"not JSON", `{"username": "alice",`, 400, "request body: not valid JSON"},
		{"not an object", `["alice", "secret"]`, 400, "request body: must be a JSON object"},
		{"unknown top-level key", `{"username": "alice", "password": "secret", "user": "x", "run": {}}`, 400, "user: unknown field"},
		{"run missing", `{"username": "alice", "password": "secret"}`, 400, "run: missing"},
		{"run null", `{"username": "alice", "password": "secret", "run": null}`, 400, "run: missing"},
		{"run not an object", submitBody("alice", `"sprt"`), 400, "run: must be a JSON object"},
		{"unknown run key", submitBody("alice", submitRunArgs(sprt+`, "num_game": 1000`)), 400, "run.num_game: unknown field"},
		{"key in the wrong case", submitBody("alice", submitRunArgs(sprt+`, "TC": "10+0.1"`)), 400, "run.TC: unknown field"},
		{"empty key", `{"username": "alice", "password": "secret", "run": {"": 1}}`, 400, `run."": unknown field`},
		{"unknown sprt key", submitBody("alice", submitRunArgs(`"tc": "10+0.1", "sprt": {"elo0": 0, "elo1": 2, "alpha": 0.1}`)), 400, "run.sprt.alpha: unknown field"},
		{"unknown spsa key", submitBody("alice", submitRunArgs(`"tc": "10+0.1", "spsa": {"num_games": 2000, "raw_params": "A,1,0,2,1,0.1", "iter": 3}`)), 400, "run.spsa.iter: unknown field"},
		{"threads as a string", submitBody("alice", submitRunArgs(`"tc": "10+0.1", "threads": "1", `+sprt)), 400, "run.threads: must be a whole number, not string"},
		{"fractional threads", submitBody("alice", submitRunArgs(`"tc": "10+0.1", "threads": 1.5, `+sprt)), 400, "run.threads: must be a whole number"},
		{"elo0 as a string", submitBody("alice", submitRunArgs(`"tc": "10+0.1", "sprt": {"elo0": "0", "elo1": 2}`)), 400, "run.sprt.elo0: must be a number, not string"},
		{"net as a number", submitBody("alice", submitRunArgs(`"tc": "10+0.1", "base_nets": [1], `+sprt)), 400, "run.base_nets: must be a list of strings"},
		{"sprt as a list", submitBody("alice", submitRunArgs(`"tc": "10+0.1", "sprt": [0, 2]`)), 400, "run.sprt: must be a JSON object"},
		{"adjudication as a string", submitBody("alice", submitRunArgs(`"tc": "10+0.1", "adjudication": "no", `+sprt)), 400, "run.adjudication: must be true or false"},
		{"bad tc", submitBody("alice", submitRunArgs(`"tc": "10 + 0.1", `+sprt)), 400, "run.tc: "},
		{"missing tc", submitBody("alice", submitRunArgs(sprt)), 400, "run.tc: missing"},
		{"bad elo model", submitBody("alice", submitRunArgs(`"tc": "10+0.1", "sprt": {"elo0": 0, "elo1": 2, "elo_model": "logistic"}`)), 400, "run.sprt.elo_model: "},
		{"two stop rules", submitBody("alice", submitRunArgs(`"tc": "10+0.1", "num_games": 2000, `+sprt)), 400, "run.num_games: "},
		{"bad spsa params", submitBody("alice", submitRunArgs(`"tc": "10+0.1", "spsa": {"num_games": 2000, "raw_params": "A,1,0,2"}`)), 400, "run.spsa.raw_params: "},
		{"net not uploaded", submitBody("alice", submitRunArgs(`"tc": "10+0.1", "new_nets": ["nn-0123456789ab.nnue"], `+sprt)), 400, "run.new_nets: not on this server"},
		{"wrong password", `{"username": "alice", "password": "wrong", "run": ` + submitRunArgs(`"tc": "10+0.1", `+sprt) + `}`, 401, "Invalid username or password."},
		{"unknown user", submitBody("zed", submitRunArgs(`"tc": "10+0.1", `+sprt)), 401, "Invalid username or password."},
		{"no credentials", `{"run": ` + submitRunArgs(`"tc": "10+0.1", `+sprt) + `}`, 401, "Invalid username or password."},
		{"pending user", submitBody("dave", submitRunArgs(`"tc": "10+0.1", `+sprt)), 401, "Your account is pending approval."},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := postSubmit(s, "/api/create_run", c.body)
			msg, _ := servertest.APIError(t, w)
			if w.Code != c.status || !strings.HasPrefix(msg, "/api/create_run: "+c.prefix) {
				t.Errorf("= %d %q\nwant %d %q", w.Code, msg, c.status, "/api/create_run: "+c.prefix)
			}
		})
	}
	if n := storedRunCount(t, db); n != 0 {
		t.Errorf("refused submissions stored %d runs", n)
	}
}

func TestCreateRunBodyTooLarge(t *testing.T) {
	s, _ := newSubmitServer(t)
	huge := submitBody("alice", submitRunArgs(`"tc": "10+0.1", "num_games": 2000, "msg_new": "`+strings.Repeat("x", api.MaxSubmitBody)+`"`))
	w := postSubmit(s, "/api/create_run", huge)
	if msg, _ := servertest.APIError(t, w); w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(msg, "larger than") {
		t.Errorf("huge body = %d %q", w.Code, msg)
	}
}

func TestSubmissionNeedsThePrimary(t *testing.T) {
	db := rundbtest.Open(t)
	s, err := server.New(server.Deps{Logger: servertest.DiscardLogger(), Tokens: tokenpool.New(4), DB: db})
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/api/create_run", "/api/approve_run"} {
		w := postSubmit(s, path, `{}`)
		if msg, _ := servertest.APIError(t, w); w.Code != http.StatusServiceUnavailable || !strings.Contains(msg, "primary") {
			t.Errorf("%s without a scheduler = %d %q", path, w.Code, msg)
		}
	}
}

func TestCreateAndApproveOverHTTP(t *testing.T) {
	ctx := context.Background()
	s, db := newSubmitServer(t)

	// An STC SPRT run, an LTC one and an SPSA run.
	stc := submitRun(t, s, submitRunArgs(`"tc": "10+0.1", "sprt": {"elo0": 0, "elo1": 2}`))
	ltc := submitRun(t, s, submitRunArgs(`"tc": "60+0.6", "threads": 1, "sprt": {"elo0": 0.5, "elo1": 2.5, "elo_model": "normalized"}`))
	spsa := submitRun(t, s, submitRunArgs(`"tc": "10+0.1", "spsa": {"num_games": 20000, "A_ratio": 0.1, "alpha": 0.602, "gamma": 0.101, "raw_params": "Tempo,20,0,50,2,0.002"}`))

	get := func(id rundb.ObjectID) *rundb.Run {
		t.Helper()
		r, err := db.Runs.Get(ctx, id)
		if err != nil {
			t.Fatalf("run %s is not in the database: %v", id, err)
		}
		return r
	}
	r := get(stc)
	if r.Version != 24 || r.Approved || r.Approver != "" || r.Args.Username != "alice" || r.Args.NumGames != 800000 ||
		r.Args.SPRT == nil || r.Args.SPRT.BatchSize != 16 || r.Args.SPRT.EloModel != "normalized" ||
		r.Args.SPRT.Overshoot == nil || r.Args.ITP != 100 || r.Args.Throughput != 100 || r.Args.NewTC != "10+0.1" ||
		r.Args.Info != "try a patch" || len(r.Results.Pentanomial) != 5 || r.Tasks == nil || r.TCBase != 10 {
		t.Errorf("STC run = %+v\nargs %+v", r, r.Args)
	}
	if r := get(ltc); r.Args.SPRT == nil || r.Args.SPRT.BatchSize != 3 || r.Args.Info != "LTC: try a patch" || r.TCBase != 60 {
		t.Errorf("LTC run args = %+v", r.Args)
	}
	r = get(spsa)
	if s := r.Args.SPSA; s == nil || s.A != 1000 || s.NumIter != 10000 || len(s.Params) != 1 ||
		math.Abs(s.Params[0].C-5.070257260995816) > 1e-12 || math.Abs(s.Params[0].A-2.1677459497676126) > 1e-12 ||
		s.Params[0].Theta != 20 || r.Args.NumGames != 20000 || r.Args.BaseSignature != "2061234" {
		t.Errorf("SPSA run args = %+v spsa %+v", r.Args, r.Args.SPSA)
	}
	if actions, _ := db.Actions.Find(ctx, rundb.ActionFilter{Action: "new_run"}, 10); len(actions) != 3 {
		t.Errorf("new_run actions = %d, want 3", len(actions))
	}

	approve := func(user, password, id string) (int, string) {
		t.Helper()
		w := postSubmit(s, "/api/approve_run", `{"username": "`+user+`", "password": "`+password+`", "run_id": "`+id+`"}`)
		if w.Code == http.StatusOK {
			var reply struct {
				Approved bool     `json:"approved"`
				Duration *float64 `json:"duration"`
			}
			if err := json.Unmarshal(w.Body.Bytes(), &reply); err != nil || !reply.Approved || reply.Duration == nil {
				t.Errorf("approve reply %s", w.Body)
			}
			return w.Code, ""
		}
		msg, _ := servertest.APIError(t, w)
		return w.Code, msg
	}
	cases := []struct {
		name           string
		user, password string
		id             string
		status         int
		msg            string
	}{
		{"bad password", "bob", "wrong", stc.Hex(), 401, "Invalid username or password."},
		{"pending user", "dave", "secret", stc.Hex(), 401, "Your account is pending approval."},
		{"not an approver", "alice", "secret", spsa.Hex(), 403, "user alice is not an approver"},
		{"malformed id", "bob", "secret", "1234", 400, "run_id: invalid ObjectId"},
		{"missing id", "bob", "secret", "", 400, "run_id: missing"},
		{"unknown run", "bob", "secret", "0123456789abcdef01234567", 404, "run 0123456789abcdef01234567 not found"},
		{"approved", "bob", "secret", stc.Hex(), 200, ""},
		{"approved twice", "carol", "secret", stc.Hex(), 409, "run " + stc.Hex() + " already approved"},
	}
	for _, c := range cases {
		status, msg := approve(c.user, c.password, c.id)
		if status != c.status || (c.msg != "" && !strings.HasPrefix(msg, "/api/approve_run: "+c.msg)) {
			t.Errorf("%s: = %d %q, want %d %q", c.name, status, msg, c.status, c.msg)
		}
	}
	if r := get(stc); !r.Approved || r.Approver != "bob" {
		t.Errorf("after approvals the run is approved %v by %q", r.Approved, r.Approver)
	}
	for _, id := range []rundb.ObjectID{ltc, spsa} {
		if r := get(id); r.Approved {
			t.Errorf("run %s approved by a refused request", id)
		}
	}
	actions, _ := db.Actions.Find(ctx, rundb.ActionFilter{Action: "approve_run"}, 10)
	if len(actions) != 1 || actions[0].Username != "bob" || actions[0].RunID != stc.Hex() || actions[0].Message != "approved" {
		t.Errorf("approve_run actions = %+v", actions)
	}

	w := postSubmit(s, "/api/approve_run", `{"username": "bob", "password": "secret", "run_id": "`+ltc.Hex()+`", "force": true}`)
	if msg, _ := servertest.APIError(t, w); w.Code != 400 || !strings.HasPrefix(msg, "/api/approve_run: force: unknown field") {
		t.Errorf("unknown key = %d %q", w.Code, msg)
	}
}

// An approver may not approve their own run, however often they try.
func TestApproverCannotApproveOwnRun(t *testing.T) {
	s, db := newSubmitServer(t)
	w := postSubmit(s, "/api/create_run", submitBody("bob", submitRunArgs(`"tc": "10+0.1", "num_games": 2000`)))
	if w.Code != http.StatusOK {
		t.Fatalf("create_run = %d %s", w.Code, w.Body)
	}
	var reply struct {
		RunID string `json:"run_id"`
	}
	_ = json.Unmarshal(w.Body.Bytes(), &reply)
	w = postSubmit(s, "/api/approve_run", `{"username": "bob", "password": "secret", "run_id": "`+reply.RunID+`"}`)
	if msg, _ := servertest.APIError(t, w); w.Code != http.StatusForbidden || msg != "/api/approve_run: run "+reply.RunID+": self approval is disabled" {
		t.Errorf("self approval = %d %q", w.Code, msg)
	}
	id, _ := rundb.ParseObjectID(reply.RunID)
	if r, err := db.Runs.Get(context.Background(), id); err != nil || r.Approved {
		t.Errorf("run after self approval: %v approved %v", err, r != nil && r.Approved)
	}
	w = postSubmit(s, "/api/approve_run", `{"username": "carol", "password": "secret", "run_id": "`+reply.RunID+`"}`)
	if w.Code != http.StatusOK {
		t.Errorf("another approver = %d %s", w.Code, w.Body)
	}
}

// FuzzDecodeCreateRun feeds arbitrary bodies to the submission decoder: it never panics, and it
// either fills the body or names what is wrong.
func FuzzDecodeCreateRun(f *testing.F) {
	f.Add([]byte(submitBody("alice", submitRunArgs(`"tc": "10+0.1", "sprt": {"elo0": 0, "elo1": 2}`))))
	f.Add([]byte(submitBody("alice", submitRunArgs(`"tc": "10+0.1", "spsa": {"num_games": 2000, "raw_params": "A,1,0,2,1,0.1"}`))))
	f.Add([]byte(`{"run": {"sprt": null, "spsa": [1], "base_nets": {"a": 1}}}`))
	f.Add([]byte(`{"run": {"threads": 1e400, "priority": -0}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"":{}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var body api.CreateRunBody
		err := api.DecodeStrict(data, &body)
		if err != nil {
			var fe *scheduler.FieldError
			if !errors.As(err, &fe) || fe.Field == "" {
				t.Fatalf("api.DecodeStrict(%q) = %v, want a FieldError", data, err)
			}
			return
		}
		if body.Run != nil {
			_, _ = scheduler.BuildRun(*body.Run, "alice", submitTestTime)
		}
	})
}
