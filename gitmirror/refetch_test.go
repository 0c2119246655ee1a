package gitmirror

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

// A branch named with hex digits only is a branch like any other: fetched again when due.
func TestHexBranchNamesAreRefetched(t *testing.T) {
	up := newUpstream(t)
	up.write("a", "1\n")
	one := up.commit("one")
	names := []string{"1234", "cafe", "decade"}
	for _, name := range names {
		up.git("branch", name, one)
	}
	m := newTestMirrors(t, Config{Allowed: []string{up.dir}, RefetchAfter: time.Minute})
	clock := &fakeClock{now: time.Unix(1800000000, 0)}
	m.now = clock.Now
	ctx := testCtx(t)
	for _, name := range names {
		if c, err := m.Resolve(ctx, up.dir, name); err != nil || c.SHA != one {
			t.Fatalf("Resolve(%s) = %s, %v; want %s", name, c.SHA, err, one)
		}
	}
	up.write("a", "2\n")
	two := up.commit("two")
	for _, name := range names {
		up.git("branch", "-f", name, two)
	}
	clock.advance(2 * time.Minute)
	for _, name := range names {
		if c, err := m.Resolve(ctx, up.dir, name); err != nil || c.SHA != two {
			t.Errorf("Resolve(%s) after the branch moved = %s, %v; want %s", name, c.SHA, err, two)
		}
	}
	// A hex ref that names no branch is still a short SHA.
	if c, err := m.Resolve(ctx, up.dir, one[:8]); err != nil || c.SHA != one {
		t.Errorf("Resolve(%s) = %s, %v; want %s", one[:8], c.SHA, err, one)
	}
}

func TestMaxRepos(t *testing.T) {
	var ups []*upstream
	var allowed []string
	for range 3 {
		up := smallUpstream(t)
		ups = append(ups, up)
		allowed = append(allowed, up.dir)
	}
	dir := t.TempDir()
	cfg := Config{Dir: dir, Allowed: allowed, MaxRepos: 2}
	m := newTestMirrors(t, cfg)
	ctx := testCtx(t)
	for _, up := range ups[:2] {
		if _, err := m.Resolve(ctx, up.dir, "master"); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(m *Mirrors) {
		t.Helper()
		_, err := m.Resolve(ctx, ups[2].dir, "master")
		if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "mirrors 2 repositories") {
			t.Errorf("Resolve of a third repository: %v, want ErrTooLarge saying the server mirrors 2", err)
		}
	}
	refused(m)
	clock := &fakeClock{now: time.Now().Add(time.Hour)}
	m.now = clock.Now
	if _, err := m.Resolve(ctx, ups[0].dir, "master"); err != nil {
		t.Errorf("a repository mirrored already is fetched again: %v", err)
	}
	t.Run("counted again at start", func(t *testing.T) {
		m.Close()
		refused(newTestMirrors(t, cfg))
	})
}

func TestWaitingFetchesAreBounded(t *testing.T) {
	srv, ca := newHangingServer(t)
	m := newTestMirrors(t, Config{Allowed: []string{srv.URL + "/"}, CAFile: ca})
	const queued = 2 + 16 // two fetching, sixteen waiting
	var wg sync.WaitGroup
	for i := range queued {
		wg.Go(func() { m.Resolve(testCtx(t), fmt.Sprintf("%s/repo%d.git", srv.URL, i), "master") })
	}
	defer wg.Wait()
	defer m.Close()
	deadline := time.Now().Add(10 * time.Second)
	for m.fetchCount.Load() < queued {
		if time.Now().After(deadline) {
			t.Fatalf("%d fetches started, want %d", m.fetchCount.Load(), queued)
		}
		time.Sleep(10 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, err := m.Resolve(ctx, srv.URL+"/one-more.git", "master")
	if !errors.Is(err, ErrUnreachable) || !strings.Contains(err.Error(), "too many fetches waiting") {
		t.Fatalf("Resolve with %d fetches queued: %v, want ErrUnreachable saying too many wait", queued, err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("refused after %v, want at once", d)
	}
}

// mirrorState is what a test compares of a mirror before and after a fetch: its bytes on disk,
// its refs, its pack files.
func mirrorState(t *testing.T, m *Mirrors, repo string) string {
	t.Helper()
	st, err := m.repo(repo)
	if err != nil {
		t.Fatal(err)
	}
	packs, err := packNames(st.dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range packs {
		names = append(names, n)
	}
	sort.Strings(names)
	return fmt.Sprintf("%d bytes\nrefs:\n%s\npacks: %v", dirSize(st.dir), gitT(t, st.dir, "for-each-ref"), names)
}

func TestTooLargeFetchLeavesTheMirrorAsItWas(t *testing.T) {
	for _, tt := range []struct {
		name string
		poll time.Duration
	}{
		{"a fetch that ends past the limit", time.Hour},
		{"a fetch stopped past the limit", time.Millisecond},
	} {
		t.Run(tt.name, func(t *testing.T) {
			up := smallUpstream(t)
			up.git("tag", "v1")
			up.git("branch", "side")
			small := up.git("rev-parse", "HEAD")
			m := newTestMirrors(t, Config{Allowed: []string{up.dir}, MaxBytes: 300 << 10})
			m.pollEvery = tt.poll
			clock := &fakeClock{now: time.Unix(1800000000, 0)}
			m.now = clock.Now
			ctx := testCtx(t)
			if _, err := m.Resolve(ctx, up.dir, "master"); err != nil {
				t.Fatal(err)
			}
			before := mirrorState(t, m, up.dir)
			addNoise(t, up, "noise.bin", 3<<20, 3)
			up.git("tag", "v2")
			up.git("branch", "-D", "side")
			clock.advance(2 * time.Minute)
			if _, err := m.Resolve(ctx, up.dir, "master"); !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Resolve: %v, want ErrTooLarge", err)
			}
			if after := mirrorState(t, m, up.dir); after != before {
				t.Errorf("the mirror changed:\nbefore %s\nafter  %s", before, after)
			}
			// Once upstream is small again, fetches go on.
			up.git("reset", "-q", "--hard", small)
			up.git("tag", "-d", "v2")
			up.git("reflog", "expire", "--expire=now", "--all")
			up.git("gc", "-q", "--prune=now")
			clock.advance(2 * time.Minute)
			if c, err := m.Resolve(ctx, up.dir, "master"); err != nil || c.SHA != small {
				t.Errorf("Resolve after upstream shrank = %s, %v; want %s", c.SHA, err, small)
			}
		})
	}
}

// A fetch into an existing mirror prunes what upstream deleted, but not what Shoal keeps.
func TestRefetchUpdatesAndPrunes(t *testing.T) {
	up := newUpstream(t)
	up.write("a", "1\n")
	one := up.commit("one")
	up.git("branch", "gone")
	up.git("branch", "a")
	up.git("tag", "old")
	up.git("branch", "moves")
	m := newTestMirrors(t, Config{Allowed: []string{up.dir}})
	clock := &fakeClock{now: time.Unix(1800000000, 0)}
	m.now = clock.Now
	ctx := testCtx(t)
	if _, err := m.Resolve(ctx, up.dir, "master"); err != nil {
		t.Fatal(err)
	}
	if err := m.Keep(ctx, up.dir, one); err != nil {
		t.Fatal(err)
	}
	up.write("a", "2\n")
	two := up.commit("two")
	up.git("branch", "-D", "gone", "a")
	up.git("branch", "a/b", two) // where the deleted "a" was
	up.git("tag", "-d", "old")
	up.git("tag", "new")
	up.git("branch", "-f", "moves", two)
	clock.advance(2 * time.Minute)
	if c, err := m.Resolve(ctx, up.dir, "master"); err != nil || c.SHA != two {
		t.Fatalf("Resolve(master) = %s, %v; want %s", c.SHA, err, two)
	}
	st, _ := m.repo(up.dir)
	got := gitT(t, st.dir, "for-each-ref", "--format=%(refname) %(objectname)")
	want := strings.Join([]string{
		"refs/heads/a/b " + two,
		"refs/heads/master " + two,
		"refs/heads/moves " + two,
		"refs/shoal/keep/" + one + " " + one,
		"refs/tags/new " + two,
	}, "\n")
	if got != want {
		t.Errorf("refs after the fetch:\n%s\nwant\n%s", got, want)
	}
}

// Fetched objects are checked: a malformed commit upstream fails the fetch.
func TestFetchChecksObjects(t *testing.T) {
	up := smallUpstream(t)
	tree := up.git("rev-parse", "HEAD^{tree}")
	bad := filepath.Join(t.TempDir(), "bad-commit")
	raw := "tree " + tree + "\nauthor Ada <ada@example.org> not-a-date +0000\ncommitter Ada <ada@example.org> 1700000000 +0000\n\nbad\n"
	if err := os.WriteFile(bad, []byte(raw), 0o644); err != nil {
		t.Fatal(err)
	}
	sha := up.git("hash-object", "-t", "commit", "--literally", "-w", bad)
	up.git("update-ref", "refs/heads/bad", sha)
	m := newTestMirrors(t, Config{Allowed: []string{up.dir}})
	_, err := m.Resolve(testCtx(t), up.dir, "master")
	if !errors.Is(err, ErrUnreachable) {
		t.Fatalf("Resolve of a repository with a malformed commit: %v, want ErrUnreachable", err)
	}
}

func TestGitEnvPassesProxiesOnly(t *testing.T) {
	env := map[string]string{
		"PATH":        "/usr/bin",
		"HTTPS_PROXY": "http://proxy.example:3128",
		"http_proxy":  "http://proxy.example:3128",
		"NO_PROXY":    "localhost,.internal",
		"all_proxy":   "socks5://proxy.example:1080",
		"GIT_DIR":     "/elsewhere",
		"SECRET":      "x",
	}
	got := gitEnv("/home", "https", func(k string) string { return env[k] })
	want := []string{
		"PATH=/usr/bin", "HTTPS_PROXY=http://proxy.example:3128", "http_proxy=http://proxy.example:3128",
		"NO_PROXY=localhost,.internal", "all_proxy=socks5://proxy.example:1080",
	}
	has := map[string]bool{}
	for _, kv := range got {
		has[kv] = true
		if strings.HasPrefix(kv, "GIT_DIR=") || strings.HasPrefix(kv, "SECRET=") || strings.HasPrefix(kv, "HTTP_PROXY=") {
			t.Errorf("%s reached git", kv)
		}
	}
	for _, kv := range want {
		if !has[kv] {
			t.Errorf("%s did not reach git (env %v)", kv, got)
		}
	}
	t.Run("from the process environment", func(t *testing.T) {
		t.Setenv("HTTPS_PROXY", "http://proxy.example:3128")
		m := newTestMirrors(t, Config{})
		found := false
		for _, kv := range m.env {
			found = found || kv == "HTTPS_PROXY=http://proxy.example:3128"
		}
		if !found {
			t.Errorf("HTTPS_PROXY not in git's environment %v", m.env)
		}
	})
}

// A fetch undone removes the pack files it added, unless a Keep ran meanwhile: a kept commit
// may be in them, and a ref to a missing object would break the mirror.
func TestUndoFetchKeepsPacksAKeepMayUse(t *testing.T) {
	for _, keptMeanwhile := range []bool{false, true} {
		t.Run(fmt.Sprintf("kept meanwhile %v", keptMeanwhile), func(t *testing.T) {
			up := smallUpstream(t)
			m := newTestMirrors(t, Config{Allowed: []string{up.dir}})
			ctx := testCtx(t)
			if _, err := m.Resolve(ctx, up.dir, "master"); err != nil {
				t.Fatal(err)
			}
			st, _ := m.repo(up.dir)
			before, err := m.snapshot(st)
			if err != nil {
				t.Fatal(err)
			}
			up.write("more", "more\n")
			more := up.commit("more")
			if _, err := m.fetchObjects(ctx, st, st.dir, []string{"-c", "fetch.unpackLimit=1"}, false,
				"+refs/heads/*:"+incomingRefs+"heads/*"); err != nil {
				t.Fatal(err)
			}
			if keptMeanwhile {
				st.kept.Add(1)
			}
			m.undoFetch(st, before)
			if refs := gitT(t, st.dir, "for-each-ref", incomingRefs); refs != "" {
				t.Errorf("incoming refs left: %s", refs)
			}
			after, _ := packNames(st.dir)
			added := len(after) > len(before.packs)
			if added != keptMeanwhile {
				t.Errorf("packs before %v after %v; want the fetch's kept: %v", before.packs, after, keptMeanwhile)
			}
			m.commits = newLRU[Commit](10, 0, nil)
			_, err = m.Commit(ctx, up.dir, more)
			if (err == nil) != keptMeanwhile {
				t.Errorf("Commit of the fetched commit: %v; want it there: %v", err, keptMeanwhile)
			}
		})
	}
}
