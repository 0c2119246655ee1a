package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server/guard"
)

// The tests named TestSecurity... perform one finding of the security audit each (docs/SECURITY.md)
// and assert that it is refused, or harmless, and that nothing changed: `go test -run Security
// ./...` runs them all.

// bigBody streams n filler bytes between a head and a tail without holding them, and counts
// what the server read of it.
type bigBody struct {
	r    io.Reader
	read atomic.Int64
}

func newBigBody(head string, n int64, tail string) *bigBody {
	filler := io.LimitReader(repeatByte('x'), n)
	return &bigBody{r: io.MultiReader(strings.NewReader(head), filler, strings.NewReader(tail))}
}

func (b *bigBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read.Add(int64(n))
	return n, err
}

type repeatByte byte

func (c repeatByte) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(c)
	}
	return len(p), nil
}

// Finding 1: a UI POST that carries the CSRF token in the X-CSRF-Token header, with a
// multipart body, must not be parsed (nor spooled to disk) before anyone is known, whatever its
// content type's case; a large form with the header token meets the same cap as one with the
// token in a field. The audit made an anonymous client write a 1 GiB multipart-* file.
func TestSecurityMultipartBodyWithHeaderTokenIsNotParsed(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // where mime/multipart would spool the file
	env := newUIEnv(t)
	const size = 40 << 20 // beyond any in-memory allowance: a parse would spool it
	for _, path := range []string{"/login", "/signup", "/tests/run", "/user"} {
		for _, ctype := range []string{"multipart/form-data", "Multipart/Form-Data"} {
			t.Run(path+" "+ctype, func(t *testing.T) {
				b := env.anon()
				token := b.csrf()
				const boundary = "xyzzy"
				head := "--" + boundary + "\r\n" +
					"Content-Disposition: form-data; name=\"username\"\r\n\r\nmallory\r\n" +
					"--" + boundary + "\r\n" +
					"Content-Disposition: form-data; name=\"password\"\r\n\r\nmallory-password\r\n" +
					"--" + boundary + "\r\n" +
					"Content-Disposition: form-data; name=\"blob\"; filename=\"blob.bin\"\r\n" +
					"Content-Type: application/octet-stream\r\n\r\n"
				payload := newBigBody(head, size, "\r\n--"+boundary+"--\r\n")
				req := httptest.NewRequest(http.MethodPost, path, payload)
				req.Header.Set("Content-Type", ctype+"; boundary="+boundary)
				req.Header.Set("X-CSRF-Token", token)
				w := b.do(req)
				if w.Code != http.StatusUnsupportedMediaType {
					t.Errorf("multipart POST %s with the header token = %d, want 415\n%s", path, w.Code, body(w))
				}
				if n := payload.read.Load(); n > 1<<20 {
					t.Errorf("the server read %d bytes of a body it refuses", n)
				}
				assertNoSpooledFiles(t, tmp)
			})
		}
	}
	if _, err := env.db.Users.Get(context.Background(), "mallory"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("a refused signup made an account: err = %v", err)
	}
}

// Finding 1, the form side: a URL-encoded form beyond the cap is refused with 413 whether the
// token travels in a field or in the header, after reading at most the cap.
func TestSecurityOversizedFormWithHeaderTokenIsRefused(t *testing.T) {
	env := newUIEnv(t)
	b := env.anon()
	token := b.csrf()
	head := "username=mallory&password=mallory-password&email=m%40example.org&padding="
	payload := newBigBody(head, 64<<20, "")
	req := httptest.NewRequest(http.MethodPost, "/signup", payload)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-CSRF-Token", token)
	w := b.do(req)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a 64 MiB form with the header token = %d, want 413\n%s", w.Code, body(w))
	}
	if n := payload.read.Load(); n > maxFormBody+64<<10 {
		t.Errorf("the server read %d bytes of a form capped at %d", n, maxFormBody)
	}
	if _, err := env.db.Users.Get(context.Background(), "mallory"); !errors.Is(err, rundb.ErrNotFound) {
		t.Errorf("a refused signup made an account: err = %v", err)
	}
	// The header token still works for a form of a normal size.
	form := url.Values{"username": {"alice"}, "password": {uiPassword}}
	req = httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("X-CSRF-Token", token)
	if w := b.do(req); w.Code != http.StatusSeeOther {
		t.Errorf("a login with the header token = %d, want 303\n%s", w.Code, body(w))
	}
}

// assertNoSpooledFiles fails if a multipart parse left a file in dir.
func assertNoSpooledFiles(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "multipart-") {
			info, _ := e.Info()
			t.Errorf("a multipart body was spooled to %s (%s)", e.Name(), fmt.Sprint(info.Size()))
		}
	}
}

// Finding 2, the upload slots: clients that open upload_pgn calls and send no body (or no
// credentials) hold no upload slot, so a real worker's upload still goes through; a call with a
// wrong password is refused at once even with every slot busy.
func TestSecurityIdleUploadsHoldNoSlot(t *testing.T) {
	f := newFleet(t)
	id := f.newRun(map[string]any{"num_games": 10000})
	f.post("/api/request_task", call(1, nil))
	addr := strings.TrimPrefix(f.url, "http://")
	for range maxConcurrentUploads + 8 {
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
	for range maxConcurrentUploads {
		if err := f.srv.uploads.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for range maxConcurrentUploads {
			f.srv.uploads.Release()
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
	f := newFleet(t)
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

	old := maxPGNText
	maxPGNText = 4 << 20
	defer func() { maxPGNText = old }()
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

// Finding 13: a worker's owner cannot lift, or reword, a block that an approver set (nor one
// recorded before Shoal noted who blocked), and nothing changes when they try.
func TestSecurityOwnerCannotLiftAnApproversBlock(t *testing.T) {
	env := newUIEnv(t)
	ctx := context.Background()
	const worker = "alice-4cores-abcd1234"
	if w := env.as("bob").post("/workers/"+worker, url.Values{"blocked": {"1"}, "message": {"Time losses."}}); w.Code != http.StatusSeeOther {
		t.Fatalf("approver's block: %d", w.Code)
	}
	const legacy = "alice-8cores-0000ffff"
	if err := env.db.Workers.Put(ctx, &rundb.Worker{WorkerName: legacy, Blocked: true, Message: "old block"}); err != nil {
		t.Fatal(err)
	}
	before, err := env.db.Actions.Find(ctx, rundb.ActionFilter{Action: "block_worker"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	alice := env.as("alice")
	for _, attempt := range []struct {
		worker string
		form   url.Values
	}{
		{worker, url.Values{"message": {"all fixed"}}},
		{worker, url.Values{"blocked": {"1"}, "message": {"nothing wrong here"}}},
		{legacy, url.Values{"message": {"all fixed"}}},
	} {
		if w := alice.post("/workers/"+attempt.worker, attempt.form); w.Code != http.StatusForbidden {
			t.Errorf("owner's change %v of %s = %d, want 403", attempt.form, attempt.worker, w.Code)
		}
	}
	if page := body(alice.get("/workers/" + worker)); strings.Contains(page, `<form method="post" action="/workers/`) ||
		!strings.Contains(page, "only an approver may") {
		t.Errorf("the owner's page offers a form for an approver's block")
	}
	if got, err := env.db.Workers.Get(ctx, worker); err != nil || !got.Blocked || got.Message != "Time losses." || got.BlockedBy != "bob" {
		t.Errorf("the approver's block changed: %+v %v", got, err)
	}
	if got, err := env.db.Workers.Get(ctx, legacy); err != nil || !got.Blocked || got.Message != "old block" {
		t.Errorf("the recorded block changed: %+v %v", got, err)
	}
	if after, _ := env.db.Actions.Find(ctx, rundb.ActionFilter{Action: "block_worker"}, 0); len(after) != len(before) {
		t.Errorf("refused changes logged %d block_worker actions", len(after)-len(before))
	}
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

// Finding 14: every reply says nosniff; every HTML page, error pages outside the UI included,
// carries the UI's content security policy and refuses to be framed.
func TestSecurityHeadersOnEveryReply(t *testing.T) {
	env := newUIEnv(t)
	for _, c := range []struct {
		method, path string
		html         bool
	}{
		{http.MethodGet, "/no/such/page", true},
		{http.MethodDelete, "/tests", true},
		{http.MethodGet, "/tests", true},
		{http.MethodGet, "/api/no_such_endpoint", false},
		{http.MethodGet, "/api/active_runs", false},
		{http.MethodPost, "/api/request_task", false},
		{http.MethodGet, "/healthz", false},
		{http.MethodGet, "/static/shoal.css", false},
	} {
		w := httptest.NewRecorder()
		env.s.Handler().ServeHTTP(w, httptest.NewRequest(c.method, c.path, strings.NewReader("{}")))
		h := w.Header()
		if h.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s %s (%d): no nosniff", c.method, c.path, w.Code)
		}
		if !c.html {
			continue
		}
		if csp := h.Get("Content-Security-Policy"); !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("%s %s (%d): CSP %q", c.method, c.path, w.Code, csp)
		}
		if h.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s %s (%d): X-Frame-Options %q", c.method, c.path, w.Code, h.Get("X-Frame-Options"))
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
	for range maxConcurrentUploads {
		if err := f.srv.uploads.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		time.Sleep(1500 * time.Millisecond) // five read timeouts after the body is in
		for range maxConcurrentUploads {
			f.srv.uploads.Release()
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

// loginFrom posts the login form from a client at ip, in a session of its own.
func loginFrom(env *uiEnv, ip, username, password string) int {
	b := env.anon()
	token := b.csrf()
	form := url.Values{"csrf_token": {token}, "username": {username}, "password": {password}}
	req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.RemoteAddr = ip + ":40000"
	return b.do(req).Code
}

// Finding 8, the form: guesses for one account from many addresses are limited per username,
// and they do not lock out the owner, who logged in from his address before; a stranger's
// right password waits like a guess.
func TestSecurityLoginGuessesFromManyAddressesDoNotLockOutTheOwner(t *testing.T) {
	env := newUIEnv(t)
	const owner = "198.51.100.10"
	if code := loginFrom(env, owner, "alice", uiPassword); code != http.StatusSeeOther {
		t.Fatalf("the owner's first login = %d", code)
	}
	before := env.db.Users.SlowChecks()
	refused := 0
	for a := range 7 { // 35 guesses from 7 addresses, as in the audit
		for g := range 5 {
			switch loginFrom(env, fmt.Sprintf("203.0.113.%d", a+1), "alice", fmt.Sprintf("guess-%d-%d", a, g)) {
			case http.StatusTooManyRequests:
				refused++
			case http.StatusBadRequest:
			default:
				t.Fatal("a guess got neither 400 nor 429")
			}
		}
	}
	if checked := env.db.Users.SlowChecks() - before; checked > guard.LoginPerUserBurst+1 {
		t.Errorf("%d guesses were checked, want at most the username's burst of %d", checked, guard.LoginPerUserBurst)
	}
	if refused == 0 {
		t.Error("no guess was refused: the username's limit did not hold")
	}
	if code := loginFrom(env, owner, "alice", uiPassword); code != http.StatusSeeOther {
		t.Errorf("the owner's right password from his own address after the guesses = %d, want 303", code)
	}
	if code := loginFrom(env, "192.0.2.200", "alice", uiPassword); code != http.StatusTooManyRequests {
		t.Errorf("the right password from a new address while the username is over its limit = %d, want 429", code)
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

// Finding 17: failed and refused logins are logged at WARN, a line a minute per user and client
// however many there are; a live stream refused by its limits is logged at DEBUG, not ERROR.
func TestSecurityLoginFailuresAreLoggedQuietly(t *testing.T) {
	env := newUIEnv(t)
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&lockedWriter{w: &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	env.s.logger, env.s.logins = logger, guard.NewLogins(logger)
	for g := range 20 {
		loginFrom(env, "203.0.113.9", "alice", fmt.Sprintf("guess-%d", g))
	}
	log := buf.String()
	if n := strings.Count(log, `msg="failed login"`); n != 1 || !strings.Contains(log, "level=WARN") || !strings.Contains(log, "user=alice") {
		t.Errorf("20 failed logins from one client wrote %d warnings, want 1:\n%s", n, log)
	}
	if n := strings.Count(log, "login refused: too many failures"); n != 1 {
		t.Errorf("the refused logins wrote %d warnings, want 1:\n%s", n, log)
	}

	env.s.live.maxPerIP = 0 // every stream is refused
	buf.Reset()
	r := env.runsAdd("alice", runsTestRequest(nil))
	if w := env.anon().get("/tests/view/" + r.ID.Hex() + "/events"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("a stream over the limit = %d, want 503", w.Code)
	}
	if log := buf.String(); strings.Contains(log, "level=ERROR") || !strings.Contains(log, "level=DEBUG") {
		t.Errorf("a refused stream was logged as an error:\n%s", log)
	}
}

// lockedWriter serialises writes to w.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// Finding 6: event-log searches are bounded. An anonymous text search (which no index serves)
// is refused; every search reads a window of days (a month by default, a year at most for
// users, a month for anonymous visitors); and searches run at most guard.HeavyReadSlots at once: the
// rest are told to come back, while the worker path goes on.
func TestSecuritySearchesAreBoundedAndKeptOffTheWorkerPath(t *testing.T) {
	env := newUIEnv(t)
	ctx := context.Background()
	now := float64(time.Now().Unix())
	for _, a := range []rundb.Action{
		{Action: "log_message", Username: "bob", Message: "recent needle", Time: now - 3600},
		{Action: "log_message", Username: "bob", Message: "old needle", Time: now - 60*86400},
	} {
		if err := env.db.Actions.Insert(ctx, &a); err != nil {
			t.Fatal(err)
		}
	}
	if w := env.anon().get("/actions?text=needle"); w.Code != http.StatusForbidden || !strings.Contains(body(w), "needs a login") {
		t.Errorf("an anonymous text search = %d, want 403 asking for a login", w.Code)
	}
	shows := func(b *browser, query string) (recent, old bool) {
		t.Helper()
		w := b.get("/actions" + query)
		if w.Code != http.StatusOK {
			t.Fatalf("/actions%s = %d", query, w.Code)
		}
		page := body(w)
		return strings.Contains(page, "recent needle"), strings.Contains(page, "old needle")
	}
	for _, c := range []struct {
		who         *browser
		query       string
		recent, old bool
	}{
		{env.anon(), "", true, false},
		{env.anon(), "?days=90", true, false}, // capped at a month
		{env.as("alice"), "?text=needle", true, false},
		{env.as("alice"), "?text=needle&days=90", true, true},
		{env.as("alice"), "?days=100000", true, true}, // capped at a year
	} {
		if recent, old := shows(c.who, c.query); recent != c.recent || old != c.old {
			t.Errorf("/actions%s: recent %v, 60 days old %v; want %v, %v", c.query, recent, old, c.recent, c.old)
		}
	}

	// Every search slot busy: a search is refused after heavyReadWait, the worker path answers.
	for range guard.HeavyReadSlots {
		if err := env.s.heavy.Acquire(ctx); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		for range guard.HeavyReadSlots {
			env.s.heavy.Release()
		}
	}()
	if w := env.anon().get("/actions"); w.Code != http.StatusServiceUnavailable || w.Header().Get("Retry-After") == "" {
		t.Errorf("a search with every slot busy = %d, want 503 with Retry-After", w.Code)
	}
	w := httptest.NewRecorder()
	env.s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/api/actions", strings.NewReader(`{"action": "log_message"}`)))
	if w.Code != http.StatusServiceUnavailable {
		t.Errorf("/api/actions with every slot busy = %d, want 503", w.Code)
	}
	b, _ := json.Marshal(map[string]any{"password": uiPassword, "worker_info": map[string]any{"username": "alice"}})
	w = httptest.NewRecorder()
	env.s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/api/request_version", bytes.NewReader(b)))
	if w.Code != http.StatusOK {
		t.Errorf("request_version while searches are busy = %d, want 200", w.Code)
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
	for range 3 * rundb.DefaultMachineLimit * taskRequestBurstPerMachine {
		b, _ := json.Marshal(call(1, nil))
		req := httptest.NewRequest(http.MethodPost, "/api/request_task", bytes.NewReader(b))
		req.RemoteAddr = "203.0.113.5:4000"
		w := httptest.NewRecorder()
		f.handler.ServeHTTP(w, req)
		var out map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil || w.Code != http.StatusOK {
			t.Fatalf("request_task = %d %s", w.Code, w.Body)
		}
		if out["info"] == taskLimitedInfo {
			if out["task_waiting"] != false {
				t.Fatalf("a limited request_task = %v, want task_waiting false (the worker waits and asks again)", out)
			}
			if wait, ok := out["retry_after"].(float64); !ok || wait < paceFloor.Seconds() {
				t.Fatalf("a limited request_task = %v, want a retry_after of at least %v", out, paceFloor)
			}
			if limited == 0 {
				checkGolden(t, "request_task over the account's rate", w.Code, w.Body.Bytes(), http.StatusOK,
					goldenPaced, &protocol.TaskReply{})
			}
			limited++
		}
	}
	if want := rundb.DefaultMachineLimit * taskRequestBurstPerMachine; limited < 3*want-want-2 {
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

// Finding 7, reading: a run stored before the bounds, as the audit's submission left it (SPRT
// bounds of ±1e308, which made /api/get_elo answer 500), makes no read endpoint or page answer
// 5xx. (MongoDB can also hold NaN, which the embedded database refuses to store: runJSON's
// fallback for it is checked without a database below.)
func TestSecurityStoredOutOfRangeRunReadsWithout5xx(t *testing.T) {
	env := newUIEnv(t)
	r := env.runsAdd("alice", runsTestRequest(nil))
	env.runsChange(r.ID, func(r *rundb.Run) {
		r.Args.SPRT.Elo0, r.Args.SPRT.Elo1, r.Args.SPRT.LLR = -1e308, 1e308, 1e308
		r.Results = rundb.Results{Wins: 10, Losses: 5, Draws: 20, Pentanomial: []int{1, 3, 6, 4, 3}}
	})
	id := r.ID.Hex()
	for _, path := range []string{"/api/get_elo/" + id, "/api/get_run/" + id, "/api/active_runs", "/api/finished_runs",
		"/tests", "/tests/view/" + id, "/tests/live_elo/" + id, "/tests/stats/" + id, "/tests/user/alice"} {
		w := httptest.NewRecorder()
		env.s.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code >= 500 {
			t.Errorf("GET %s = %d\n%.300s", path, w.Code, w.Body)
		}
	}
}

// runJSON answers for a run holding numbers JSON cannot carry, with those numbers as 0.
func TestSecurityRunJSONWithNonFiniteNumbers(t *testing.T) {
	r, err := scheduler.BuildRun(runsTestRequest(nil), "alice", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	r.Args.SPRT.LLR, r.Args.ITP = math.NaN(), math.Inf(1)
	m, err := runJSON(r, stripped)
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

// copyBrowser is another browser holding copies of b's cookies: a stolen or left-behind
// session cookie.
func copyBrowser(b *browser) *browser {
	c := b.env.anon()
	maps.Copy(c.cookies, b.cookies)
	return c
}

// Finding 5: a session ends on the server. After a logout a copy of its cookie is logged out;
// "log out everywhere" ends every session of the account; a block ends them all; a session
// opened without "remember me" lasts 12 hours on the server, a remembered one 30 days, and
// the login form's box is not ticked by default.
func TestSecuritySessionsAreRevocable(t *testing.T) {
	env := newUIEnv(t)
	ctx := context.Background()

	b := env.as("alice")
	stolen := copyBrowser(b)
	if stolen.loggedInAs() != "alice" {
		t.Fatal("the copied cookie does not log in: the test proves nothing")
	}
	if w := b.post("/logout", url.Values{}); w.Code != http.StatusSeeOther {
		t.Fatalf("logout = %d", w.Code)
	}
	if got := stolen.loggedInAs(); got != "" {
		t.Errorf("a copy of the cookie is still logged in as %q after the logout", got)
	}

	laptop, phone := env.as("alice"), env.as("alice")
	phoneCopy := copyBrowser(phone)
	if w := laptop.post("/logout", url.Values{"everywhere": {"1"}}); w.Code != http.StatusSeeOther {
		t.Fatalf("log out everywhere = %d", w.Code)
	}
	for name, br := range map[string]*browser{"laptop": laptop, "phone": phone, "the phone's copied cookie": phoneCopy} {
		if got := br.loggedInAs(); got != "" {
			t.Errorf("%s is still logged in as %q after logging out everywhere", name, got)
		}
	}
	if u, _ := env.db.Users.Get(ctx, "alice"); len(u.Sessions) != 0 {
		t.Errorf("%d sessions still recorded after logging out everywhere", len(u.Sessions))
	}

	eve := env.as("carol")
	if err := env.db.Users.SetBlocked(ctx, "carol", true); err != nil {
		t.Fatal(err)
	}
	if err := env.db.Users.SetBlocked(ctx, "carol", false); err != nil {
		t.Fatal(err)
	}
	if got := eve.loggedInAs(); got != "" {
		t.Errorf("a session opened before a block is still logged in as %q after it was lifted", got)
	}

	// Lifetimes, on the server: 12 hours, or 30 days remembered.
	if page := body(env.anon().get("/login")); strings.Contains(page, `name="remember" value="1" checked`) {
		t.Error("remember me is ticked by default")
	}
	env.as("bob")
	u, _ := env.db.Users.Get(ctx, "bob")
	if n := len(u.Sessions); n != 1 || time.Until(u.Sessions[0].Expires) > 12*time.Hour || time.Until(u.Sessions[0].Expires) < 11*time.Hour {
		t.Errorf("a session without remember me: %+v, want one ending in 12 hours", u.Sessions)
	}
	if !u.HasSession(u.Sessions[0].ID, time.Now()) || u.HasSession(u.Sessions[0].ID, time.Now().Add(13*time.Hour)) {
		t.Error("a session's end on the server is not enforced")
	}
}
