package worker

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker/build/buildtest"
)

// This file holds the scripted stub server the worker tests talk to, in place of Shoal's server
// (which the worker may not import). Every request body it receives is validated as the server
// validates it, so a worker that sends anything fishtest would refuse fails the test.

const testRunID = "0123456789abcdef01234567"

// call is one request the stub received.
type call struct {
	endpoint string
	at       time.Time
	req      *protocol.Request // nil for request_version
	n        int               // 1 for the first call to this endpoint, 2 for the second...
}

func (c call) games() int {
	if c.req == nil || c.req.Stats == nil {
		return -1
	}
	return c.req.Stats.Wins + c.req.Stats.Losses + c.req.Stats.Draws
}

// answer writes the stub's response to a call.
type answer func(w http.ResponseWriter)

// script decides the answer to a call; nil means the default answer.
type script func(c call) answer

type stub struct {
	t      *testing.T
	srv    *httptest.Server
	script script
	// files, if set, answers the file contract's paths (sources, networks, books).
	files http.Handler

	mu    sync.Mutex
	calls []call
	count map[string]int
}

func newStub(t *testing.T, s script) *stub { return newStubWithFiles(t, s, nil) }

// newStubWithFiles is a stub whose file contract's paths files answers.
func newStubWithFiles(t *testing.T, s script, files http.Handler) *stub {
	t.Helper()
	st := &stub{t: t, script: s, files: files, count: map[string]int{}}
	st.srv = httptest.NewServer(http.HandlerFunc(st.serve))
	t.Cleanup(st.srv.Close)
	return st
}

func (st *stub) serve(w http.ResponseWriter, r *http.Request) {
	if st.files != nil && buildtest.Handles(r.URL.Path) {
		st.files.ServeHTTP(w, r)
		return
	}
	endpoint, ok := strings.CutPrefix(r.URL.Path, "/api/")
	if r.Method != http.MethodPost || !ok {
		st.t.Errorf("unexpected %s %s", r.Method, r.URL.Path)
		http.NotFound(w, r)
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		st.t.Errorf("%s: Content-Type %q, want application/json", endpoint, ct)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		st.t.Errorf("%s: read body: %v", endpoint, err)
		return
	}
	c := call{endpoint: endpoint, at: time.Now()}
	if endpoint == "request_version" {
		if _, _, err := protocol.DecodeAccess(body); err != nil {
			st.t.Errorf("request_version: body refused by the server's validation: %v\n%s", err, body)
		}
	} else {
		c.req, err = protocol.DecodeRequest(body, nil)
		if err != nil {
			st.t.Errorf("%s: body refused by the server's validation: %v\n%s", endpoint, err, body)
		} else {
			st.checkShape(c)
		}
	}
	st.mu.Lock()
	st.count[endpoint]++
	c.n = st.count[endpoint]
	st.calls = append(st.calls, c)
	st.mu.Unlock()

	var a answer
	if st.script != nil {
		a = st.script(c)
	}
	if a == nil {
		a = defaultAnswer(endpoint)
	}
	a(w)
}

// checkShape checks what each endpoint needs beyond the schema, as fishtest's handlers do.
func (st *stub) checkShape(c call) {
	r := c.req
	needTask := c.endpoint != "request_task" && c.endpoint != "worker_log"
	if needTask && (r.RunID == nil || r.TaskID == nil) {
		st.t.Errorf("%s without run_id and task_id", c.endpoint)
	}
	switch c.endpoint {
	case "update_task":
		if r.Stats == nil {
			st.t.Errorf("update_task without stats")
		}
	case "upload_pgn":
		if r.PGN == nil {
			st.t.Errorf("upload_pgn without pgn")
		} else if _, err := decodePGN(*r.PGN); err != nil {
			st.t.Errorf("upload_pgn: %v", err)
		}
	case "failed_task", "stop_run":
		if r.Message == nil {
			st.t.Errorf("%s without message", c.endpoint)
		}
	}
}

func decodePGN(b64 string) (string, error) {
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return "", err
	}
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return "", err
	}
	text, err := io.ReadAll(zr)
	return string(text), err
}

// calls returns the calls so far, optionally only those to the given endpoints.
func (st *stub) got(endpoints ...string) []call {
	st.mu.Lock()
	defer st.mu.Unlock()
	var out []call
	for _, c := range st.calls {
		if len(endpoints) == 0 || contains(endpoints, c.endpoint) {
			out = append(out, c)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// Answers.

func jsonAnswer(status int, v map[string]any) answer {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
}

func ok(kv ...any) answer {
	m := map[string]any{"duration": 0.001}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i].(string)] = kv[i+1]
	}
	return jsonAnswer(http.StatusOK, m)
}

func plainText(status int, text string) answer {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, text)
	}
}

// dropConnection closes the connection without a response.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	_ = conn.Close()
}

func defaultAnswer(endpoint string) answer {
	switch endpoint {
	case "request_version":
		return ok("version", protocol.Version)
	case "request_task":
		return ok("task_waiting", false)
	case "update_task", "beat":
		return ok("task_alive", true)
	case "request_spsa":
		return spsaAnswer(7)
	default:
		return ok()
	}
}

func spsaAnswer(sig uint32) answer {
	return ok("w_params", []map[string]any{{"name": "A", "value": 110.0, "c": 10.0, "R": 0.002, "flip": 1}},
		"b_params", []map[string]any{{"name": "A", "value": 90.0}},
		"sig", sig, "task_alive", true)
}

// taskAnswer is request_task's reply with a task of the test run.
func taskAnswer(taskID, numGames, start int, args map[string]any, stats *protocol.Stats) answer {
	myTask := map[string]any{"num_games": numGames, "start": start}
	if stats != nil {
		myTask["stats"] = stats
	} else {
		myTask["stats"] = protocol.Stats{}
	}
	full := map[string]any{
		"base_tag": "master", "new_tag": "patch", "num_games": 40000, "tc": "10+0.1", "threads": 1,
		"book": "UHO_Lichess_4852_v1.epd", "book_depth": "8", "base_options": "Hash=16", "new_options": "Hash=16",
		"resolved_base": strings.Repeat("b", 40), "resolved_new": strings.Repeat("a", 40),
		"base_signature": "123", "new_signature": "456", "tests_repo": "https://github.com/official-stockfish/Stockfish",
	}
	for k, v := range args {
		full[k] = v
	}
	return ok("run", map[string]any{"_id": testRunID, "args": full, "my_task": myTask}, "task_id", taskID)
}

func sprtArgs(batchSize int) map[string]any {
	return map[string]any{"sprt": map[string]any{"alpha": 0.05, "beta": 0.05, "elo0": 0, "elo1": 2,
		"elo_model": "normalized", "state": "", "llr": 0, "batch_size": batchSize}}
}

func spsaArgs() map[string]any {
	return map[string]any{"spsa": map[string]any{"A": 100, "alpha": 0.602, "gamma": 0.101, "raw_params": "A,100,0,200,10,0.0020",
		"iter": 0, "num_iter": 1000, "params": []map[string]any{{"name": "A", "start": 100, "min": 0, "max": 200,
			"c_end": 10, "r_end": 0.002, "c": 10, "a_end": 0.2, "a": 0.2, "theta": 100}}}}
}

// Worker setup.

// syncBuffer is a log sink safe for the worker's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// testTimeScale makes fishtest's periods short: backoff 15 ms to 900 ms, heartbeat 120 ms,
// update retries 15 ms apart.
const testTimeScale = 1000

func testConfig(st *stub, log io.Writer) Config {
	return Config{
		ServerURL: st.srv.URL, Username: "alice", Password: "secret", Concurrency: 2,
		UniqueKey: NewUniqueKey("test"), TimeScale: testTimeScale,
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug})),
	}
}

// running is a worker whose Run is in progress.
type running struct {
	w    *Worker
	done chan struct{}
	err  error
}

func start(t *testing.T, ctx context.Context, cfg Config, src GameSource) *running {
	t.Helper()
	w, err := New(cfg, src)
	if err != nil {
		t.Fatal(err)
	}
	r := &running{w: w, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.err = w.Run(ctx)
	}()
	t.Cleanup(func() {
		w.Stop()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Errorf("worker did not return")
		}
	})
	return r
}

// playOneTask runs a worker with the test config against st for one task, to its end.
func playOneTask(t *testing.T, st *stub, src GameSource) {
	t.Helper()
	cfg := testConfig(st, &syncBuffer{})
	cfg.MaxTasks = 1
	if err := start(t, context.Background(), cfg, src).wait(t); err != nil {
		t.Fatal(err)
	}
}

// wait waits for Run to return and gives its error.
func (r *running) wait(t *testing.T) error {
	t.Helper()
	select {
	case <-r.done:
		return r.err
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s")
		return nil
	}
}

// Game sources.

// recordingSource plays with a seeded SimSource, or with play when set, and records every call.
type recordingSource struct {
	play func(ctx context.Context, t Task, pairs int, spsa *SPSAParams) (Batch, error)
	sim  *SimSource

	mu      sync.Mutex
	tasks   []Task
	pairs   []int
	spsa    []*SPSAParams
	batches []Batch
}

func newRecordingSource(seed uint64) *recordingSource {
	return &recordingSource{sim: &SimSource{Elo: 5, DrawRatio: 0.5, Rand: rand.New(rand.NewPCG(seed, 1))}}
}

func (s *recordingSource) Play(ctx context.Context, t Task, pairs int, spsa *SPSAParams) (Batch, error) {
	s.mu.Lock()
	s.tasks = append(s.tasks, t)
	s.pairs = append(s.pairs, pairs)
	s.spsa = append(s.spsa, spsa)
	s.mu.Unlock()
	var b Batch
	var err error
	if s.play != nil {
		b, err = s.play(ctx, t, pairs, spsa)
	} else {
		b, err = s.sim.Play(ctx, t, pairs, spsa)
	}
	if err == nil {
		s.mu.Lock()
		s.batches = append(s.batches, b)
		s.mu.Unlock()
	}
	return b, err
}

func (s *recordingSource) played() (pairs []int, batches []Batch) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.pairs...), append([]Batch(nil), s.batches...)
}

// recordingObserver records what an Observer is told.
type recordingObserver struct {
	mu       sync.Mutex
	requests []string
	statuses []int
	started  []int
	accepted []protocol.Stats
	alive    []bool
	ended    []TaskEnd
	// unanswered are the cumulative stats of update_task calls that got no usable reply.
	unanswered []protocol.Stats
}

func (o *recordingObserver) Request(endpoint string, took time.Duration, status int, reply map[string]any, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.requests = append(o.requests, endpoint)
	o.statuses = append(o.statuses, status)
}

func (o *recordingObserver) TaskStarted(runID string, taskID, numGames int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.started = append(o.started, taskID)
}

func (o *recordingObserver) TaskEnded(runID string, taskID int, how TaskEnd) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.ended = append(o.ended, how)
}

func (o *recordingObserver) Unanswered(runID string, taskID int, cumulative protocol.Stats) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.unanswered = append(o.unanswered, cumulative)
}

func (o *recordingObserver) Accepted(runID string, taskID int, cumulative protocol.Stats, alive bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.accepted = append(o.accepted, cumulative)
	o.alive = append(o.alive, alive)
}
