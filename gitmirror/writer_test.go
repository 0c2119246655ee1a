package gitmirror

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Two instances share a data directory: the first to write is the writer, the other reads what
// the mirrors hold and writes nothing, not even another's temporary files away, until the
// writer is gone.
func TestSharedDir(t *testing.T) {
	up := newUpstream(t)
	up.write("src/main.cpp", "int main() {}\n")
	base := up.commit("base")
	up.write("src/main.cpp", "int main() { return 0; }\n")
	tip := up.commit("tip")
	dir := t.TempDir()
	cfg := Config{Dir: dir, Allowed: []string{up.dir}}
	primary := newTestMirrors(t, cfg)
	ctx := testCtx(t)
	if _, err := primary.Resolve(ctx, up.dir, "master"); err != nil {
		t.Fatal(err)
	}
	cached, err := primary.Archive(ctx, up.dir, base)
	if err != nil {
		t.Fatal(err)
	}
	cached.Close()
	// What the writer has in progress: a first fetch, an archive being made.
	inFlight := []string{filepath.Join(dir, "tmp-abc.git-123"), filepath.Join(dir, "archives", "tmp-456")}
	if err := os.Mkdir(inFlight[0], 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(inFlight[1], []byte("half an archive"), 0o644); err != nil {
		t.Fatal(err)
	}
	exist := func() bool {
		for _, p := range inFlight {
			if _, err := os.Stat(p); err != nil {
				return false
			}
		}
		return true
	}

	standby := newTestMirrors(t, cfg)
	clock := &fakeClock{now: time.Now().Add(time.Hour)}
	standby.now = clock.Now
	t.Run("reads what the mirror holds", func(t *testing.T) {
		if c, err := standby.Resolve(ctx, up.dir, tip); err != nil || c.SHA != tip {
			t.Errorf("Resolve(full SHA) = %s, %v; want %s", c.SHA, err, tip)
		}
		if _, err := standby.Commit(ctx, up.dir, base); err != nil {
			t.Errorf("Commit: %v", err)
		}
		if r, err := standby.Relation(ctx, up.dir, base, tip); err != nil || !r.BaseIsAncestor || r.HeadSHA != tip {
			t.Errorf("Relation = %+v, %v", r, err)
		}
		if d, err := standby.Diff(ctx, up.dir, base, tip); err != nil || len(d.Files) != 1 {
			t.Errorf("Diff = %+v, %v", d, err)
		}
		if _, err := standby.File(ctx, up.dir, tip, "src/main.cpp", 1000); err != nil {
			t.Errorf("File: %v", err)
		}
		a, err := standby.Archive(ctx, up.dir, base)
		if err != nil {
			t.Fatalf("Archive of an archive cached: %v", err)
		}
		if a.SHA256 != cached.SHA256 || a.Size != cached.Size {
			t.Errorf("Archive = %s (%d bytes), the writer made %s (%d bytes)", a.SHA256, a.Size, cached.SHA256, cached.Size)
		}
		a.Close()
	})
	t.Run("writes nothing", func(t *testing.T) {
		readOnly := func(what string, err error) {
			t.Helper()
			if !errors.Is(err, ErrReadOnly) || !errors.Is(err, ErrUnreachable) {
				t.Errorf("%s: %v, want ErrReadOnly (and ErrUnreachable)", what, err)
			} else if !strings.Contains(err.Error(), "another instance holds the mirrors") {
				t.Errorf("%s: %q does not say why", what, err)
			}
		}
		_, err := standby.Resolve(ctx, up.dir, "master")
		readOnly("Resolve(master)", err)
		readOnly("Keep", standby.Keep(ctx, up.dir, tip))
		_, err = standby.Archive(ctx, up.dir, tip)
		readOnly("Archive of an archive not cached", err)
		if standby.fetchCount.Load() != 0 || standby.archiveCount.Load() != 0 {
			t.Errorf("%d fetches and %d archives made", standby.fetchCount.Load(), standby.archiveCount.Load())
		}
		if !exist() {
			t.Error("the writer's temporary files were removed")
		}
	})
	t.Run("takes over when the writer is gone", func(t *testing.T) {
		primary.Close()
		up.write("src/main.cpp", "int main() { return 1; }\n")
		next := up.commit("next")
		if c, err := standby.Resolve(ctx, up.dir, "master"); err != nil || c.SHA != next {
			t.Fatalf("Resolve(master) = %s, %v; want %s fetched", c.SHA, err, next)
		}
		if exist() {
			t.Error("the temporary files of the writer gone are still there")
		}
		a, err := standby.Archive(ctx, up.dir, base)
		if err != nil {
			t.Fatal(err)
		}
		a.Close()
		if a.SHA256 != cached.SHA256 || standby.archiveCount.Load() != 0 {
			t.Errorf("Archive = %s after %d made; want the cached %s", a.SHA256, standby.archiveCount.Load(), cached.SHA256)
		}
		if err := standby.Keep(ctx, up.dir, next); err != nil {
			t.Errorf("Keep: %v", err)
		}
	})
}

// A mirror made when GitHub URLs kept their case is found under the lower-case name, with what
// it keeps.
func TestWriterRenamesMixedCaseGitHubMirrors(t *testing.T) {
	dir := t.TempDir()
	m := newTestMirrors(t, Config{Dir: dir, Allowed: []string{"https://github.com/"}})
	const old, canon = "https://github.com/Official-Stockfish/Stockfish", "https://github.com/official-stockfish/stockfish"
	from := m.mirrorDir(old)
	gitT(t, dir, "init", "-q", "--bare", from)
	if err := os.WriteFile(filepath.Join(from, repoFile), []byte(old+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := m.becomeWriter("test"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(m.mirrorDir(canon), repoFile))
	if err != nil || strings.TrimSpace(string(b)) != canon {
		t.Errorf("the mirror's description %q, %v; want it moved to %s", b, err, canon)
	}
	if _, err := os.Stat(from); err == nil {
		t.Error("the mixed-case mirror is still there")
	}
	st, err := m.repo("https://github.com/Official-Stockfish/Stockfish")
	if err != nil || !st.mirrored() {
		t.Errorf("repo: mirrored %v, %v", st != nil && st.mirrored(), err)
	}
}
