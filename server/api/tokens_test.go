package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/guard"
)

// token makes a token for username through the store the server uses.
func (f *fleet) token(username, name string, scope rundb.TokenScope, life time.Duration) string {
	f.t.Helper()
	tok, _, err := f.db.Users.CreateToken(context.Background(), username, rundb.NewToken{Name: name, Scope: scope, Lifetime: life})
	if err != nil {
		f.t.Fatal(err)
	}
	return tok
}

// tokenCall is call with a token where fishtest's worker puts its password.
func tokenCall(token string, n int, extra map[string]any) map[string]any {
	b := call(n, extra)
	b["password"] = token
	return b
}

// bearer posts a JSON body with "Authorization: Bearer <token>".
func (f *fleet) bearer(token, path string, body any) (int, map[string]any) {
	f.t.Helper()
	b, err := json.Marshal(body)
	if err != nil {
		f.t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, f.url+path, bytes.NewReader(b))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		f.t.Fatalf("%s: reply is not JSON: %d %v", path, resp.StatusCode, err)
	}
	return resp.StatusCode, out
}

// wrongPasswordReply is what a worker call with a wrong password gets, which every refused
// token must get too.
func (f *fleet) wrongPasswordReply(path string, body map[string]any) (int, string) {
	f.t.Helper()
	body["password"] = "not the password"
	code, out := f.post(path, body)
	return code, fmt.Sprint(out["error"])
}

// The requests fishtest's worker sends, each with a worker token in the password field, are
// answered as with the password.
func TestTokenWorkerProtocolReplayedWithAToken(t *testing.T) {
	f := newFleet(t)
	tok := f.token("wrk", "box-1", rundb.ScopeWorker, 0)
	id := f.newRun(map[string]any{"num_games": 10000})
	task := map[string]any{"run_id": id, "task_id": 0}
	code, out := f.post("/api/request_version", map[string]any{"password": tok, "worker_info": map[string]any{"username": "wrk"}})
	if code != http.StatusOK || out["version"] != float64(325) {
		t.Fatalf("request_version: %d %v", code, out)
	}
	if code, out := f.post("/api/request_task", tokenCall(tok, 1, nil)); code != http.StatusOK || out["run"] == nil {
		t.Fatalf("request_task: %d %v", code, out)
	}
	steps := []struct {
		path  string
		extra map[string]any
		check func(map[string]any) bool
	}{
		{"/api/update_task", map[string]any{"run_id": id, "task_id": 0, "stats": draws(10)}, func(o map[string]any) bool { return o["task_alive"] == true }},
		{"/api/beat", task, func(o map[string]any) bool { return o["task_alive"] == true }},
		{"/api/worker_log", map[string]any{"message": "hello"}, func(o map[string]any) bool { return len(o) == 1 }},
		{"/api/upload_pgn", map[string]any{"run_id": id, "task_id": 0, "pgn": pgnUpload(t, "[Event \"x\"]\n1. e4 e5 *\n")}, func(o map[string]any) bool { return len(o) == 1 }},
		{"/api/failed_task", map[string]any{"run_id": id, "task_id": 0, "message": "crash"}, func(o map[string]any) bool { return len(o) == 1 }},
	}
	for _, s := range steps {
		if code, out := f.post(s.path, tokenCall(tok, 1, s.extra)); code != http.StatusOK || !s.check(out) {
			t.Errorf("%s with a worker token: %d %v", s.path, code, out)
		}
	}
	if r := f.run(id); r.Results.Draws != 20 {
		t.Errorf("the token's report counted %d draws, want 20", r.Results.Draws)
	}
	if _, err := f.db.PGNs.Get(context.Background(), id+"-0"); err != nil {
		t.Errorf("the token's PGN: %v", err)
	}
	// stop_run, which needs the owner's CPU hours, on a task of its own.
	if err := f.db.UserCache.Put(context.Background(), &rundb.UserStats{Username: "wrk", CPUHours: 1000}); err != nil {
		t.Fatal(err)
	}
	f.post("/api/request_task", tokenCall(tok, 2, nil))
	if code, out := f.post("/api/stop_run", tokenCall(tok, 2, map[string]any{"run_id": id, "task_id": 1, "message": "bad bench"})); code != http.StatusOK {
		t.Errorf("stop_run with a worker token: %d %v", code, out)
	}
	list, _ := f.db.Users.Tokens(context.Background(), "wrk")
	if len(list) != 1 || list[0].LastUse == nil || list[0].LastUse.Address != "127.0.0.1" {
		t.Errorf("the token's last use: %+v", list)
	}
	f.checkAggregates(id)
}

// An api token cannot play, a worker token cannot submit, and each refusal is the reply a wrong
// password gets; a token of the right scope submits and approves.
func TestTokenScopesOverHTTP(t *testing.T) {
	f := newFleet(t)
	workerTok := f.token("wrk", "box", rundb.ScopeWorker, 0)
	apiTok := f.token("wrk", "script", rundb.ScopeAPI, 0)
	aliceAPI := f.token("alice", "script", rundb.ScopeAPI, 0)
	bobAPI := f.token("bob", "script", rundb.ScopeAPI, 0)
	wantCode, wantErr := f.wrongPasswordReply("/api/request_task", call(1, nil))
	if wantCode != http.StatusUnauthorized {
		t.Fatalf("a wrong password: %d %s", wantCode, wantErr)
	}
	if code, out := f.post("/api/request_task", tokenCall(apiTok, 1, nil)); code != wantCode || out["error"] != wantErr {
		t.Errorf("an api token on request_task: %d %v, want %d %q", code, out, wantCode, wantErr)
	}
	run := map[string]any{
		"base_tag": "master", "new_tag": "patch", "resolved_base": strings.Repeat("a", 40), "resolved_new": strings.Repeat("b", 40),
		"tc": "10+0.1", "base_options": "Hash=16", "new_options": "Hash=16", "base_signature": "2050811",
		"new_signature": "2061234", "tests_repo": "https://github.com/alice/Stockfish", "info": "a test", "num_games": 1000,
	}
	for _, c := range []struct{ name, token string }{{"a worker token", workerTok}, {"a password", "wrkpw"}, {"garbage", "xyz"}} {
		if code, out := f.bearer(c.token, "/api/create_run", map[string]any{"run": run}); code != http.StatusUnauthorized {
			t.Errorf("create_run with %s as a Bearer: %d %v, want 401", c.name, code, out)
		}
	}
	if code, out := f.post("/api/create_run", map[string]any{"username": "wrk", "password": workerTok, "run": run}); code != http.StatusUnauthorized {
		t.Errorf("create_run with a worker token as the password: %d %v, want 401", code, out)
	}
	if code, out := f.bearer(aliceAPI, "/api/create_run", map[string]any{"username": "alice", "run": run}); code != http.StatusBadRequest ||
		!strings.Contains(fmt.Sprint(out["error"]), "Bearer") {
		t.Errorf("a Bearer with a username in the body: %d %v, want 400", code, out)
	}
	if n := storedRunCount(t, f.db); n != 0 {
		t.Fatalf("%d runs stored by refused submissions", n)
	}
	code, out := f.bearer(aliceAPI, "/api/create_run", map[string]any{"run": run})
	if code != http.StatusOK {
		t.Fatalf("create_run with alice's api token: %d %v", code, out)
	}
	id := out["run_id"].(string)
	if code, out := f.bearer(workerTok, "/api/approve_run", map[string]any{"run_id": id}); code != http.StatusUnauthorized {
		t.Errorf("approve_run with a worker token: %d %v", code, out)
	}
	if code, out := f.bearer(bobAPI, "/api/approve_run", map[string]any{"run_id": id}); code != http.StatusOK {
		t.Errorf("approve_run with bob's api token: %d %v", code, out)
	}
	if code, out := f.post("/api/request_task", tokenCall(workerTok, 1, nil)); code != http.StatusOK || out["run"] == nil {
		t.Errorf("request_task with the worker token: %d %v", code, out)
	}
}

func TestTokenExpiresOverHTTP(t *testing.T) {
	f := newFleet(t)
	tok := f.token("wrk", "short", rundb.ScopeWorker, 1500*time.Millisecond)
	body := map[string]any{"password": tok, "worker_info": map[string]any{"username": "wrk"}}
	if code, out := f.post("/api/request_version", body); code != http.StatusOK {
		t.Fatalf("before its expiry: %d %v", code, out)
	}
	time.Sleep(1600 * time.Millisecond)
	wantCode, wantErr := f.wrongPasswordReply("/api/request_version", map[string]any{"worker_info": map[string]any{"username": "wrk"}})
	if code, out := f.post("/api/request_version", body); code != wantCode || out["error"] != wantErr {
		t.Errorf("after its expiry: %d %v, want %d %q", code, out, wantCode, wantErr)
	}
}

// A fleet calling with a token keeps working until the token is revoked, and from the next
// call after the revocation every call of it is refused on this instance. Each worker stops at
// its first refusal, as fishtest's worker does on a wrong password.
func TestTokenRevokedWhileTheFleetCalls(t *testing.T) {
	f := newFleet(t)
	tok := f.token("wrk", "fleet", rundb.ScopeWorker, 0)
	other := f.token("wrk", "other", rundb.ScopeWorker, 0)
	var revoking, revoked atomic.Bool // set before the revocation starts, after it returns
	var okAfter, refusedBefore atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				before, after := !revoking.Load(), revoked.Load()
				code, _ := f.post("/api/request_version", map[string]any{"password": tok, "worker_info": map[string]any{"username": "wrk"}})
				switch {
				case after && code == http.StatusOK:
					okAfter.Add(1)
				case code != http.StatusOK && before:
					refusedBefore.Add(1)
					return
				case code != http.StatusOK:
					return
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	revoking.Store(true)
	if err := f.db.Users.RevokeToken(context.Background(), "wrk", "fleet"); err != nil {
		t.Fatal(err)
	}
	revoked.Store(true)
	time.Sleep(200 * time.Millisecond)
	close(stop)
	wg.Wait()
	if okAfter.Load() != 0 || refusedBefore.Load() != 0 {
		t.Errorf("%d calls let in after the revocation, %d failed before it", okAfter.Load(), refusedBefore.Load())
	}
	if code, out := f.post("/api/request_version", map[string]any{"password": other, "worker_info": map[string]any{"username": "wrk"}}); code != http.StatusOK {
		t.Errorf("the token not revoked: %d %v", code, out)
	}
	if code, out := f.post("/api/request_version", versionCall("wrkpw")); code != http.StatusOK {
		t.Errorf("the password: %d %v", code, out)
	}
}

// The login limits count wrong tokens as wrong passwords: past the burst, even the right token
// waits.
func TestTokenGuessesAreLimited(t *testing.T) {
	f := newFleet(t)
	good := f.token("wrk", "box", rundb.ScopeWorker, 0)
	const ip = "203.0.113.9"
	for i := range guard.APILoginPerIPBurst {
		guess := good[:len(good)-4] + fmt.Sprintf("%04d", i)
		if code, _, out := f.apiFrom(ip, "/api/request_version", versionCall(guess)); code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d %v, want 401", i+1, code, out)
		}
	}
	code, retry, out := f.apiFrom(ip, "/api/request_version", versionCall(good))
	checkAPILimited(t, "/api/request_version", code, retry, out)
}

// Wrong tokens in a Bearer header count against the login limits too.
func TestTokenBearerGuessesAreLimited(t *testing.T) {
	f := newFleet(t)
	good := f.token("alice", "script", rundb.ScopeAPI, 0)
	body := map[string]any{"run_id": "0123456789abcdef01234567"}
	for i := range guard.APILoginPerIPBurst {
		guess := good[:len(good)-4] + fmt.Sprintf("%04d", i)
		if code, out := f.bearer(guess, "/api/approve_run", body); code != http.StatusUnauthorized {
			t.Fatalf("guess %d: %d %v, want 401", i+1, code, out)
		}
	}
	if code, out := f.bearer(good, "/api/approve_run", body); code != http.StatusTooManyRequests {
		t.Errorf("past the limit: %d %v, want 429", code, out)
	}
}
