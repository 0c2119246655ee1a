package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/config"
	"github.com/shoal-chess/shoal/demo"
	"github.com/shoal-chess/shoal/node"
)

// testConfig is a server configuration for a test: an embedded database in dataDir, any free
// port, and fishtest's time knobs compressed by scale as the demo's are
// (config.Config.Compressed: the dead-task timeout stays at least 5 s, the scavenge period at
// least half a second, and task_duration keeps fishtest's size of a task in games).
func testConfig(dataDir string, scale float64) config.Config {
	cfg := config.DefaultConfig().Compressed(scale)
	cfg.DataDir = dataDir
	cfg.Addr = "127.0.0.1:0"
	cfg.LogLevel = "warn"
	return cfg
}

// startTestInstance starts an instance on cfg that logs its warnings to log, shut down when
// the test ends. The end-to-end tests use it too: this file is built with and without the race
// detector.
func startTestInstance(t *testing.T, cfg config.Config, log io.Writer) *node.Instance {
	t.Helper()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	inst, err := node.Start(context.Background(), cfg, node.Env{Logger: logger, Getenv: envOf(nil), Stdout: io.Discard, Version: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := inst.Shutdown(); err != nil {
			t.Errorf("shutdown %s: %v", inst.Addr(), err)
		}
	})
	return inst
}

// A primary and a secondary share one database: the secondary turns the worker API away in
// fishtest's shape, serves reads and pages, and sees a run the primary created once the
// primary has written it.
func TestPrimaryAndSecondary(t *testing.T) {
	dir := t.TempDir()
	pcfg := testConfig(dir, 1)
	primary := startTestInstance(t, pcfg, io.Discard)
	scfg := pcfg
	scfg.Role, scfg.MongoURI = "secondary", primary.DB().URI()
	secondary := startTestInstance(t, scfg, io.Discard)
	if secondary.Primary() != nil {
		t.Fatal("the secondary runs a scheduler, a run cache or jobs")
	}
	pbase, sbase := "http://"+primary.Addr(), "http://"+secondary.Addr()

	post := func(url string) (int, string, http.Header) {
		resp, err := http.Post(url, "application/json", strings.NewReader(`{"password": "x", "worker_info": {"username": "nobody"}}`))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body), resp.Header
	}
	// Worker calls are turned away as workers retry them: 503 text with Retry-After, not a
	// JSON error (which fishtest's worker takes as final).
	for _, ep := range []string{"request_version", "request_task", "update_task", "beat", "request_spsa",
		"failed_task", "stop_run", "worker_log"} {
		code, body, hdr := post(sbase + "/api/" + ep)
		if code != http.StatusServiceUnavailable || json.Valid([]byte(body)) || hdr.Get("Retry-After") == "" ||
			!strings.Contains(body, "primary instance required") {
			t.Errorf("secondary POST /api/%s = %d %q (Retry-After %q), want 503 text saying a primary is required",
				ep, code, body, hdr.Get("Retry-After"))
		}
		if !strings.HasPrefix(hdr.Get("X-Shoal-Instance"), "secondary@") {
			t.Errorf("X-Shoal-Instance = %q", hdr.Get("X-Shoal-Instance"))
		}
	}
	// upload_pgn is served by secondaries: bad credentials get 401, not 503.
	if code, body, _ := post(sbase + "/api/upload_pgn"); code == http.StatusServiceUnavailable {
		t.Errorf("secondary POST /api/upload_pgn = %d %v, want it served", code, body)
	}
	// The primary answers the same call (401: no such user), not 503.
	if code, _, hdr := post(pbase + "/api/request_version"); code != http.StatusUnauthorized || !strings.HasPrefix(hdr.Get("X-Shoal-Instance"), "primary@") {
		t.Errorf("primary POST /api/request_version = %d (%s), want 401 from the primary", code, hdr.Get("X-Shoal-Instance"))
	}

	// A run created on the primary is on the secondary's read API and pages once written.
	users, err := demo.CreateUsers(context.Background(), primary.DB(), 4)
	if err != nil {
		t.Fatal(err)
	}
	req := demo.RunRequest("seen from a secondary")
	req.NumGames = 2000
	id, err := demo.SubmitRun(context.Background(), pbase, users, req)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		code, body := get(t, sbase+"/api/get_run/"+id)
		if code == http.StatusOK && strings.Contains(body, "seen from a secondary") && strings.Contains(body, `"approved":true`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the secondary does not serve the primary's run: %d %s", code, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if code, body := get(t, sbase+"/tests/view/"+id); code != http.StatusOK || !strings.Contains(body, "seen from a secondary") {
		t.Errorf("secondary GET /tests/view/%s = %d", id, code)
	}
	if code, body := get(t, sbase+"/readyz"); code != http.StatusOK || !strings.Contains(body, `"role":"secondary"`) {
		t.Errorf("secondary /readyz = %d %s", code, body)
	}
	if code, body := get(t, pbase+"/readyz"); code != http.StatusOK || !strings.Contains(body, `"role":"primary"`) {
		t.Errorf("primary /readyz = %d %s", code, body)
	}
}
