package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/shoal-chess/shoal/metrics"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/api"
)

// BenchmarkWorkerAPI is one worker call through the server's whole handler (gin, the
// middleware, authentication of a known worker, decoding, the scheduler, the reply), without
// the network: what a request costs the server's processor beyond net/http's own work.
// The server counts and times each request as a deployed one does (metrics on a registry of
// its own). "bare" is a net/http handler that decodes a JSON body and answers a JSON object, the
// floor to compare with.
func BenchmarkWorkerAPI(b *testing.B) {
	f := newFleetWith(b, func(d *server.Deps) { d.Metrics = metrics.New(prometheus.NewRegistry()) })
	// No rate limit: the same few workers ask again and again.
	api.SetTaskLimits(f.srv.API(), time.Microsecond)
	id := f.newRun(map[string]any{"num_games": 1000000})
	const workers = 16 // the default machine limit of one address
	for n := range workers {
		if code, out := f.post("/api/request_task", call(n, nil)); code != http.StatusOK || out["task_id"] == nil {
			b.Fatalf("request_task: %d %v", code, out)
		}
	}
	bodies := func(extra func(n int) map[string]any) [][]byte {
		out := make([][]byte, workers)
		for n := range workers {
			raw, err := json.Marshal(call(n, extra(n)))
			if err != nil {
				b.Fatal(err)
			}
			out[n] = raw
		}
		return out
	}
	// Task n belongs to worker n: the workers asked in order.
	task := func(n int) map[string]any { return map[string]any{"run_id": id, "task_id": n} }
	serve := func(b *testing.B, h http.Handler, path string, body func(i int) []byte) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			req := httptest.NewRequest(http.MethodPost, path, bytes.NewReader(body(i)))
			req.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Fatalf("%s: %d %s", path, w.Code, w.Body)
			}
			i++
		}
	}
	b.Run("bare", func(b *testing.B) {
		bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var in map[string]any
			if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]any{"task_alive": true, "duration": 0.001})
		})
		in := bodies(task)
		serve(b, bare, "/api/beat", func(i int) []byte { return in[i%workers] })
	})
	b.Run("request_version", func(b *testing.B) {
		in := bodies(func(int) map[string]any { return nil })
		serve(b, f.handler, "/api/request_version", func(i int) []byte { return in[i%workers] })
	})
	b.Run("beat", func(b *testing.B) {
		in := bodies(task)
		serve(b, f.handler, "/api/beat", func(i int) []byte { return in[i%workers] })
	})
	// Which task each worker holds and how far it is, kept across the repetitions of
	// update_task (-count): each one goes on from where the last left its tasks.
	taskOf, pairsOf := make([]int, workers), make([]int, workers)
	for n := range workers {
		taskOf[n] = n
	}
	b.Run("update_task", func(b *testing.B) {
		// Cumulative stats grow by one pair a call, as a worker's do; a worker whose task is
		// full finishes it and takes the next (outside the timing).
		games := f.run(id).Tasks[0].NumGames
		serve(b, f.handler, "/api/update_task", func(i int) []byte {
			n := i % workers
			if 2*(pairsOf[n]+1) > games {
				b.StopTimer()
				code, out := f.post("/api/update_task", call(n, map[string]any{"run_id": id, "task_id": taskOf[n], "stats": draws(games / 2)}))
				if code != http.StatusOK {
					b.Fatalf("finishing a task: %d %v", code, out)
				}
				code, out = f.post("/api/request_task", call(n, nil))
				if code != http.StatusOK || out["task_id"] == nil {
					b.Fatalf("request_task: %d %v", code, out)
				}
				taskOf[n], pairsOf[n] = int(out["task_id"].(float64)), 0
				b.StartTimer()
			}
			pairsOf[n]++
			raw, err := json.Marshal(call(n, map[string]any{"run_id": id, "task_id": taskOf[n], "stats": draws(pairsOf[n])}))
			if err != nil {
				b.Fatal(err)
			}
			return raw
		})
	})
	b.Run("request_task_waiting", func(b *testing.B) {
		// Workers that hold a task already are told to wait: the decision without a new task.
		in := bodies(func(int) map[string]any { return nil })
		serve(b, f.handler, "/api/request_task", func(i int) []byte { return in[i%workers] })
	})
}
