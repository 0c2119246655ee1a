package gitmirror

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// fetchSnapshot is what a fetch into an existing mirror may change besides refs, taken before
// it so that it can be undone.
type fetchSnapshot struct {
	packs     map[string]bool // the names in objects/pack
	fetchHead savedFile       // FETCH_HEAD, whose time says when the mirror was last fetched
	shallow   savedFile       // the shallow roots, which --update-shallow may change
	kept      uint64          // the repoState's count of Keep calls
}

// savedFile is a file's content and modification time, or its absence.
type savedFile struct {
	path   string
	exists bool
	data   []byte
	mtime  time.Time
}

func saveFile(path string) (savedFile, error) {
	s := savedFile{path: path}
	info, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, err
	}
	if s.data, err = os.ReadFile(path); err != nil {
		return s, err
	}
	s.exists, s.mtime = true, info.ModTime()
	return s, nil
}

// restore puts the file back as it was saved.
func (s savedFile) restore() error {
	if !s.exists {
		if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}
	if err := os.WriteFile(s.path, s.data, 0o644); err != nil {
		return err
	}
	return os.Chtimes(s.path, s.mtime, s.mtime)
}

// snapshot takes a fetchSnapshot of st's mirror.
func (m *Mirrors) snapshot(st *repoState) (*fetchSnapshot, error) {
	s := &fetchSnapshot{kept: st.kept.Load()}
	var err error
	if s.packs, err = packNames(st.dir); err != nil {
		return nil, err
	}
	if s.fetchHead, err = saveFile(filepath.Join(st.dir, "FETCH_HEAD")); err != nil {
		return nil, err
	}
	if s.shallow, err = saveFile(filepath.Join(st.dir, "shallow")); err != nil {
		return nil, err
	}
	return s, nil
}

// packNames lists objects/pack of the mirror dir.
func packNames(dir string) (map[string]bool, error) {
	entries, err := os.ReadDir(filepath.Join(dir, "objects", "pack"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name()] = true
	}
	return names, nil
}

// undoFetch puts st's mirror back as it was before a fetch that failed or grew past MaxBytes:
// no incoming refs, none of the pack files the fetch added, FETCH_HEAD and the shallow roots
// as they were. The pack files stay (and the mirror consistent, if larger) when the incoming
// refs could not be removed or when a Keep ran during the fetch: a kept commit may be in them.
func (m *Mirrors) undoFetch(st *repoState, before *fetchSnapshot) {
	st.keepMu.Lock()
	defer st.keepMu.Unlock()
	dir := st.dir
	cleanFailedFetch(dir)
	for _, f := range []savedFile{before.shallow, before.fetchHead} {
		if err := f.restore(); err != nil {
			m.log.Warn("restore a file after a fetch undone", "repo", st.t.canon, "err", err)
		}
	}
	// The fetch's context may have ended: the undoing has its own.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := m.dropIncoming(ctx, dir); err != nil {
		m.log.Warn("a fetch undone keeps its objects", "repo", st.t.canon, "err", err)
		return
	}
	if st.kept.Load() != before.kept {
		m.log.Info("a fetch undone keeps its objects: commits were kept meanwhile", "repo", st.t.canon)
		return
	}
	after, err := packNames(dir)
	if err != nil {
		m.log.Warn("a fetch undone keeps its objects", "repo", st.t.canon, "err", err)
		return
	}
	for name := range after {
		if !before.packs[name] {
			if err := os.Remove(filepath.Join(dir, "objects", "pack", name)); err != nil {
				m.log.Warn("remove a pack file of a fetch undone", "repo", st.t.canon, "err", err)
			}
		}
	}
}

// refValue is one ref and the object it names.
type refValue struct{ name, sha string }

// listRefs lists the refs of dir under the prefixes.
func (m *Mirrors) listRefs(ctx context.Context, dir string, prefixes ...string) ([]refValue, error) {
	args := append([]string{"for-each-ref", "--format=%(objectname) %(refname)", "--end-of-options"}, prefixes...)
	out, err := m.run(ctx, gitRun{dir: dir, args: args, limit: 256 << 20})
	if err != nil {
		return nil, err
	}
	var refs []refValue
	for _, l := range strings.Split(string(out), "\n") {
		sha, name, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		refs = append(refs, refValue{name: name, sha: sha})
	}
	return refs, nil
}

// updateRefs runs one `git update-ref --stdin -z` transaction of cmds, each a command without
// its terminating NUL.
func (m *Mirrors) updateRefs(ctx context.Context, dir string, cmds []string) error {
	if len(cmds) == 0 {
		return nil
	}
	in := strings.Join(cmds, "\x00") + "\x00"
	_, err := m.run(ctx, gitRun{dir: dir, args: []string{"update-ref", "--stdin", "-z"}, stdin: strings.NewReader(in)})
	return err
}

// dropIncoming deletes the incoming refs of dir, and fails unless none is left.
func (m *Mirrors) dropIncoming(ctx context.Context, dir string) error {
	refs, err := m.listRefs(ctx, dir, incomingRefs)
	if err != nil || len(refs) == 0 {
		return err
	}
	var cmds []string
	for _, r := range refs {
		cmds = append(cmds, "delete "+r.name+"\x00")
	}
	if err := m.updateRefs(ctx, dir, cmds); err != nil {
		return fmt.Errorf("delete the incoming refs: %w", err)
	}
	if refs, err = m.listRefs(ctx, dir, incomingRefs); err == nil && len(refs) > 0 {
		err = fmt.Errorf("%d incoming refs left after deleting them", len(refs))
	}
	return err
}

// acceptIncoming makes the incoming refs of dir its branches and tags: those no longer upstream
// are deleted, then the others set, then the incoming refs deleted. Deletions go first, and
// apart, so that a branch "a" deleted upstream makes room for a new "a/b".
func (m *Mirrors) acceptIncoming(ctx context.Context, dir string) error {
	refs, err := m.listRefs(ctx, dir, "refs/heads/", "refs/tags/", incomingRefs)
	if err != nil {
		return err
	}
	current, incoming := map[string]string{}, map[string]string{}
	var drop []string
	for _, r := range refs {
		if rest, ok := strings.CutPrefix(r.name, incomingRefs); ok {
			incoming["refs/"+rest] = r.sha
			drop = append(drop, "delete "+r.name+"\x00")
		} else {
			current[r.name] = r.sha
		}
	}
	var del, set []string
	for name := range current {
		if _, ok := incoming[name]; !ok {
			del = append(del, "delete "+name+"\x00")
		}
	}
	for name, sha := range incoming {
		if current[name] != sha {
			set = append(set, "update "+name+"\x00"+sha+"\x00")
		}
	}
	sort.Strings(del)
	sort.Strings(set)
	for _, cmds := range [][]string{del, set, drop} {
		if err := m.updateRefs(ctx, dir, cmds); err != nil {
			return err
		}
	}
	return nil
}
