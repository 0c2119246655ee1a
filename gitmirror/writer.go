package gitmirror

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/shoal-chess/shoal/filelock"
)

// readOnlyError is the error of a write asked of an instance that is not the writer: it is
// ErrReadOnly, and ErrUnreachable for callers that know only that.
type readOnlyError struct{ op string }

func (e *readOnlyError) Error() string { return e.op + ": " + ErrReadOnly.Error() }

func (e *readOnlyError) Is(target error) bool {
	return target == ErrReadOnly || target == ErrUnreachable
}

// becomeWriter makes m the writer of Dir unless it is already or another instance is (see
// Config.Dir): it takes Dir's lock, then cleans up what an earlier writer may have left and
// lists the archive cache. op names the write asked, for the error.
func (m *Mirrors) becomeWriter(op string) error {
	if m.writer.Load() {
		return nil
	}
	m.writerMu.Lock()
	defer m.writerMu.Unlock()
	if m.writer.Load() {
		return nil
	}
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return errClosed
	}
	f, err := filelock.TryLock(filepath.Join(m.cfg.Dir, lockFile))
	if errors.Is(err, filelock.ErrLocked) {
		if !m.readOnlyLogged.Swap(true) {
			m.log.Info("another instance writes the mirrors; this one reads them until it is gone", "dir", m.cfg.Dir)
		}
		return &readOnlyError{op: op}
	}
	if err != nil {
		return fmt.Errorf("%s: lock %s: %w", op, m.cfg.Dir, err)
	}
	if err := m.takeOver(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", op, err)
	}
	m.lock = f
	m.writer.Store(true)
	m.log.Info("this instance writes the mirrors now", "dir", m.cfg.Dir)
	return nil
}

// takeOver is what a new writer does first: remove the mirrors half made by a first fetch that
// never ended, move mirrors to their current names, clean what stopped fetches leave in a
// mirror, count the mirrors, and list the archive cache (removing its temporary files). No
// other instance writes in Dir meanwhile: m holds the lock.
func (m *Mirrors) takeOver() error {
	dir := m.cfg.Dir
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("read %s: %w", dir, err)
	}
	count := 0
	for _, e := range entries {
		name := e.Name()
		p := filepath.Join(dir, name)
		switch {
		case strings.HasPrefix(name, "tmp-"):
			if err := os.RemoveAll(p); err != nil {
				return fmt.Errorf("remove %s: %w", name, err)
			}
		case strings.HasSuffix(name, ".git") && e.IsDir():
			p = m.renameMirror(p)
			cleanFailedFetch(p)
			count++
		}
	}
	m.mu.Lock()
	m.mirrorCount = count
	m.mu.Unlock()
	return m.archives.load()
}

// mirrorDir is the directory of the mirror of canon.
func (m *Mirrors) mirrorDir(canon string) string {
	sum := sha256.Sum256([]byte(canon))
	return filepath.Join(m.cfg.Dir, hex.EncodeToString(sum[:12])+".git")
}

// renameMirror moves a mirror made under an older canonical name of its repository (a GitHub
// URL in mixed case) to the current one, unless a mirror is there already, and returns where
// it is. What the old mirror keeps for runs (Keep) is kept so.
func (m *Mirrors) renameMirror(p string) string {
	b, err := os.ReadFile(filepath.Join(p, repoFile))
	if err != nil {
		return p
	}
	old := strings.TrimSpace(string(b))
	const gh = "https://github.com/"
	if !strings.HasPrefix(old, gh) || old == strings.ToLower(old) {
		return p
	}
	canon := gh + strings.ToLower(old[len(gh):])
	to := m.mirrorDir(canon)
	if _, err := os.Stat(to); err == nil || to == p {
		return p
	}
	if err := os.Rename(p, to); err != nil {
		m.log.Warn("rename a mirror to its repository's canonical name", "repo", canon, "err", err)
		return p
	}
	os.WriteFile(filepath.Join(to, repoFile), []byte(canon+"\n"), 0o644) // a description only
	m.log.Info("renamed a mirror to its repository's canonical name", "from", old, "to", canon)
	return to
}
