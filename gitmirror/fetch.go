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
// its result; a caller whose ctx ends stops waiting, but the fetch goes on for the others. A
// fetch is refused at once, and not counted as an attempt, when this instance is not the
// writer (ErrReadOnly), when maxWaitingFetches already wait for a turn (ErrUnreachable), and
// when the repository would be one more than MaxRepos (ErrTooLarge).
func (m *Mirrors) fetchIfDue(ctx context.Context, st *repoState) error {
	if err := m.becomeWriter("fetch " + st.t.canon); err != nil {
		return err
	}
	first := !st.mirrored()
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
		if m.flights >= parallelFetches+maxWaitingFetches {
			m.mu.Unlock()
			return fmt.Errorf("fetch %s: %w: too many fetches waiting; try again in a minute", st.t.canon, ErrUnreachable)
		}
		if first && m.mirrorCount+m.firstFetches >= m.cfg.MaxRepos {
			m.mu.Unlock()
			return fmt.Errorf("fetch %s: %w: this server mirrors %d repositories, its limit, and takes no more",
				st.t.canon, ErrTooLarge, m.cfg.MaxRepos)
		}
		f = &flight{done: make(chan struct{}), first: first}
		st.flight = f
		st.lastAttempt = m.now()
		m.flights++
		if first {
			m.firstFetches++
		}
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
	m.flights--
	if f.first {
		m.firstFetches--
		if st.mirrored() {
			m.mirrorCount++
		}
	}
	m.mu.Unlock()
	f.err = err
	close(f.done)
}

// fetch brings the mirror up to date with the repository's branches and tags and its default
// branch. A first fetch works in a temporary directory renamed into place on success, so a
// mirror never exists half made; a later one is undone unless it succeeds within MaxBytes
// (refetch).
func (m *Mirrors) fetch(st *repoState) (err error) {
	select {
	case m.sem <- struct{}{}:
		defer func() { <-m.sem }()
	case <-m.ctx.Done():
		return fmt.Errorf("fetch %s: %w", st.t.canon, errClosed)
	}
	ctx, cancel := context.WithTimeout(m.ctx, m.cfg.FetchTimeout)
	defer cancel()
	if st.mirrored() {
		return m.refetch(ctx, st)
	}

	tmp, err := os.MkdirTemp(m.cfg.Dir, "tmp-"+filepath.Base(st.dir)+"-")
	if err != nil {
		return fmt.Errorf("fetch %s: %w", st.t.canon, err)
	}
	defer os.RemoveAll(tmp) // fails harmlessly once renamed
	if _, err := m.run(ctx, gitRun{args: []string{"init", "--bare", "-q", "--end-of-options", tmp}}); err != nil {
		return fmt.Errorf("fetch %s: create the mirror: %w", st.t.canon, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, repoFile), []byte(st.t.canon+"\n"), 0o644); err != nil {
		return fmt.Errorf("fetch %s: %w", st.t.canon, err)
	}
	head, err := m.remoteHead(ctx, tmp, st.t)
	if err != nil {
		return m.fetchError(ctx, st, err)
	}
	tooLarge, err := m.fetchObjects(ctx, st, tmp, nil, true, "+refs/heads/*:refs/heads/*", "+refs/tags/*:refs/tags/*")
	if tooLarge {
		return m.tooLarge(st)
	}
	if err != nil {
		return m.fetchError(ctx, st, err)
	}
	if err := m.setHead(ctx, tmp, head); err != nil {
		return fmt.Errorf("fetch %s: set the default branch: %w", st.t.canon, err)
	}
	if err := os.Rename(tmp, st.dir); err != nil {
		return fmt.Errorf("fetch %s: %w", st.t.canon, err)
	}
	return nil
}

// incomingRefs is where a fetch into an existing mirror puts the repository's branches
// (incomingRefs+"heads/") and tags ("tags/") until it is known to fit MaxBytes.
const incomingRefs = "refs/shoal/incoming/"

// refetch fetches into an existing mirror in quarantine: the branches and tags into
// incomingRefs, the objects into new pack files only (fetch.unpackLimit=1), gc held off. If the
// mirror then fits MaxBytes the incoming refs replace the branches and tags (those deleted
// upstream are deleted, refs/shoal/keep/ is left alone); otherwise, or if the fetch failed,
// the incoming refs and the new pack files are removed, and the mirror is as it was.
func (m *Mirrors) refetch(ctx context.Context, st *repoState) error {
	dir := st.dir
	if size := dirSize(dir); size > m.cfg.MaxBytes {
		return fmt.Errorf("fetch %s: %w: the mirror already has %d bytes on disk, more than the limit of %d",
			st.t.canon, ErrTooLarge, size, m.cfg.MaxBytes)
	}
	head, err := m.remoteHead(ctx, dir, st.t)
	if err != nil {
		return m.fetchError(ctx, st, err)
	}
	// Incoming refs are left only by a fetch that was killed; they would be taken for new ones.
	if err := m.dropIncoming(ctx, dir); err != nil {
		return fmt.Errorf("fetch %s: %w", st.t.canon, err)
	}
	before, err := m.snapshot(st)
	if err != nil {
		return fmt.Errorf("fetch %s: %w", st.t.canon, err)
	}
	tooLarge, err := m.fetchObjects(ctx, st, dir,
		[]string{"-c", "fetch.unpackLimit=1", "-c", "gc.auto=0", "-c", "maintenance.auto=false"}, false,
		"+refs/heads/*:"+incomingRefs+"heads/*", "+refs/tags/*:"+incomingRefs+"tags/*")
	if err != nil || tooLarge {
		m.undoFetch(st, before)
		if tooLarge {
			return m.tooLarge(st)
		}
		return m.fetchError(ctx, st, err)
	}
	if err := m.acceptIncoming(ctx, dir); err != nil {
		return fmt.Errorf("fetch %s: update the branches and tags: %w", st.t.canon, err)
	}
	if err := m.setHead(ctx, dir, head); err != nil {
		return fmt.Errorf("fetch %s: set the default branch: %w", st.t.canon, err)
	}
	// gc was held off during the fetch, lest it repack what the fetch brought with the rest.
	if _, err := m.run(ctx, gitRun{dir: dir, args: []string{"gc", "--auto", "--quiet"}}); err != nil {
		m.log.Warn("gc after a fetch", "repo", st.t.canon, "err", err)
	}
	return nil
}

// tooLarge is the error of a fetch stopped or undone past MaxBytes.
func (m *Mirrors) tooLarge(st *repoState) error {
	return fmt.Errorf("fetch %s: %w: the mirror grew past %d bytes on disk (the limit)", st.t.canon, ErrTooLarge, m.cfg.MaxBytes)
}

// fetchObjects runs git fetch of refspecs into work, with config (-c options) before the
// subcommand and --prune if asked, and stops it when work grows past MaxBytes. tooLarge: it
// was stopped, or it ended past MaxBytes.
func (m *Mirrors) fetchObjects(ctx context.Context, st *repoState, work string, config []string, prune bool, refspecs ...string) (tooLarge bool, err error) {
	fctx, stop := context.WithCancel(ctx)
	defer stop()
	var over atomic.Bool
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
					over.Store(true)
					stop()
					return
				}
			}
		}
	}()
	// --update-shallow: a shallow upstream (a fixture, a mirror made with --depth) has
	// branches whose history ends at a shallow root; without it, git refuses them.
	args := append(append([]string(nil), config...), "fetch", "--no-tags", "--quiet", "--update-shallow")
	if prune {
		args = append(args, "--prune")
	}
	args = append(append(args, "--end-of-options", st.t.canon), refspecs...)
	_, err = m.run(fctx, gitRun{dir: work, local: st.t.local, args: args})
	stop()
	watch.Wait()
	if err == nil && dirSize(work) > m.cfg.MaxBytes {
		over.Store(true)
	}
	return over.Load(), err
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

// cleanFailedFetch removes what a stopped fetch (or a writer whose process ended) leaves in a
// mirror: temporary packs and objects, and lock files that would fail the next fetch.
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
