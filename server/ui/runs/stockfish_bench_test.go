package runs_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/books"
	"github.com/shoal-chess/shoal/gitmirror"
	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/scheduler"
	"github.com/shoal-chess/shoal/server"
)

// BenchmarkStockfishSubmitAndRunPage measures, on a local clone of Stockfish's whole history
// (SHOAL_BENCH_REPO, a path; skipped without it, so never in CI), what a developer and an
// approver wait for once the repository is mirrored: a submission resolving master by name
// (PrepareRun, no fetch within a minute of the last: resolve-ms), storing it (CreateRun:
// store-ms) and the run's page with its diff, warm (page-ms).
// It reports the mirror's first fetch (fetch-s) and the archive a worker gets, cold and from
// the cache (archive-cold-ms, archive-warm-ms).
//
//	SHOAL_BENCH_REPO=/path/to/Stockfish.git go test -run '^$' -bench StockfishSubmit ./server/ui/runs/
func BenchmarkStockfishSubmitAndRunPage(b *testing.B) {
	repo := os.Getenv("SHOAL_BENCH_REPO")
	if repo == "" {
		b.Skip("set SHOAL_BENCH_REPO to a local clone of Stockfish's history")
	}
	ctx := context.Background()
	mirrors, err := gitmirror.New(gitmirror.Config{Dir: b.TempDir(), Allowed: []string{repo}})
	if err != nil {
		b.Fatal(err)
	}
	defer mirrors.Close()
	start := time.Now()
	head, err := mirrors.Resolve(ctx, repo, "master")
	if err != nil {
		b.Fatal(err)
	}
	fetch := time.Since(start)
	parent := gitOutput(b, repo, "rev-parse", head.SHA+"~1")

	held, err := books.Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	t := &testing.T{}
	env := newUIEnvSched(t, scheduler.Config{Sources: mirrors, Books: held}, func(d *server.Deps) {
		d.Mirrors, d.Books = mirrors, held
	})
	zero, two := 0.0, 2.0
	// master's newest commit may name no bench ("No functional change"): the signatures are
	// given, the commit is still resolved by name.
	req := protocol.RunRequest{BaseTag: parent, NewTag: "master", ResolvedBase: parent, BaseSignature: "1", NewSignature: "1",
		TC: "10+0.1", BaseOptions: "Hash=16", NewOptions: "Hash=16", TestsRepo: repo,
		SPRT: &protocol.SPRTRequest{Elo0: &zero, Elo1: &two}}
	// The networks the sources name must be on the server.
	for _, sha := range []string{head.SHA, parent} {
		evaluate, _ := mirrors.File(ctx, repo, sha, "src/evaluate.h", 1<<20)
		for _, name := range protocol.NetsInSource(evaluate, nil) {
			if err := env.DB.NNs.Insert(ctx, &rundb.NN{Name: name, User: "alice"}); err != nil && !errors.Is(err, rundb.ErrConflict) {
				b.Fatal(err)
			}
		}
	}
	var resolve, create time.Duration
	submit := func() string {
		t0 := time.Now()
		prepared, err := env.Sched.PrepareRun(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		r, err := env.Sched.CreateRun(ctx, prepared, "alice")
		if err != nil {
			b.Fatal(err)
		}
		resolve, create = resolve+t1.Sub(t0), create+time.Since(t1)
		return r.ID.Hex()
	}
	page := func(id string) {
		w := httptest.NewRecorder()
		env.Server.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/tests/view/"+id, nil))
		if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `id="patch-file-1"`) {
			b.Fatalf("run page: %d, no patch", w.Code)
		}
	}
	page(submit()) // warms the diff and commit caches
	resolve, create = 0, 0

	var render time.Duration
	for b.Loop() {
		id := submit()
		t0 := time.Now()
		page(id)
		render += time.Since(t0)
	}
	n := float64(b.N)
	b.ReportMetric(float64(resolve.Microseconds())/n/1000, "resolve-ms")
	b.ReportMetric(float64(create.Microseconds())/n/1000, "store-ms")
	b.ReportMetric(float64(render.Microseconds())/n/1000, "page-ms")
	b.ReportMetric(fetch.Seconds(), "fetch-s")

	archive := func() time.Duration {
		t0 := time.Now()
		a, err := mirrors.Archive(ctx, repo, head.SHA)
		if err != nil {
			b.Fatal(err)
		}
		d := time.Since(t0)
		if a.SHA256 == "" || a.Size == 0 {
			b.Fatalf("archive %+v", a)
		}
		a.Close()
		return d
	}
	b.ReportMetric(float64(archive().Microseconds())/1000, "archive-cold-ms")
	b.ReportMetric(float64(archive().Microseconds())/1000, "archive-warm-ms")
}

func gitOutput(b *testing.B, dir string, args ...string) string {
	out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
	if err != nil {
		b.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}
