package build

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/worker/build/buildtest"
	"github.com/shoal-chess/shoal/worker/uci"
	"github.com/shoal-chess/shoal/worker/uci/fakeuci"
)

func TestMain(m *testing.M) {
	// The engines the tests build run this binary with fakeuci.TestEnv set (their script sets
	// it). The tests themselves leave it unset, so that the processes the fuzzer starts of this
	// binary stay tests.
	if os.Getenv(fakeuci.TestEnv) == "1" {
		fakeuci.ServeIfAsked()
	}
	os.Exit(m.Run())
}

// logBuffer is a log sink safe for concurrent use.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// fixture is a server of files and a builder of its own directory.
type fixture struct {
	files  *buildtest.Files
	srv    Server
	dir    string
	log    *logBuffer
	logger *slog.Logger
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	files := buildtest.NewFiles()
	hs := httptest.NewServer(files)
	t.Cleanup(hs.Close)
	log := &logBuffer{}
	return &fixture{files: files, srv: &buildtest.Client{URL: hs.URL}, dir: filepath.Join(t.TempDir(), "worker"), log: log,
		logger: slog.New(slog.NewTextHandler(log, nil))}
}

// builder is a Builder of the fixture's directory, closed at the test's end.
func (f *fixture) builder(t *testing.T, cfg Config) *Builder {
	t.Helper()
	cfg.Dir, cfg.Logger = f.dir, f.logger
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// serve archives files as a commit the server serves, and returns its SHA.
func (f *fixture) serve(t *testing.T, files map[string]string) string {
	t.Helper()
	sha, tgz := buildtest.Archive(t, files)
	f.files.AddSource(sha, tgz)
	return sha
}

// sourceFilesLeft lists the files under dir that are neither cached engines, networks nor the
// lock: what a build left of its sources.
func sourceFilesLeft(t *testing.T, dir string) []string {
	t.Helper()
	var left []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "lock" || strings.HasPrefix(rel, "engines"+string(filepath.Separator)) || strings.HasPrefix(rel, "nets"+string(filepath.Separator)) {
			return nil
		}
		left = append(left, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return left
}

// A network of the test's and the evaluate.h that names it.
var (
	testNet     = []byte("a network of the test's own\n")
	testNetName = "nn-" + protocol.SHA256Hex(testNet)[:12] + ".nnue"
)

func withNet(files map[string]string) map[string]string {
	files["src/evaluate.h"] = "#pragma once\n#define EvalFileDefaultName   \"" + testNetName + "\"\n"
	return files
}

// A build from the server's source: the network the sources name fetched (through the server's
// redirect) and placed before make runs, the best ARCH of `make help` this machine runs, the
// engine cached by commit and ARCH and answering as an engine, the sources gone; a second
// request for the commit (or another builder on the same directory later) uses the cached
// engine without asking the server; a directory in use is refused.
func TestBuildFromTheServersSource(t *testing.T) {
	f := newFixture(t)
	sha := f.serve(t, withNet(buildtest.Engine(t, buildtest.Archs, "test -f "+testNetName)))
	f.files.AddNet(testNetName, testNet)
	b := f.builder(t, Config{Jobs: 2})
	paths, err := b.Engines(context.Background(), f.srv, Commit{sha, "new"}, Commit{sha, "base"})
	if err != nil {
		t.Fatalf("%v\n%s", err, f.log)
	}
	arch := ChooseArch(buildtest.Archs, ReadCPU())
	want := filepath.Join(f.dir, "engines", sha+"-"+arch)
	if len(paths) != 2 || paths[0] != want || paths[1] != want {
		t.Fatalf("engines %q, want %s twice", paths, want)
	}
	bench, err := uci.Bench(context.Background(), paths[0], 16, 1, 13)
	if err != nil || bench.Nodes != fakeuci.BenchNodes {
		t.Errorf("the built engine's bench: %+v, %v; want the fake engine's %d nodes", bench, err, fakeuci.BenchNodes)
	}
	if n, nn := f.files.Requests("source"), f.files.Requests("nn"); n != 1 || nn != 1 {
		t.Errorf("%d source and %d network requests, want one each", n, nn)
	}
	if data, err := os.ReadFile(filepath.Join(f.dir, "nets", testNetName)); err != nil || !bytes.Equal(data, testNet) {
		t.Errorf("the network was not kept: %v", err)
	}
	if left := sourceFilesLeft(t, f.dir); len(left) != 0 {
		t.Errorf("the sources were left on disk: %q", left)
	}
	for _, line := range []string{"Fetched the source", "sha256=ok", "from=server", "Built the engine", "arch=" + arch, "command=\"make -j2 build ARCH=" + arch + "\""} {
		if !strings.Contains(f.log.String(), line) {
			t.Errorf("the log lacks %q:\n%s", line, f.log)
		}
	}

	again, err := b.Engines(context.Background(), f.srv, Commit{sha, "new"})
	if err != nil || again[0] != want {
		t.Fatalf("again: %q, %v", again, err)
	}
	if n := f.files.Requests("source"); n != 1 {
		t.Errorf("%d source requests after a cached engine was asked for, want 1", n)
	}
	if !strings.Contains(f.log.String(), "Using the engine built before") {
		t.Errorf("the log does not say the cached engine was used:\n%s", f.log)
	}

	if _, err := New(Config{Dir: f.dir}); err == nil || !strings.Contains(err.Error(), "another worker") {
		t.Errorf("a second builder on a directory in use: %v, want refused", err)
	}
	b.Close()
	later, err := New(Config{Dir: f.dir, Logger: f.logger})
	if err != nil {
		t.Fatal(err)
	}
	defer later.Close()
	if p, err := later.Engines(context.Background(), f.srv, Commit{sha, "new"}); err != nil || p[0] != want || f.files.Requests("source") != 1 {
		t.Errorf("after a restart: %q, %v, %d source requests; want the cached engine", p, err, f.files.Requests("source"))
	}
}

// The operator's arch and command are used as given; a cached engine that no longer executes
// is built again.
func TestBuildWithTheOperatorsArchAndCommand(t *testing.T) {
	f := newFixture(t)
	sha := f.serve(t, buildtest.Engine(t, buildtest.Archs))
	b := f.builder(t, Config{Arch: "general-64", Command: "make  build ARCH={arch} JOBS={jobs}", Jobs: 3})
	p, err := b.Engines(context.Background(), f.srv, Commit{sha, "new"})
	if err != nil {
		t.Fatalf("%v\n%s", err, f.log)
	}
	if filepath.Base(p[0]) != sha+"-general-64" || !strings.Contains(f.log.String(), "make build ARCH=general-64 JOBS=3") {
		t.Errorf("engine %s; log:\n%s", p[0], f.log)
	}
	if err := os.Chmod(p[0], 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Engines(context.Background(), f.srv, Commit{sha, "new"}); err != nil || f.files.Requests("source") != 2 {
		t.Errorf("a broken cached engine: %v, %d source requests; want it built again", err, f.files.Requests("source"))
	}
}

// A build that fails is a *Error with the end of its log, bounded, and the failed_task message
// the server recognises; nothing is cached and the sources are gone.
func TestBuildFailureKeepsTheLogsEnd(t *testing.T) {
	f := newFixture(t)
	for _, tt := range []struct {
		name, line string
		lines      int // how many lines the error keeps
	}{
		{"short lines", "line $$i of the build log", 40},
		{"long lines", "line $$i of the build log " + strings.Repeat("x", 150), 16},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sha := f.serve(t, buildtest.Engine(t, buildtest.Archs,
				`@for i in $$(seq 1 100); do echo "`+tt.line+`"; done; echo "error: it does not compile" >&2; exit 1`))
			b := f.builder(t, Config{})
			defer b.Close()
			_, err := b.Engines(context.Background(), f.srv, Commit{sha, "new"})
			var be *Error
			if !errors.As(err, &be) {
				t.Fatalf("%v, want a *build.Error", err)
			}
			lines := strings.Split(be.Log, "\n")
			if len(lines) > maxLogLines || len(be.Log) > maxLogBytes || len(lines) < tt.lines ||
				!strings.Contains(be.Log, "line 100 ") || !strings.Contains(be.Log, "\nerror: it does not compile\n") ||
				strings.Contains(be.Log, "line 50 ") || !strings.HasPrefix(be.Log, "line ") {
				t.Errorf("log of %d lines and %d bytes:\n%s", len(lines), len(be.Log), be.Log)
			}
			msg := be.Message()
			head := protocol.BuildFailedPrefix + sha[:10] + ": make -j1 build ARCH="
			if !strings.HasPrefix(msg, head) || !strings.Contains(msg, ": exit status 2\n") || !strings.HasSuffix(msg, be.Log) || len(msg) > 4000 {
				t.Errorf("message:\n%s", msg)
			}
			if left := sourceFilesLeft(t, f.dir); len(left) != 0 {
				t.Errorf("the sources were left on disk: %q", left)
			}
			if entries := (&cache{dir: filepath.Join(f.dir, "engines")}).entries(); len(entries) != 0 {
				t.Errorf("a failed build was cached: %+v", entries)
			}
		})
	}
	long := &Error{SHA: strings.Repeat("a", 40), Command: "make", Status: "exit status 2", Log: strings.Repeat("é", 3000)}
	if msg := long.Message(); len(msg) > 4000 || !strings.HasPrefix(msg, protocol.BuildFailedPrefix) || !strings.HasSuffix(msg, "é") {
		t.Errorf("a message over the bound: %d bytes", len(msg))
	}
}

// A build that hangs is killed at the timeout, with the processes it started; that is this
// machine's lack of time, not the commit's fault: a plain error that says so, not a *Error.
func TestBuildTimeout(t *testing.T) {
	f := newFixture(t)
	pidFile := filepath.Join(t.TempDir(), "sleep.pid")
	sha := f.serve(t, buildtest.Engine(t, buildtest.Archs, "@echo compiling", "@sleep 300 & echo $$! > "+pidFile+"; wait"))
	b := f.builder(t, Config{Timeout: time.Second})
	start := time.Now()
	_, err := b.Engines(context.Background(), f.srv, Commit{sha, "new"})
	var be *Error
	if err == nil || errors.As(err, &be) || !strings.Contains(err.Error(), "took longer than build_timeout (1s) on this machine") {
		t.Fatalf("%v, want a plain error saying the build took longer than build_timeout", err)
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("the build returned after %v", took)
	}
	if !strings.Contains(f.log.String(), "compiling") {
		t.Errorf("the log lacks the build's output:\n%s", f.log)
	}
	data, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS != "linux" {
		return // what is left of the group is read in /proc
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(data)))
	waitFor(t, "the build's sleep to die", func() bool { return !alive(pid) })
}

// script writes an executable shell script of body in a fresh directory and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "build.sh")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// helpMakefile is a Makefile whose help target runs help (shell lines) and whose build target
// makes the engine.
func helpMakefile(help ...string) string {
	mk := ".PHONY: help build\nhelp:\n"
	for _, line := range help {
		mk += "\t" + line + "\n"
	}
	return mk + "build:\n\tcp engine.sh stockfish\n\tchmod +x stockfish\n"
}

// What stops a build on this machine rather than in the commit is a plain error, which the
// worker reports without protocol.BuildFailedPrefix (the server does not count it against the
// run): make help failing or hanging, a build command that cannot be run (exit status 126 or
// 127), a compiler make cannot find, a full disk, a command killed by a signal the worker did not
// send. A command that ran and failed otherwise, even with make's Error 127 or a file "not found",
// is the commit's: a *Error.
func TestMachineFaultsAreNotBuildErrors(t *testing.T) {
	engine := func(recipe ...string) func(*testing.T) map[string]string {
		return func(t *testing.T) map[string]string { return buildtest.Engine(t, buildtest.Archs, recipe...) }
	}
	withHelp := func(help ...string) func(*testing.T) map[string]string {
		return func(t *testing.T) map[string]string {
			files := buildtest.Engine(t, buildtest.Archs)
			files["src/Makefile"] = helpMakefile(help...)
			return files
		}
	}
	for _, tt := range []struct {
		name    string
		files   func(*testing.T) map[string]string
		command func(*testing.T) string // nil: the default
		gone    bool                    // the command is removed once the builder looked it up
		timeout time.Duration
		want    string // in the plain error; "" : a *Error
	}{
		{name: "make help fails", files: withHelp("@echo 'make: *** No rule to make target' >&2; exit 2"),
			want: "make help"},
		{name: "make help hangs", files: withHelp("@sleep 300"), timeout: time.Second,
			want: "make help"},
		{name: "the build command exits 127", files: engine(),
			command: func(t *testing.T) string { return script(t, "exit 127") }, want: "could not be run"},
		{name: "the build command exits 126", files: engine(),
			command: func(t *testing.T) string { return script(t, "exit 126") }, want: "could not be run"},
		{name: "the build command is gone", files: engine(),
			command: func(t *testing.T) string { return script(t, "exit 0") }, gone: true, want: "run "},
		{name: "make cannot find the compiler", files: engine("x86_64-linux-gnu-g++-99 -o stockfish main.cpp"),
			want: "x86_64-linux-gnu-g++-99 is not installed"},
		{name: "the shell cannot find the compiler", files: engine("@x86_64-linux-gnu-g++-99 --version && true"),
			want: "x86_64-linux-gnu-g++-99 is not installed"},
		{name: "the disk is full", files: engine(`@echo "/usr/bin/ld: final link failed: No space left on device" >&2; exit 1`),
			want: "no space left"},
		{name: "the command is killed by a signal", files: engine(),
			command: func(t *testing.T) string { return script(t, "kill -KILL $$") }, want: "signal: killed"},
		{name: "a recipe that exits 127", files: engine("@echo 'error: it does not compile' >&2; exit 127")},
		{name: "a missing header", files: engine(`@echo "search.cpp:1:10: fatal error: foo.h: No such file or directory" >&2; exit 1`)},
		{name: "the compiler not found without make's Error 127", files: engine(`@echo "/bin/sh: 1: g++: not found" >&2; exit 1`)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			sha := f.serve(t, tt.files(t))
			cfg := Config{Timeout: tt.timeout}
			if tt.command != nil {
				cfg.Command = tt.command(t)
			}
			b := f.builder(t, cfg)
			if tt.gone {
				if err := os.Remove(cfg.Command); err != nil {
					t.Fatal(err)
				}
			}
			_, err := b.Engines(context.Background(), f.srv, Commit{sha, "new"})
			var be *Error
			switch {
			case err == nil:
				t.Fatal("the build succeeded")
			case tt.want == "" && !errors.As(err, &be):
				t.Errorf("%v, want a *build.Error", err)
			case tt.want != "" && errors.As(err, &be):
				t.Errorf("a *build.Error (%v), want a plain error (%q)\n%s", err, tt.want, be.Log)
			case tt.want != "" && !strings.Contains(err.Error(), tt.want):
				t.Errorf("%v, want it to say %q", err, tt.want)
			}
			if left := sourceFilesLeft(t, f.dir); len(left) != 0 {
				t.Errorf("the sources were left on disk: %q", left)
			}
		})
	}
}

// alive reports whether the process runs (a zombie does not), on Linux.
func alive(pid int) bool {
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(stat), ") ")
	return !strings.HasPrefix(after, "Z")
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// What the server sends is checked: a source whose sha256 is not the header's (asked twice),
// a commit the server refuses (asked once, its message kept), a network that does not match
// its name, an archive that would write outside its tree, a run without a commit.
func TestBuildRefusesWhatDoesNotCheckOut(t *testing.T) {
	t.Run("a wrong sha256", func(t *testing.T) {
		f := newFixture(t)
		sha := f.serve(t, buildtest.Engine(t, buildtest.Archs))
		f.files.SetWrongSHA256(true)
		_, err := f.builder(t, Config{}).Engines(context.Background(), f.srv, Commit{sha, "new"})
		if err == nil || !strings.Contains(err.Error(), "sha256") || f.files.Requests("source") != 2 {
			t.Errorf("%v after %d requests; want a sha256 mismatch, asked twice", err, f.files.Requests("source"))
		}
	})
	t.Run("a commit the server refuses", func(t *testing.T) {
		f := newFixture(t)
		_, err := f.builder(t, Config{}).Engines(context.Background(), f.srv, Commit{strings.Repeat("c", 40), "base"})
		var he *HTTPError
		if !errors.As(err, &he) || he.Status != 404 || !strings.Contains(err.Error(), "is not an active run's") || f.files.Requests("source") != 1 {
			t.Errorf("%v after %d requests; want the server's 404, asked once", err, f.files.Requests("source"))
		}
	})
	t.Run("a network that does not match its name", func(t *testing.T) {
		f := newFixture(t)
		sha := f.serve(t, withNet(buildtest.Engine(t, buildtest.Archs)))
		f.files.AddNet(testNetName, []byte("another network"))
		_, err := f.builder(t, Config{}).Engines(context.Background(), f.srv, Commit{sha, "new"})
		if err == nil || !strings.Contains(err.Error(), "does not match its name") {
			t.Errorf("%v, want the network refused", err)
		}
		if _, err := os.Stat(filepath.Join(f.dir, "nets", testNetName)); err == nil {
			t.Error("the bad network was kept")
		}
	})
	t.Run("an archive that writes outside its tree", func(t *testing.T) {
		f := newFixture(t)
		evil := strings.Repeat("e", 40)
		f.files.AddSource(evil, tgzOf(t, dir("src/"), file("src/Makefile"), file("../evil")))
		_, err := f.builder(t, Config{}).Engines(context.Background(), f.srv, Commit{evil, "new"})
		if !errors.Is(err, errUnsafe) {
			t.Errorf("%v, want the archive refused", err)
		}
		if left := sourceFilesLeft(t, f.dir); len(left) != 0 {
			t.Errorf("files left: %q", left)
		}
	})
	t.Run("no commit", func(t *testing.T) {
		f := newFixture(t)
		_, err := f.builder(t, Config{}).Engines(context.Background(), f.srv, Commit{"", "base"})
		if err == nil || !strings.Contains(err.Error(), "base engine has no commit") || f.files.Requests("source") != 0 {
			t.Errorf("%v, want refused before asking", err)
		}
	})
}

// A build runs with a HOME and a TMPDIR of its own, inside its build directory, never the
// worker's directory (where the engines are): what a patch's Makefile writes there goes with
// the sources.
func TestBuildHasAHomeOfItsOwn(t *testing.T) {
	f := newFixture(t)
	out := t.TempDir()
	sha := f.serve(t, buildtest.Engine(t, buildtest.Archs,
		`@echo "$$HOME" > `+filepath.Join(out, "home"), `@echo "$$TMPDIR" > `+filepath.Join(out, "tmpdir"),
		`@touch "$$HOME/.written-by-the-build" "$$TMPDIR/written-by-the-build"`))
	b := f.builder(t, Config{})
	if _, err := b.Engines(context.Background(), f.srv, Commit{sha, "new"}); err != nil {
		t.Fatalf("%v\n%s", err, f.log)
	}
	read := func(name string) string {
		data, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(data))
	}
	home, tmp := read("home"), read("tmpdir")
	buildDir := filepath.Dir(home)
	if filepath.Dir(buildDir) != filepath.Join(f.dir, "tmp") || filepath.Dir(tmp) != buildDir || home == tmp {
		t.Errorf("HOME %s and TMPDIR %s, want two directories of one build directory in %s", home, tmp, filepath.Join(f.dir, "tmp"))
	}
	if _, err := os.Stat(buildDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the build's directory %s is still there: %v", buildDir, err)
	}
	if left := sourceFilesLeft(t, f.dir); len(left) != 0 {
		t.Errorf("files left in the worker's directory: %q", left)
	}
}

// An engine whose bytes changed since it was cached (by a build that wrote into engines/, by
// a disk) is not used: the next request builds it again, and the log says why.
func TestTamperedEngineIsBuiltAgain(t *testing.T) {
	f := newFixture(t)
	sha := f.serve(t, buildtest.Engine(t, buildtest.Archs))
	b := f.builder(t, Config{})
	p, err := b.Engines(context.Background(), f.srv, Commit{sha, "new"})
	if err != nil {
		t.Fatalf("%v\n%s", err, f.log)
	}
	if _, err := b.Engines(context.Background(), f.srv, Commit{sha, "new"}); err != nil || f.files.Requests("source") != 1 {
		t.Fatalf("an untouched engine: %v, %d source requests; want it used", err, f.files.Requests("source"))
	}
	data, err := os.ReadFile(p[0])
	if err != nil {
		t.Fatal(err)
	}
	tampered := append([]byte("#!/bin/sh\necho tampered\n"), data...)
	if err := os.WriteFile(p[0], tampered, 0o755); err != nil {
		t.Fatal(err)
	}
	again, err := b.Engines(context.Background(), f.srv, Commit{sha, "new"})
	if err != nil || again[0] != p[0] || f.files.Requests("source") != 2 {
		t.Fatalf("a tampered engine: %q, %v, %d source requests; want it built again", again, err, f.files.Requests("source"))
	}
	if data, err := os.ReadFile(again[0]); err != nil || bytes.Contains(data, []byte("tampered")) {
		t.Errorf("the engine is still the tampered one: %v", err)
	}
	if !strings.Contains(f.log.String(), "level=WARN") || !strings.Contains(f.log.String(), "sha256") {
		t.Errorf("the log does not warn of the changed engine:\n%s", f.log)
	}
}
