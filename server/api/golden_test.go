package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/servertest"
	"github.com/shoal-chess/shoal/tokenpool"
)

// The golden replies of the worker API: every endpoint's reply, read as fishtest's worker reads
// it (a Python dict: keys match exactly, case included), has exactly the keys and JSON types of
// fishtest's own replies, and decodes into the reply type the worker uses with no key left over.
//
// A shape is "number", "string", "boolean" or "object" (any JSON object), a map of the exact
// keys to their shapes, or a one-element slice: an array, not empty, whose every element has
// that shape.

var (
	stats5 = map[string]any{"wins": "number", "losses": "number", "draws": "number", "crashes": "number",
		"time_losses": "number", "pentanomial": []any{"number"}}
	// Reference 3.x / 9.3: request_task with a task.
	goldenTask = map[string]any{
		"run": map[string]any{"_id": "string", "args": "object",
			"my_task": map[string]any{"num_games": "number", "start": "number", "stats": stats5}},
		"task_id": "number", "duration": "number",
	}
	goldenNoTask = map[string]any{"task_waiting": "boolean", "duration": "number"}
	// goldenPaced is a request_task turned away: fishtest's keys and Shoal's retry_after, which
	// fishtest's worker ignores (docs/PROTOCOL.md).
	goldenPaced     = map[string]any{"task_waiting": "boolean", "info": "string", "retry_after": "number", "duration": "number"}
	goldenAlive     = map[string]any{"task_alive": "boolean", "duration": "number"}
	goldenNotActive = map[string]any{"task_alive": "boolean", "info": "string", "duration": "number"}
	goldenDone      = map[string]any{"duration": "number"}
	goldenError     = map[string]any{"error": "string", "duration": "number"}
	// Reference: POST /api/request_spsa.
	goldenSPSA = map[string]any{
		"w_params":   []any{map[string]any{"name": "string", "value": "number", "c": "number", "R": "number", "flip": "number"}},
		"b_params":   []any{map[string]any{"name": "string", "value": "number"}},
		"sig":        "number",
		"task_alive": "boolean",
		"duration":   "number",
	}
	// The args keys fishtest's worker reads (reference 9.3), with their types.
	goldenArgs = map[string]string{"tc": "string", "threads": "number", "book": "string", "book_depth": "string",
		"new_options": "string", "base_options": "string", "resolved_new": "string", "resolved_base": "string",
		"base_signature": "string", "new_signature": "string", "new_tag": "string", "base_tag": "string",
		"tests_repo": "string", "num_games": "number"}
)

// jsonType names the JSON type of a value decoded by encoding/json into any.
func jsonType(v any) string {
	switch v.(type) {
	case float64:
		return "number"
	case string:
		return "string"
	case bool:
		return "boolean"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// shapeDiff lists where got differs from the shape want, each with its path.
func shapeDiff(path string, want, got any) []string {
	switch w := want.(type) {
	case string:
		if g := jsonType(got); g != w {
			return []string{fmt.Sprintf("%s: %s, want %s", path, g, w)}
		}
		return nil
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return []string{fmt.Sprintf("%s: %s, want an object", path, jsonType(got))}
		}
		var diffs []string
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range w {
				if !yield(k) {
					return
				}
			}
		}) {
			v, present := g[k]
			if !present {
				diffs = append(diffs, fmt.Sprintf("%s: no key %q", path, k))
				continue
			}
			diffs = append(diffs, shapeDiff(path+"."+k, w[k], v)...)
		}
		var extra []string
		for k := range g {
			if _, known := w[k]; !known {
				extra = append(extra, k)
			}
		}
		sort.Strings(extra)
		for _, k := range extra {
			diffs = append(diffs, fmt.Sprintf("%s: key %q is not in the reference", path, k))
		}
		return diffs
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) == 0 {
			return []string{fmt.Sprintf("%s: %s (%v), want an array that is not empty", path, jsonType(got), got)}
		}
		var diffs []string
		for i, e := range g {
			diffs = append(diffs, shapeDiff(fmt.Sprintf("%s[%d]", path, i), w[0], e)...)
		}
		return diffs
	}
	panic(fmt.Sprintf("bad shape %T", want))
}

// goldenPost posts a worker call and returns the reply's status, headers and bytes.
func goldenPost(t *testing.T, url, path string, body any) (int, http.Header, []byte) {
	t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Post(url+path, "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, raw
}

// checkGolden asserts a reply's status, its shape, and that it decodes into typ with every key
// known (protocol.DecodeReplyStrict); it returns the reply as a map.
func checkGolden(t *testing.T, name string, status int, raw []byte, wantStatus int, want map[string]any, typ any) map[string]any {
	t.Helper()
	if status != wantStatus {
		t.Errorf("%s: HTTP %d, want %d: %s", name, status, wantStatus, raw)
	}
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil || got == nil {
		t.Errorf("%s: reply is not a JSON object: %s", name, raw)
		return nil
	}
	for _, d := range shapeDiff(name, want, got) {
		t.Errorf("%s\n\treply: %.400s", d, raw)
	}
	if typ != nil {
		if err := protocol.DecodeReplyStrict(raw, typ); err != nil {
			t.Errorf("%s: the worker's %T does not read the reply exactly: %v", name, typ, err)
		}
	}
	return got
}

func TestGoldenRepliesOfEveryWorkerEndpoint(t *testing.T) {
	f := newFleet(t)
	post := func(path string, body any) (int, http.Header, []byte) { return goldenPost(t, f.url, path, body) }

	code, _, raw := post("/api/request_version", call(1, nil))
	checkGolden(t, "request_version", code, raw, http.StatusOK,
		map[string]any{"version": "number", "duration": "number"}, &protocol.VersionReply{})

	code, _, raw = post("/api/request_task", call(1, nil))
	checkGolden(t, "request_task without runs", code, raw, http.StatusOK, goldenNoTask, &protocol.TaskReply{})

	// A fixed-games run: task, update, beat, logs, PGN, failure.
	id := f.newRun(map[string]any{"num_games": 10000})
	task := map[string]any{"run_id": id, "task_id": 0}
	code, _, raw = post("/api/request_task", call(1, nil))
	got := checkGolden(t, "request_task", code, raw, http.StatusOK, goldenTask, &protocol.TaskReply{})
	if args, ok := got["run"].(map[string]any)["args"].(map[string]any); ok {
		for k, typ := range goldenArgs {
			if g := jsonType(args[k]); g != typ {
				t.Errorf("request_task: run.args.%s is %s, want %s", k, g, typ)
			}
		}
	}
	code, _, raw = post("/api/update_task", call(1, map[string]any{"run_id": id, "task_id": 0, "stats": draws(8)}))
	checkGolden(t, "update_task", code, raw, http.StatusOK, goldenAlive, &protocol.UpdateReply{})
	code, _, raw = post("/api/beat", call(1, task))
	checkGolden(t, "beat", code, raw, http.StatusOK, goldenAlive, &protocol.UpdateReply{})
	code, _, raw = post("/api/worker_log", call(1, map[string]any{"run_id": id, "task_id": 0, "message": "hello"}))
	checkGolden(t, "worker_log", code, raw, http.StatusOK, goldenDone, &protocol.DoneReply{})
	code, _, raw = post("/api/upload_pgn", call(1, map[string]any{"run_id": id, "task_id": 0, "pgn": pgnUpload(t, "[Event \"x\"]\n1. e4 e5 *\n")}))
	checkGolden(t, "upload_pgn", code, raw, http.StatusOK, goldenDone, &protocol.DoneReply{})
	code, _, raw = post("/api/failed_task", call(1, map[string]any{"run_id": id, "task_id": 0, "message": "crash"}))
	checkGolden(t, "failed_task", code, raw, http.StatusOK, goldenDone, &protocol.DoneReply{})
	code, _, raw = post("/api/failed_task", call(1, map[string]any{"run_id": id, "task_id": 0, "message": "again"}))
	checkGolden(t, "failed_task on an inactive task", code, raw, http.StatusOK, goldenNotActive, &protocol.UpdateReply{})
	code, _, raw = post("/api/update_task", call(1, map[string]any{"run_id": id, "task_id": 0, "stats": draws(16)}))
	checkGolden(t, "update_task on an inactive task", code, raw, http.StatusOK, goldenNotActive, &protocol.UpdateReply{})
	code, _, raw = post("/api/beat", call(1, task))
	checkGolden(t, "beat on an inactive task", code, raw, http.StatusOK, goldenAlive, &protocol.UpdateReply{})
	code, _, raw = post("/api/update_task", call(1, map[string]any{"run_id": id, "task_id": 0}))
	checkGolden(t, "update_task without stats", code, raw, http.StatusBadRequest, goldenError, &protocol.ErrorReply{})

	// stop_run: refused with too few CPU hours, taken with enough.
	code, _, raw = post("/api/request_task", call(2, nil))
	checkGolden(t, "request_task (second worker)", code, raw, http.StatusOK, goldenTask, &protocol.TaskReply{})
	code, _, raw = post("/api/stop_run", call(2, map[string]any{"run_id": id, "task_id": 1, "message": "bad bench"}))
	checkGolden(t, "stop_run refused", code, raw, http.StatusUnauthorized, goldenError, &protocol.ErrorReply{})
	if err := f.db.UserCache.Put(context.Background(), &rundb.UserStats{Username: "wrk", CPUHours: 1000}); err != nil {
		t.Fatal(err)
	}
	code, _, raw = post("/api/stop_run", call(2, map[string]any{"run_id": id, "task_id": 1, "message": "bad bench"}))
	checkGolden(t, "stop_run", code, raw, http.StatusOK, goldenDone, &protocol.DoneReply{})

	// An SPSA run: request_spsa with its parameters, the update with the batch, and after the
	// task has ended.
	spsa := f.newRun(map[string]any{"new_signature": "2050811",
		"spsa": map[string]any{"num_games": 10000, "raw_params": "Tempo,20,0,50,2,0.002\nMobility,100,0,200,10,0.002"}})
	code, _, raw = post("/api/request_task", call(3, nil))
	got = checkGolden(t, "request_task (SPSA)", code, raw, http.StatusOK, goldenTask, &protocol.TaskReply{})
	spsaTask, _ := got["task_id"].(float64)
	sTask := map[string]any{"run_id": spsa, "task_id": int(spsaTask)}
	code, _, raw = post("/api/request_spsa", call(3, sTask))
	got = checkGolden(t, "request_spsa", code, raw, http.StatusOK, goldenSPSA, &protocol.SPSAReply{})
	var names []string
	for _, p := range got["w_params"].([]any) {
		names = append(names, fmt.Sprint(p.(map[string]any)["name"]))
	}
	if !slices.Equal(names, []string{"Tempo", "Mobility"}) {
		t.Errorf("request_spsa: w_params names %q, want the run's parameters", names)
	}
	sig, _ := got["sig"].(float64)
	code, _, raw = post("/api/update_task", call(3, map[string]any{"run_id": spsa, "task_id": int(spsaTask), "stats": draws(4),
		"spsa": map[string]any{"wins": 0, "losses": 0, "draws": 8, "num_games": 8, "sig": int64(sig)}}))
	checkGolden(t, "update_task (SPSA)", code, raw, http.StatusOK, goldenAlive, &protocol.UpdateReply{})
	if r := f.run(spsa); r.Args.SPSA == nil || r.Args.SPSA.Iter != 4 {
		t.Errorf("after one SPSA batch of 8 games the run is at iteration %+v, want 4", r.Args.SPSA)
	}
	post("/api/failed_task", call(3, sTask))
	code, _, raw = post("/api/request_spsa", call(3, sTask))
	checkGolden(t, "request_spsa on an inactive task", code, raw, http.StatusOK, goldenNotActive, &protocol.SPSAReply{})
}

// checkRetryLater asserts the answer that makes a worker come back instead of dropping its task:
// 503, Retry-After, and a body that is not a JSON object.
func checkRetryLater(t *testing.T, name string, w *httptest.ResponseRecorder) {
	t.Helper()
	var obj map[string]any
	if w.Code != protocol.RetryLaterStatus || w.Header().Get("Retry-After") == "" ||
		json.Unmarshal(w.Body.Bytes(), &obj) == nil || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/plain") {
		t.Errorf("%s: %d, Retry-After %q, %s %q; want 503 with Retry-After and text that is not JSON",
			name, w.Code, w.Header().Get("Retry-After"), w.Header().Get("Content-Type"), w.Body)
	}
}

// A server that cannot take worker calls now, shutting down or a secondary, answers every
// worker endpoint in the way both workers retry; the other JSON endpoints keep the API's error
// shape.
func TestGoldenRetryLaterWhileShuttingDownAndOnASecondary(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 10000})
	secondary, err := server.New(server.Deps{Logger: servertest.DiscardLogger(), Tokens: tokenpool.New(4), DB: f.db, Runs: runcache.New(f.db.Runs, runcache.Options{Now: time.Now, Logger: servertest.DiscardLogger()}),
		Version: "test", DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	body := func() []byte {
		b, _ := json.Marshal(call(1, map[string]any{"run_id": id, "task_id": 0, "stats": draws(2)}))
		return b
	}
	send := func(s *server.Server, path string) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body()))
		r.Header.Set("Content-Type", "application/json")
		s.Handler().ServeHTTP(w, r)
		return w
	}
	for _, path := range allWorkerPaths {
		if path != "/api/upload_pgn" { // a secondary takes PGN uploads (nginx sends them there)
			checkRetryLater(t, "secondary "+path, send(secondary, path))
		}
	}
	f.srv.BeginShutdown()
	for _, path := range allWorkerPaths {
		checkRetryLater(t, "shutting down "+path, send(f.srv, path))
	}
	w := servertest.Do(f.srv.Handler(), http.MethodGet, "/api/active_runs")
	if msg, _ := servertest.APIError(t, w); w.Code != http.StatusServiceUnavailable || msg != "/api/active_runs: server is shutting down" {
		t.Errorf("a read endpoint while shutting down: %d %q, want the JSON error", w.Code, msg)
	}
}

// The JSON API's own replies have their keys and types, and decode exactly into the types in
// protocol that the server encodes them from.
func TestGoldenRepliesOfTheJSONAPI(t *testing.T) {
	f := newFleet(t)
	get := func(path string) (int, []byte) {
		t.Helper()
		resp, err := http.Get(f.url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, raw
	}
	run := map[string]any{
		"base_tag": "master", "new_tag": "patch", "resolved_base": strings.Repeat("a", 40), "resolved_new": strings.Repeat("b", 40),
		"tc": "10+0.1", "base_options": "Hash=16", "new_options": "Hash=16", "base_signature": "2050811",
		"new_signature": "2061234", "tests_repo": "https://github.com/alice/Stockfish", "info": "a test", "num_games": 10000,
	}
	code, _, raw := goldenPost(t, f.url, "/api/create_run", map[string]any{"username": "alice", "password": "alicepw", "run": run})
	got := checkGolden(t, "create_run", code, raw, http.StatusOK, map[string]any{"run_id": "string", "duration": "number"}, &protocol.CreateRunReply{})
	id, _ := got["run_id"].(string)
	code, _, raw = goldenPost(t, f.url, "/api/approve_run", map[string]any{"username": "bob", "password": "bobpw", "run_id": id})
	checkGolden(t, "approve_run", code, raw, http.StatusOK, map[string]any{"approved": "boolean", "duration": "number"}, &protocol.ApproveRunReply{})
	code, _, raw = goldenPost(t, f.url, "/api/approve_run", map[string]any{"username": "bob", "password": "wrong", "run_id": id})
	checkGolden(t, "approve_run, refused", code, raw, http.StatusUnauthorized, goldenError, &protocol.ErrorReply{})

	code, raw = get("/api/get_elo/" + id) // a fixed-games run: {}
	checkGolden(t, "get_elo without SPRT", code, raw, http.StatusOK, map[string]any{}, &protocol.EmptyReply{})
	code, raw = get("/api/calc_elo?W=60&D=100&L=40")
	got = checkGolden(t, "calc_elo", code, raw, http.StatusOK, map[string]any{"elo": "number", "ci": []any{"number"}, "LOS": "number"}, &protocol.EloReply{})
	if ci, _ := got["ci"].([]any); len(ci) != 2 {
		t.Errorf("calc_elo: ci is %v, want the interval's two ends", got["ci"])
	}
	code, raw = get("/api/rate_limit")
	checkGolden(t, "rate_limit", code, raw, http.StatusOK, map[string]any{"configured": "boolean", "message": "string"}, &protocol.RateLimitReply{})
	code, raw = get("/healthz")
	checkGolden(t, "healthz", code, raw, http.StatusOK, map[string]any{"status": "string", "version": "string", "role": "string"}, &protocol.HealthReply{})
	code, raw = get("/readyz")
	checkGolden(t, "readyz", code, raw, http.StatusOK,
		map[string]any{"status": "string", "role": "string", "instance": "string", "version": "string"}, &protocol.ReadyReply{})
}

// A standby passes the primary's pages and read calls on when nginx sends them (the retry 503,
// so nginx tries the primary), and serves them as a secondary does when asked on its own port.
// A secondary serves them either way.
func TestStandbyPassesThePrimarysRoutesOn(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 10000})
	newInstance := func(instance string) *server.Server {
		s, err := server.New(server.Deps{Logger: servertest.DiscardLogger(), Tokens: tokenpool.New(4), DB: f.db, Runs: runcache.New(f.db.Runs, runcache.Options{Now: time.Now, Logger: servertest.DiscardLogger()}),
			Version: "test", DataDir: t.TempDir(), Instance: instance})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	standby, secondary := newInstance("standby@127.0.0.1:8003"), newInstance("secondary@127.0.0.1:8001")
	get := func(s *server.Server, path string, proxied bool) *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		r := httptest.NewRequest(http.MethodGet, path, nil)
		r.RemoteAddr = "127.0.0.1:50000"
		if proxied {
			r.Header.Set("X-Forwarded-For", "203.0.113.7")
		}
		s.Handler().ServeHTTP(w, r)
		return w
	}
	for _, path := range []string{"/tests/view/" + id, "/tests/tasks/" + id, "/tests/stats/" + id, "/api/get_run/" + id, "/api/get_elo/" + id} {
		checkRetryLater(t, "standby, through the proxy, "+path, get(standby, path, true))
		if w := get(standby, path, false); w.Code != http.StatusOK {
			t.Errorf("standby, on its own port, %s: %d, want the page", path, w.Code)
		}
		if w := get(secondary, path, true); w.Code != http.StatusOK {
			t.Errorf("secondary, through the proxy, %s: %d, want the page", path, w.Code)
		}
	}
	// What nginx sends a standby as the secondaries' backup, it serves.
	if w := get(standby, "/tests", true); w.Code != http.StatusOK {
		t.Errorf("standby, through the proxy, /tests: %d, want the page", w.Code)
	}
}
