package gitmirror

import (
	"context"
	"io"
	"os"
	"sync"
	"testing"
)

// The benchmarks measure the mirrors on Stockfish's real history. They run only when
// SHOAL_BENCH_REPO names a local clone of it (a bare one will do), which is mirrored like any
// listed local path: branches and tags only.

// benchShared is one mirror of the bench repository that the benchmarks other than
// BenchmarkMirrorFetch share, made on first use and removed by TestMain.
var benchShared struct {
	once sync.Once
	dir  string
	err  error
}

// benchRepo returns the bench repository, or skips.
func benchRepo(b *testing.B) string {
	repo := os.Getenv("SHOAL_BENCH_REPO")
	if repo == "" {
		b.Skip("SHOAL_BENCH_REPO is not set")
	}
	return repo
}

// benchMirrors returns mirrors of the bench repository with its master resolved, sharing the
// mirror on disk between benchmarks.
func benchMirrors(b *testing.B) (*Mirrors, string, Commit) {
	repo := benchRepo(b)
	benchShared.once.Do(func() {
		benchShared.dir, benchShared.err = os.MkdirTemp("", "shoal-gitmirror-bench-")
	})
	if benchShared.err != nil {
		b.Fatal(benchShared.err)
	}
	m, err := New(Config{Dir: benchShared.dir, Allowed: []string{repo}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { m.Close() })
	c, err := m.Resolve(context.Background(), repo, "master")
	if err != nil {
		b.Fatal(err)
	}
	return m, repo, c
}

func BenchmarkMirrorFetch(b *testing.B) {
	repo := benchRepo(b)
	ctx := context.Background()
	var size int64
	for b.Loop() {
		b.StopTimer()
		dir := b.TempDir()
		m, err := New(Config{Dir: dir, Allowed: []string{repo}})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if _, err := m.Resolve(ctx, repo, "master"); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		m.Close()
		size = dirSize(dir)
		b.StartTimer()
	}
	b.ReportMetric(float64(size)/(1<<20), "MB-on-disk")
}

func BenchmarkResolveBranchWarm(b *testing.B) {
	m, repo, _ := benchMirrors(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := m.Resolve(ctx, repo, "master"); err != nil {
			b.Fatal(err)
		}
	}
}

// benchPair is master~1 and master, a typical one-commit patch.
func benchPair(b *testing.B, m *Mirrors, repo string, tip Commit) (string, string) {
	st, err := m.repo(repo)
	if err != nil {
		b.Fatal(err)
	}
	return gitT(b, st.dir, "rev-parse", tip.SHA+"~1"), tip.SHA
}

func BenchmarkDiffCold(b *testing.B) {
	m, repo, tip := benchMirrors(b)
	base, new := benchPair(b, m, repo, tip)
	ctx := context.Background()
	for b.Loop() {
		m.diffs = newLRU(diffCacheSize, diffCacheBytes, diffCost)
		if _, err := m.Diff(ctx, repo, base, new); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDiffWarm(b *testing.B) {
	m, repo, tip := benchMirrors(b)
	base, new := benchPair(b, m, repo, tip)
	ctx := context.Background()
	if _, err := m.Diff(ctx, repo, base, new); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := m.Diff(ctx, repo, base, new); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkArchiveCold(b *testing.B) {
	m, repo, tip := benchMirrors(b)
	ctx := context.Background()
	var size int64
	for b.Loop() {
		b.StopTimer()
		c := m.archives
		c.mu.Lock()
		if el, ok := c.bySHA[tip.SHA]; ok {
			c.drop(el)
		}
		c.mu.Unlock()
		b.StartTimer()
		a, err := m.Archive(ctx, repo, tip.SHA)
		if err != nil {
			b.Fatal(err)
		}
		size = a.Size
		a.Close()
	}
	b.ReportMetric(float64(size)/(1<<10), "KB-archive")
}

func BenchmarkArchiveWarm(b *testing.B) {
	m, repo, tip := benchMirrors(b)
	ctx := context.Background()
	for b.Loop() {
		a, err := m.Archive(ctx, repo, tip.SHA)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, a); err != nil {
			b.Fatal(err)
		}
		a.Close()
	}
}
