package api_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/servertest"
)

// postAs posts body to path with "Authorization: Bearer <token>" when token is not "".
func postAs(s *server.Server, token, path, body string) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	s.Handler().ServeHTTP(w, req)
	return w
}

// runActionSetup is newSubmitServer with erin (neither the owner nor an approver), an api and a
// worker token of alice's, and an SPRT run of alice's.
func runActionSetup(t *testing.T) (s *server.Server, db *rundb.DB, id rundb.ObjectID, apiTok, workerTok string) {
	t.Helper()
	ctx := context.Background()
	s, db = newSubmitServer(t)
	if _, err := db.Users.Create(ctx, rundb.NewUser{Username: "erin", Password: "secret", Accepted: true}); err != nil {
		t.Fatal(err)
	}
	var err error
	if apiTok, _, err = db.Users.CreateToken(ctx, "alice", rundb.NewToken{Name: "script", Scope: rundb.ScopeAPI}); err != nil {
		t.Fatal(err)
	}
	if workerTok, _, err = db.Users.CreateToken(ctx, "alice", rundb.NewToken{Name: "box", Scope: rundb.ScopeWorker}); err != nil {
		t.Fatal(err)
	}
	id = submitRun(t, s, submitRunArgs(`"tc": "10+0.1", "sprt": {"elo0": 0, "elo1": 2}`))
	return s, db, id, apiTok, workerTok
}

func actionCount(t *testing.T, db *rundb.DB, action string) int {
	t.Helper()
	a, err := db.Actions.Find(context.Background(), rundb.ActionFilter{Action: action}, 100)
	if err != nil {
		t.Fatal(err)
	}
	return len(a)
}

func TestUserStopRunOverHTTP(t *testing.T) {
	ctx := context.Background()
	s, db, id, apiTok, workerTok := runActionSetup(t)
	run := `"run_id": "` + id.Hex() + `"`
	cases := []struct {
		name, token, body string
		status            int
		msg               string
	}{
		{"not JSON", "", `{"run_id": `, 400, "request body: not valid JSON"},
		{"unknown key", "", `{"username": "alice", "password": "secret", "run": "x", ` + run + `}`, 400, "run: unknown field"},
		{"missing id", "", `{"username": "alice", "password": "secret"}`, 400, "run_id: missing"},
		{"malformed id", "", `{"username": "alice", "password": "secret", "run_id": "1234"}`, 400, "run_id: invalid ObjectId"},
		{"wrong password", "", `{"username": "alice", "password": "wrong", ` + run + `}`, 401, "Invalid username or password."},
		{"a worker token as a Bearer", workerTok, `{` + run + `}`, 401, "Invalid username or password."},
		{"a worker token as the password", "", `{"username": "alice", "password": "` + workerTok + `", ` + run + `}`, 401, "Invalid username or password."},
		{"a Bearer and a password", apiTok, `{"username": "alice", "password": "secret", ` + run + `}`, 400, "Authorization: "},
		{"pending user", "", `{"username": "dave", "password": "secret", ` + run + `}`, 401, "Your account is pending approval."},
		{"not the owner", "", `{"username": "erin", "password": "secret", ` + run + `}`, 403, "user erin may not stop run " + id.Hex() + ": only its owner or an approver may"},
		{"unknown run", apiTok, `{"run_id": "0123456789abcdef01234567"}`, 404, "run 0123456789abcdef01234567 not found"},
	}
	for _, c := range cases {
		w := postAs(s, c.token, "/api/user_stop_run", c.body)
		msg, _ := servertest.APIError(t, w)
		if w.Code != c.status || !strings.HasPrefix(msg, "/api/user_stop_run: "+c.msg) {
			t.Errorf("%s: = %d %q, want %d %q", c.name, w.Code, msg, c.status, c.msg)
		}
	}
	if r, err := db.Runs.Get(ctx, id); err != nil || r.Finished {
		t.Fatalf("after refused stops: %v, finished %v", err, r != nil && r.Finished)
	}
	if n := actionCount(t, db, "stop_run"); n != 0 {
		t.Fatalf("%d stop_run actions after refused stops", n)
	}

	w := postAs(s, apiTok, "/api/user_stop_run", `{`+run+`}`)
	var reply struct {
		Stopped  bool     `json:"stopped"`
		Duration *float64 `json:"duration"`
	}
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &reply) != nil || !reply.Stopped || reply.Duration == nil {
		t.Fatalf("stop with alice's api token: %d %s", w.Code, w.Body)
	}
	if r, err := db.Runs.Get(ctx, id); err != nil || !r.Finished {
		t.Errorf("after the stop: %v, finished %v", err, r != nil && r.Finished)
	}
	a, _ := db.Actions.Find(ctx, rundb.ActionFilter{Action: "stop_run"}, 10)
	if len(a) != 1 || a[0].Username != "alice" || a[0].Message != "User stop" {
		t.Errorf("stop_run actions = %+v", a)
	}

	// An approver may stop anyone's run, with a password.
	other := submitRun(t, s, submitRunArgs(`"tc": "10+0.1", "num_games": 2000`))
	if w := postSubmit(s, "/api/user_stop_run", `{"username": "bob", "password": "secret", "run_id": "`+other.Hex()+`"}`); w.Code != http.StatusOK {
		t.Errorf("stop by an approver: %d %s", w.Code, w.Body)
	}
}

func TestModifyRunOverHTTP(t *testing.T) {
	ctx := context.Background()
	s, db, id, apiTok, workerTok := runActionSetup(t)
	before, err := db.Runs.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	run := `"run_id": "` + id.Hex() + `"`
	cases := []struct {
		name, token, body string
		status            int
		msg               string
	}{
		{"nothing to modify", apiTok, `{` + run + `}`, 400, "nothing to modify"},
		{"unknown key", apiTok, `{` + run + `, "num-games": 1000}`, 400, `"num-games": unknown field`},
		{"priority as a string", apiTok, `{` + run + `, "priority": "1"}`, 400, "priority: must be a whole number, not string"},
		{"fractional games", apiTok, `{` + run + `, "num_games": 1500.5}`, 400, "num_games: must be a whole number"},
		{"games off the step", apiTok, `{` + run + `, "num_games": 1500}`, 400, "num_games: 1500: must be a multiple of 1000"},
		{"too many games", apiTok, `{` + run + `, "num_games": 4000000}`, 400, "num_games: 4000000: must be <= 3200000"},
		{"negative throughput", apiTok, `{` + run + `, "throughput": -1}`, 400, "throughput: -1: must be >= 0"},
		{"priority too high", apiTok, `{` + run + `, "priority": 101}`, 400, "priority: 101: must be from -100 to 100"},
		{"missing id", apiTok, `{"priority": 1}`, 400, "run_id: missing"},
		{"a worker token", workerTok, `{` + run + `, "priority": -1}`, 401, "Invalid username or password."},
		{"wrong password", "", `{"username": "alice", "password": "wrong", ` + run + `, "priority": -1}`, 401, "Invalid username or password."},
		{"not the owner", "", `{"username": "erin", "password": "secret", ` + run + `, "priority": -1}`, 403, "user erin may not modify run"},
		{"an approver's info", "", `{"username": "bob", "password": "secret", ` + run + `, "info": "mine"}`, 403, "info: only the owner of run"},
		{"unknown run", apiTok, `{"run_id": "0123456789abcdef01234567", "priority": -1}`, 404, "run 0123456789abcdef01234567 not found"},
	}
	for _, c := range cases {
		w := postAs(s, c.token, "/api/modify_run", c.body)
		msg, _ := servertest.APIError(t, w)
		if w.Code != c.status || !strings.HasPrefix(msg, "/api/modify_run: "+c.msg) {
			t.Errorf("%s: = %d %q, want %d %q", c.name, w.Code, msg, c.status, c.msg)
		}
	}
	if r, err := db.Runs.Get(ctx, id); err != nil || !reflect.DeepEqual(r.Args, before.Args) {
		t.Fatalf("after refused modifications: %v, args %+v, want %+v", err, r.Args, before.Args)
	}
	if n := actionCount(t, db, "modify_run"); n != 0 {
		t.Fatalf("%d modify_run actions after refused modifications", n)
	}

	// The owner with an api token: the fields given change, the others stay.
	w := postAs(s, apiTok, "/api/modify_run", `{`+run+`, "num_games": 400000, "priority": -2, "info": " a better description "}`)
	var reply struct {
		Approved, Unapproved, Revived bool
		Duration                      *float64 `json:"duration"`
	}
	if w.Code != http.StatusOK || json.Unmarshal(w.Body.Bytes(), &reply) != nil || reply.Approved || reply.Unapproved || reply.Revived || reply.Duration == nil {
		t.Fatalf("modify with alice's api token: %d %s", w.Code, w.Body)
	}
	r, err := db.Runs.Get(ctx, id)
	if err != nil || r.Args.NumGames != 400000 || r.Args.Priority != -2 || r.Args.Info != "a better description" ||
		r.Args.Throughput != before.Args.Throughput || r.Args.AutoPurge != before.Args.AutoPurge {
		t.Errorf("after the modification: %v, args %+v", err, r.Args)
	}
	a, _ := db.Actions.Find(ctx, rundb.ActionFilter{Action: "modify_run"}, 10)
	if len(a) != 1 || a[0].Username != "alice" || a[0].Message != "modify: priority changed from 0 to -2, num-games changed from 800000 to 400000" {
		t.Errorf("modify_run actions = %+v", a)
	}

	// An approver may modify someone else's run, though not its description.
	if w := postSubmit(s, "/api/modify_run", `{"username": "bob", "password": "secret", `+run+`, "throughput": 50, "auto_purge": true}`); w.Code != http.StatusOK {
		t.Errorf("modify by an approver: %d %s", w.Code, w.Body)
	}
	if r, err := db.Runs.Get(ctx, id); err != nil || r.Args.Throughput != 50 || !r.Args.AutoPurge || r.Args.NumGames != 400000 {
		t.Errorf("after the approver's modification: %v, args %+v", err, r.Args)
	}
}
