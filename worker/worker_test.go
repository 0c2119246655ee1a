package worker

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
)

func TestNewUniqueKey(t *testing.T) {
	for _, prefix := range []string{"", "ab", "test", "A1b2C3d4"} {
		k1, k2 := NewUniqueKey(prefix), NewUniqueKey(prefix)
		if k1 == k2 {
			t.Errorf("prefix %q: two keys are equal: %s", prefix, k1)
		}
		if prefix != "" && !strings.HasPrefix(k1, prefix+"-") {
			t.Errorf("prefix %q: key %s does not start with it", prefix, k1)
		}
		if !protocol.ValidUniqueKey(k1) {
			t.Errorf("prefix %q: key %s is not a valid unique key", prefix, k1)
		}
		if prefix == "" && k1[14] != '4' {
			t.Errorf("key %s is not a uuid4", k1)
		}
	}
	if protocol.ValidUniqueKey(NewUniqueKey("a")) || protocol.ValidUniqueKey(NewUniqueKey("toolongprefix")) || protocol.ValidUniqueKey(NewUniqueKey("a-b")) {
		t.Error("a key with a prefix of the wrong length or characters passes")
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	good := Config{ServerURL: "http://127.0.0.1:8000", Username: "alice", Password: "secret"}
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"no server", func(c *Config) { c.ServerURL = "" }, "server URL"},
		{"server without scheme", func(c *Config) { c.ServerURL = "127.0.0.1:8000" }, "server URL"},
		{"no username", func(c *Config) { c.Username = "" }, "username"},
		{"no password", func(c *Config) { c.Password = "" }, "password"},
		{"negative concurrency", func(c *Config) { c.Concurrency = -1 }, "concurrency"},
		{"negative memory", func(c *Config) { c.MaxMemory = -1 }, "max memory"},
		{"bad unique key", func(c *Config) { c.UniqueKey = "x-1234" }, "unique key"},
		{"unknown arch", func(c *Config) { c.WorkerArch = "z80" }, "worker arch"},
		{"unknown compiler", func(c *Config) { c.Compiler = "tcc" }, "compiler"},
		{"negative time scale", func(c *Config) { c.TimeScale = -2 }, "time scale"},
		{"negative max tasks", func(c *Config) { c.MaxTasks = -1 }, "max tasks"},
		{"PGN compression above gzip's", func(c *Config) { c.PGNCompression = gzip.BestCompression + 1 }, "PGN compression"},
		{"PGN compression below gzip's", func(c *Config) { c.PGNCompression = gzip.HuffmanOnly - 1 }, "PGN compression"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := good
			tt.change(&cfg)
			_, err := New(cfg, &SimSource{})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New: %v, want an error about %s", err, tt.want)
			}
		})
	}
	if _, err := New(good, nil); err == nil {
		t.Error("New accepted a nil game source")
	}
}

// The worker_info a worker sends must pass the server's validation as it is, with defaults.
func TestInfoPassesServerValidation(t *testing.T) {
	w, err := New(Config{ServerURL: "http://x", Username: "alice", Password: "secret", Concurrency: 3, UniqueKey: NewUniqueKey("ab12")}, &SimSource{})
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(w.taskRequest(testRunID, 0))
	if err != nil {
		t.Fatal(err)
	}
	req, err := protocol.DecodeRequest(body, nil)
	if err != nil {
		t.Fatalf("the server refuses the worker's request: %v\n%s", err, body)
	}
	info := w.Info()
	if req.WorkerInfo != info {
		t.Errorf("decoded %+v, sent %+v", req.WorkerInfo, info)
	}
	if info.Version != protocol.Version || info.Concurrency != 3 || info.MinThreads != 1 || info.MaxMemory != 444+396*3 ||
		info.ARCH != "?" || info.WorkerArch != "unknown" || info.Compiler != "g++" || info.NPS != 0 {
		t.Errorf("unexpected defaults: %+v", info)
	}
}

var waitingRE = regexp.MustCompile(`msg="Waiting before retrying" .*delay=(\S+)`)

// loggedDelays are the backoff delays the worker logged, in order.
func loggedDelays(log string) []string {
	var out []string
	for _, m := range waitingRE.FindAllStringSubmatch(log, -1) {
		out = append(out, m[1])
	}
	return out
}

// Every way a call can fail makes the worker back off 15 s, 30 s, 60 s... (here divided by 1000)
// and try again, as fishtest's worker does: it reads no status codes, only whether the reply is
// a JSON object with a duration and whether it has "error".
func TestBacksOffOnEveryErrorChannel(t *testing.T) {
	tests := []struct {
		name    string
		answer  answer
		status  int
		wantLog string
	}{
		{"400 with a JSON error", jsonAnswer(400, map[string]any{"error": "/api/request_task: worker_info.concurrency: is not positive", "duration": 0.001}),
			400, "Error from remote: /api/request_task: worker_info.concurrency"},
		{"401 with a JSON error", jsonAnswer(401, map[string]any{"error": "/api/request_task: Invalid username or password.", "duration": 0.001}),
			401, "Error from remote: /api/request_task: Invalid username or password."},
		{"200 with an error", ok("task_waiting", false, "error", "Request_task: Machine limit reached for user alice"),
			200, "Error from remote: Request_task: Machine limit reached"},
		{"200 with info", ok("task_waiting", false, "info", "Request_task: the server is currently too busy..."),
			200, "Info from remote: Request_task: the server is currently too busy"},
		{"200 without a task", ok("task_waiting", false), 200, "No tasks available"},
		{"503 plain text", plainText(503, "Server is shutting down"), 503, "not a json encoded dictionary"},
		{"dropped connection", dropConnection, 0, "EOF"},
		{"a JSON reply without duration", jsonAnswer(500, map[string]any{"error": "boom"}), 500, "no duration"},
		{"JSON that is not an object", func(w http.ResponseWriter) { _, _ = w.Write([]byte(`[1, 2]`)) }, 200, "not a json encoded dictionary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := newStub(t, func(c call) answer {
				if c.endpoint == "request_task" {
					return tt.answer
				}
				return nil
			})
			log := &syncBuffer{}
			cfg := testConfig(st, log)
			obs := &recordingObserver{}
			cfg.Observer = obs
			r := start(t, context.Background(), cfg, newRecordingSource(1))
			waitFor(t, "4 request_task calls", func() bool { return len(st.got("request_task")) >= 4 })
			r.w.Stop()
			if err := r.wait(t); err != nil {
				t.Fatalf("Run: %v", err)
			}

			calls := st.got()
			for i, c := range calls {
				want := "request_version"
				if i%2 == 1 {
					want = "request_task"
				}
				if c.endpoint != want {
					t.Fatalf("call %d is %s, want %s (request_version before every request_task, nothing else)", i, c.endpoint, want)
				}
			}
			tasks := st.got("request_task")
			for i, wantMin := range []time.Duration{15, 30, 60} {
				if gap := tasks[i+1].at.Sub(tasks[i].at); gap < wantMin*time.Millisecond {
					t.Errorf("request_task %d came %v after the previous one, want at least %v ms of backoff", i+2, gap, wantMin)
				}
			}
			if got := loggedDelays(log.String()); len(got) < 3 || !reflect.DeepEqual(got[:3], []string{"15ms", "30ms", "60ms"}) {
				t.Errorf("logged delays %v, want 15ms 30ms 60ms first", got)
			}
			if !strings.Contains(log.String(), tt.wantLog) {
				t.Errorf("log lacks %q:\n%s", tt.wantLog, log)
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if obs.requests[1] != "request_task" || obs.statuses[1] != tt.status {
				t.Errorf("observer saw %s with status %d, want request_task with %d", obs.requests[1], obs.statuses[1], tt.status)
			}
		})
	}
}

func TestBackoffDoublesToTheMaximumAndResetsAfterATask(t *testing.T) {
	t.Run("caps at 900 s", func(t *testing.T) {
		st := newStub(t, nil) // no task, ever
		log := &syncBuffer{}
		cfg := testConfig(st, log)
		cfg.TimeScale = 15000 // 15 s -> 1 ms, 900 s -> 60 ms
		r := start(t, context.Background(), cfg, newRecordingSource(1))
		waitFor(t, "9 request_task calls", func() bool { return len(st.got("request_task")) >= 9 })
		r.w.Stop()
		if err := r.wait(t); err != nil {
			t.Fatal(err)
		}
		want := []string{"1ms", "2ms", "4ms", "8ms", "16ms", "32ms", "60ms", "60ms"}
		if got := loggedDelays(log.String()); len(got) < len(want) || !reflect.DeepEqual(got[:len(want)], want) {
			t.Errorf("delays %v, want %v", got, want)
		}
	})
	t.Run("resets after a task", func(t *testing.T) {
		st := newStub(t, func(c call) answer {
			if c.endpoint == "request_task" && c.n == 3 {
				return taskAnswer(0, 8, 0, sprtArgs(4), nil)
			}
			if c.endpoint == "update_task" {
				return ok("task_alive", false)
			}
			return nil
		})
		log := &syncBuffer{}
		r := start(t, context.Background(), testConfig(st, log), newRecordingSource(1))
		waitFor(t, "5 request_task calls", func() bool { return len(st.got("request_task")) >= 5 })
		r.w.Stop()
		if err := r.wait(t); err != nil {
			t.Fatal(err)
		}
		want := []string{"15ms", "30ms", "15ms"}
		if got := loggedDelays(log.String()); len(got) < 3 || !reflect.DeepEqual(got[:3], want) {
			t.Errorf("delays %v, want %v: no wait right after a task, and the backoff starts over", got, want)
		}
	})
}

func TestRequestVersion(t *testing.T) {
	tests := []struct {
		name    string
		answer  func(n int) answer
		wantErr string // "" means Run goes on to request_task
	}{
		{"a newer protocol stops the worker", func(int) answer { return ok("version", protocol.Version+1) }, "newer worker protocol"},
		{"refused credentials stop the worker",
			func(int) answer {
				return jsonAnswer(401, map[string]any{"error": "/api/request_version: Invalid username or password.", "duration": 0.001})
			},
			"Invalid username or password."},
		{"an unreachable server is retried", func(n int) answer {
			if n == 1 {
				return plainText(503, "busy")
			}
			return nil
		}, ""},
		{"an older server is fine", func(int) answer { return ok("version", protocol.Version-1) }, ""},
		{"too many failed logins from the address is waited out", func(n int) answer {
			if n == 1 {
				return jsonAnswer(429, map[string]any{"error": "/api/request_version: too many failed logins from this address; retry in 30 s", "duration": 0.001})
			}
			return nil
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := newStub(t, func(c call) answer {
				if c.endpoint == "request_version" {
					return tt.answer(c.n)
				}
				return nil
			})
			r := start(t, context.Background(), testConfig(st, &syncBuffer{}), newRecordingSource(1))
			if tt.wantErr == "" {
				waitFor(t, "a request_task", func() bool { return len(st.got("request_task")) > 0 })
				r.w.Stop()
			}
			err := r.wait(t)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Run: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Run: %v, want an error containing %q", err, tt.wantErr)
			case tt.wantErr != "" && len(st.got("request_task")) > 0:
				t.Fatal("request_task was sent after request_version failed")
			}
			if strings.Contains(tt.wantErr, "newer") && !errors.Is(err, ErrNewerProtocol) {
				t.Errorf("error %v does not wrap ErrNewerProtocol", err)
			}
		})
	}
}

// A task is played in batches, each followed by update_task with the task's cumulative stats,
// and its PGN is uploaded at the end.
func TestPlaysTaskInBatches(t *testing.T) {
	resumed := protocol.Stats{Wins: 3, Losses: 1, Draws: 4, Pentanomial: [5]int{0, 0, 2, 2, 0}}
	tests := []struct {
		name        string
		concurrency int
		args        map[string]any
		numGames    int
		initial     *protocol.Stats
		wantPairs   []int
		pgnLevel    int // Config.PGNCompression: each level's upload decodes to the games
	}{
		{"SPRT in batches of 2*batch_size games", 2, sprtArgs(4), 24, nil, []int{4, 4, 4}, 0},
		{"fixed games, 4 games per core", 3, nil, 30, nil, []int{6, 6, 3}, gzip.BestSpeed},
		{"fixed games with 2 threads per game", 4, map[string]any{"threads": 2}, 20, nil, []int{4, 4, 2}, gzip.BestCompression},
		{"a resumed task plays what is left", 2, sprtArgs(4), 24, &resumed, []int{4, 4}, gzip.BestSpeed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := newStub(t, func(c call) answer {
				switch c.endpoint {
				case "request_task":
					return taskAnswer(3, tt.numGames, 1000, tt.args, tt.initial)
				case "update_task":
					return ok("task_alive", c.games() < tt.numGames)
				}
				return nil
			})
			cfg := testConfig(st, &syncBuffer{})
			cfg.Concurrency = tt.concurrency
			cfg.MaxTasks = 1
			cfg.PGNCompression = tt.pgnLevel
			obs := &recordingObserver{}
			cfg.Observer = obs
			src := newRecordingSource(7)
			r := start(t, context.Background(), cfg, src)
			if err := r.wait(t); err != nil {
				t.Fatalf("Run: %v", err)
			}

			pairs, batches := src.played()
			if !reflect.DeepEqual(pairs, tt.wantPairs) {
				t.Fatalf("played %v pairs per batch, want %v", pairs, tt.wantPairs)
			}
			cum := protocol.Stats{}
			if tt.initial != nil {
				cum = *tt.initial
			}
			updates := st.got("update_task")
			if len(updates) != len(batches) {
				t.Fatalf("%d updates for %d batches", len(updates), len(batches))
			}
			var pgn strings.Builder
			played := cum.Wins + cum.Losses + cum.Draws
			for i, u := range updates {
				if start := src.tasks[i].Start; start != 1000+played {
					t.Errorf("batch %d: opening offset %d, want %d", i, start, 1000+played)
				}
				cum = cum.Add(batches[i].Stats)
				played += 2 * pairs[i]
				if *u.req.Stats != cum {
					t.Errorf("update %d sent %+v, want the cumulative %+v", i, *u.req.Stats, cum)
				}
				if *u.req.RunID != testRunID || *u.req.TaskID != 3 || u.req.SPSA != nil {
					t.Errorf("update %d: run %s task %d spsa %v", i, *u.req.RunID, *u.req.TaskID, u.req.SPSA)
				}
				pgn.WriteString(batches[i].PGN)
			}
			if played != tt.numGames {
				t.Errorf("the task ended at %d games, want %d", played, tt.numGames)
			}
			uploads := st.got("upload_pgn")
			if len(uploads) != 1 {
				t.Fatalf("%d upload_pgn calls, want 1", len(uploads))
			}
			text, _ := decodePGN(*uploads[0].req.PGN)
			if text != pgn.String() || strings.Count(text, "[Event ") != 2*sumInts(pairs) {
				t.Errorf("uploaded PGN has %d games, want the %d played", strings.Count(text, "[Event "), 2*sumInts(pairs))
			}
			if n := len(st.got("failed_task", "stop_run", "beat")); n != 0 {
				t.Errorf("%d failed_task/stop_run/beat calls, want none", n)
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if !reflect.DeepEqual(obs.started, []int{3}) || len(obs.accepted) != len(updates) || obs.accepted[len(obs.accepted)-1] != cum ||
				obs.alive[len(obs.alive)-1] {
				t.Errorf("observer: started %v, accepted %v alive %v", obs.started, obs.accepted, obs.alive)
			}
		})
	}
}

// backedOffAfterTask reports whether the worker waited between the end of its first task and the
// next request_task's reply.
func backedOffAfterTask(log string) bool {
	_, rest, found := strings.Cut(log, "Task exited")
	if !found {
		return false
	}
	wait := strings.Index(rest, "Waiting before retrying")
	noTask := strings.Index(rest, "No tasks available")
	return wait >= 0 && (noTask < 0 || wait < noTask)
}

func sumInts(xs []int) (s int) {
	for _, x := range xs {
		s += x
	}
	return s
}

// fishtest's worker retries update_task 5 times, 15 s apart, but only after transport failures;
// a reply with "error" ends the task with failed_task at once.
func TestUpdateTaskRetries(t *testing.T) {
	tests := []struct {
		name        string
		answer      func(n int) answer
		wantUpdates int
		wantFailed  string // "" means no failed_task
		wantUpload  bool
		// wantUnanswered is how many update_task calls the observer hears got no usable reply.
		wantUnanswered int
	}{
		{"transport errors, then success", func(n int) answer {
			switch n {
			case 1:
				return plainText(503, "Service Unavailable")
			case 2:
				return dropConnection
			}
			return ok("task_alive", false)
		}, 3, "", true, 2},
		{"five transport errors fail the task", func(int) answer { return plainText(502, "Bad Gateway") }, 5, "Too many failed update attempts.", false, 5},
		{"a restart's 503 text is retried", func(n int) answer {
			if n < 4 {
				return plainText(503, "/api/update_task: server is shutting down; retry later")
			}
			return ok("task_alive", false)
		}, 4, "", true, 3},
		{"a JSON error while shutting down is final, as in fishtest's worker", func(int) answer {
			return jsonAnswer(503, map[string]any{"error": "/api/update_task: server is shutting down", "duration": 0.001})
		}, 1, "update_task refused: /api/update_task: server is shutting down", false, 0},
		{"a 200 error is not retried", func(int) answer {
			return ok("task_alive", false, "error", "Update_task: task 3 has incompatible stats")
		}, 1, "update_task refused: Update_task: task 3 has incompatible stats", false, 0},
		{"a 400 error is not retried", func(int) answer {
			return jsonAnswer(400, map[string]any{"error": "/api/update_task: Invalid task_id 3 for run", "duration": 0.001})
		}, 1, "update_task refused: /api/update_task: Invalid task_id 3", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := newStub(t, func(c call) answer {
				switch c.endpoint {
				case "request_task":
					return taskAnswer(3, 8, 0, sprtArgs(4), nil)
				case "update_task":
					return tt.answer(c.n)
				}
				return nil
			})
			cfg := testConfig(st, &syncBuffer{})
			cfg.MaxTasks = 1
			obs := &recordingObserver{}
			cfg.Observer = obs
			r := start(t, context.Background(), cfg, newRecordingSource(2))
			if err := r.wait(t); err != nil {
				t.Fatal(err)
			}
			wantEnd := TaskFinished
			if tt.wantFailed != "" {
				wantEnd = TaskFailed
			}
			obs.mu.Lock()
			if !reflect.DeepEqual(obs.ended, []TaskEnd{wantEnd}) {
				t.Errorf("observer told the task ended %v, want [%s]", obs.ended, wantEnd)
			}
			obs.mu.Unlock()
			updates := st.got("update_task")
			if len(updates) != tt.wantUpdates {
				t.Fatalf("%d update_task calls, want %d", len(updates), tt.wantUpdates)
			}
			obs.mu.Lock()
			if len(obs.unanswered) != tt.wantUnanswered {
				t.Errorf("observer heard of %d unanswered updates, want %d", len(obs.unanswered), tt.wantUnanswered)
			}
			for _, st := range obs.unanswered {
				if st != *updates[0].req.Stats {
					t.Errorf("observer heard of unanswered stats %+v, sent %+v", st, *updates[0].req.Stats)
				}
			}
			obs.mu.Unlock()
			for i := 1; i < len(updates); i++ {
				if *updates[i].req.Stats != *updates[0].req.Stats {
					t.Errorf("retry %d sent other stats", i)
				}
				if gap := updates[i].at.Sub(updates[i-1].at); gap < 15*time.Millisecond {
					t.Errorf("retry %d came after %v, want at least 15 ms", i, gap)
				}
			}
			failed := st.got("failed_task")
			switch {
			case tt.wantFailed == "" && len(failed) != 0:
				t.Errorf("failed_task sent: %q", *failed[0].req.Message)
			case tt.wantFailed != "" && (len(failed) != 1 || !strings.HasPrefix(*failed[0].req.Message, tt.wantFailed)):
				t.Errorf("failed_task calls %v, want one with %q", failed, tt.wantFailed)
			}
			if got := len(st.got("upload_pgn")) == 1; got != tt.wantUpload {
				t.Errorf("PGN uploaded: %v, want %v (only batches the server recorded)", got, tt.wantUpload)
			}
		})
	}
}

func TestStopsWhenTheServerSaysTaskAliveFalse(t *testing.T) {
	tests := []struct {
		name         string
		reply        answer
		wantAccepted int
		wantUpload   bool
	}{
		{"the update was the last one needed", ok("task_alive", false), 1, true},
		{"the task is no longer active", ok("task_alive", false, "info", "Update_task: task 0123/3 is not active"), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := newStub(t, func(c call) answer {
				switch c.endpoint {
				case "request_task":
					if c.n == 1 {
						return taskAnswer(3, 40, 0, sprtArgs(4), nil)
					}
				case "update_task":
					return tt.reply
				}
				return nil
			})
			log := &syncBuffer{}
			cfg := testConfig(st, log)
			obs := &recordingObserver{}
			cfg.Observer = obs
			r := start(t, context.Background(), cfg, newRecordingSource(3))
			waitFor(t, "a second request_task", func() bool { return len(st.got("request_task")) >= 2 })
			r.w.Stop()
			if err := r.wait(t); err != nil {
				t.Fatal(err)
			}
			if n := len(st.got("update_task")); n != 1 {
				t.Errorf("%d update_task calls, want 1: the task stops at task_alive false", n)
			}
			if n := len(st.got("failed_task", "stop_run")); n != 0 {
				t.Errorf("%d failed_task/stop_run calls: the task ended normally", n)
			}
			if got := len(st.got("upload_pgn")) == 1; got != tt.wantUpload {
				t.Errorf("PGN uploaded: %v, want %v", got, tt.wantUpload)
			}
			if backedOffAfterTask(log.String()) {
				t.Errorf("backed off after a task that ended normally:\n%s", log)
			}
			obs.mu.Lock()
			defer obs.mu.Unlock()
			if len(obs.accepted) != tt.wantAccepted {
				t.Errorf("observer told of %d accepted updates, want %d", len(obs.accepted), tt.wantAccepted)
			}
			if !reflect.DeepEqual(obs.ended, []TaskEnd{TaskFinished}) {
				t.Errorf("observer told the task ended %v, want [%s]", obs.ended, TaskFinished)
			}
		})
	}
}

// blockingSource plays a batch in d (or until its ctx ends) and tells started when it begins.
func blockingSource(d time.Duration, started chan<- struct{}) *recordingSource {
	src := newRecordingSource(4)
	src.play = func(ctx context.Context, t Task, pairs int, spsa *SPSAParams) (Batch, error) {
		if started != nil {
			select {
			case started <- struct{}{}:
			default:
			}
		}
		if err := sleep(ctx, d); err != nil {
			return Batch{}, err
		}
		return src.sim.Play(ctx, t, pairs, spsa)
	}
	return src
}

func TestHeartbeat(t *testing.T) {
	const period = 120 * time.Millisecond // 120 s / 1000

	t.Run("beats every period while a batch plays", func(t *testing.T) {
		t.Parallel()
		st := newStub(t, func(c call) answer {
			switch c.endpoint {
			case "request_task":
				return taskAnswer(3, 8, 0, sprtArgs(4), nil)
			case "update_task":
				return ok("task_alive", false)
			}
			return nil
		})
		cfg := testConfig(st, &syncBuffer{})
		cfg.MaxTasks = 1
		r := start(t, context.Background(), cfg, blockingSource(550*time.Millisecond, nil))
		if err := r.wait(t); err != nil {
			t.Fatal(err)
		}
		beats := st.got("beat")
		if len(beats) < 3 || len(beats) > 4 {
			t.Fatalf("%d beats during a 550 ms batch, want 3 or 4 (one per 120 ms)", len(beats))
		}
		last := st.got("request_task")[0].at
		for i, b := range beats {
			// The worker times a beat from when it sent the previous one; allow for the trip.
			if gap := b.at.Sub(last); gap < period-10*time.Millisecond {
				t.Errorf("beat %d came %v after the previous report, want at least %v", i+1, gap, period)
			}
			last = b.at
		}
		if up := st.got("update_task")[0]; up.at.Before(beats[len(beats)-1].at) {
			t.Error("a beat came after the task's update")
		}
		time.Sleep(2 * period)
		if n := len(st.got("beat")); n != len(beats) {
			t.Errorf("%d beats after the task ended", n-len(beats))
		}
	})

	t.Run("updates postpone beats", func(t *testing.T) {
		t.Parallel()
		st := newStub(t, func(c call) answer {
			switch c.endpoint {
			case "request_task":
				return taskAnswer(3, 10, 0, sprtArgs(1), nil)
			case "update_task":
				return ok("task_alive", c.games() < 10)
			}
			return nil
		})
		cfg := testConfig(st, &syncBuffer{})
		cfg.MaxTasks = 1
		// Batches of 20 ms against a 120 ms heartbeat: a loaded machine may stall a batch, but
		// not by five times its length.
		r := start(t, context.Background(), cfg, blockingSource(20*time.Millisecond, nil))
		if err := r.wait(t); err != nil {
			t.Fatal(err)
		}
		if n := len(st.got("update_task")); n != 5 {
			t.Fatalf("%d updates, want 5", n)
		}
		if n := len(st.got("beat")); n != 0 {
			t.Errorf("%d beats although an update came every 20 ms, want none", n)
		}
	})

	t.Run("a beat comes a period after each update", func(t *testing.T) {
		t.Parallel()
		st := newStub(t, func(c call) answer {
			switch c.endpoint {
			case "request_task":
				return taskAnswer(3, 6, 0, sprtArgs(1), nil)
			case "update_task":
				return ok("task_alive", c.games() < 6)
			}
			return nil
		})
		cfg := testConfig(st, &syncBuffer{})
		cfg.MaxTasks = 1
		// Batches of 200 ms against a 120 ms heartbeat: a beat 120 ms after every report, the
		// heartbeat woken at the time an update set, not at the one the beat before had set.
		r := start(t, context.Background(), cfg, blockingSource(200*time.Millisecond, nil))
		if err := r.wait(t); err != nil {
			t.Fatal(err)
		}
		updates, beats := st.got("update_task"), st.got("beat")
		if len(updates) != 3 || len(beats) != 3 {
			t.Fatalf("%d updates and %d beats, want 3 of each (a beat per 200 ms batch)", len(updates), len(beats))
		}
		last := st.got("request_task")[0].at
		for i, b := range beats {
			if gap := b.at.Sub(last); gap < period-10*time.Millisecond {
				t.Errorf("beat %d came %v after the previous report, want at least %v", i+1, gap, period)
			}
			if !b.at.Before(updates[i].at) {
				t.Errorf("beat %d came after update %d, want it between two updates", i+1, i+1)
			}
			last = updates[i].at
		}
	})

	for _, tt := range []struct {
		name  string
		reply answer
	}{
		{"task_alive false abandons the task", ok("task_alive", false)},
		{"an error abandons the task", ok("error", "beat: task is not active")},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := newStub(t, func(c call) answer {
				switch c.endpoint {
				case "request_task":
					if c.n == 1 {
						return taskAnswer(3, 8, 0, sprtArgs(4), nil)
					}
				case "beat":
					return tt.reply
				}
				return nil
			})
			log := &syncBuffer{}
			src := blockingSource(time.Minute, nil)
			r := start(t, context.Background(), testConfig(st, log), src)
			waitFor(t, "a second request_task", func() bool { return len(st.got("request_task")) >= 2 })
			r.w.Stop()
			if err := r.wait(t); err != nil {
				t.Fatal(err)
			}
			if n := len(st.got("beat")); n != 1 {
				t.Errorf("%d beats, want 1", n)
			}
			if n := len(st.got("update_task", "failed_task", "stop_run", "upload_pgn")); n != 0 {
				t.Errorf("%d calls about the abandoned task, want none: fishtest drops it silently", n)
			}
			if backedOffAfterTask(log.String()) {
				t.Errorf("backed off after an abandoned task; fishtest counts it a success:\n%s", log)
			}
		})
	}

	t.Run("a failed beat keeps the task", func(t *testing.T) {
		t.Parallel()
		st := newStub(t, func(c call) answer {
			switch c.endpoint {
			case "request_task":
				return taskAnswer(3, 8, 0, sprtArgs(4), nil)
			case "beat":
				return plainText(503, "busy")
			case "update_task":
				return ok("task_alive", false)
			}
			return nil
		})
		cfg := testConfig(st, &syncBuffer{})
		cfg.MaxTasks = 1
		r := start(t, context.Background(), cfg, blockingSource(300*time.Millisecond, nil))
		if err := r.wait(t); err != nil {
			t.Fatal(err)
		}
		if len(st.got("beat")) == 0 || len(st.got("update_task")) != 1 || len(st.got("failed_task")) != 0 {
			t.Errorf("beats %d, updates %d, failed %d: want beats, then the batch reported", len(st.got("beat")),
				len(st.got("update_task")), len(st.got("failed_task")))
		}
	})
}

func TestSPSA(t *testing.T) {
	t.Run("request_spsa before every batch, spsa results in every update", func(t *testing.T) {
		t.Parallel()
		st := newStub(t, func(c call) answer {
			switch c.endpoint {
			case "request_task":
				return taskAnswer(5, 16, 0, spsaArgs(), nil)
			case "request_spsa":
				return spsaAnswer(uint32(1000*c.n + 7))
			case "update_task":
				return ok("task_alive", c.games() < 16)
			}
			return nil
		})
		src := newRecordingSource(5)
		playOneTask(t, st, src)
		var order []string
		for _, c := range st.got("request_spsa", "update_task", "upload_pgn") {
			order = append(order, c.endpoint)
		}
		if want := []string{"request_spsa", "update_task", "request_spsa", "update_task"}; !reflect.DeepEqual(order, want) {
			t.Fatalf("calls %v, want %v (and no PGN upload for SPSA)", order, want)
		}
		_, batches := src.played()
		for i, u := range st.got("update_task") {
			b := batches[i].Stats
			want := protocol.SPSAResult{Wins: b.Wins, Losses: b.Losses, Draws: b.Draws, NumGames: 8, Sig: 1000*(i+1) + 7}
			if u.req.SPSA == nil || *u.req.SPSA != want {
				t.Errorf("update %d: spsa %+v, want %+v", i, u.req.SPSA, want)
			}
			p := src.spsa[i]
			if p == nil || p.Sig != uint32(want.Sig) || len(p.W) != 1 || p.W[0].Value != 110 || p.W[0].C != 10 || len(p.B) != 1 || p.B[0].Value != 90 {
				t.Errorf("batch %d played with %+v", i, p)
			}
		}
	})
	for _, tt := range []struct {
		name       string
		reply      answer
		wantFailed bool
	}{
		{"task_alive false ends the task", ok("task_alive", false, "info", "request_spsa_data: task is not active"), false},
		{"an error fails the task", ok("error", "request_spsa: Internal Server Error"), true},
		{"a server that stays away fails the task", plainText(503, "busy"), true},
		// Go's encoding/json would read "Name" into the field named "name"; fishtest's worker
		// (a Python dict) fails with a KeyError, and so must this one.
		{"keys in another case fail the task", ok("w_params", []map[string]any{{"Name": "A", "Value": 110.0, "C": 10.0, "R": 0.002, "Flip": 1}},
			"b_params", []map[string]any{{"Name": "A", "Value": 90.0}}, "sig", 7, "task_alive", true), true},
		{"parameters other than the run's fail the task", ok("w_params", []map[string]any{{"name": "B", "value": 110.0, "c": 10.0, "R": 0.002, "flip": 1}},
			"b_params", []map[string]any{{"name": "B", "value": 90.0}}, "sig", 7, "task_alive", true), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := newStub(t, func(c call) answer {
				switch c.endpoint {
				case "request_task":
					return taskAnswer(5, 16, 0, spsaArgs(), nil)
				case "request_spsa":
					return tt.reply
				}
				return nil
			})
			src := newRecordingSource(5)
			playOneTask(t, st, src)
			if pairs, _ := src.played(); len(pairs) != 0 || len(st.got("update_task")) != 0 {
				t.Errorf("played %v and sent %d updates without SPSA parameters", pairs, len(st.got("update_task")))
			}
			if got := len(st.got("failed_task")) == 1; got != tt.wantFailed {
				t.Errorf("failed_task sent: %v, want %v", got, tt.wantFailed)
			}
		})
	}
	t.Run("a restarting server's 503 is retried", func(t *testing.T) {
		t.Parallel()
		st := newStub(t, func(c call) answer {
			switch {
			case c.endpoint == "request_task":
				return taskAnswer(5, 8, 0, spsaArgs(), nil)
			case c.endpoint == "request_spsa" && c.n < 3:
				return plainText(503, "/api/request_spsa: server is shutting down; retry later")
			case c.endpoint == "update_task":
				return ok("task_alive", false)
			}
			return nil
		})
		src := newRecordingSource(5)
		playOneTask(t, st, src)
		if n, u, f := len(st.got("request_spsa")), len(st.got("update_task")), len(st.got("failed_task")); n != 3 || u != 1 || f != 0 {
			t.Errorf("request_spsa %d times, update_task %d, failed_task %d; want 3, 1 and 0", n, u, f)
		}
	})
}

func TestGameSourceFailures(t *testing.T) {
	tests := []struct {
		name         string
		err          error
		batch        Batch
		wantEndpoint string
		wantMessage  string
	}{
		{"an engine failure fails the task", errors.New("engine crashed"), Batch{}, "failed_task", "engine crashed"},
		{"a run error stops the run", &RunError{Message: "bench 123 does not match the signature 456"}, Batch{}, "stop_run", "bench 123 does not match"},
		{"a wrapped run error stops the run", errors.Join(errors.New("build"), &RunError{Message: "does not compile"}), Batch{}, "stop_run", "does not compile"},
		{"counts that do not add up fail the task", nil, Batch{Stats: protocol.Stats{Wins: 8, Pentanomial: [5]int{0, 0, 0, 0, 3}}}, "failed_task", "game source: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := newStub(t, func(c call) answer {
				if c.endpoint == "request_task" && c.n == 1 {
					return taskAnswer(3, 8, 0, sprtArgs(4), nil)
				}
				return nil
			})
			src := newRecordingSource(6)
			src.play = func(context.Context, Task, int, *SPSAParams) (Batch, error) { return tt.batch, tt.err }
			log := &syncBuffer{}
			r := start(t, context.Background(), testConfig(st, log), src)
			waitFor(t, "a second request_task", func() bool { return len(st.got("request_task")) >= 2 })
			r.w.Stop()
			if err := r.wait(t); err != nil {
				t.Fatal(err)
			}
			got := st.got("failed_task", "stop_run", "update_task", "upload_pgn")
			if len(got) != 1 || got[0].endpoint != tt.wantEndpoint || !strings.Contains(*got[0].req.Message, tt.wantMessage) ||
				*got[0].req.RunID != testRunID || *got[0].req.TaskID != 3 {
				t.Fatalf("calls %+v, want one %s with %q", got, tt.wantEndpoint, tt.wantMessage)
			}
			if d := loggedDelays(log.String()); len(d) == 0 || d[0] != "15ms" {
				t.Errorf("delays %v: a failed task is followed by backoff", d)
			}
		})
	}
}

func TestGracefulStop(t *testing.T) {
	stopFile := func(t *testing.T) (Config, func(*Worker)) {
		path := filepath.Join(t.TempDir(), "fish.exit")
		return Config{StopFile: path}, func(*Worker) {
			if err := os.WriteFile(path, nil, 0o644); err != nil {
				t.Error(err)
			}
		}
	}
	stopCall := func(*testing.T) (Config, func(*Worker)) { return Config{}, (*Worker).Stop }
	for _, tt := range []struct {
		name    string
		setup   func(*testing.T) (Config, func(*Worker))
		message string
	}{
		{"Stop finishes the batch", stopCall, "Task stopped by a shutdown request."},
		{"the stop file finishes the batch", stopFile, "Task stopped by 'fish.exit'."},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := newStub(t, func(c call) answer {
				if c.endpoint == "request_task" {
					return taskAnswer(3, 40, 0, sprtArgs(4), nil)
				}
				return nil
			})
			extra, stop := tt.setup(t)
			cfg := testConfig(st, &syncBuffer{})
			cfg.StopFile = extra.StopFile
			started := make(chan struct{}, 1)
			src := blockingSource(150*time.Millisecond, started)
			r := start(t, context.Background(), cfg, src)
			<-started
			stop(r.w)
			if err := r.wait(t); err != nil {
				t.Fatalf("Run: %v, want nil after a graceful stop", err)
			}
			var order []string
			for _, c := range st.got() {
				if c.endpoint != "beat" { // a 150 ms batch may see one
					order = append(order, c.endpoint)
				}
			}
			want := []string{"request_version", "request_task", "update_task", "failed_task", "upload_pgn"}
			if !reflect.DeepEqual(order, want) {
				t.Fatalf("calls %v, want %v", order, want)
			}
			if g := st.got("update_task")[0].games(); g != 8 {
				t.Errorf("the finished batch reported %d games, want 8", g)
			}
			if msg := *st.got("failed_task")[0].req.Message; msg != tt.message {
				t.Errorf("failed_task message %q, want %q", msg, tt.message)
			}
		})
	}

	t.Run("Stop while backing off returns at once", func(t *testing.T) {
		t.Parallel()
		st := newStub(t, nil)
		cfg := testConfig(st, &syncBuffer{})
		cfg.TimeScale = 1 // a real 15 s backoff
		r := start(t, context.Background(), cfg, newRecordingSource(1))
		waitFor(t, "a request_task", func() bool { return len(st.got("request_task")) == 1 })
		t0 := time.Now()
		r.w.Stop()
		if err := r.wait(t); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(t0); d > 2*time.Second {
			t.Errorf("Run returned %v after Stop, during a 15 s backoff", d)
		}
	})

	t.Run("the stop file is seen while backing off", func(t *testing.T) {
		t.Parallel()
		st := newStub(t, nil)
		cfg := testConfig(st, &syncBuffer{})
		cfg.TimeScale = 1
		cfg.StopFile = filepath.Join(t.TempDir(), "fish.exit")
		r := start(t, context.Background(), cfg, newRecordingSource(1))
		waitFor(t, "a request_task", func() bool { return len(st.got("request_task")) == 1 })
		if err := os.WriteFile(cfg.StopFile, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := r.wait(t); err != nil {
			t.Fatal(err)
		}
		if n := len(st.got("request_task")); n != 1 {
			t.Errorf("%d request_task calls, want 1", n)
		}
	})
}

// A cancelled context is a worker that vanished: Run returns at once and nothing more reaches the
// server, not even a beat.
func TestContextCancelSendsNothingMore(t *testing.T) {
	for _, tt := range []struct {
		name     string
		duringPl bool
	}{
		{"during a batch", true},
		{"while backing off", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			st := newStub(t, func(c call) answer {
				if c.endpoint == "request_task" && tt.duringPl {
					return taskAnswer(3, 40, 0, sprtArgs(4), nil)
				}
				return nil
			})
			cfg := testConfig(st, &syncBuffer{})
			if !tt.duringPl {
				cfg.TimeScale = 1
			}
			started := make(chan struct{}, 1)
			src := blockingSource(time.Minute, started)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			r := start(t, ctx, cfg, src)
			if tt.duringPl {
				<-started
				waitFor(t, "a beat", func() bool { return len(st.got("beat")) > 0 })
			} else {
				waitFor(t, "a request_task", func() bool { return len(st.got("request_task")) == 1 })
			}
			t0 := time.Now()
			cancel()
			err := r.wait(t)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Run: %v, want context.Canceled", err)
			}
			if d := time.Since(t0); d > time.Second {
				t.Errorf("Run returned %v after the cancel", d)
			}
			n := len(st.got())
			time.Sleep(300 * time.Millisecond) // more than two heartbeat periods
			if got := st.got(); len(got) != n {
				t.Errorf("%d calls after Run returned: %s", len(got)-n, got[n].endpoint)
			}
			if k := len(st.got("update_task", "failed_task", "stop_run", "upload_pgn")); k != 0 {
				t.Errorf("%d calls about the task; a vanished worker sends nothing", k)
			}
		})
	}
}

func TestRunTwice(t *testing.T) {
	st := newStub(t, nil)
	w, err := New(testConfig(st, &syncBuffer{}), &SimSource{})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	if err := w.Run(context.Background()); err != nil {
		t.Fatalf("first Run after Stop: %v", err)
	}
	if err := w.Run(context.Background()); err == nil {
		t.Fatal("second Run: no error")
	}
}

var pacedRE = regexp.MustCompile(`msg="Waiting before retrying, as the server asks" .*delay=(\S+)`)

// A "too busy" reply with Shoal's retry_after makes the worker wait that long, in place of its
// own backoff, which does not grow meanwhile; a hint above the longest backoff is cut to it;
// replies without the hint get fishtest's backoff.
func TestRequestTaskRetryAfterPacesTheWorker(t *testing.T) {
	busy := func(hint any) answer {
		return ok("task_waiting", false, "info", "Request_task: the server is currently too busy...", "retry_after", hint)
	}
	st := newStub(t, func(c call) answer {
		if c.endpoint != "request_task" {
			return nil
		}
		switch c.n {
		case 1, 2:
			return busy(0.04)
		case 5:
			return busy(1e6)
		}
		return ok("task_waiting", false)
	})
	log := &syncBuffer{}
	r := start(t, context.Background(), testConfig(st, log), newRecordingSource(1))
	waitFor(t, "6 request_task calls", func() bool { return len(st.got("request_task")) >= 6 })
	r.w.Stop()
	if err := r.wait(t); err != nil {
		t.Fatal(err)
	}
	calls := st.got("request_task")
	for i := 1; i <= 2; i++ {
		if gap := calls[i].at.Sub(calls[i-1].at); gap < 40*time.Millisecond {
			t.Errorf("request_task %d came %v after a retry_after of 40 ms", i+1, gap)
		}
	}
	var paced []string
	for _, m := range pacedRE.FindAllStringSubmatch(log.String(), -1) {
		paced = append(paced, m[1])
	}
	if want := []string{"40ms", "40ms", "900ms"}; !reflect.DeepEqual(paced, want) {
		t.Errorf("paced waits %v, want %v (the last cut to the longest backoff, 900 s / 1000)", paced, want)
	}
	if got := loggedDelays(log.String()); len(got) < 2 || !reflect.DeepEqual(got[:2], []string{"15ms", "30ms"}) {
		t.Errorf("backoff delays %v, want 15ms, 30ms: the paced waits did not grow the backoff", got)
	}
}

// cancelOnReply is an observer that ends the worker's context as soon as update_task's reply
// has arrived, before the worker reads it: a fleet stopping its workers at that moment.
type cancelOnReply struct {
	*recordingObserver
	cancel context.CancelFunc
}

func (o cancelOnReply) Request(endpoint string, took time.Duration, status int, reply map[string]any, err error) {
	o.recordingObserver.Request(endpoint, took, status, reply, err)
	if endpoint == "update_task" && status == http.StatusOK {
		o.cancel()
	}
}

// An update_task whose reply arrived is taken in even if the worker's context ends just then:
// the server recorded it, so the observer hears it was accepted (and the worker stops).
func TestUpdateAcceptedAsTheWorkerStops(t *testing.T) {
	st := newStub(t, func(c call) answer {
		switch c.endpoint {
		case "request_task":
			return taskAnswer(3, 8, 0, sprtArgs(4), nil)
		case "update_task":
			return ok("task_alive", true)
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	obs := cancelOnReply{&recordingObserver{}, cancel}
	cfg := testConfig(st, &syncBuffer{})
	cfg.Observer = obs
	r := start(t, ctx, cfg, newRecordingSource(2))
	if err := r.wait(t); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run returned %v, want context.Canceled", err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(st.got("update_task")) != 1 || len(obs.accepted) != 1 || len(obs.unanswered) != 0 {
		t.Errorf("%d update_task calls, observer heard %d accepted and %d unanswered; want 1, 1, 0",
			len(st.got("update_task")), len(obs.accepted), len(obs.unanswered))
	}
}
