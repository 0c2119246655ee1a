package gitmirror

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestMain removes the mirror the Stockfish benchmarks share, if they made one.
func TestMain(m *testing.M) {
	code := m.Run()
	if benchShared.dir != "" {
		os.RemoveAll(benchShared.dir)
	}
	os.Exit(code)
}

// testEnv is the environment of the tests' own git calls: no user configuration, and fixed
// names and dates so that SHAs are the same on every run.
func testEnv(home string) []string {
	return []string{
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + home,
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_AUTHOR_NAME=Ada Tester",
		"GIT_AUTHOR_EMAIL=ada@example.org",
		"GIT_AUTHOR_DATE=1700000000 +0100",
		"GIT_COMMITTER_NAME=Bob Committer",
		"GIT_COMMITTER_EMAIL=bob@example.org",
		"GIT_COMMITTER_DATE=1700000100 +0000",
		"LC_ALL=C",
	}
}

// gitT runs git in dir for a test and returns its trimmed output.
func gitT(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "init.defaultBranch=master", "-c", "protocol.file.allow=always"}, args...)...)
	cmd.Dir = dir
	cmd.Env = testEnv(dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// upstream is a repository a test mirrors, worked on with the git command.
type upstream struct {
	t   testing.TB
	dir string
}

func newUpstream(t testing.TB) *upstream {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "up")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	gitT(t, dir, "init", "-q")
	return &upstream{t: t, dir: dir}
}

func (u *upstream) git(args ...string) string {
	u.t.Helper()
	return gitT(u.t, u.dir, args...)
}

// write writes a file of the work tree and stages it.
func (u *upstream) write(path, content string) {
	u.t.Helper()
	p := filepath.Join(u.dir, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		u.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		u.t.Fatal(err)
	}
	u.git("add", "--", path)
}

// commit commits what is staged and returns the new commit's SHA.
func (u *upstream) commit(msg string) string {
	u.t.Helper()
	u.git("commit", "-q", "--allow-empty", "-m", msg)
	return u.git("rev-parse", "HEAD")
}

// newTestMirrors returns mirrors in a fresh directory allowing the given entries, closed when
// the test ends.
func newTestMirrors(t testing.TB, cfg Config) *Mirrors {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// testCtx is a context bounded well under the test timeout.
func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
