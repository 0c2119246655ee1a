package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
)

// mapEnv returns a getenv function reading from m instead of the process.
func mapEnv(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// writeFile creates a file in a fresh temporary directory and returns its
// path.
func writeFile(t *testing.T, name, contents string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(contents), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// workerAPI is a minimal worker API for `shoal worker`: one SPRT task of 400 games, then none.
type workerAPI struct {
	t       *testing.T
	version int
	mu      sync.Mutex
	calls   []string
	games   []int
	updated chan struct{}
}

func (a *workerAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	endpoint := strings.TrimPrefix(r.URL.Path, "/api/")
	body, _ := io.ReadAll(r.Body)
	if endpoint != "request_version" {
		req, err := protocol.DecodeRequest(body, nil)
		if err != nil {
			a.t.Errorf("%s: %v", endpoint, err)
		} else if req.Stats != nil {
			a.mu.Lock()
			a.games = append(a.games, req.Stats.Wins+req.Stats.Losses+req.Stats.Draws)
			a.mu.Unlock()
		}
	}
	a.mu.Lock()
	a.calls = append(a.calls, endpoint)
	first := len(a.calls) <= 2
	a.mu.Unlock()
	reply := map[string]any{"duration": 0.001}
	switch endpoint {
	case "request_version":
		reply["version"] = a.version
	case "request_task":
		if !first {
			reply["task_waiting"] = false
			break
		}
		reply["task_id"] = 0
		reply["run"] = map[string]any{"_id": "0123456789abcdef01234567", "my_task": map[string]any{"num_games": 400, "start": 0},
			"args": map[string]any{"tc": "10+0.1", "threads": 1, "new_tag": "patch", "base_tag": "master",
				"sprt": map[string]any{"batch_size": 4}}}
	case "update_task":
		reply["task_alive"] = true
		select {
		case a.updated <- struct{}{}:
		default:
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(reply)
}

func (a *workerAPI) got() ([]string, []int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]string(nil), a.calls...), append([]int(nil), a.games...)
}

// An interrupt finishes the batch being played, reports it, gives the task back and exits
// cleanly.
func TestWorkerCmdInterruptFinishesTheBatch(t *testing.T) {
	api := &workerAPI{t: t, version: protocol.Version, updated: make(chan struct{}, 1)}
	srv := httptest.NewServer(api)
	defer srv.Close()
	stopFile := filepath.Join(t.TempDir(), "fish.exit")
	ctx, interrupt := context.WithCancel(context.Background())
	defer interrupt()
	done := make(chan error, 1)
	var out strings.Builder
	go func() {
		done <- workerCmd(ctx, []string{"--server", srv.URL, "--concurrency", "1", "--sim-pair-time", "50ms",
			"--time-scale", "1000", "--stop-file", stopFile, "--uuid-prefix", "cli1"},
			mapEnv(map[string]string{"SHOAL_USERNAME": "alice", "SHOAL_PASSWORD": "secret"}), &syncWriter{w: &out}, io.Discard)
	}()
	select {
	case <-api.updated:
	case <-time.After(10 * time.Second):
		t.Fatal("no update_task")
	}
	time.Sleep(50 * time.Millisecond)
	interrupt() // most likely during the second batch (4 pairs, 200 ms)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("workerCmd: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("workerCmd did not return after the interrupt")
	}
	calls, games := api.got()
	for i, g := range games {
		if g != 8*(i+1) {
			t.Fatalf("updates with %v games: want whole batches of 8", games)
		}
	}
	if n := len(games); n == 0 || games[n-1] >= 400 {
		t.Errorf("updates with %v games: want the task given back before its end", games)
	}
	if tail := strings.Join(calls[len(calls)-2:], " "); tail != "failed_task upload_pgn" {
		t.Errorf("calls end with %q, want the task given back and its PGN uploaded", tail)
	}
}

func TestWorkerCmdRefusesANewerServer(t *testing.T) {
	api := &workerAPI{t: t, version: protocol.Version + 1, updated: make(chan struct{}, 1)}
	srv := httptest.NewServer(api)
	defer srv.Close()
	err := workerCmd(context.Background(), []string{"--server", srv.URL}, mapEnv(map[string]string{"SHOAL_USERNAME": "alice", "SHOAL_PASSWORD": "secret"}),
		io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "newer worker protocol") {
		t.Fatalf("workerCmd: %v, want a newer-protocol error", err)
	}
}

// The stop file is removed on a clean exit, so that the next start works (fishtest does too).
func TestWorkerCmdRemovesTheStopFile(t *testing.T) {
	api := &workerAPI{t: t, version: protocol.Version, updated: make(chan struct{}, 1)}
	srv := httptest.NewServer(api)
	defer srv.Close()
	stopFile := writeFile(t, "fish.exit", "")
	err := workerCmd(context.Background(), []string{"--server", srv.URL, "--stop-file", stopFile},
		mapEnv(map[string]string{"SHOAL_USERNAME": "alice", "SHOAL_PASSWORD": "secret"}), io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stopFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stop file still there: %v", err)
	}
	if calls, _ := api.got(); len(calls) != 0 {
		t.Errorf("calls %v: a worker started with the stop file present exits before asking for work", calls)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
