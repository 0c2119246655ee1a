package gitmirror

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestResolve(t *testing.T) {
	up := newUpstream(t)
	up.write("src/evaluate.h", "#define EvalFileDefaultNameBig \"nn-1c0000000000.nnue\"\n")
	first := up.commit("First commit\n\nBench: 1234567")
	up.git("tag", "-a", "-m", "release one", "sf_1")
	up.write("README.md", "hello\n")
	second := up.commit("Second commit\n\nbench: 123\n\nTrailing text")
	up.git("tag", "light")
	up.git("branch", "feature/x", first)
	m := newTestMirrors(t, Config{Allowed: []string{up.dir}})
	ctx := testCtx(t)

	tests := []struct {
		name string
		ref  string
		want string
	}{
		{"the default branch", "master", second},
		{"a branch with a slash", "feature/x", first},
		{"an annotated tag", "sf_1", first},
		{"a lightweight tag", "light", second},
		{"a short SHA", second[:7], second},
		{"a short SHA in upper case", strings.ToUpper(first[:10]), first},
		{"a full SHA", first, first},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := m.Resolve(ctx, up.dir, tt.ref)
			if err != nil {
				t.Fatalf("Resolve(%q): %v", tt.ref, err)
			}
			if c.SHA != tt.want {
				t.Errorf("Resolve(%q) = %s, want %s", tt.ref, c.SHA, tt.want)
			}
		})
	}

	t.Run("an unknown branch", func(t *testing.T) {
		_, err := m.Resolve(ctx, up.dir, "no-such-branch")
		if !errors.Is(err, ErrUnknownRef) {
			t.Fatalf("Resolve: %v, want ErrUnknownRef", err)
		}
		for _, part := range []string{"no-such-branch", up.dir, "last fetched"} {
			if !strings.Contains(err.Error(), part) {
				t.Errorf("error %q does not mention %q", err, part)
			}
		}
	})
	t.Run("an unknown SHA", func(t *testing.T) {
		if _, err := m.Resolve(ctx, up.dir, strings.Repeat("0", 40)); !errors.Is(err, ErrUnknownRef) {
			t.Fatalf("Resolve: %v, want ErrUnknownRef", err)
		}
	})
	t.Run("a bad ref", func(t *testing.T) {
		if _, err := m.Resolve(ctx, up.dir, "--upload-pack=touch /tmp/x"); !errors.Is(err, ErrBadRef) {
			t.Fatalf("Resolve: %v, want ErrBadRef", err)
		}
	})
	t.Run("a repository not allowed", func(t *testing.T) {
		if _, err := m.Resolve(ctx, "https://example.org/a/b", "master"); !errors.Is(err, ErrNotAllowed) {
			t.Fatalf("Resolve: %v, want ErrNotAllowed", err)
		}
	})
	t.Run("the commit's fields", func(t *testing.T) {
		c, err := m.Commit(ctx, up.dir, second)
		if err != nil {
			t.Fatal(err)
		}
		want := Commit{
			SHA:     second,
			Author:  "Ada Tester",
			Email:   "ada@example.org",
			Message: "Second commit\n\nbench: 123\n\nTrailing text",
			Bench:   "123",
		}
		date := c.Date
		c.Date = time.Time{}
		if c != want {
			t.Errorf("Commit = %+v, want %+v", c, want)
		}
		if !date.Equal(time.Unix(1700000000, 0)) {
			t.Errorf("Date = %v, want %v", date, time.Unix(1700000000, 0))
		}
		if _, off := date.Zone(); off != 3600 {
			t.Errorf("Date's zone offset = %d, want 3600 (the author's +0100)", off)
		}
	})
	t.Run("a commit the mirror lacks", func(t *testing.T) {
		if _, err := m.Commit(ctx, up.dir, strings.Repeat("1", 40)); !errors.Is(err, ErrUnknownRef) {
			t.Fatalf("Commit: %v, want ErrUnknownRef", err)
		}
	})
	t.Run("a file of a commit", func(t *testing.T) {
		b, err := m.File(ctx, up.dir, first, "src/evaluate.h", 1000)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "nn-1c0000000000.nnue") {
			t.Errorf("File = %q", b)
		}
		if _, err := m.File(ctx, up.dir, first, "README.md", 1000); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("File of a missing path: %v, want fs.ErrNotExist", err)
		}
		if _, err := m.File(ctx, up.dir, first, "src/evaluate.h", 10); err == nil || !strings.Contains(err.Error(), "more than") {
			t.Errorf("File past max: %v, want an error saying it is more than allowed", err)
		}
		if _, err := m.File(ctx, up.dir, first, "src", 1000); err == nil {
			t.Error("File of a directory succeeded")
		}
		if _, err := m.File(ctx, up.dir, first, "../x", 1000); err == nil {
			t.Error("File of ../x succeeded")
		}
		if _, err := m.File(ctx, up.dir, strings.Repeat("1", 40), "README.md", 1000); !errors.Is(err, ErrUnknownRef) {
			t.Errorf("File of an unknown commit: %v, want ErrUnknownRef", err)
		}
	})
}

func TestBench(t *testing.T) {
	tests := []struct {
		name string
		msg  string
		want string
	}{
		{"one bench line", "Tweak eval\n\nBench: 1234567", "1234567"},
		{"lower case with a colon", "x\n\nbench: 123", "123"},
		{"a space, no colon", "x\n\nBench 4567890", "4567890"},
		{"the last of several wins", "x\n\nBench: 111111\n\nfixup\n\nBench: 222222", "222222"},
		{"many digits", "x\n\nBench: 123456789012", "123456789012"},
		{"a leading zero is no bench", "x\n\nBench: 0123", ""},
		{"inside a word is no bench", "x\n\nworkbench: 123456", ""},
		{"within a line", "x\n\nNo functional change. Bench: 4242424", "4242424"},
		{"indented", "x\n\n   Bench: 777777  ", "777777"},
		{"none", "Just a message", ""},
		{"a later line without a number", "x\n\nBench: 999999\nbench", "999999"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := benchOf(tt.msg); got != tt.want {
				t.Errorf("benchOf(%q) = %q, want %q", tt.msg, got, tt.want)
			}
		})
	}
}

func TestRefetchPolicy(t *testing.T) {
	up := newUpstream(t)
	up.write("a", "1\n")
	one := up.commit("one")
	m := newTestMirrors(t, Config{Allowed: []string{up.dir}, RefetchAfter: time.Minute})
	clock := &fakeClock{now: time.Unix(1800000000, 0)}
	m.now = clock.Now
	ctx := testCtx(t)
	resolve := func(ref string) (string, error) {
		t.Helper()
		c, err := m.Resolve(ctx, up.dir, ref)
		return c.SHA, err
	}
	fetches := func(want int64) {
		t.Helper()
		if got := m.fetchCount.Load(); got != want {
			t.Fatalf("%d fetches, want %d", got, want)
		}
	}

	if sha, err := resolve("master"); err != nil || sha != one {
		t.Fatalf("first Resolve = %s, %v; want %s", sha, err, one)
	}
	fetches(1)

	up.write("a", "2\n")
	two := up.commit("two")
	clock.advance(30 * time.Second)
	if sha, err := resolve("master"); err != nil || sha != one {
		t.Fatalf("Resolve within the interval = %s, %v; want the old %s", sha, err, one)
	}
	fetches(1)
	if _, err := resolve("no-such-branch"); !errors.Is(err, ErrUnknownRef) {
		t.Fatalf("unknown branch: %v", err)
	}
	if _, err := resolve(strings.Repeat("e", 40)); !errors.Is(err, ErrUnknownRef) {
		t.Fatalf("unknown SHA: %v", err)
	}
	if _, err := resolve(two[:8]); !errors.Is(err, ErrUnknownRef) {
		t.Fatalf("a short SHA pushed within the interval: %v, want ErrUnknownRef until the next fetch", err)
	}
	fetches(1)
	if sha, err := resolve(one); err != nil || sha != one {
		t.Fatalf("Resolve of a known SHA = %s, %v", sha, err)
	}
	fetches(1)

	clock.advance(31 * time.Second)
	if sha, err := resolve("master"); err != nil || sha != two {
		t.Fatalf("Resolve after the interval = %s, %v; want the new %s", sha, err, two)
	}
	fetches(2)

	up.write("a", "3\n")
	three := up.commit("three")
	clock.advance(2 * time.Minute)
	if sha, err := resolve(three); err != nil || sha != three {
		t.Fatalf("Resolve of a SHA the mirror lacks = %s, %v; want %s fetched", sha, err, three)
	}
	fetches(3)

	up.write("a", "4\n")
	four := up.commit("four")
	clock.advance(2 * time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, 10)
	for range 10 {
		wg.Go(func() {
			c, err := m.Resolve(ctx, up.dir, "master")
			if err == nil && c.SHA != four {
				err = fmt.Errorf("Resolve = %s, want %s", c.SHA, four)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	fetches(4)
}

func TestFailedFetchIsRememberedForTheInterval(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "gone")
	m := newTestMirrors(t, Config{Allowed: []string{missing}})
	clock := &fakeClock{now: time.Unix(1800000000, 0)}
	m.now = clock.Now
	ctx := testCtx(t)
	_, err := m.Resolve(ctx, missing, "master")
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Resolve of a missing repository: %v, want ErrUnreachable", err)
	}
	if !strings.Contains(err.Error(), "gone") {
		t.Errorf("error %q does not say what git said", err)
	}
	_, err2 := m.Resolve(ctx, missing, "master")
	if !errors.Is(err2, ErrUnreachable) || m.fetchCount.Load() != 1 {
		t.Fatalf("second Resolve: %v after %d fetches; want the same error, one fetch", err2, m.fetchCount.Load())
	}
	entries, _ := os.ReadDir(m.cfg.Dir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "tmp-") || strings.HasSuffix(e.Name(), ".git") {
			t.Errorf("a failed first fetch left %s behind", e.Name())
		}
	}
	clock.advance(2 * time.Minute)
	if _, err := m.Resolve(ctx, missing, "master"); !errors.Is(err, ErrUnreachable) || m.fetchCount.Load() != 2 {
		t.Fatalf("Resolve after the interval: %v after %d fetches; want a new fetch", err, m.fetchCount.Load())
	}
}

func TestUnreachable(t *testing.T) {
	m := newTestMirrors(t, Config{Allowed: []string{"https://127.0.0.1:1/"}})
	start := time.Now()
	_, err := m.Resolve(testCtx(t), "https://127.0.0.1:1/x/y.git", "master")
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Resolve: %v, want ErrUnreachable", err)
	}
	if !strings.Contains(err.Error(), "127.0.0.1") {
		t.Errorf("error %q does not give git's reason", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("took %v", d)
	}
}

func TestKeepSurvivesForcePushAndGC(t *testing.T) {
	up := newUpstream(t)
	up.write("a", "base\n")
	base := up.commit("base")
	up.git("checkout", "-q", "-b", "patch")
	up.write("a", "patch\n")
	patch := up.commit("the patch")
	up.git("checkout", "-q", "master")
	m := newTestMirrors(t, Config{Allowed: []string{up.dir}})
	clock := &fakeClock{now: time.Unix(1800000000, 0)}
	m.now = clock.Now
	ctx := testCtx(t)

	if c, err := m.Resolve(ctx, up.dir, "patch"); err != nil || c.SHA != patch {
		t.Fatalf("Resolve(patch) = %v, %v", c.SHA, err)
	}
	if err := m.Keep(ctx, up.dir, patch, base); err != nil {
		t.Fatalf("Keep: %v", err)
	}
	// The branch is force-pushed away from the kept commit, the commit pruned upstream.
	up.git("branch", "-f", "patch", base)
	up.git("reflog", "expire", "--expire=now", "--all")
	up.git("gc", "-q", "--prune=now")
	clock.advance(2 * time.Minute)
	if c, err := m.Resolve(ctx, up.dir, "patch"); err != nil || c.SHA != base {
		t.Fatalf("Resolve(patch) after the force-push = %v, %v; want %s", c.SHA, err, base)
	}
	st, _ := m.repo(up.dir)
	gitT(t, st.dir, "gc", "-q", "--prune=now")
	m.commits = newLRU[Commit](10, 0, nil) // read from disk, not from memory
	if c, err := m.Resolve(ctx, up.dir, patch); err != nil || c.SHA != patch {
		t.Fatalf("Resolve(%s) after gc = %v, %v; want it kept", patch, c.SHA, err)
	}

	t.Run("an unknown commit", func(t *testing.T) {
		if err := m.Keep(ctx, up.dir, strings.Repeat("2", 40)); !errors.Is(err, ErrUnknownRef) {
			t.Errorf("Keep: %v, want ErrUnknownRef", err)
		}
	})
	t.Run("a short SHA", func(t *testing.T) {
		if err := m.Keep(ctx, up.dir, patch[:8]); !errors.Is(err, ErrBadRef) {
			t.Errorf("Keep: %v, want ErrBadRef", err)
		}
	})
}

func TestRelation(t *testing.T) {
	up := newUpstream(t)
	up.write("a", "1\n")
	root := up.commit("root")
	up.write("a", "2\n")
	mid := up.commit("mid")
	up.git("checkout", "-q", "-b", "patch")
	up.write("b", "patch\n")
	patch := up.commit("patch")
	up.git("checkout", "-q", "master")
	up.write("a", "3\n")
	tip := up.commit("tip")
	up.git("checkout", "-q", "--orphan", "lonely")
	up.write("z", "z\n")
	lonely := up.commit("unrelated history")
	up.git("checkout", "-q", "master")
	m := newTestMirrors(t, Config{Allowed: []string{up.dir}})
	ctx := testCtx(t)
	if _, err := m.Resolve(ctx, up.dir, "master"); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name      string
		base, new string
		want      Relation
	}{
		{"base is an ancestor", root, patch, Relation{MergeBase: root, BaseIsAncestor: true, BaseInHead: true, HeadMergeBase: mid}},
		{"base is the default branch's tip", tip, patch, Relation{MergeBase: mid, BaseInHead: true, HeadMergeBase: mid}},
		{"new is in the default branch", root, tip, Relation{MergeBase: root, BaseIsAncestor: true, BaseInHead: true, NewInHead: true, HeadMergeBase: tip}},
		{"base is a side branch", patch, tip, Relation{MergeBase: mid, NewInHead: true, HeadMergeBase: tip}},
		{"no common history", lonely, tip, Relation{NewInHead: true, HeadMergeBase: tip}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.want.Head, tt.want.HeadSHA = "master", tip
			for range 2 { // the second answer is the cached one
				got, err := m.Relation(ctx, up.dir, tt.base, tt.new)
				if err != nil {
					t.Fatal(err)
				}
				if got != tt.want {
					t.Errorf("Relation = %+v, want %+v", got, tt.want)
				}
			}
		})
	}
	t.Run("an unknown commit", func(t *testing.T) {
		if _, err := m.Relation(ctx, up.dir, root, strings.Repeat("3", 40)); !errors.Is(err, ErrUnknownRef) {
			t.Errorf("Relation: %v, want ErrUnknownRef", err)
		}
	})
}

func TestDefaultBranchFollowsTheRemote(t *testing.T) {
	up := newUpstream(t)
	up.git("checkout", "-q", "-b", "main")
	up.write("a", "1\n")
	tip := up.commit("on main")
	up.git("branch", "master", tip)
	up.write("a", "2\n")
	up.git("branch", "-f", "master", up.commit("ahead on main"))
	up.git("reset", "-q", "--hard", tip)
	m := newTestMirrors(t, Config{Allowed: []string{up.dir}})
	ctx := testCtx(t)
	if _, err := m.Resolve(ctx, up.dir, "main"); err != nil {
		t.Fatal(err)
	}
	r, err := m.Relation(ctx, up.dir, tip, tip)
	if err != nil {
		t.Fatal(err)
	}
	if r.Head != "main" || r.HeadSHA != tip {
		t.Errorf("Head = %q at %s, want main at %s", r.Head, r.HeadSHA, tip)
	}
}

func TestClosedMirrorsRefuse(t *testing.T) {
	up := newUpstream(t)
	up.write("a", "1\n")
	up.commit("one")
	m := newTestMirrors(t, Config{Allowed: []string{up.dir}})
	m.Close()
	if _, err := m.Resolve(testCtx(t), up.dir, "master"); err == nil {
		t.Fatal("Resolve after Close succeeded")
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
