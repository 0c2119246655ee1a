package api_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
)

// The user an API call authenticates as is the user cache's own document, shared by every call
// (rundb.UserStore.AuthenticateAccessIfCached): no handler may change it, or every later call
// of that user would see the change, and calls running at once would race on it.
func TestWorkerCallsLeaveTheCachedUserAlone(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 1000}) // alice and bob are cached now
	ctx := context.Background()
	shared := func(username, password string) *rundb.User {
		t.Helper()
		a := rundb.Access{Username: username, Secret: password, Scope: rundb.ScopeWorker}
		u, cached, err := f.db.Users.AuthenticateAccessIfCached(ctx, a)
		if err != nil || !cached {
			t.Fatalf("%s is not cached: %v %v", username, cached, err)
		}
		return u
	}
	f.post("/api/request_version", call(0, nil)) // wrk is cached now
	users := map[string]*rundb.User{"wrk": shared("wrk", "wrkpw"), "alice": shared("alice", "alicepw")}
	before := map[string]string{}
	for name, u := range users {
		before[name] = fmt.Sprintf("%#v", *u)
	}

	task := map[string]any{"run_id": id, "task_id": 0}
	for _, c := range []struct {
		path string
		body any
	}{
		{"/api/request_version", call(0, nil)},
		{"/api/request_task", call(0, nil)},
		{"/api/beat", call(0, task)},
		{"/api/update_task", call(0, map[string]any{"run_id": id, "task_id": 0, "stats": draws(1)})},
		{"/api/request_spsa", call(0, task)},
		{"/api/worker_log", call(0, map[string]any{"message": "hello"})},
		{"/api/stop_run", call(0, map[string]any{"run_id": id, "task_id": 0, "message": "stop"})},
		{"/api/failed_task", call(0, map[string]any{"run_id": id, "task_id": 0, "message": "crash"})},
		{"/api/request_task", call(0, nil)},
		{"/api/modify_run", map[string]any{"username": "alice", "password": "alicepw", "run_id": id, "num_games": 2000}},
		{"/api/user_stop_run", map[string]any{"username": "alice", "password": "alicepw", "run_id": id}},
	} {
		f.post(c.path, c.body) // the replies are other tests' business
	}
	for name, u := range users {
		if after := fmt.Sprintf("%#v", *u); after != before[name] {
			t.Errorf("the calls changed %s's cached user:\nbefore %s\nafter  %s", name, before[name], after)
		}
	}
}
