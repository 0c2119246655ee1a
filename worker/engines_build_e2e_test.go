//go:build !race

package worker

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/shoal-chess/shoal/worker/build"
	"github.com/shoal-chess/shoal/worker/build/buildtest"
)

// sfFixtureEnv names the fixture repository of Stockfish 11 (stockfish-sf11.git.tar.gz).
const sfFixtureEnv = "SHOAL_TEST_SF_FIXTURE"

// Stockfish 11's branch tweak-futility, built as a worker builds a run's engine: its git
// archive from the server, the default command with the ARCH this machine runs best, and the
// bench of the engine built must be the commit's (4643972); then a game pair between two
// builds of it, and no source file left in the worker's directory. It takes the better part of
// a minute (a real build), so it runs without the race detector, and only when the fixture is
// found (in CI it must be).
func TestBuildE2EStockfish11(t *testing.T) {
	fixture := os.Getenv(sfFixtureEnv)
	if _, err := os.Stat(fixture); fixture == "" || err != nil {
		msg := sfFixtureEnv + "=" + fixture + " does not name stockfish-sf11.git.tar.gz (make test sets it from SF_FIXTURE)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg + ": CI must find it")
		}
		t.Skip(msg + ": the real build is skipped")
	}
	for _, tool := range []string{"git", "make", "tar", "g++"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s names the fixture, but %s is not installed", sfFixtureEnv, tool)
		}
	}
	// The ARCH this machine should build Stockfish 11 with; a machine none fits could not
	// build it (and the check of the log below would check nothing).
	arch := build.ChooseArch(build.ParseMakeHelp(sf11Archs), build.ReadCPU())
	if arch == "" {
		t.Skipf("none of Stockfish 11's ARCHes %v runs on this machine (%s/%s): nothing to build",
			build.ParseMakeHelp(sf11Archs), runtime.GOOS, runtime.GOARCH)
	}
	const sha = "4901218d4cc31658942486ccd1dbadf2d2df783a" // tweak-futility
	unpacked := t.TempDir()
	if out, err := exec.Command("tar", "xzf", fixture, "-C", unpacked).CombinedOutput(); err != nil {
		t.Fatalf("tar xzf %s: %v\n%s", fixture, err, out)
	}
	tgz := buildtest.Git(t, filepath.Join(unpacked, "stockfish.git"), "archive", "--format=tar.gz", sha)
	files := buildtest.NewFiles()
	files.AddSource(sha, tgz)
	st := newStubWithFiles(t, nil, files)

	log := &syncBuffer{}
	dir := filepath.Join(t.TempDir(), "worker")
	src := &EngineSource{Build: builder(t, dir, log, build.Config{Jobs: 2}), Dir: dir, Factor: 0.2}
	if _, err := New(testConfig(st, log), src); err != nil {
		t.Fatal(err)
	}
	task := realTask()
	task.Args.ResolvedNew, task.Args.ResolvedBase = sha, sha
	task.Args.NewSignature, task.Args.BaseSignature = "4643972", "4643972"
	task.Args.NewOptions, task.Args.BaseOptions = "Hash=16", "Hash=16"
	start := time.Now()
	b, err := src.Play(context.Background(), task, 1, nil)
	if err != nil {
		t.Fatalf("%v\n%s", err, log)
	}
	t.Logf("built, benched and played in %v:\n%s", time.Since(start).Round(time.Second), log)
	if s := b.Stats; s.Wins+s.Losses+s.Draws != 2 || s.Crashes != 0 {
		t.Errorf("stats %+v, want two games without a crash", s)
	}
	// The whole value: "arch=x86-64" is also the start of "arch=x86-64-bmi2".
	if !strings.Contains(log.String(), "Built the engine") || !strings.Contains(log.String(), " arch="+arch+" ") {
		t.Errorf("the build did not use %s, the ARCH this machine runs best", arch)
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if rel, _ := filepath.Rel(dir, p); rel != "lock" && !strings.HasPrefix(rel, "engines"+string(filepath.Separator)) {
			t.Errorf("%s left in the worker's directory", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// sf11Archs is the ARCH list of Stockfish 11's `make help`.
const sf11Archs = `Supported archs:

x86-64-bmi2             > x86 64-bit with pext support (also enables SSE4)
x86-64-modern           > x86 64-bit with popcnt support (also enables SSE3)
x86-64                  > x86 64-bit generic
x86-32                  > x86 32-bit (also enables SSE)
x86-32-old              > x86 32-bit fall back for old hardware
ppc-64                  > PPC 64-bit
ppc-32                  > PPC 32-bit
armv7                   > ARMv7 32-bit
general-64              > unspecified 64-bit
general-32              > unspecified 32-bit
`
