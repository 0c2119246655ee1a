package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/tokenpool"
)

// TestTuningLiveResizeDropsNoRequest is the live tuning check: while real HTTP clients
// keep a primary busy with requests that take database tokens (the read API, a UI page and
// workers asking for tasks), the token pool and the request_task semaphore are shrunk and
// grown several times. Every request must complete without a 5xx; a request_task told that
// the server is too busy is a normal answer, not a failure.
func TestTuningLiveResizeDropsNoRequest(t *testing.T) {
	const (
		clients = 12
		workers = 4 // the clients share these worker identities for request_task
	)
	pool := tokenpool.New(6)
	f := newFleetWithPool(t, pool)
	sched := f.sched
	var err error
	f.newRun(map[string]any{"num_games": 400000})

	client := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	t.Cleanup(client.CloseIdleConnections)
	taskBodies := make([][]byte, workers)
	for n := range taskBodies {
		if taskBodies[n], err = json.Marshal(call(n+1, nil)); err != nil {
			t.Fatal(err)
		}
	}

	// One request: a transport error, a 5xx, or (for the API) a reply that is not a JSON
	// object is a failure; otherwise it completed.
	var started, completed, tasks, tooBusy atomic.Int64
	var failMu sync.Mutex
	var failures []string
	fail := func(format string, args ...any) {
		failMu.Lock()
		defer failMu.Unlock()
		failures = append(failures, fmt.Sprintf(format, args...))
	}
	do := func(method, path string, body []byte) {
		started.Add(1)
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequest(method, f.url+path, rd)
		if err != nil {
			fail("%s %s: %v", method, path, err)
			return
		}
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		if err != nil {
			fail("%s %s: %v", method, path, err)
			return
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case err != nil:
			fail("%s %s: reading the reply: %v", method, path, err)
			return
		case resp.StatusCode >= 500:
			fail("%s %s: %d %s", method, path, resp.StatusCode, raw)
			return
		}
		if strings.HasPrefix(path, "/api/") {
			var out map[string]any
			if err := json.Unmarshal(raw, &out); err != nil {
				fail("%s %s: %d, not a JSON object: %.200s", method, path, resp.StatusCode, raw)
				return
			}
			if path == "/api/request_task" {
				if _, ok := out["task_id"]; ok {
					tasks.Add(1)
				}
				if out["info"] == scheduler.TooBusy {
					tooBusy.Add(1)
					if wait, ok := out["retry_after"].(float64); !ok || wait <= 0 {
						fail("request_task too busy without a retry_after: %v", out)
						return
					}
				}
			}
		}
		completed.Add(1)
	}

	// The operator: shrink and grow both sizes, each change while the load runs.
	poolSizes := []int{2, 9, 1, 12, 3, 1, 8, 4}
	semSizes := []int{1, 6, 2, 1, 9, 1, 3, 5}
	stop := make(chan struct{})
	var resizeErrs []error
	var resizeWG sync.WaitGroup
	resizeWG.Go(func() {
		defer close(stop)
		for i := range poolSizes {
			time.Sleep(120 * time.Millisecond)
			sched.SetTaskSemaphoreSize(semSizes[i])
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := pool.Resize(rctx, poolSizes[i])
			cancel()
			if err != nil {
				resizeErrs = append(resizeErrs, fmt.Errorf("resize the pool to %d: %w", poolSizes[i], err))
			}
		}
		time.Sleep(120 * time.Millisecond) // some load at the last sizes too
	})

	var load sync.WaitGroup
	for i := range clients {
		load.Go(func() {
			for round := 0; ; round++ {
				select {
				case <-stop:
					return
				default:
				}
				switch (i + round) % 3 {
				case 0:
					do(http.MethodGet, "/api/active_runs", nil)
				case 1:
					do(http.MethodGet, "/tests", nil)
				default:
					do(http.MethodPost, "/api/request_task", taskBodies[i%workers])
				}
			}
		})
	}
	joined := make(chan struct{})
	go func() { resizeWG.Wait(); load.Wait(); close(joined) }()
	select {
	case <-joined:
	case <-time.After(60 * time.Second):
		t.Fatalf("the load did not finish: %d requests started, %d completed", started.Load(), completed.Load())
	}

	for _, err := range resizeErrs {
		t.Error(err)
	}
	for i, msg := range failures {
		if i == 10 {
			t.Errorf("... and %d more failures", len(failures)-10)
			break
		}
		t.Error(msg)
	}
	st := pool.Stats()
	t.Logf("%d requests, %d completed; request_task: %d tasks, %d too busy; pool: %+v",
		started.Load(), completed.Load(), tasks.Load(), tooBusy.Load(), st)
	if started.Load() != completed.Load() {
		t.Errorf("%d requests started but %d completed", started.Load(), completed.Load())
	}
	if completed.Load() < int64(3*clients) {
		t.Errorf("only %d requests completed: the load was too light to test anything", completed.Load())
	}
	if st.Waited == 0 {
		t.Error("no request ever waited for a token: the resizes were never under load")
	}
	if st.Size != poolSizes[len(poolSizes)-1] || st.InUse != 0 || st.Waiting != 0 || st.ShrinkingTo != 0 {
		t.Errorf("pool at rest: %+v, want Size %d and nothing in use or waiting", st, poolSizes[len(poolSizes)-1])
	}
	if got := sched.TaskSemaphoreSize(); got != semSizes[len(semSizes)-1] {
		t.Errorf("semaphore size %d at the end, want %d", got, semSizes[len(semSizes)-1])
	}
}
