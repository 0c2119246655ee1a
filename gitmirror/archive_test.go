package gitmirror

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

// untar reads a gzipped tarball's regular files.
func untar(t *testing.T, r io.Reader) map[string]string {
	t.Helper()
	zr, err := gzip.NewReader(r)
	if err != nil {
		t.Fatalf("gzip: %v", err)
	}
	tr := tar.NewReader(zr)
	files := map[string]string{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("tar: %v", err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = string(b)
		}
	}
}

func TestArchive(t *testing.T) {
	up := newUpstream(t)
	up.write("src/main.cpp", "int main() {}\n")
	up.write("src/Makefile", "all:\n")
	up.write("README.md", "engine\n")
	sha := up.commit("sources")
	m := newTestMirrors(t, Config{Allowed: []string{up.dir}})
	clock := &fakeClock{now: time.Unix(1800000000, 0)}
	m.now = clock.Now
	ctx := testCtx(t)
	if _, err := m.Resolve(ctx, up.dir, "master"); err != nil {
		t.Fatal(err)
	}

	a, err := m.Archive(ctx, up.dir, sha)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	want := map[string]string{"src/main.cpp": "int main() {}\n", "src/Makefile": "all:\n", "README.md": "engine\n"}
	if got := untar(t, a); !reflect.DeepEqual(got, want) {
		t.Errorf("archive holds %v, want %v", got, want)
	}
	if info, _ := a.Stat(); info.Size() != a.Size {
		t.Errorf("Size = %d, file has %d", a.Size, info.Size())
	}

	b, err := m.Archive(ctx, up.dir, sha)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.SHA256 != a.SHA256 || m.archiveCount.Load() != 1 {
		t.Errorf("second call: sha256 %s (first %s) after %d git archive calls; want the cached one, 1 call",
			b.SHA256, a.SHA256, m.archiveCount.Load())
	}

	t.Run("the same bytes when made again", func(t *testing.T) {
		other := newTestMirrors(t, Config{Allowed: []string{up.dir}})
		if _, err := other.Resolve(ctx, up.dir, "master"); err != nil {
			t.Fatal(err)
		}
		c, err := other.Archive(ctx, up.dir, sha)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if c.SHA256 != a.SHA256 {
			t.Errorf("sha256 %s, first made %s", c.SHA256, a.SHA256)
		}
	})
	t.Run("a commit the mirror lacks", func(t *testing.T) {
		if _, err := m.Archive(ctx, up.dir, strings.Repeat("4", 40)); !errors.Is(err, ErrUnknownRef) {
			t.Errorf("Archive: %v, want ErrUnknownRef", err)
		}
	})
	t.Run("concurrent calls make it once", func(t *testing.T) {
		up.write("README.md", "engine 2\n")
		sha2 := up.commit("more")
		clock.advance(2 * time.Minute)
		if _, err := m.Resolve(ctx, up.dir, sha2); err != nil {
			t.Fatal(err)
		}
		before := m.archiveCount.Load()
		var wg sync.WaitGroup
		sums := make([]string, 8)
		for i := range sums {
			wg.Go(func() {
				a, err := m.Archive(ctx, up.dir, sha2)
				if err != nil {
					t.Error(err)
					return
				}
				sums[i] = a.SHA256
				a.Close()
			})
		}
		wg.Wait()
		if n := m.archiveCount.Load() - before; n != 1 {
			t.Errorf("%d git archive calls, want 1", n)
		}
		for _, s := range sums {
			if s != sums[0] {
				t.Errorf("sha256s differ: %v", sums)
			}
		}
	})
}

func TestArchiveCacheEviction(t *testing.T) {
	up := newUpstream(t)
	r := rand.New(rand.NewPCG(7, 7))
	var shas []string
	for i := range 5 {
		noise := make([]byte, 10<<10)
		for j := range noise {
			noise[j] = byte(r.Uint32())
		}
		up.write("noise.bin", string(noise))
		shas = append(shas, up.commit(fmt.Sprintf("commit %d", i)))
	}
	dir := t.TempDir()
	// Room for two archives of about 10 KiB, not three.
	cfg := Config{Dir: dir, Allowed: []string{up.dir}, ArchiveCacheBytes: 25 << 10}
	m := newTestMirrors(t, cfg)
	ctx := testCtx(t)
	if _, err := m.Resolve(ctx, up.dir, "master"); err != nil {
		t.Fatal(err)
	}
	get := func(sha string) *Archive {
		t.Helper()
		a, err := m.Archive(ctx, up.dir, sha)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	cached := func(sha string) bool {
		_, err := os.Stat(filepath.Join(dir, "archives", sha+".tar.gz"))
		return err == nil
	}

	a, b, c := shas[0], shas[1], shas[2]
	get(a).Close()
	get(b).Close()
	get(a).Close() // a is now more recently used than b
	held := get(a)
	defer held.Close()
	get(c).Close()
	if !cached(a) || cached(b) || !cached(c) {
		t.Errorf("cached a %v b %v c %v; want b, the least recently used, evicted", cached(a), cached(b), cached(c))
	}

	get(shas[3]).Close()
	last := get(shas[4])
	lastSum := last.SHA256
	last.Close()
	if cached(a) {
		t.Fatal("a still cached after two newer archives")
	}
	if got := untar(t, held); len(got["noise.bin"]) != 10<<10 {
		t.Errorf("the archive held open across its eviction reads %d bytes of noise.bin", len(got["noise.bin"]))
	}

	t.Run("a restart finds the cache", func(t *testing.T) {
		m.Close()
		calls := m.archiveCount.Load()
		m2 := newTestMirrors(t, cfg)
		x, err := m2.Archive(ctx, up.dir, shas[4])
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		if m2.archiveCount.Load() != 0 {
			t.Errorf("git archive ran for an archive on disk (%d calls before the restart)", calls)
		}
		if x.SHA256 != lastSum {
			t.Errorf("sha256 after the restart %s, before %s", x.SHA256, lastSum)
		}
		if got := untar(t, x); len(got["noise.bin"]) != 10<<10 {
			t.Error("the archive found on disk does not read back")
		}
	})
}

// A commit the mirror lacks is fetched for: one given by SHA, or any for a writer new to an
// empty directory.
func TestArchiveFetchesACommitTheMirrorLacks(t *testing.T) {
	up := newUpstream(t)
	up.write("a", "1\n")
	up.commit("one")
	m := newTestMirrors(t, Config{Allowed: []string{up.dir}})
	clock := &fakeClock{now: time.Unix(1800000000, 0)}
	m.now = clock.Now
	ctx := testCtx(t)
	if _, err := m.Resolve(ctx, up.dir, "master"); err != nil {
		t.Fatal(err)
	}
	up.write("a", "2\n")
	two := up.commit("two")
	clock.advance(2 * time.Minute)
	a, err := m.Archive(ctx, up.dir, two)
	if err != nil {
		t.Fatalf("Archive of a commit pushed since the last fetch: %v", err)
	}
	a.Close()
	if _, err := m.Archive(ctx, up.dir, strings.Repeat("6", 40)); !errors.Is(err, ErrUnknownRef) {
		t.Errorf("Archive of a commit upstream lacks too: %v, want ErrUnknownRef", err)
	}

	t.Run("an empty directory", func(t *testing.T) {
		fresh := newTestMirrors(t, Config{Allowed: []string{up.dir}})
		a, err := fresh.Archive(ctx, up.dir, two)
		if err != nil {
			t.Fatalf("Archive from mirrors never fetched: %v", err)
		}
		a.Close()
	})
	t.Run("upstream unreachable", func(t *testing.T) {
		gone := filepath.Join(t.TempDir(), "gone")
		m := newTestMirrors(t, Config{Allowed: []string{gone}})
		_, err := m.Archive(ctx, gone, two)
		if !errors.Is(err, ErrUnknownRef) || !errors.Is(err, ErrUnreachable) {
			t.Errorf("Archive: %v, want ErrUnknownRef and the fetch's ErrUnreachable", err)
		}
	})
}
