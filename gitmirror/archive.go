package gitmirror

import (
	"bufio"
	"compress/gzip"
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"
)

// archiveCache is the source archives on disk, least recently used out past its bound. An
// evicted file is unlinked, so readers that have it open keep reading it.
type archiveCache struct {
	dir string
	max int64

	mu      sync.Mutex
	order   *list.List               // of *archiveEntry, most recently used first
	bySHA   map[string]*list.Element // by commit SHA
	total   int64                    // bytes of the files listed
	flights map[string]*flight       // archives being made
}

type archiveEntry struct {
	sha  string
	size int64
	// sum is the SHA-256 of the file, "" until computed for a file found on disk at start.
	sum string
}

// openArchiveCache lists the archives already in dir, taking each file's modification time for
// its last use (it is touched on every use), and removes what an interrupted run left.
func openArchiveCache(dir string, max int64) (*archiveCache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("gitmirror: create %s: %w", dir, err)
	}
	c := &archiveCache{dir: dir, max: max, order: list.New(), bySHA: map[string]*list.Element{}, flights: map[string]*flight{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("gitmirror: read %s: %w", dir, err)
	}
	type found struct {
		e    *archiveEntry
		used time.Time
	}
	var all []found
	for _, de := range entries {
		name := de.Name()
		if strings.HasPrefix(name, "tmp-") {
			os.Remove(filepath.Join(dir, name))
			continue
		}
		sha, ok := strings.CutSuffix(name, ".tar.gz")
		if !ok || len(sha) != 40 || !isHex(sha) || !de.Type().IsRegular() {
			continue
		}
		info, err := de.Info()
		if err != nil {
			continue
		}
		all = append(all, found{&archiveEntry{sha: sha, size: info.Size()}, info.ModTime()})
	}
	sort.Slice(all, func(i, j int) bool { return all[i].used.After(all[j].used) })
	for _, f := range all {
		c.bySHA[f.e.sha] = c.order.PushBack(f.e)
		c.total += f.e.size
	}
	c.mu.Lock()
	c.evict(nil)
	c.mu.Unlock()
	return c, nil
}

func (c *archiveCache) path(sha string) string { return filepath.Join(c.dir, sha+".tar.gz") }

// evict removes the least recently used archives, but never keep, until the cache fits its
// bound. c.mu is held.
func (c *archiveCache) evict(keep *list.Element) {
	for c.total > c.max {
		back := c.order.Back()
		if back == nil || back == keep {
			return
		}
		c.drop(back)
	}
}

// drop forgets an archive and removes its file. c.mu is held.
func (c *archiveCache) drop(el *list.Element) {
	e := c.order.Remove(el).(*archiveEntry)
	delete(c.bySHA, e.sha)
	c.total -= e.size
	os.Remove(c.path(e.sha))
}

// open returns the cached archive of sha, open for reading, or nil when there is none.
func (c *archiveCache) open(sha string) (*Archive, error) {
	c.mu.Lock()
	el, ok := c.bySHA[sha]
	if !ok {
		c.mu.Unlock()
		return nil, nil
	}
	f, err := os.Open(c.path(sha))
	if err != nil {
		// Removed behind the cache's back: it is made again.
		c.drop(el)
		c.mu.Unlock()
		return nil, nil
	}
	c.order.MoveToFront(el)
	e := el.Value.(*archiveEntry)
	size, sum := e.size, e.sum
	c.mu.Unlock()
	now := time.Now()
	os.Chtimes(f.Name(), now, now) // the last use, for the next start; best effort
	if sum == "" {
		h := sha256.New()
		_, err := io.Copy(h, f)
		if err == nil {
			_, err = f.Seek(0, io.SeekStart)
		}
		if err != nil {
			f.Close()
			return nil, fmt.Errorf("archive %s: %w", sha, err)
		}
		sum = hex.EncodeToString(h.Sum(nil))
		c.mu.Lock()
		e.sum = sum
		c.mu.Unlock()
	}
	return &Archive{File: f, Size: size, SHA256: sum}, nil
}

// Archive returns the source archive of commit sha (full) of repo, from the cache or made from
// the mirror (without fetching).
func (m *Mirrors) Archive(ctx context.Context, repo, sha string) (*Archive, error) {
	st, err := m.repo(repo)
	if err != nil {
		return nil, err
	}
	if sha, err = parseSHA(sha); err != nil {
		return nil, err
	}
	if !st.mirrored() {
		return nil, st.notMirrored()
	}
	// The cache is by commit, whichever repository made it; this repository must have it too.
	if _, err := m.commit(ctx, st, sha); err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	c := m.archives
	for {
		if a, err := c.open(sha); a != nil || err != nil {
			return a, err
		}
		c.mu.Lock()
		if f := c.flights[sha]; f != nil {
			c.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return nil, fmt.Errorf("archive %s of %s: %w", sha, st.t.canon, ctx.Err())
			}
			if f.err != nil && !errors.Is(f.err, context.Canceled) && !errors.Is(f.err, context.DeadlineExceeded) {
				return nil, f.err
			}
			continue // made, or its maker gave up: look again
		}
		f := &flight{done: make(chan struct{})}
		c.flights[sha] = f
		c.mu.Unlock()
		a, err := m.makeArchive(ctx, st, sha)
		c.mu.Lock()
		delete(c.flights, sha)
		c.mu.Unlock()
		f.err = err
		close(f.done)
		return a, err
	}
}

// makeArchive writes the archive of sha into the cache and returns it open. The gzip header
// has no time or name in it, so an archive's bytes depend on its commit only.
func (m *Mirrors) makeArchive(ctx context.Context, st *repoState, sha string) (*Archive, error) {
	c := m.archives
	tmp, err := os.CreateTemp(c.dir, "tmp-*")
	if err != nil {
		return nil, fmt.Errorf("archive %s of %s: %w", sha, st.t.canon, err)
	}
	defer func() {
		tmp.Close()
		os.Remove(tmp.Name()) // fails harmlessly once renamed
	}()
	h := sha256.New()
	lw := &limitWriter{w: io.MultiWriter(tmp, h), left: c.max}
	bw := bufio.NewWriterSize(lw, 256<<10)
	zw, err := gzip.NewWriterLevel(bw, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	m.archiveCount.Add(1)
	_, err = m.run(ctx, gitRun{dir: st.dir, stdout: zw, args: []string{"archive", "--format=tar", "--end-of-options", sha}})
	if err == nil {
		err = zw.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	if lw.over {
		return nil, fmt.Errorf("archive %s of %s: more than the archive cache's %d bytes", sha, st.t.canon, c.max)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if err != nil {
		return nil, fmt.Errorf("archive %s of %s: %w", sha, st.t.canon, err)
	}
	size := c.max - lw.left
	final := c.path(sha)
	if err := os.Rename(tmp.Name(), final); err != nil {
		return nil, fmt.Errorf("archive %s of %s: %w", sha, st.t.canon, err)
	}
	f, err := os.Open(final)
	if err != nil {
		return nil, fmt.Errorf("archive %s of %s: %w", sha, st.t.canon, err)
	}
	sum := hex.EncodeToString(h.Sum(nil))
	c.mu.Lock()
	if old, ok := c.bySHA[sha]; ok {
		c.total -= old.Value.(*archiveEntry).size
		c.order.Remove(old)
	}
	el := c.order.PushFront(&archiveEntry{sha: sha, size: size, sum: sum})
	c.bySHA[sha] = el
	c.total += size
	c.evict(el)
	c.mu.Unlock()
	return &Archive{File: f, Size: size, SHA256: sum}, nil
}

// limitWriter passes at most left bytes on and then fails, which stops git.
type limitWriter struct {
	w    io.Writer
	left int64
	over bool
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.left {
		l.over = true
		return 0, errors.New("archive past the cache's size")
	}
	n, err := l.w.Write(p)
	l.left -= int64(n)
	return n, err
}
