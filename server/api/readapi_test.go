package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/api"
	"github.com/shoal-chess/shoal/server/servertest"
	"github.com/shoal-chess/shoal/stats"
	"github.com/shoal-chess/shoal/tokenpool"
)

// newReadServer returns a server with the read API on a fresh database; change, if not nil,
// adjusts the dependencies first.
func newReadServer(t *testing.T, change func(*server.Deps)) (*server.Server, *rundb.DB) {
	t.Helper()
	db := rundbtest.Open(t)
	deps := server.Deps{
		Logger: servertest.DiscardLogger(), Tokens: tokenpool.New(4), Version: "test",
		DB: db, Runs: runcache.New(db.Runs, runcache.Options{Now: time.Now, Logger: servertest.DiscardLogger()}),
	}
	if change != nil {
		change(&deps)
	}
	s, err := server.New(deps)
	if err != nil {
		t.Fatal(err)
	}
	return s, db
}

// doWith makes a request with a body and headers.
func doWith(s *server.Server, method, path, body string, header map[string]string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	for k, v := range header {
		req.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	s.Handler().ServeHTTP(w, req)
	return w
}

// jsonObject decodes a 200 reply that is a JSON object.
func jsonObject(t *testing.T, w *httptest.ResponseRecorder) map[string]any {
	t.Helper()
	if w.Code != http.StatusOK {
		t.Fatalf("status %d, want 200: %s", w.Code, w.Body)
	}
	var m map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &m); err != nil {
		t.Fatalf("reply is not a JSON object: %v: %s", err, w.Body)
	}
	return m
}

// wantAPIError checks a reply is the API's error shape with the status and a message that
// starts with the path and contains want.
func wantAPIError(t *testing.T, w *httptest.ResponseRecorder, status int, path, want string) {
	t.Helper()
	if w.Code != status {
		t.Errorf("status %d, want %d: %s", w.Code, status, w.Body)
	}
	msg, d := servertest.APIError(t, w)
	if !strings.HasPrefix(msg, path+": ") || !strings.Contains(msg, want) {
		t.Errorf("error %q, want %q after %q", msg, want, path+": ")
	}
	if d < 0 {
		t.Errorf("duration %v is negative", d)
	}
}

func parseUTC(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func testWorkerInfo() rundb.WorkerInfo {
	return rundb.WorkerInfo{
		Uname: "Linux 6.1.0", Architecture: []string{"64bit", "ELF"}, Concurrency: 8, MaxMemory: 8192,
		MinThreads: 1, Username: "alice", Version: 325, PythonVersion: []int{3, 11, 2},
		GCCVersion: []int{12, 2, 0}, Compiler: "g++", UniqueKey: "ab12cd34-5a28-4b7d-b27b-d78d97ecf11a",
		WorkerArch: "x86-64-avx2", ARCH: "?", NPS: 1.25e6, RemoteAddr: "192.0.2.7", CountryCode: "DE",
	}
}

// testRun is an unfinished SPRT run with a task, an SPSA task and a bad task purged with an
// infinite residual; change, if not nil, adjusts it.
func testRun(change func(*rundb.Run)) *rundb.Run {
	wi := testWorkerInfo()
	inf := math.Inf(1)
	r := &rundb.Run{
		ID: rundb.NewObjectID(), Version: rundb.RunVersion,
		StartTime: parseUTC("2026-11-01T10:00:00.123Z"), LastUpdated: parseUTC("2026-11-01T11:30:00Z"),
		TCBase: 10, Approved: true, Approver: "bob", Workers: 1, Cores: 8,
		Results: rundb.Results{Wins: 100, Losses: 90, Draws: 290, Pentanomial: []int{3, 50, 120, 60, 7}},
		Args: rundb.RunArgs{
			BaseTag: "master", NewTag: "patch", NumGames: 800000, TC: "10+0.1", NewTC: "10+0.1", Threads: 1,
			Username: "alice", TestsRepo: "https://github.com/alice/Stockfish",
			SPRT: &rundb.SPRT{Alpha: 0.05, Beta: 0.05, Elo0: 0, Elo1: 2, EloModel: "normalized", BatchSize: 16,
				LowerBound: math.Log(0.05 / 0.95), UpperBound: math.Log(0.95 / 0.05)},
		},
		Tasks: []rundb.Task{
			{NumGames: 480, Active: true, LastUpdated: parseUTC("2026-11-01T11:00:00.250Z"), Stats: rundb.NewResults(), WorkerInfo: wi},
			{NumGames: 480, Active: true, LastUpdated: parseUTC("2026-11-01T11:30:00Z"), Start: 480, Stats: rundb.NewResults(),
				WorkerInfo: wi, SPSAParams: &rundb.SPSAParams{Iter: 4, PackedFlips: []byte{0x80, 0x01}}},
		},
		BadTasks: []rundb.Task{
			{NumGames: 480, LastUpdated: parseUTC("2026-11-01T11:00:00Z"), Bad: true, TaskID: new(0),
				Residual: &inf, ResidualColor: "red", Stats: rundb.NewResults(), WorkerInfo: wi},
		},
	}
	if change != nil {
		change(r)
	}
	return r
}

// withSPSA makes a run an SPSA run with a sampled history.
func withSPSA(r *rundb.Run) {
	r.Args.SPRT = nil
	r.Args.SPSA = &rundb.SPSA{A: 5000, Alpha: 0.602, Gamma: 0.101, RawParams: "Foo,100,0,200,10,0.0020",
		Iter: 4, NumIter: 50000, Params: []rundb.SPSAParam{{Name: "Foo", Start: 100, Max: 200, CEnd: 10, Theta: 101.25}},
		ParamHistory: rundb.ParamHistory{{{Theta: 100.5, R: 0.002, C: 12}}}}
}

// asFinished makes a run finished, last updated at updated, then applies change.
func asFinished(updated time.Time, change func(*rundb.Run)) func(*rundb.Run) {
	return func(r *rundb.Run) {
		r.Finished, r.Workers, r.Cores, r.LastUpdated = true, 0, 0, updated
		r.Tasks, r.BadTasks = nil, nil
		if change != nil {
			change(r)
		}
	}
}

func insertRuns(t *testing.T, db *rundb.DB, runs ...*rundb.Run) {
	t.Helper()
	for _, r := range runs {
		if err := db.Runs.Insert(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
}

// keyOrder returns the ids in the order their keys appear in a JSON object's text.
func keyOrder(body string, ids ...rundb.ObjectID) []rundb.ObjectID {
	type pos struct {
		id rundb.ObjectID
		at int
	}
	var ps []pos
	for _, id := range ids {
		if i := strings.Index(body, `"`+id.Hex()+`":`); i >= 0 {
			ps = append(ps, pos{id, i})
		}
	}
	for i := range ps {
		for j := i + 1; j < len(ps); j++ {
			if ps[j].at < ps[i].at {
				ps[i], ps[j] = ps[j], ps[i]
			}
		}
	}
	out := []rundb.ObjectID{}
	for _, p := range ps {
		out = append(out, p.id)
	}
	return out
}

func TestPythonTime(t *testing.T) {
	for _, c := range []struct {
		name string
		in   time.Time
		want string
	}{
		{"milliseconds become six digits", parseUTC("2026-11-01T10:00:00.123Z"), "2026-11-01 10:00:00.123000+00:00"},
		{"a whole second has no fraction", parseUTC("2026-11-01T11:30:00Z"), "2026-11-01 11:30:00+00:00"},
		{"another zone is shown in UTC", time.Date(2026, 11, 1, 12, 0, 0, 5000, time.FixedZone("CET", 3600)), "2026-11-01 11:00:00.000005+00:00"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := api.PythonTime(c.in); got != c.want {
				t.Errorf("api.PythonTime = %q, want %q", got, c.want)
			}
		})
	}
}

func TestActiveRuns(t *testing.T) {
	s, db := newReadServer(t, nil)
	first := testRun(withSPSA)
	second := testRun(nil)
	done := testRun(asFinished(parseUTC("2026-11-02T00:00:00Z"), nil))
	insertRuns(t, db, first, second, done)

	w := servertest.Do(s.Handler(), http.MethodGet, "/api/active_runs")
	m := jsonObject(t, w)
	if got := keyOrder(w.Body.String(), first.ID, second.ID, done.ID); !reflect.DeepEqual(got, []rundb.ObjectID{first.ID, second.ID}) {
		t.Errorf("active runs in order %v, want the two unfinished ones oldest first %v", got, []rundb.ObjectID{first.ID, second.ID})
	}
	run, _ := m[first.ID.Hex()].(map[string]any)
	if run == nil {
		t.Fatalf("no run %s in %s", first.ID, w.Body)
	}
	for key, want := range map[string]any{
		"_id": first.ID.Hex(), "start_time": "2026-11-01 10:00:00.123000+00:00",
		"last_updated": "2026-11-01 11:30:00+00:00", "finished": false, "approver": "bob",
	} {
		if run[key] != want {
			t.Errorf("%s = %#v, want %#v", key, run[key], want)
		}
	}
	for _, key := range []string{"tasks", "bad_tasks"} {
		if _, ok := run[key]; ok {
			t.Errorf("an active run in the listing has %q", key)
		}
	}
	spsa, _ := run["args"].(map[string]any)["spsa"].(map[string]any)
	if spsa == nil || spsa["params"] == nil {
		t.Errorf("args.spsa lost its parameters: %v", spsa)
	} else if _, ok := spsa["param_history"]; ok {
		t.Error("an active run in the listing has args.spsa.param_history")
	}

	if w := servertest.Do(s.Handler(), http.MethodHead, "/api/active_runs"); w.Code != http.StatusOK || !strings.HasPrefix(w.Header().Get("Content-Type"), "application/json") {
		t.Errorf("HEAD /api/active_runs = %d %q", w.Code, w.Header().Get("Content-Type"))
	}
}

func TestFinishedRuns(t *testing.T) {
	s, db := newReadServer(t, nil)
	base := parseUTC("2026-10-01T00:00:00Z")
	// 51 plain finished runs by carol, one hour apart, fill one page and a bit.
	var carol []*rundb.Run
	for i := range 51 {
		carol = append(carol, testRun(asFinished(base.Add(time.Duration(i)*time.Hour), func(r *rundb.Run) { r.Args.Username = "carol" })))
	}
	insertRuns(t, db, carol...)
	later := base.Add(100 * time.Hour)
	green := testRun(asFinished(later.Add(4*time.Hour), func(r *rundb.Run) { r.IsGreen = true }))
	yellow := testRun(asFinished(later.Add(3*time.Hour), func(r *rundb.Run) { r.IsYellow = true }))
	ltc := testRun(asFinished(later.Add(2*time.Hour), func(r *rundb.Run) { r.TCBase = 60 }))
	deleted := testRun(asFinished(later.Add(5*time.Hour), func(r *rundb.Run) { r.Deleted = true }))
	active := testRun(nil)
	insertRuns(t, db, ltc, yellow, green, deleted, active)
	newest := []rundb.ObjectID{green.ID, yellow.ID, ltc.ID}
	for i := 50; i >= 0; i-- {
		newest = append(newest, carol[i].ID)
	}
	all := append([]rundb.ObjectID{deleted.ID, active.ID}, newest...)
	ts := fmt.Sprint(later.Add(3 * time.Hour).Unix())

	for _, c := range []struct {
		name  string
		query string
		want  []rundb.ObjectID // in this order
	}{
		{"the first page holds 50 runs, newest first", "page=1", newest[:50]},
		{"the second page holds the rest", "page=2", newest[50:]},
		{"a page past the end is empty", "page=3", []rundb.ObjectID{}},
		{"leading zeros are digits", "page=001", newest[:50]},
		{"one user's runs", "page=2&username=carol", []rundb.ObjectID{carol[0].ID}},
		{"success_only with any value", "page=1&success_only=no", []rundb.ObjectID{green.ID}},
		{"an empty flag is off", "page=1&success_only=&username=alice", newest[:3]},
		{"yellow_only", "page=1&yellow_only=1", []rundb.ObjectID{yellow.ID}},
		{"ltc_only", "page=1&ltc_only=1", []rundb.ObjectID{ltc.ID}},
		{"timestamp keeps runs updated at or after it", "page=1&timestamp=" + ts, []rundb.ObjectID{green.ID, yellow.ID}},
		{"timestamp with decimals", "page=1&timestamp=" + ts + ".5", []rundb.ObjectID{green.ID}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := servertest.Do(s.Handler(), http.MethodGet, "/api/finished_runs?"+c.query)
			m := jsonObject(t, w)
			if got := keyOrder(w.Body.String(), all...); !reflect.DeepEqual(got, c.want) || len(m) != len(c.want) {
				t.Errorf("got %d runs in order %v\nwant %v", len(m), got, c.want)
			}
			for id, v := range m {
				run := v.(map[string]any)
				if _, ok := run["tasks"]; ok {
					t.Errorf("run %s in the listing has tasks", id)
				}
				if lu, _ := run["last_updated"].(string); !strings.HasSuffix(lu, "+00:00") || run["_id"] != id {
					t.Errorf("run %s has _id %v and last_updated %q", id, run["_id"], lu)
				}
			}
		})
	}

	for _, c := range []struct {
		name, query, want string
	}{
		{"page is required", "", "Please provide a Page number: page is missing."},
		{"page may not be empty", "page=", "page is missing"},
		{"page zero", "page=0", `page="0"`},
		{"a negative page", "page=-1", `page="-1"`},
		{"a fractional page", "page=1.5", `page="1.5"`},
		{"a page that is not a number", "page=abc", "Please provide a valid Page number"},
		{"a page too large", "page=99999999999999999999", `page="99999999999999999999"`},
		{"a timestamp with too few digits", "page=1&timestamp=123", `timestamp="123"`},
		{"a timestamp with letters", "page=1&timestamp=1700000000x", "Please provide a valid UNIX timestamp"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := servertest.Do(s.Handler(), http.MethodGet, "/api/finished_runs?"+c.query)
			wantAPIError(t, w, http.StatusBadRequest, "/api/finished_runs", c.want)
		})
	}
}

func TestGetRun(t *testing.T) {
	s, db := newReadServer(t, nil)
	run := testRun(func(r *rundb.Run) {
		withSPSA(r)
		r.Extra = rundb.Extra{"a_future_field": "kept"}
	})
	insertRuns(t, db, run)

	for _, method := range []string{http.MethodGet, http.MethodHead} {
		w := servertest.Do(s.Handler(), method, "/api/get_run/"+run.ID.Hex())
		if w.Code != http.StatusOK {
			t.Fatalf("%s = %d: %s", method, w.Code, w.Body)
		}
		if w.Header().Get("Access-Control-Allow-Origin") != "*" || w.Header().Get("Access-Control-Allow-Headers") != "content-type" {
			t.Errorf("%s: CORS headers %v", method, w.Header())
		}
	}
	m := jsonObject(t, servertest.Do(s.Handler(), http.MethodGet, "/api/get_run/"+run.ID.Hex()))
	for key, want := range map[string]any{
		"_id": run.ID.Hex(), "start_time": "2026-11-01 10:00:00.123000+00:00",
		"last_updated": "2026-11-01 11:30:00+00:00", "a_future_field": "kept",
	} {
		if m[key] != want {
			t.Errorf("%s = %#v, want %#v", key, m[key], want)
		}
	}
	for _, key := range []string{"tasks", "bad_tasks"} {
		if v, ok := m[key].([]any); !ok || len(v) != 0 {
			t.Errorf("%s = %#v, want []", key, m[key])
		}
	}
	spsa := m["args"].(map[string]any)["spsa"].(map[string]any)
	if h, ok := spsa["param_history"].([]any); !ok || len(h) != 0 {
		t.Errorf("args.spsa.param_history = %#v, want []", spsa["param_history"])
	}
	if res := m["results"].(map[string]any); res["wins"] != 100.0 || len(res["pentanomial"].([]any)) != 5 {
		t.Errorf("results = %v", res)
	}

	for _, c := range []struct{ name, id string }{
		{"a run that does not exist", rundb.NewObjectID().Hex()},
		{"an id that is not an ObjectId", "not-a-run"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := servertest.Do(s.Handler(), http.MethodGet, "/api/get_run/"+c.id)
			wantAPIError(t, w, http.StatusNotFound, "/api/get_run/"+c.id, "The run "+c.id+" does not exist")
		})
	}
	if w := servertest.Do(s.Handler(), http.MethodOptions, "/api/get_run/"+run.ID.Hex()); w.Code != http.StatusMethodNotAllowed {
		t.Errorf("OPTIONS /api/get_run = %d, want 405", w.Code)
	}
}

func TestGetTask(t *testing.T) {
	s, db := newReadServer(t, nil)
	run := testRun(nil)
	insertRuns(t, db, run)
	id := run.ID.Hex()

	w := servertest.Do(s.Handler(), http.MethodGet, "/api/get_task/"+id+"/0")
	task := jsonObject(t, w)
	wi := task["worker_info"].(map[string]any)
	for key, want := range map[string]any{"unique_key": "ab12cd34...", "remote_addr": "?.?.?.?", "username": "alice", "country_code": "DE"} {
		if wi[key] != want {
			t.Errorf("worker_info.%s = %#v, want %#v", key, wi[key], want)
		}
	}
	if task["last_updated"] != "2026-11-01 11:00:00.250000+00:00" || task["num_games"] != 480.0 || task["active"] != true {
		t.Errorf("task 0 = %v", task)
	}
	if strings.Contains(w.Body.String(), "192.0.2.7") || strings.Contains(w.Body.String(), "d78d97ecf11a") {
		t.Errorf("the reply reveals the worker's address or key: %s", w.Body)
	}

	task = jsonObject(t, servertest.Do(s.Handler(), http.MethodGet, "/api/get_task/"+id+"/1"))
	if sp := task["spsa_params"].(map[string]any); !reflect.DeepEqual(sp["packed_flips"], []any{128.0, 1.0}) || sp["iter"] != 4.0 {
		t.Errorf("spsa_params = %v, want packed_flips [128 1]", sp)
	}

	task = jsonObject(t, servertest.Do(s.Handler(), http.MethodGet, "/api/get_task/"+id+"/0bad"))
	if task["residual"] != "inf" || task["residual_color"] != "red" || task["task_id"] != 0.0 || task["bad"] != true {
		t.Errorf("bad task 0 = %v, want residual \"inf\"", task)
	}

	if w := servertest.Do(s.Handler(), http.MethodHead, "/api/get_task/"+id+"/0"); w.Code != http.StatusOK {
		t.Errorf("HEAD = %d", w.Code)
	}

	for _, c := range []struct{ name, run, task string }{
		{"a task past the end", id, "2"},
		{"a bad task past the end", id, "1bad"},
		{"a negative task id", id, "-1"},
		{"a task id that is not a number", id, "x"},
		{"a run that does not exist", rundb.NewObjectID().Hex(), "0"},
		{"a run id that is not an ObjectId", "nope", "0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := "/api/get_task/" + c.run + "/" + c.task
			wantAPIError(t, servertest.Do(s.Handler(), http.MethodGet, path), http.StatusNotFound, path,
				"The task "+c.run+"/"+c.task+" does not exist")
		})
	}
}

func TestGetElo(t *testing.T) {
	s, db := newReadServer(t, nil)
	sprt := testRun(nil)
	legacy := testRun(func(r *rundb.Run) { r.Args.SPRT.EloModel = "" })
	spsa := testRun(withSPSA)
	insertRuns(t, db, sprt, legacy, spsa)

	res := stats.Results{Wins: 100, Losses: 90, Draws: 290, Pentanomial: []int{3, 50, 120, 60, 7}}
	for _, c := range []struct {
		name  string
		run   *rundb.Run
		model string
	}{
		{"a normalized SPRT", sprt, "normalized"},
		{"an SPRT stored without a model is BayesElo", legacy, "BayesElo"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := jsonObject(t, servertest.Do(s.Handler(), http.MethodGet, "/api/get_elo/"+c.run.ID.Hex()))
			want, err := stats.EstimateSPRTElo(res, 0.05, 0.05, 0.05, 0, 2, c.model)
			if err != nil {
				t.Fatal(err)
			}
			wantJSON, _ := json.Marshal(want)
			var wantElo any
			_ = json.Unmarshal(wantJSON, &wantElo)
			if !reflect.DeepEqual(m["elo"], wantElo) {
				t.Errorf("elo = %v\nwant %v", m["elo"], wantElo)
			}
			if m["_id"] != c.run.ID.Hex() || m["start_time"] != "2026-11-01 10:00:00.123000+00:00" {
				t.Errorf("the run is not stripped: _id %v start_time %v", m["_id"], m["start_time"])
			}
			if tasks, ok := m["tasks"].([]any); !ok || len(tasks) != 0 {
				t.Errorf("tasks = %v, want []", m["tasks"])
			}
			if got := m["args"].(map[string]any)["sprt"].(map[string]any)["elo_model"]; got != c.model {
				t.Errorf("args.sprt.elo_model = %v, want %s", got, c.model)
			}
		})
	}

	t.Run("a run without SPRT answers {}", func(t *testing.T) {
		w := servertest.Do(s.Handler(), http.MethodGet, "/api/get_elo/"+spsa.ID.Hex())
		if w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != "{}" {
			t.Errorf("get_elo of an SPSA run = %d %s, want 200 {}", w.Code, w.Body)
		}
	})
	t.Run("a missing run is 404", func(t *testing.T) {
		id := rundb.NewObjectID().Hex()
		wantAPIError(t, servertest.Do(s.Handler(), http.MethodGet, "/api/get_elo/"+id), http.StatusNotFound, "/api/get_elo/"+id, "The run "+id+" does not exist")
	})
}

func TestActions(t *testing.T) {
	s, db := newReadServer(t, nil)
	ctx := context.Background()
	runID := rundb.NewObjectID().Hex()
	seed := []*rundb.Action{
		{Time: 100, Action: "new_run", Username: "alice", RunID: runID, Run: "patch-abcdef0", Message: "new"},
		{Time: 200, Action: "failed_task", Username: "bob", RunID: runID, TaskID: new(0), Worker: "bob-8cores-ab12cd34-5a28"},
		{Time: 300, Action: "block_user", Username: "carol", User: "bob", Message: "blocked"},
		{Time: 400, Action: "upload_nn", Username: "alice", NN: "nn-0123456789ab.nnue"},
	}
	for _, a := range seed {
		if err := db.Actions.Insert(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	times := func(t *testing.T, w *httptest.ResponseRecorder) []float64 {
		t.Helper()
		var list []map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil || list == nil {
			t.Fatalf("reply is not a JSON list: %v: %s", err, w.Body)
		}
		out := []float64{}
		for _, a := range list {
			out = append(out, a["time"].(float64))
			if id, _ := a["_id"].(string); len(id) != 24 {
				t.Errorf("_id = %#v, want 24 hex digits", a["_id"])
			}
		}
		return out
	}
	for _, c := range []struct {
		name, body string
		want       []float64
	}{
		{"an empty object lists everything, newest first", `{}`, []float64{400, 300, 200, 100}},
		{"an empty body is the empty filter", ``, []float64{400, 300, 200, 100}},
		{"by username", `{"username": "alice"}`, []float64{400, 100}},
		{"by action and run", `{"action": "failed_task", "run_id": "` + runID + `"}`, []float64{200}},
		{"by task id", `{"task_id": 0}`, []float64{200}},
		{"by user acted on", `{"user": "bob"}`, []float64{300}},
		{"by network", `{"nn": "nn-0123456789ab.nnue"}`, []float64{400}},
		{"by worker", `{"worker": "bob-8cores-ab12cd34-5a28"}`, []float64{200}},
		{"by run name", `{"run": "patch-abcdef0"}`, []float64{100}},
		{"a time window", `{"after": 150, "before": 300.5}`, []float64{300, 200}},
		{"an empty string matches everything", `{"username": ""}`, []float64{400, 300, 200, 100}},
		{"nothing matches", `{"username": "nobody"}`, []float64{}},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := doWith(s, http.MethodPost, "/api/actions", c.body, map[string]string{"Content-Type": "application/json"})
			if w.Code != http.StatusOK {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			if got := times(t, w); !reflect.DeepEqual(got, c.want) {
				t.Errorf("times %v, want %v", got, c.want)
			}
			if w.Header().Get("Access-Control-Allow-Origin") != "*" || w.Header().Get("Access-Control-Allow-Headers") != "content-type" {
				t.Errorf("CORS headers %v", w.Header())
			}
		})
	}

	for _, c := range []struct {
		name, body, want string
	}{
		{"a $where operator", `{"$where": "sleep(1000)"}`, `"$where": operators are not accepted`},
		{"an operator inside a field", `{"username": {"$ne": ""}}`, `"username": operators are not accepted`},
		{"a list value", `{"username": ["alice", "bob"]}`, `"username": operators are not accepted`},
		{"a raw time range", `{"time": {"$gt": 0}}`, `"time" is not a filter key`},
		{"an unknown key", `{"message": "x"}`, `"message" is not a filter key`},
		{"a number where a string goes", `{"username": 7}`, `"username" must be a string`},
		{"a string where a task id goes", `{"task_id": "1"}`, `"task_id" must be an integer`},
		{"a fractional task id", `{"task_id": 1.5}`, `"task_id" must be an integer`},
		{"null", `{"run_id": null}`, `"run_id" must be a string, not null`},
		{"a list body", `[]`, "the body must be a JSON object"},
		{"a body that is not JSON", `username=alice`, "the body must be a JSON object"},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := doWith(s, http.MethodPost, "/api/actions", c.body, nil)
			wantAPIError(t, w, http.StatusBadRequest, "/api/actions", c.want)
			if w.Header().Get("Access-Control-Allow-Origin") != "*" {
				t.Errorf("an error reply lacks the CORS header, so a page elsewhere cannot read it")
			}
		})
	}

	t.Run("a huge body is refused", func(t *testing.T) {
		body := `{"username": "` + strings.Repeat("a", api.MaxActionsBody) + `"}`
		wantAPIError(t, doWith(s, http.MethodPost, "/api/actions", body, nil), http.StatusRequestEntityTooLarge, "/api/actions", "bytes")
	})
	t.Run("OPTIONS is not allowed", func(t *testing.T) {
		if w := doWith(s, http.MethodOptions, "/api/actions", "", map[string]string{"Origin": "https://example.org"}); w.Code != http.StatusMethodNotAllowed {
			t.Errorf("OPTIONS /api/actions = %d, want 405", w.Code)
		}
	})
}

func TestActionsReturnsAtMost200(t *testing.T) {
	s, db := newReadServer(t, nil)
	for i := range api.MaxActions + 5 {
		if err := db.Actions.Insert(context.Background(), &rundb.Action{Time: float64(1000 + i), Action: "log_message", Username: "alice"}); err != nil {
			t.Fatal(err)
		}
	}
	w := doWith(s, http.MethodPost, "/api/actions", `{"action": "log_message"}`, nil)
	var list []rundb.Action
	if err := json.Unmarshal(w.Body.Bytes(), &list); err != nil {
		t.Fatalf("%v: %s", err, w.Body)
	}
	if len(list) != api.MaxActions || list[0].Time != float64(1000+api.MaxActions+4) || list[len(list)-1].Time != 1005 {
		t.Errorf("got %d actions from time %v to %v, want the newest 200", len(list), list[0].Time, list[len(list)-1].Time)
	}
}

func TestRateLimit(t *testing.T) {
	s, _ := newReadServer(t, nil)
	for _, method := range []string{http.MethodGet, http.MethodHead} {
		w := servertest.Do(s.Handler(), method, "/api/rate_limit")
		if w.Code != http.StatusOK {
			t.Errorf("%s = %d", method, w.Code)
		}
	}
	if m := jsonObject(t, servertest.Do(s.Handler(), http.MethodGet, "/api/rate_limit")); m["configured"] != false || m["message"] == "" {
		t.Errorf("rate_limit = %v, want configured false and a message", m)
	}
}

func TestDownloadNN(t *testing.T) {
	const net = "nn-0123456789ab.nnue"
	downloads := func(t *testing.T, db *rundb.DB) int {
		t.Helper()
		n, err := db.NNs.Get(context.Background(), net)
		if err != nil {
			t.Fatal(err)
		}
		return n.Downloads
	}
	for _, c := range []struct {
		name    string
		nnURL   string
		method  string
		header  map[string]string
		want    string
		counted int
	}{
		{"to the configured address", "https://data.example.org/", http.MethodGet, nil, "https://data.example.org/nn/" + net, 1},
		{"to this server by default", "", http.MethodGet, nil, "http://example.com/nn/" + net, 1},
		{"behind a TLS proxy", "", http.MethodGet, map[string]string{"X-Forwarded-Proto": "https"}, "https://example.com/nn/" + net, 1},
		{"HEAD does not count a download", "", http.MethodHead, nil, "http://example.com/nn/" + net, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, db := newReadServer(t, func(d *server.Deps) { d.NNURL = c.nnURL })
			if err := db.NNs.Insert(context.Background(), &rundb.NN{Name: net, User: "alice"}); err != nil {
				t.Fatal(err)
			}
			w := doWith(s, c.method, "/api/nn/"+net, "", c.header)
			if w.Code != http.StatusFound || w.Header().Get("Location") != c.want {
				t.Errorf("= %d to %q, want 302 to %q", w.Code, w.Header().Get("Location"), c.want)
			}
			if got := downloads(t, db); got != c.counted {
				t.Errorf("downloads = %d, want %d", got, c.counted)
			}
		})
	}
	t.Run("an unknown network is 404", func(t *testing.T) {
		s, _ := newReadServer(t, nil)
		path := "/api/nn/nn-ffffffffffff.nnue"
		wantAPIError(t, servertest.Do(s.Handler(), http.MethodGet, path), http.StatusNotFound, path, "The network nn-ffffffffffff.nnue does not exist")
	})
}

// Every database call of the read API waits for a token of the pool: with the only token held,
// a request whose context ends answers 500 instead of reaching the database.
func TestReadAPIWaitsForADatabaseToken(t *testing.T) {
	pool := tokenpool.New(1)
	s, db := newReadServer(t, func(d *server.Deps) { d.Tokens = pool })
	run := testRun(nil)
	insertRuns(t, db, run)
	if err := db.NNs.Insert(context.Background(), &rundb.NN{Name: "nn-0123456789ab.nnue"}); err != nil {
		t.Fatal(err)
	}
	if err := pool.Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer pool.Release()
	id := run.ID.Hex()
	for _, c := range []struct{ method, path string }{
		{http.MethodGet, "/api/active_runs"},
		{http.MethodGet, "/api/finished_runs?page=1"},
		{http.MethodPost, "/api/actions"},
		{http.MethodGet, "/api/get_run/" + id},
		{http.MethodGet, "/api/get_task/" + id + "/0"},
		{http.MethodGet, "/api/get_elo/" + id},
		{http.MethodGet, "/api/nn/nn-0123456789ab.nnue"},
		{http.MethodGet, "/api/pgn/" + id + "-0.pgn"},
		{http.MethodGet, "/api/run_pgns/" + id + ".pgn.gz"},
	} {
		t.Run(c.method+" "+c.path, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			req := httptest.NewRequest(c.method, c.path, strings.NewReader("{}")).WithContext(ctx)
			w := httptest.NewRecorder()
			s.Handler().ServeHTTP(w, req)
			wantAPIError(t, w, http.StatusInternalServerError, strings.SplitN(c.path, "?", 2)[0], "Internal Server Error")
		})
	}
}

// Whatever the body, the filter either is refused or came from a JSON object whose keys are all
// documented filter keys with plain values: no operator reaches the database.
func FuzzParseActionFilter(f *testing.F) {
	for _, seed := range []string{``, `{}`, `{"username": "alice", "task_id": 3}`, `{"$where": "1"}`,
		`{"username": {"$ne": ""}}`, `{"before": 1.5e9, "after": 0}`, `[]`, `null`, `{"task_id": 1e3}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if _, err := api.ParseActionFilter(body); err != nil || len(bytes.TrimSpace(body)) == 0 {
			return
		}
		var raw map[string]json.RawMessage
		if err := json.Unmarshal(body, &raw); err != nil {
			t.Fatalf("accepted a body that is not a JSON object: %q", body)
		}
		for k, v := range raw {
			v = bytes.TrimSpace(v)
			if _, ok := api.ActionFilterKeys[k]; !ok || (len(v) > 0 && (v[0] == '{' || v[0] == '[')) {
				t.Errorf("accepted key %q with value %s", k, v)
			}
		}
	})
}
