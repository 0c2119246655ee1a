package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/shoal-chess/shoal/demo"
	"github.com/shoal-chess/shoal/node"
	"github.com/shoal-chess/shoal/protocol"
)

// e2eScale compresses time 240-fold: heartbeat 0.5 s, dead task after 5 s (demoConfig's floor),
// tasks of 7.5 s, an STC game pair in 65 ms of wall time on a 4-core worker.
const e2eScale = 240

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// e2eServer is a running server with the demo's users.
type e2eServer struct {
	base  string
	users demo.Users
}

// startE2E starts a server in this process on a fresh embedded database, the demo's time knobs
// at e2eScale, with the demo's users; it is shut down when the test ends, its log shown if the
// test failed.
func startE2E(t *testing.T, machineLimit int) *e2eServer {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end: skipped with -short")
	}
	log := &lockedBuffer{}
	cfg := demoConfig(t.TempDir(), e2eScale)
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
		if t.Failed() {
			t.Logf("server log:\n%s", log)
		}
	})
	users, err := demo.CreateUsers(context.Background(), inst.DB(), machineLimit)
	if err != nil {
		t.Fatal(err)
	}
	return &e2eServer{base: "http://" + inst.Addr(), users: users}
}

// submit creates and approves a run: the demo's arguments, changed by change.
func (s *e2eServer) submit(t *testing.T, change func(*protocol.RunRequest)) string {
	t.Helper()
	req := demo.RunRequest("end-to-end test")
	change(&req)
	id, err := demo.SubmitRun(context.Background(), s.base, s.users, req)
	if err != nil {
		t.Fatal(err)
	}
	return id
}
