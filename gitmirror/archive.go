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
// evicted file is unlinked, so readers that have it open keep reading it. Only the writer of
// Dir lists, makes and evicts archives; until this instance is the writer the cache is not
// listed, and archives are read from Dir as they are.
type archiveCache struct {
	dir string
	max int64

	mu      sync.Mutex
	listed  bool                     // load ran: this instance is the writer
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

// newArchiveCache returns the cache in dir, created if need be, not listed yet.
func newArchiveCache(dir string, max int64) (*archiveCache, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("gitmirror: create %s: %w", dir, err)
	}
	return &archiveCache{dir: dir, max: max, order: list.New(), bySHA: map[string]*list.Element{}, flights: map[string]*flight{}}, nil
}

// load lists the archives in the cache's directory, taking each file's modification time for
// its last use (it is touched on every use), removes what an interrupted writer left, and
// evicts past the bound. The caller has just become the writer.
func (c *archiveCache) load() error {
	entries, err := os.ReadDir(c.dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", c.dir, err)
	}
	type found struct {
		e    *archiveEntry
		used time.Time
	}
	var all []found
	for _, de := range entries {
		name := de.Name()
		if strings.HasPrefix(name, "tmp-") {
			os.Remove(filepath.Join(c.dir, name))
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
	c.mu.Lock()
	defer c.mu.Unlock()
	c.order.Init()
	clear(c.bySHA)
	c.total = 0
	for _, f := range all {
		c.bySHA[f.e.sha] = c.order.PushBack(f.e)
		c.total += f.e.size
	}
	c.listed = true
	c.evict(nil)
	return nil
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
	if !c.listed {
		c.mu.Unlock()
		return c.openUnlisted(sha)
	}
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

// openUnlisted opens the archive of sha as Dir has it, for an instance that is not the writer
// (and so never touches nor removes a file), or returns nil when there is none.
func (c *archiveCache) openUnlisted(sha string) (*Archive, error) {
	f, err := os.Open(c.path(sha))
	if err != nil {
		return nil, nil
	}
	h := sha256.New()
	size, err := io.Copy(h, f)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("archive %s: %w", sha, err)
	}
	return &Archive{File: f, Size: size, SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// Archive returns the source archive of commit sha (full) of repo, from the cache or made from
// the mirror. When the mirror lacks the commit (or the repository is not mirrored yet), the
// repository is fetched for it, at most once per Config.RefetchAfter. Errors wrap
// ErrNotAllowed, ErrBadRef, ErrUnknownRef (the mirror lacks the commit even so; when that
// fetch failed, its error is wrapped too), or ErrReadOnly when the archive is not cached and
// another instance is the writer.
func (m *Mirrors) Archive(ctx context.Context, repo, sha string) (*Archive, error) {
	st, err := m.repo(repo)
	if err != nil {
		return nil, err
	}
	if sha, err = parseSHA(sha); err != nil {
		return nil, err
	}
	// The cache is by commit, whichever repository made it; this repository must have it too.
	has := func() error {
		if !st.mirrored() {
			return st.notMirrored()
		}
		_, err := m.commit(ctx, st, sha)
		return err
	}
	if err := has(); errors.Is(err, ErrUnknownRef) {
		// A run given by SHA, or a writer new to an empty Dir: the mirror may not have it yet.
		if ferr := m.fetchIfDue(ctx, st); ferr != nil {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("archive %s of %s: %w", sha, st.t.canon, ctx.Err())
			}
			if err := has(); err != nil {
				return nil, fmt.Errorf("archive: %w (and fetching for it failed: %w)", err, ferr)
			}
		} else if err := has(); err != nil {
			return nil, fmt.Errorf("archive: %w", err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	c := m.archives
	for {
		if a, err := c.open(sha); a != nil || err != nil {
			return a, err
		}
		if err := m.becomeWriter(fmt.Sprintf("archive %s of %s", sha, st.t.canon)); err != nil {
			return nil, err
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
	// Close ends it too: the next writer may remove its temporary file.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(m.ctx, cancel)()
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
	err = m.writeTar(ctx, st.dir, sha, zw)
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
