package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/rundb/rundbtest"
	"github.com/shoal-chess/shoal/server/servertest"
	"github.com/shoal-chess/shoal/tokenpool"
)

func TestMain(m *testing.M) { rundbtest.Main(m) }

// newTestServer returns a server over db (nil: none).
func newTestServer(t *testing.T, db *rundb.DB) *Server {
	t.Helper()
	s, err := New(Deps{
		Logger: servertest.DiscardLogger(), Tokens: tokenpool.New(4),
		DB: db, Version: "test", Database: "the test database",
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestHealthAndHome(t *testing.T) {
	db := rundbtest.Open(t)
	if _, err := db.Users.Create(context.Background(), rundb.NewUser{Username: "alice", Password: "x"}); err != nil {
		t.Fatal(err)
	}
	s := newTestServer(t, db)

	w := servertest.Do(s.Handler(), http.MethodGet, "/healthz")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"status":"ok"`) {
		t.Errorf("GET /healthz = %d %s", w.Code, w.Body)
	}
	if w := servertest.Do(s.Handler(), http.MethodHead, "/healthz"); w.Code != http.StatusOK {
		t.Errorf("HEAD /healthz = %d", w.Code)
	}
	w = servertest.Do(s.Handler(), http.MethodGet, "/")
	if w.Code != http.StatusFound || w.Header().Get("Location") != "/tests" {
		t.Errorf("GET / = %d to %q, want 302 to /tests", w.Code, w.Header().Get("Location"))
	}
	if w := servertest.Do(s.Handler(), http.MethodGet, "/static/shoal.css"); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), "body") {
		t.Errorf("GET /static/shoal.css = %d", w.Code)
	}
}

func TestErrorShapes(t *testing.T) {
	db := rundbtest.Open(t)
	s := newTestServer(t, db)
	s.engine.POST("/api/explode", func(*gin.Context) { panic("boom") })

	w := servertest.Do(s.Handler(), http.MethodGet, "/api/no_such_endpoint")
	if msg, _ := servertest.APIError(t, w); w.Code != http.StatusNotFound || msg != "/api/no_such_endpoint: no such page" {
		t.Errorf("unknown API path = %d %q", w.Code, msg)
	}
	w = servertest.Do(s.Handler(), http.MethodPost, "/api/explode")
	if msg, d := servertest.APIError(t, w); w.Code != http.StatusInternalServerError || msg != "/api/explode: Internal Server Error" || d < 0 {
		t.Errorf("panic = %d %q duration %v", w.Code, msg, d)
	}
	w = servertest.Do(s.Handler(), http.MethodGet, "/no/such/page")
	if w.Code != http.StatusNotFound || !strings.Contains(w.Body.String(), "<h1>404 Not Found</h1>") {
		t.Errorf("unknown page = %d:\n%s", w.Code, w.Body)
	}
	w = servertest.Do(s.Handler(), http.MethodPost, "/healthz")
	if w.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz = %d, want 405", w.Code)
	}
}

func TestShutdownRefusesNewWork(t *testing.T) {
	db := rundbtest.Open(t)
	s := newTestServer(t, db)
	s.BeginShutdown()
	if w := servertest.Do(s.Handler(), http.MethodGet, "/healthz"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("GET /healthz while shutting down = %d, want 503", w.Code)
	}
	w := servertest.Do(s.Handler(), http.MethodGet, "/api/active_runs")
	if msg, _ := servertest.APIError(t, w); w.Code != http.StatusServiceUnavailable || msg != "/api/active_runs: server is shutting down" {
		t.Errorf("API while shutting down = %d %q", w.Code, msg)
	}
	if w.Header().Get("Retry-After") == "" {
		t.Error("no Retry-After on a 503")
	}
	if w := servertest.Do(s.Handler(), http.MethodGet, "/"); w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "shutting down") {
		t.Errorf("page while shutting down = %d", w.Code)
	}
}

// When the database does not answer, the home page says so instead of hanging or crashing.
func TestHomeWithoutDatabase(t *testing.T) {
	db, err := rundb.Open(context.Background(), rundb.Options{URI: rundbtest.URI(t), Database: rundbtest.NewName(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s := newTestServer(t, db)
	w := servertest.Do(s.Handler(), http.MethodGet, "/tests")
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "Try again shortly") {
		t.Errorf("GET /tests with a closed database = %d:\n%s", w.Code, w.Body)
	}
}

// /readyz says whether to send traffic here: the database answers (200 with the role), or not
// (503 in the API's shape), and never while shutting down.
func TestReadyz(t *testing.T) {
	db := rundbtest.Open(t)
	s, err := New(Deps{Logger: servertest.DiscardLogger(), Tokens: tokenpool.New(4), DB: db, Instance: "secondary@test"})
	if err != nil {
		t.Fatal(err)
	}
	w := servertest.Do(s.Handler(), http.MethodGet, "/readyz")
	if w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"role":"secondary"`) {
		t.Errorf("GET /readyz = %d %s, want 200 with the role", w.Code, w.Body)
	}
	if got := w.Header().Get("X-Shoal-Instance"); got != "secondary@test" {
		t.Errorf("X-Shoal-Instance = %q", got)
	}
	s.BeginShutdown()
	if w := servertest.Do(s.Handler(), http.MethodGet, "/readyz"); w.Code != http.StatusServiceUnavailable {
		t.Errorf("GET /readyz while shutting down = %d, want 503", w.Code)
	}

	closed, err := rundb.Open(context.Background(), rundb.Options{URI: rundbtest.URI(t), Database: rundbtest.NewName(t)})
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	s, err = New(Deps{Logger: servertest.DiscardLogger(), Tokens: tokenpool.New(4), DB: closed})
	if err != nil {
		t.Fatal(err)
	}
	w = servertest.Do(s.Handler(), http.MethodGet, "/readyz")
	if msg, _ := servertest.APIError(t, w); w.Code != http.StatusServiceUnavailable || msg != "/readyz: the database does not answer" {
		t.Errorf("GET /readyz with a closed database = %d %q", w.Code, msg)
	}
	if w := servertest.Do(s.Handler(), http.MethodGet, "/healthz"); w.Code != http.StatusOK {
		t.Errorf("GET /healthz with a closed database = %d: liveness does not depend on the database", w.Code)
	}
}

func TestUIAccountsLimiterPerServer(t *testing.T) {
	a, b := newTestServer(t, nil), newTestServer(t, nil)
	if a.logins == nil {
		t.Error("a server has no login limiters")
	}
	if a.logins == b.logins {
		t.Error("two servers share their limiters")
	}
}
