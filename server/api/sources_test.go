package api_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/books"
	"github.com/shoal-chess/shoal/gitmirror/gitmirrortest"
	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/runcache"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/servertest"
	"github.com/shoal-chess/shoal/tokenpool"
)

// sourceFleet is a fleet whose server mirrors a small engine repository and holds books.
type sourceFleet struct {
	*fleet
	repo          *gitmirrortest.Repo
	master, patch string
	books         *books.Store
}

func newSourceFleet(t *testing.T) *sourceFleet {
	t.Helper()
	repo := gitmirrortest.New(t)
	master := repo.Commit("Start\n\nBench: 1000001", map[string]string{"src/search.cpp": "int depth = 3;\n"})
	repo.Branch("patch", master)
	patch := repo.Commit("Deeper\n\nBench: 1000002", map[string]string{"src/search.cpp": "int depth = 4;\n"})
	repo.Checkout("master")

	pool, db := tokenpool.New(20), rundbtest.Open(t)
	addFleetUsers(t, db)
	held, err := books.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	mirrors := repo.Mirrors()
	logger := servertest.DiscardLogger()
	cfg := fleetSchedulerConfig(pool)
	cfg.Sources, cfg.Books = mirrors, held
	sched := scheduler.New(cfg, db, runcache.New(db.Runs, runcache.Options{Logger: logger}), logger)
	s, err := server.New(server.Deps{Logger: logger, Tokens: pool, Version: "test",
		DB: db, Runs: sched, Scheduler: sched, DataDir: t.TempDir(), Mirrors: mirrors, Books: held})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	f := &fleet{t: t, url: ts.URL, db: db, sched: sched, handler: s.Handler(), srv: s}
	return &sourceFleet{fleet: f, repo: repo, master: master, patch: patch, books: held}
}

// createByBranch submits a run naming its engines by branch alone.
func (f *sourceFleet) createByBranch(newTag string) (int, map[string]any) {
	return f.post("/api/create_run", map[string]any{"username": "alice", "password": "alicepw", "run": map[string]any{
		"base_tag": "master", "new_tag": newTag, "tc": "10+0.1", "base_options": "Hash=16", "new_options": "Hash=16",
		"tests_repo": f.repo.Dir, "num_games": 2000}})
}

// source asks for commit sha's sources as worker 1, returning the status, the headers and the
// body.
func (f *sourceFleet) source(body any) (int, http.Header, []byte) {
	f.t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(f.url+protocol.SourcePath, "application/json", bytes.NewReader(b))
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data
}

func TestCreateRunByBranch(t *testing.T) {
	f := newSourceFleet(t)
	code, out := f.createByBranch("patch")
	if code != http.StatusOK {
		t.Fatalf("create_run by branch: %d %v", code, out)
	}
	a := f.run(out["run_id"].(string)).Args
	if a.ResolvedNew != f.patch || a.ResolvedBase != f.master || a.NewSignature != "1000002" || a.BaseSignature != "1000001" ||
		a.Info != "Deeper" || a.Book != books.ShippedDefault {
		t.Errorf("stored %+v; want the branches' commits and benches, the message and the default book", a)
	}

	before := storedRunCount(t, f.db)
	code, out = f.createByBranch("no-such-branch")
	msg, _ := out["error"].(string)
	if code != http.StatusBadRequest || !strings.HasPrefix(msg, "/api/create_run: run.new_tag: no branch, tag or commit") {
		t.Errorf("an unknown branch: %d %v; want 400 naming run.new_tag", code, out)
	}
	if n := storedRunCount(t, f.db); n != before {
		t.Errorf("%d runs after a refusal; want %d", n, before)
	}
}

func TestSourceServesTheCommitsOfActiveRuns(t *testing.T) {
	f := newSourceFleet(t)
	code, out := f.createByBranch("patch")
	if code != http.StatusOK {
		t.Fatalf("create_run: %d %v", code, out)
	}
	id := out["run_id"].(string)
	ask := func(sha string) map[string]any { return call(1, map[string]any{"sha": sha}) }

	// Pending: no worker plays it yet, so its sources are not served.
	if code, _, data := f.source(ask(f.patch)); code != http.StatusNotFound || !strings.Contains(string(data), "is not one of an active run") {
		t.Errorf("the commit of a pending run: %d %s; want 404", code, data)
	}
	if code, out := f.post("/api/approve_run", map[string]any{"username": "bob", "password": "bobpw", "run_id": id}); code != http.StatusOK {
		t.Fatalf("approve_run: %d %v", code, out)
	}
	for _, sha := range []string{f.patch, f.master} {
		code, h, data := f.source(ask(sha))
		if code != http.StatusOK || h.Get("Content-Type") != "application/gzip" {
			t.Fatalf("sources of %s: %d %s %.200s", sha, code, h.Get("Content-Type"), data)
		}
		if got := h.Get(protocol.SourceSHA256Header); got != protocol.SHA256Hex(data) {
			t.Errorf("%s %q; the body's sha256 is %s", protocol.SourceSHA256Header, got, protocol.SHA256Hex(data))
		}
		want := "int depth = 3;\n"
		if sha == f.patch {
			want = "int depth = 4;\n"
		}
		if got := tarFile(t, data, "src/search.cpp"); got != want {
			t.Errorf("src/search.cpp of %s = %q; want %q", sha, got, want)
		}
	}

	cases := []struct {
		name   string
		body   any
		status int
		want   string
	}{
		{"a wrong password", map[string]any{"password": "nope", "worker_info": workerInfo(1), "sha": f.patch}, http.StatusUnauthorized, ""},
		{"a short sha", ask(f.patch[:10]), http.StatusBadRequest, "sha: \"" + f.patch[:10] + "\" is not a full commit SHA"},
		{"no sha", call(1, nil), http.StatusBadRequest, `missing key "sha"`},
		{"an unknown key", call(1, map[string]any{"sha": f.patch, "run_id": "x"}), http.StatusBadRequest, `unknown key "run_id"`},
		{"a commit of no run", ask(strings.Repeat("ab", 20)), http.StatusNotFound, "is not one of an active run"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, data := f.source(c.body)
			var e struct {
				Error    string   `json:"error"`
				Duration *float64 `json:"duration"`
			}
			if err := json.Unmarshal(data, &e); err != nil || e.Duration == nil || !strings.HasPrefix(e.Error, protocol.SourcePath+": ") {
				t.Fatalf("reply %s; want the worker API's error shape", data)
			}
			if code != c.status || !strings.Contains(e.Error, c.want) {
				t.Errorf("%d %q; want %d saying %q", code, e.Error, c.status, c.want)
			}
		})
	}

	// Finished: no longer served.
	oid, _ := rundb.ParseObjectID(id)
	if err := f.sched.StopRunByUser(t.Context(), oid, "alice"); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := f.source(ask(f.patch)); code != http.StatusNotFound {
		t.Errorf("the commit of a finished run: %d; want 404", code)
	}
}

func TestBooksAreServedWithTheirChecksums(t *testing.T) {
	f := newSourceFleet(t)
	resp, err := http.Get(f.url + protocol.BooksPath + books.ShippedDefault)
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	held, _ := f.books.Get(books.ShippedDefault)
	if resp.StatusCode != http.StatusOK || protocol.BookSRI(data) != held.SRI || resp.Header.Get("X-Shoal-Book-Sri") != held.SRI {
		t.Errorf("GET the shipped book: %d, sri %s, header %q; want 200 with sri %s", resp.StatusCode, protocol.BookSRI(data),
			resp.Header.Get("X-Shoal-Book-Sri"), held.SRI)
	}
	w := servertest.Do(f.handler, http.MethodGet, protocol.BooksPath+"UHO_Lichess_4852_v1.epd")
	if msg, _ := servertest.APIError(t, w); w.Code != http.StatusNotFound || !strings.Contains(msg, "not on this server") {
		t.Errorf("GET a book the server lacks: %d %s; want 404 saying so", w.Code, msg)
	}

	// A task of a run on the held book carries its checksum, which workers check.
	code, out := f.createByBranch("patch")
	if code != http.StatusOK {
		t.Fatalf("create_run: %d %v", code, out)
	}
	if code, out := f.post("/api/approve_run", map[string]any{"username": "bob", "password": "bobpw", "run_id": out["run_id"]}); code != http.StatusOK {
		t.Fatalf("approve_run: %d %v", code, out)
	}
	_, task := f.post("/api/request_task", call(1, nil))
	args, _ := task["run"].(map[string]any)["args"].(map[string]any)
	if args["book"] != books.ShippedDefault || args["book_sri"] != held.SRI {
		t.Errorf("the task's book %v with book_sri %v; want %s with %s", args["book"], args["book_sri"], books.ShippedDefault, held.SRI)
	}
}

// tarFile is the content of the file name in the gzipped tarball data.
func tarFile(t *testing.T, data []byte, name string) string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			t.Fatalf("%s is not in the archive", name)
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Name == name {
			b, _ := io.ReadAll(tr)
			return string(b)
		}
	}
}
