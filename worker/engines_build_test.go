package worker

import (
	"context"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker/build"
	"github.com/shoal-chess/shoal/worker/build/buildtest"
	"github.com/shoal-chess/shoal/worker/uci/fakeuci"
)

// builder is a Builder of dir, logging to log, closed at the test's end.
func builder(t *testing.T, dir string, log *syncBuffer, cfg build.Config) *build.Builder {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	cfg.Dir, cfg.Logger = dir, slog.New(slog.NewTextHandler(log, nil))
	b, err := build.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// A building worker plays a task between the engines it built from the server's sources of the
// run's two commits, their bench checked against the run's signatures; the next task of the
// run uses the engines built before, asking the server for nothing.
func TestEngineSourceBuildsTheRunsEngines(t *testing.T) {
	files := buildtest.NewFiles()
	newSHA, newTgz := buildtest.Archive(t, buildtest.Engine(t, buildtest.Archs, "@echo the new engine"))
	baseSHA, baseTgz := buildtest.Archive(t, buildtest.Engine(t, buildtest.Archs, "@echo the base engine"))
	files.AddSource(newSHA, newTgz)
	files.AddSource(baseSHA, baseTgz)
	st := newStubWithFiles(t, nil, files)
	log := &syncBuffer{}
	dir := t.TempDir()
	src := &EngineSource{Build: builder(t, dir, log, build.Config{}), Dir: dir, Factor: 1}
	if _, err := New(testConfig(st, log), src); err != nil {
		t.Fatal(err)
	}
	task := realTask()
	task.Args.ResolvedNew, task.Args.ResolvedBase = newSHA, baseSHA
	sig := strconv.Itoa(fakeuci.BenchNodes)
	task.Args.NewSignature, task.Args.BaseSignature = sig, sig
	b, err := src.Play(context.Background(), task, 1, nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	if s := b.Stats; s.Wins+s.Losses+s.Draws != 2 {
		t.Errorf("stats %+v, want two games", s)
	}
	if n := files.Requests("source"); n != 2 {
		t.Errorf("%d source requests, want one a commit", n)
	}
	for _, sha := range []string{newSHA, baseSHA} {
		if !strings.Contains(src.prepared.newBin+src.prepared.baseBin, filepath.Join(dir, "engines", sha)) {
			t.Errorf("the engines %s and %s are not %s's", src.prepared.newBin, src.prepared.baseBin, sha)
		}
	}
	task.TaskID++
	if _, err := src.prepare(context.Background(), task, 1); err != nil {
		t.Fatal(err)
	}
	if n := files.Requests("source"); n != 2 || strings.Count(log.String(), "Using the engine built before") != 2 {
		t.Errorf("the next task: %d source requests in all, log:\n%s", n, log)
	}

	task.TaskID++
	task.Args.BaseSignature = "7654321"
	if _, err := src.prepare(context.Background(), task, 1); err == nil || !strings.Contains(err.Error(), "Wrong bench in "+baseSHA) {
		t.Errorf("a built engine whose bench is not the run's: %v, want fishtest's Wrong bench", err)
	}
}

// A worker whose build of the run's commit fails gives its task back with failed_task and the
// build's message, which starts with protocol.BuildFailedPrefix and carries the log's end.
func TestWorkerReportsABuildFailure(t *testing.T) {
	files := buildtest.NewFiles()
	sha, tgz := buildtest.Archive(t, buildtest.Engine(t, buildtest.Archs,
		`@for i in $$(seq 1 100); do echo "search.cpp:$$i: error: it does not compile"; done; exit 1`))
	files.AddSource(sha, tgz)
	st := newStubWithFiles(t, func(c call) answer {
		if c.endpoint == "request_task" && c.n == 1 {
			return taskAnswer(3, 8, 0, map[string]any{"resolved_new": sha, "resolved_base": sha,
				"book": "shoal_openings_v1.epd"}, nil)
		}
		return nil
	}, files)
	log := &syncBuffer{}
	dir := t.TempDir()
	src := &EngineSource{Build: builder(t, dir, log, build.Config{}), Dir: dir, Factor: 1}
	cfg := testConfig(st, log)
	cfg.MaxTasks = 1
	if err := start(t, context.Background(), cfg, src).wait(t); err != nil {
		t.Fatal(err)
	}
	got := st.got("failed_task", "stop_run", "update_task")
	if len(got) != 1 || got[0].endpoint != "failed_task" {
		t.Fatalf("calls %+v, want one failed_task", got)
	}
	msg := *got[0].req.Message
	if !strings.HasPrefix(msg, protocol.BuildFailedPrefix+sha[:10]+": make -j1 build ARCH=") || !strings.Contains(msg, "exit status 2\n") ||
		!strings.Contains(msg, "search.cpp:100: error") || strings.Contains(msg, "search.cpp:50:") || len(msg) > 4000 {
		t.Errorf("failed_task message of %d bytes:\n%s", len(msg), msg)
	}
}

// A build this machine could not finish (killed at build_timeout) fails the task with a message
// that says so and lacks protocol.BuildFailedPrefix: the server must not count it against the
// run.
func TestWorkerDoesNotBlameTheCommitForATimeout(t *testing.T) {
	files := buildtest.NewFiles()
	sha, tgz := buildtest.Archive(t, buildtest.Engine(t, buildtest.Archs, "@echo compiling", "@sleep 300"))
	files.AddSource(sha, tgz)
	st := newStubWithFiles(t, func(c call) answer {
		if c.endpoint == "request_task" && c.n == 1 {
			return taskAnswer(3, 8, 0, map[string]any{"resolved_new": sha, "resolved_base": sha,
				"book": "shoal_openings_v1.epd"}, nil)
		}
		return nil
	}, files)
	log := &syncBuffer{}
	dir := t.TempDir()
	src := &EngineSource{Build: builder(t, dir, log, build.Config{Timeout: time.Second}), Dir: dir, Factor: 1}
	cfg := testConfig(st, log)
	cfg.MaxTasks = 1
	if err := start(t, context.Background(), cfg, src).wait(t); err != nil {
		t.Fatal(err)
	}
	got := st.got("failed_task", "stop_run", "update_task")
	if len(got) != 1 || got[0].endpoint != "failed_task" {
		t.Fatalf("calls %+v, want one failed_task", got)
	}
	if msg := *got[0].req.Message; strings.HasPrefix(msg, protocol.BuildFailedPrefix) ||
		!strings.Contains(msg, "took longer than build_timeout (1s) on this machine") {
		t.Errorf("failed_task message %q, want the timeout, not a build failure", msg)
	}
}
