package api_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/api"
	"github.com/shoal-chess/shoal/server/guard"
)

// The tests named TestSecurity... perform one finding of the security audit each (docs/SECURITY.md)
// and assert that it is refused, or harmless, and that nothing changed: `go test -run Security
// ./...` runs them all. The web UI's are with the UI's tests.

// Finding 2, the upload slots: clients that open upload_pgn calls and send no body (or no
// credentials) hold no upload slot, so a real worker's upload still goes through; a call with a
// wrong password is refused at once even with every slot busy.
func TestSecurityIdleUploadsHoldNoSlot(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 10000})
	f.post("/api/request_task", call(1, nil))
	addr := strings.TrimPrefix(f.url, "http://")
	for range api.MaxConcurrentUploads + 8 {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		// Headers promising a body that never comes.
		fmt.Fprintf(conn, "POST /api/upload_pgn HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{", addr)
	}
	time.Sleep(100 * time.Millisecond) // let the server take them in
	body := call(1, map[string]any{"run_id": id, "task_id": 0})
	body["pgn"] = pgnUpload(t, "[Event \"x\"]\n1. e4 e5 *\n")
	done := make(chan int, 1)
	go func() {
		code, _ := f.post("/api/upload_pgn", body)
		done <- code
	}()
	select {
	case code := <-done:
		if code != http.StatusOK {
			t.Fatalf("a worker's upload beside idle ones = %d, want 200", code)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a worker's upload waited behind connections that sent nothing")
	}
	if _, err := f.db.PGNs.Get(context.Background(), id+"-0"); err != nil {
		t.Errorf("the upload was not stored: %v", err)
	}

	// Every slot busy: a wrong password is still answered at once, and stores nothing.
	for range api.MaxConcurrentUploads {
		if err := api.Uploads(f.srv.API()).Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for range api.MaxConcurrentUploads {
			api.Uploads(f.srv.API()).Release()
		}
	}()
	bad := call(1, map[string]any{"run_id": id, "task_id": 0, "password": "guess"})
	bad["pgn"] = pgnUpload(t, "[Event \"y\"]\n1. d4 d5 *\n")
	if code, out := f.post("/api/upload_pgn", bad); code != http.StatusUnauthorized {
		t.Errorf("a wrong password with every slot busy = %d %v, want 401", code, out)
	}
}

// gzipBomb is gzip data that inflates to n zero bytes: one member of 1 MiB of zeros, repeated
// (a sequence of gzip members is one gzip stream).
func gzipBomb(t *testing.T, n int) []byte {
	t.Helper()
	member := gzipped(t, string(make([]byte, 1<<20)))
	return bytes.Repeat(member, n>>20)
}

// Finding 10: a task holds one PGN however often its worker uploads, a gzip bomb is refused
// while it is inflated (nothing stored), another worker cannot upload for the task, and a PGN
// stored before the checks is sent as a file, never with Content-Encoding, so that no client
// inflates it on its own.
func TestSecurityPGNUploadsOnePerTaskNoBombs(t *testing.T) {
	// The inflated limit is lowered so that a bomb twice its size stays small; the uploads
	// before the bomb are far below it.
	f := newFleetWith(t, func(d *server.Deps) { d.MaxPGNText = 4 << 20 })
	ctx := context.Background()
	id := f.newRun(map[string]any{"num_games": 10000})
	if code, out := f.post("/api/request_task", call(1, nil)); code != http.StatusOK || out["task_id"] == nil {
		t.Fatalf("request_task: %d %v", code, out)
	}
	pgns := rundbtest.Collection(t, f.db, "pgns")
	stored := func() int64 {
		n, err := pgns.CountDocuments(ctx, bson.D{{Key: "run_id", Value: id + "-0"}})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	for i := range 5 {
		body := call(1, map[string]any{"run_id": id, "task_id": 0})
		body["pgn"] = pgnUpload(t, fmt.Sprintf("[Event \"upload %d\"]\n1. e4 e5 *\n", i))
		if code, out := f.post("/api/upload_pgn", body); code != http.StatusOK {
			t.Fatalf("upload %d: %d %v", i, code, out)
		}
	}
	if n := stored(); n != 1 {
		t.Errorf("five uploads for one task stored %d PGNs, want 1", n)
	}
	p, err := f.db.PGNs.Get(ctx, id+"-0")
	if err != nil {
		t.Fatal(err)
	}
	if text := gunzip(t, p.PGNZip); !strings.Contains(text, "upload 4") {
		t.Errorf("the stored PGN is not the last upload: %q", text)
	}

	bomb := call(1, map[string]any{"run_id": id, "task_id": 0})
	bomb["pgn"] = base64.StdEncoding.EncodeToString(gzipBomb(t, 8<<20))
	if code, out := f.post("/api/upload_pgn", bomb); code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["error"]), "inflates to more than") {
		t.Errorf("a gzip bomb = %d %v, want 400 naming the limit", code, out)
	}
	broken := call(1, map[string]any{"run_id": id, "task_id": 0})
	broken["pgn"] = base64.StdEncoding.EncodeToString(gzipped(t, "1. e4 e5 *")[:12])
	if code, out := f.post("/api/upload_pgn", broken); code != http.StatusBadRequest {
		t.Errorf("truncated gzip = %d %v, want 400", code, out)
	}
	other := call(2, map[string]any{"run_id": id, "task_id": 0})
	other["pgn"] = pgnUpload(t, "[Event \"not mine\"]\n1. d4 *\n")
	if code, out := f.post("/api/upload_pgn", other); code != http.StatusBadRequest {
		t.Errorf("another worker's upload for the task = %d %v, want 400", code, out)
	}
	if p, err := f.db.PGNs.Get(ctx, id+"-0"); err != nil || !strings.Contains(gunzip(t, p.PGNZip), "upload 4") || stored() != 1 {
		t.Errorf("refused uploads changed the stored PGN (err %v)", err)
	}

	// A bomb stored before the checks (or by another server) goes out as a file to save.
	legacy := gzipBomb(t, 8<<20)
	if err := f.db.PGNs.Insert(ctx, &rundb.PGN{RunID: id + "-7", PGNZip: legacy, Size: len(legacy)}); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(f.url + "/api/pgn/" + id + "-7.pgn")
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" ||
		resp.Header.Get("Content-Type") != "application/gzip" || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment") ||
		!bytes.Equal(got, legacy) {
		t.Errorf("stored PGN served as %d %v with %d bytes, want the gzip file as an attachment, as stored",
			resp.StatusCode, resp.Header, len(got))
	}
}

func gunzip(t *testing.T, data []byte) string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Finding 15: a worker's country is believed only from the local proxy, and only as two
// letters; a client talking to Shoal directly cannot choose its own.
func TestSecurityCountryCodeOnlyFromTheProxy(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 100000})
	cases := []struct {
		remote, header, want string
	}{
		{"192.0.2.1:5000", "FR", "?"},        // a client directly: not believed
		{"127.0.0.1:5000", "de", "DE"},       // the proxy's header
		{"127.0.0.1:5000", "<b>DE</b>", "?"}, // not a country code
		{"127.0.0.1:5000", strings.Repeat("A", 300), "?"},
	}
	for i, c := range cases {
		b, _ := json.Marshal(call(i+1, nil))
		req := httptest.NewRequest(http.MethodPost, "/api/request_task", bytes.NewReader(b))
		req.RemoteAddr = c.remote
		req.Header.Set("X-Country-Code", c.header)
		w := httptest.NewRecorder()
		f.handler.ServeHTTP(w, req)
		var out map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || out["task_id"] == nil {
			t.Fatalf("request_task from %s: %d %s", c.remote, w.Code, w.Body)
		}
		task := int(out["task_id"].(float64))
		if got := f.run(id).Tasks[task].WorkerInfo.CountryCode; got != c.want {
			t.Errorf("X-Country-Code %.20q from %s stored as %q, want %q", c.header, c.remote, got, c.want)
		}
	}
}

// An upload whose body is in is not cut off by the server's read timeout while it waits for an
// upload slot: the read deadlines bound the arrival of the body, not the work after it.
func TestSecurityPacedUploadIsNotCutOffAfterItsBody(t *testing.T) {
	f := newFleet(t)
	srv := httptest.NewUnstartedServer(f.handler)
	srv.Config.ReadTimeout = 300 * time.Millisecond
	srv.Start()
	defer srv.Close()
	id := f.newRun(map[string]any{"num_games": 10000})
	f.post("/api/request_task", call(1, nil))
	for range api.MaxConcurrentUploads {
		if err := api.Uploads(f.srv.API()).Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		time.Sleep(1500 * time.Millisecond) // five read timeouts after the body is in
		for range api.MaxConcurrentUploads {
			api.Uploads(f.srv.API()).Release()
		}
	}()
	body := call(1, map[string]any{"run_id": id, "task_id": 0})
	body["pgn"] = pgnUpload(t, "[Event \"late\"]\n1. e4 e5 *\n")
	raw, _ := json.Marshal(body)
	resp, err := http.Post(srv.URL+"/api/upload_pgn", "application/json", bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("upload while the slots were busy: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("upload while the slots were busy = %d, want 200 once a slot is free", resp.StatusCode)
	}
	if _, err := f.db.PGNs.Get(context.Background(), id+"-0"); err != nil {
		t.Errorf("the upload was not stored: %v", err)
	}
}

// Finding 8, the worker API: 60 guesses for one account from 60 addresses are no longer all
// checked; the owner's fleet keeps working.
func TestSecurityAPIGuessesFromManyAddressesAreLimitedPerUsername(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 10000})
	if code, _ := f.post("/api/request_task", call(1, nil)); code != http.StatusOK {
		t.Fatal("the owner's fleet cannot start")
	}
	before := f.db.Users.SlowChecks()
	statuses := map[int]int{}
	for a := range 60 {
		b, _ := json.Marshal(call(1, map[string]any{"password": fmt.Sprintf("guess-%d", a)}))
		req := httptest.NewRequest(http.MethodPost, "/api/request_version", bytes.NewReader(b))
		req.RemoteAddr = fmt.Sprintf("203.0.113.%d:5000", a+1)
		w := httptest.NewRecorder()
		f.handler.ServeHTTP(w, req)
		statuses[w.Code]++
	}
	if checked := f.db.Users.SlowChecks() - before; checked > guard.APILoginPerUserBurst+1 {
		t.Errorf("%d of 60 guesses were checked (%v), want at most the username's burst of %d", checked, statuses, guard.APILoginPerUserBurst)
	}
	if statuses[http.StatusTooManyRequests] == 0 {
		t.Errorf("no guess was refused: %v", statuses)
	}
	if code, out := f.post("/api/update_task", call(1, map[string]any{"run_id": id, "task_id": 0,
		"stats": map[string]any{"wins": 0, "losses": 0, "draws": 0, "crashes": 0, "time_losses": 0, "pentanomial": []int{0, 0, 0, 0, 0}}})); code != http.StatusOK {
		t.Errorf("the owner's worker during the guesses = %d %v, want 200", code, out)
	}
}

// Finding 4, at the API: a worker reporting a concurrency of 2**40 (or a max_memory beyond any
// machine) is refused with a 400 naming the field, and no task is made for it.
func TestSecurityWorkerSizesAreBounded(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 400000})
	for field, value := range map[string]any{"concurrency": int64(1) << 40, "max_memory": int64(1) << 40} {
		b := call(1, nil)
		wi := workerInfo(1)
		wi[field] = value
		b["worker_info"] = wi
		code, out := f.post("/api/request_task", b)
		if code != http.StatusBadRequest || !strings.Contains(fmt.Sprint(out["error"]), "worker_info."+field) {
			t.Errorf("request_task with %s %d = %d %v, want 400 naming it", field, value, code, out)
		}
	}
	if r := f.run(id); len(r.Tasks) != 0 || r.Cores != 0 {
		t.Errorf("refused requests made %d tasks, %d cores", len(r.Tasks), r.Cores)
	}
}

// Finding 11: one account asking for tasks in a loop is told to wait once past its burst (two
// requests per machine it may run), before it reaches the scheduler's semaphore; another
// account is served meanwhile.
func TestSecurityRequestTaskFloodIsLimitedPerAccount(t *testing.T) {
	f := newFleet(t)
	f.newRun(map[string]any{"num_games": 400000})
	limited := 0
	for range 3 * rundb.DefaultMachineLimit * api.TaskRequestBurstPerMachine {
		b, _ := json.Marshal(call(1, nil))
		req := httptest.NewRequest(http.MethodPost, "/api/request_task", bytes.NewReader(b))
		req.RemoteAddr = "203.0.113.5:4000"
		w := httptest.NewRecorder()
		f.handler.ServeHTTP(w, req)
		var out map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || w.Code != http.StatusOK {
			t.Fatalf("request_task = %d %s", w.Code, w.Body)
		}
		if out["info"] == api.TaskLimitedInfo {
			if out["task_waiting"] != false {
				t.Fatalf("a limited request_task = %v, want task_waiting false (the worker waits and asks again)", out)
			}
			if wait, ok := out["retry_after"].(float64); !ok || wait < api.PaceFloor.Seconds() {
				t.Fatalf("a limited request_task = %v, want a retry_after of at least %v", out, api.PaceFloor)
			}
			if limited == 0 {
				checkGolden(t, "request_task over the account's rate", w.Code, w.Body.Bytes(), http.StatusOK,
					goldenPaced, &protocol.TaskReply{})
			}
			limited++
		}
	}
	if want := rundb.DefaultMachineLimit * api.TaskRequestBurstPerMachine; limited < 3*want-want-2 {
		t.Errorf("%d of %d requests in a loop were limited, want all but the burst of %d", limited, 3*want, want)
	}
	other := call(2, map[string]any{"password": "alicepw"})
	other["worker_info"].(map[string]any)["username"] = "alice"
	if code, out := f.post("/api/request_task", other); code != http.StatusOK || out["task_id"] == nil {
		t.Errorf("another account during the flood: %d %v, want a task", code, out)
	}
}

// Finding 7: a submitted run's every field is bounded (the audit's run of 45,000 SPSA
// parameters, SPRT bounds of ±1e308, threads and priority of 2**63-1, a 900 kB info), each
// refused with a 400 (413 for a body over the API's limit) that names the field; nothing is
// stored.
func TestSecurityRunSubmissionIsBounded(t *testing.T) {
	f := newFleet(t)
	ctx := context.Background()
	runs := rundbtest.Collection(t, f.db, "runs")
	before, _ := runs.CountDocuments(ctx, bson.D{})
	var manyParams strings.Builder
	for i := range 45000 {
		fmt.Fprintf(&manyParams, "P%d,100,0,200,10,0.002\n", i)
	}
	var fewerParams strings.Builder
	for i := range 501 {
		fmt.Fprintf(&fewerParams, "P%d,1,0,2,1,0.002\n", i)
	}
	huge := int64(math.MaxInt64)
	for _, c := range []struct {
		name  string
		spec  map[string]any
		field string
	}{
		{"45,000 SPSA parameters", map[string]any{"spsa": map[string]any{"num_games": 20000, "raw_params": manyParams.String()}}, "spsa.raw_params"},
		{"501 SPSA parameters", map[string]any{"spsa": map[string]any{"num_games": 20000, "raw_params": fewerParams.String()}}, "spsa.raw_params"},
		{"SPRT bounds of ±1e308", map[string]any{"sprt": map[string]any{"elo0": -1e308, "elo1": 1e308}}, "sprt.elo0"},
		{"SPRT bounds 1e-300 apart", map[string]any{"sprt": map[string]any{"elo0": 0, "elo1": 1e-300}}, "sprt.elo1"},
		{"threads 2**63-1", map[string]any{"num_games": 10000, "threads": huge}, "threads"},
		{"priority 2**63-1", map[string]any{"num_games": 10000, "priority": huge}, "priority"},
		{"throughput 2**63-1", map[string]any{"num_games": 10000, "throughput": huge}, "throughput"},
		{"a 100 kB info", map[string]any{"num_games": 10000, "info": strings.Repeat("i", 100<<10)}, "info"},
		{"a 10 kB tag", map[string]any{"num_games": 10000, "new_tag": strings.Repeat("t", 10<<10)}, "new_tag"},
	} {
		run := map[string]any{
			"base_tag": "master", "new_tag": "patch", "resolved_base": strings.Repeat("a", 40), "resolved_new": strings.Repeat("b", 40),
			"tc": "10+0.1", "base_options": "Hash=16", "new_options": "Hash=16", "base_signature": "2050811",
			"new_signature": "2061234", "tests_repo": "https://github.com/alice/Stockfish", "info": "a test",
		}
		maps.Copy(run, c.spec)
		code, out := f.post("/api/create_run", map[string]any{"username": "alice", "password": "alicepw", "run": run})
		msg := fmt.Sprint(out["error"])
		if !(code == http.StatusBadRequest && strings.Contains(msg, "run."+c.field)) && code != http.StatusRequestEntityTooLarge {
			t.Errorf("%s: %d %.200s, want 400 naming run.%s (or 413)", c.name, code, msg, c.field)
		}
	}
	if after, _ := runs.CountDocuments(ctx, bson.D{}); after != before {
		t.Errorf("refused submissions stored %d runs", after-before)
	}
}

// runJSON answers for a run holding numbers JSON cannot carry, with those numbers as 0.
func TestSecurityRunJSONWithNonFiniteNumbers(t *testing.T) {
	r, err := scheduler.BuildRun(securityRunRequest(), "alice", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r.Args.SPRT.LLR, r.Args.ITP = math.NaN(), math.Inf(1)
	m, err := api.RunJSONStripped(r)
	if err != nil {
		t.Fatalf("runJSON: %v", err)
	}
	if _, err := json.Marshal(m); err != nil {
		t.Errorf("the run's JSON does not encode: %v", err)
	}
	if !math.IsNaN(r.Args.SPRT.LLR) {
		t.Error("runJSON changed the run itself")
	}
}

// securityRunRequest is an SPRT STC request.
func securityRunRequest() protocol.RunRequest {
	elo0, elo1 := 0.0, 2.0
	return protocol.RunRequest{
		BaseTag: "master", NewTag: "patch", ResolvedBase: strings.Repeat("1", 40), ResolvedNew: strings.Repeat("2", 40),
		TC: "10+0.1", BaseOptions: "Hash=16", NewOptions: "Hash=16",
		BaseSignature: "2050811", NewSignature: "2061234",
		TestsRepo: "https://github.com/alice/Stockfish", Info: "try a patch",
		SPRT: &protocol.SPRTRequest{Elo0: &elo0, Elo1: &elo1},
	}
}
