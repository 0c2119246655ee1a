package gitmirror

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// fetchIfDue fetches the repository unless it was tried less than RefetchAfter ago, in which
// case it returns that attempt's error. Callers arriving during a fetch wait for it and share
// its result; a caller whose ctx ends stops waiting, but the fetch goes on for the others.
func (m *Mirrors) fetchIfDue(ctx context.Context, st *repoState) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return errClosed
	}
	f := st.flight
	if f == nil {
		if !st.lastAttempt.IsZero() && m.now().Sub(st.lastAttempt) < m.cfg.RefetchAfter {
			err := st.lastErr
			m.mu.Unlock()
			return err
		}
		f = &flight{done: make(chan struct{})}
		st.flight = f
		st.lastAttempt = m.now()
		m.fetches.Add(1)
		go m.runFetch(st, f)
	}
	m.mu.Unlock()
	select {
	case <-f.done:
		return f.err
	case <-ctx.Done():
		return fmt.Errorf("fetch %s: %w", st.t.canon, ctx.Err())
	}
}

// runFetch is the goroutine of one fetch, owned by the Mirrors (Close waits for it).
func (m *Mirrors) runFetch(st *repoState, f *flight) {
	defer m.fetches.Done()
	m.fetchCount.Add(1)
	start := time.Now()
	err := m.fetch(st)
	if err != nil {
		m.log.Warn("fetch failed", "repo", st.t.canon, "took", time.Since(start), "err", err)
	} else {
		m.log.Info("fetched", "repo", st.t.canon, "took", time.Since(start))
	}
	m.mu.Lock()
	st.lastErr = err
	st.flight = nil
	st.head = nil
	st.gen++
	m.mu.Unlock()
	f.err = err
	close(f.done)
}

// fetch brings the mirror up to date with the repository's branches and tags and its default
// branch. A first fetch works in a temporary directory renamed into place on success, so a
// mirror never exists half made.
func (m *Mirrors) fetch(st *repoState) (err error) {
	select {
	case m.sem <- struct{}{}:
		defer func() { <-m.sem }()
	case <-m.ctx.Done():
		return fmt.Errorf("fetch %s: %w", st.t.canon, errClosed)
	}
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.FetchTimeout)
	defer cancel()

	work := st.dir
	existing := st.mirrored()
	if existing {
		if size := dirSize(work); size > m.cfg.MaxBytes {
			return fmt.Errorf("fetch %s: %w: the mirror already has %d bytes on disk, more than the limit of %d",
				st.t.canon, ErrTooLarge, size, m.cfg.MaxBytes)
		}
	} else {
		tmp, mkErr := os.MkdirTemp(m.cfg.Dir, "tmp-"+filepath.Base(st.dir)+"-")
		if mkErr != nil {
			return fmt.Errorf("fetch %s: %w", st.t.canon, mkErr)
		}
		defer func() {
			if tmp != "" {
				os.RemoveAll(tmp)
			}
		}()
		if _, err := m.run(ctx, gitRun{args: []string{"init", "--bare", "-q", "--end-of-options", tmp}}); err != nil {
			return fmt.Errorf("fetch %s: create the mirror: %w", st.t.canon, err)
		}
		if err := os.WriteFile(filepath.Join(tmp, repoFile), []byte(st.t.canon+"\n"), 0o644); err != nil {
			return fmt.Errorf("fetch %s: %w", st.t.canon, err)
		}
		work = tmp
		defer func() {
			// err is fetch's result: the mirror appears only when the whole fetch succeeded.
			if err == nil {
				if err = os.Rename(tmp, st.dir); err != nil {
					err = fmt.Errorf("fetch %s: %w", st.t.canon, err)
				} else {
					tmp = ""
				}
			}
		}()
	}

	head, err := m.remoteHead(ctx, work, st.t)
	if err != nil {
		return m.fetchError(ctx, st, err)
	}
	if err := m.fetchObjects(ctx, st, work, existing); err != nil {
		return err
	}
	if err := m.setHead(ctx, work, head); err != nil {
		return fmt.Errorf("fetch %s: set the default branch: %w", st.t.canon, err)
	}
	return nil
}

// fetchObjects runs git fetch into work, stopping it when the mirror grows past MaxBytes.
func (m *Mirrors) fetchObjects(ctx context.Context, st *repoState, work string, existing bool) error {
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	var tooLarge atomic.Bool
	var watch sync.WaitGroup
	watch.Add(1)
	go func() {
		defer watch.Done()
		tick := time.NewTicker(m.pollEvery)
		defer tick.Stop()
		for {
			select {
			case <-fctx.Done():
				return
			case <-tick.C:
				if dirSize(work) > m.cfg.MaxBytes {
					tooLarge.Store(true)
					stop()
					return
				}
			}
		}
	}()
	// --update-shallow: a shallow upstream (a fixture, a mirror made with --depth) has
	// branches whose history ends at a shallow root; without it, git refuses them.
	_, err := m.run(fctx, gitRun{dir: work, local: st.t.local, args: []string{
		"fetch", "--prune", "--no-tags", "--quiet", "--update-shallow", "--end-of-options", st.t.canon,
		"+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*",
	}})
	stop()
	watch.Wait()
	if err == nil && dirSize(work) > m.cfg.MaxBytes {
		tooLarge.Store(true)
	}
	if err != nil || tooLarge.Load() {
		if existing {
			st.keepMu.Lock()
			cleanFailedFetch(work)
			st.keepMu.Unlock()
		}
	}
	if tooLarge.Load() {
		return fmt.Errorf("fetch %s: %w: the mirror grew past %d bytes on disk (the limit)", st.t.canon, ErrTooLarge, m.cfg.MaxBytes)
	}
	if err != nil {
		return m.fetchError(ctx, st, err)
	}
	return nil
}

// fetchError turns a failed git call of a fetch into the error callers see.
func (m *Mirrors) fetchError(ctx context.Context, st *repoState, err error) error {
	switch {
	case m.ctx.Err() != nil:
		return fmt.Errorf("fetch %s: %w", st.t.canon, errClosed)
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return fmt.Errorf("fetch %s: %w: timed out after %v", st.t.canon, ErrUnreachable, m.cfg.FetchTimeout)
	}
	var ge *gitError
	if errors.As(err, &ge) && ge.reason() != "" {
		return fmt.Errorf("fetch %s: %w: %s", st.t.canon, ErrUnreachable, ge.reason())
	}
	return fmt.Errorf("fetch %s: %w: %v", st.t.canon, ErrUnreachable, err)
}

// cleanFailedFetch removes what a stopped fetch leaves in a mirror: temporary packs and
// objects, and lock files that would fail the next fetch.
func cleanFailedFetch(dir string) {
	filepath.WalkDir(filepath.Join(dir, "objects"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		name := d.Name()
		switch {
		case strings.HasPrefix(name, "tmp_") || strings.HasPrefix(name, "incoming-"):
			os.RemoveAll(p)
			if d.IsDir() {
				return fs.SkipDir
			}
		case strings.HasSuffix(name, ".keep") && !d.IsDir():
			// index-pack marks a pack in transfer with a .keep saying "fetch-pack"; a pack
			// whose fetch never finished must not be kept from gc for good.
			if b, err := os.ReadFile(p); err == nil && bytes.HasPrefix(b, []byte("fetch-pack")) {
				os.Remove(p)
			}
		}
		return nil
	})
	for _, top := range []string{dir, filepath.Join(dir, "refs")} {
		filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() && p != top && top == dir {
				return fs.SkipDir // refs/ is walked on its own; objects/ has no locks
			}
			if !d.IsDir() && strings.HasSuffix(d.Name(), ".lock") {
				os.Remove(p)
			}
			return nil
		})
	}
}

// remoteHead asks the repository for its default branch's name; "" when it does not say.
func (m *Mirrors) remoteHead(ctx context.Context, work string, t target) (string, error) {
	out, err := m.run(ctx, gitRun{dir: work, local: t.local, args: []string{
		"ls-remote", "--symref", "--end-of-options", t.canon, "HEAD",
	}})
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(out), "\n") {
		ref, ok := strings.CutPrefix(l, "ref: refs/heads/")
		if !ok {
			continue
		}
		name, _, _ := strings.Cut(ref, "\t")
		if refNameProblem(name) == "" {
			return name, nil
		}
	}
	return "", nil
}

// setHead points the mirror's HEAD at the default branch, or when the repository did not name
// one, at master or main, whichever exists.
func (m *Mirrors) setHead(ctx context.Context, work, head string) error {
	if head == "" {
		infos, err := m.batchCheck(ctx, work, "refs/heads/master", "refs/heads/main")
		if err != nil {
			return err
		}
		head = "master"
		if infos[0].sha == "" && infos[1].sha != "" {
			head = "main"
		}
	}
	_, err := m.run(ctx, gitRun{dir: work, args: []string{"symbolic-ref", "--end-of-options", "HEAD", "refs/heads/" + head}})
	return err
}
