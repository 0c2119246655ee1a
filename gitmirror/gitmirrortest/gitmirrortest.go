// Package gitmirrortest makes small git repositories for tests of what reads them through the
// server's mirrors: real repositories, built with the git command, with fixed authors and dates
// so that the same history gives the same commits.
package gitmirrortest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/shoal-chess/shoal/gitmirror"
)

// Repo is a repository with a work tree in a test's temporary directory.
type Repo struct {
	// Dir is its path, which a mirror may name as the repository.
	Dir  string
	t    testing.TB
	tick int // seconds after the first commit's date, one more each commit
}

// New creates an empty repository whose default branch is master. Tests that call it are
// skipped when git is not installed.
func New(t testing.TB) *Repo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not installed")
	}
	r := &Repo{Dir: t.TempDir(), t: t}
	r.Git("init", "-q", "-b", "master")
	return r
}

// Git runs a git command in the repository and returns its output, trimmed; a failure ends the
// test.
func (r *Repo) Git(args ...string) string {
	r.t.Helper()
	date := strconv.Itoa(1700000000+r.tick) + " +0000"
	cmd := exec.Command("git", args...)
	cmd.Dir = r.Dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+r.Dir,
		"GIT_AUTHOR_NAME=Ada Tester", "GIT_AUTHOR_EMAIL=ada@example.org", "GIT_AUTHOR_DATE="+date,
		"GIT_COMMITTER_NAME=Ada Tester", "GIT_COMMITTER_EMAIL=ada@example.org", "GIT_COMMITTER_DATE="+date)
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// Commit writes files (path -> content; an empty content removes the file) on the branch
// checked out, commits them with msg and returns the commit's SHA.
func (r *Repo) Commit(msg string, files map[string]string) string {
	r.t.Helper()
	for path, content := range files {
		full := filepath.Join(r.Dir, filepath.FromSlash(path))
		if content == "" {
			if err := os.Remove(full); err != nil {
				r.t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			r.t.Fatal(err)
		}
	}
	r.Git("add", "-A")
	r.tick++
	r.Git("commit", "-q", "--allow-empty", "-m", msg)
	return r.Git("rev-parse", "HEAD")
}

// Branch creates branch name at commit and checks it out.
func (r *Repo) Branch(name, commit string) {
	r.t.Helper()
	r.Git("checkout", "-q", "-b", name, commit)
}

// Checkout checks out an existing branch.
func (r *Repo) Checkout(name string) {
	r.t.Helper()
	r.Git("checkout", "-q", name)
}

// Mirrors returns mirrors, in the test's temporary directory, that allow this repository alone,
// closed when the test ends.
func (r *Repo) Mirrors() *gitmirror.Mirrors {
	r.t.Helper()
	return NewMirrors(r.t, r.Dir)
}

// NewMirrors returns mirrors in the test's temporary directory that allow the given
// repositories and prefixes, closed when the test ends.
func NewMirrors(t testing.TB, allowed ...string) *gitmirror.Mirrors {
	t.Helper()
	m, err := gitmirror.New(gitmirror.Config{Dir: t.TempDir(), Allowed: allowed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}
