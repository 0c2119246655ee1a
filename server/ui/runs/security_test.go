package runs_test

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server"
	"github.com/shoal-chess/shoal/server/ui/runs"
	"github.com/shoal-chess/shoal/server/ui/uitest"
)

// The tests named TestSecurity... perform one finding of the security audit each (docs/SECURITY.md)
// and assert that it is refused, or harmless, and that nothing changed: `go test -run Security
// ./...` runs them all.

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
		env.Server.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		if w.Code >= 500 {
			t.Errorf("GET %s = %d\n%.300s", path, w.Code, w.Body)
		}
	}
}

// A stream refused by design (over the limits) is logged at debug level, not as an error.
func TestSecurityRefusedStreamsAreLoggedQuietly(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&uitest.LockedWriter{W: &buf}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	env := newUIEnvWith(t, func(d *server.Deps) { d.Logger = logger })
	runs.LiveLimits(env.Server.RunPages()).MaxPerIP = 0 // every stream is refused
	buf.Reset()
	r := env.runsAdd("alice", runsTestRequest(nil))
	if w := env.anon().Get("/tests/view/" + r.ID.Hex() + "/events"); w.Code != http.StatusServiceUnavailable {
		t.Fatalf("a stream over the limit = %d, want 503", w.Code)
	}
	if log := buf.String(); strings.Contains(log, "level=ERROR") || !strings.Contains(log, "level=DEBUG") {
		t.Errorf("a refused stream was logged as an error:\n%s", log)
	}
}
