package gitmirror

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// maxCommitBytes bounds a commit object read; real ones are a few kilobytes.
const maxCommitBytes = 1 << 20

// benchLine finds a bench signature in one line of a commit message: fishtest's rule, with any
// number of digits. The greedy digits cannot be followed by another digit, which is what
// fishtest's "(?!\d)" asks.
var benchLine = regexp.MustCompile(`(^|\s)[Bb]ench[ :]+([1-9][0-9]*)`)

// Resolve returns the commit ref names in repo: a branch, a tag, or a full or short SHA. Any
// ref but a full SHA may name a branch or tag (a branch may be called "1234" or "cafe"), so it
// is read from a fetch at most Config.RefetchAfter old (a branch pushed a minute ago is seen);
// a branch, then a tag, then a commit whose SHA begins so. A full SHA is a commit only, read
// from the mirror as it is, and fetched for, at most once per RefetchAfter, when the mirror
// lacks it. Errors wrap ErrNotAllowed, ErrBadRef, ErrUnreachable (ErrReadOnly), ErrTooLarge or
// ErrUnknownRef.
func (m *Mirrors) Resolve(ctx context.Context, repo, ref string) (Commit, error) {
	st, err := m.repo(repo)
	if err != nil {
		return Commit{}, err
	}
	r, err := parseRef(ref)
	if err != nil {
		return Commit{}, fmt.Errorf("resolve in %s: %w", st.t.canon, err)
	}
	if !st.mirrored() {
		if err := m.fetchIfDue(ctx, st); err != nil {
			return Commit{}, err
		}
	}
	if !r.full() {
		// A name can have moved since the mirror last looked, hex digits or not.
		if err := m.fetchIfDue(ctx, st); err != nil {
			return Commit{}, err
		}
	}
	sha, err := m.lookup(ctx, st, ref, r)
	if errors.Is(err, ErrUnknownRef) && r.full() {
		if err := m.fetchIfDue(ctx, st); err != nil {
			return Commit{}, err
		}
		sha, err = m.lookup(ctx, st, ref, r)
	}
	if err != nil {
		return Commit{}, err
	}
	return m.commit(ctx, st, sha)
}

// lookup resolves r in the mirror as it is: a branch, then a tag (peeled to its commit), then
// a commit whose SHA begins with the hex digits.
func (m *Mirrors) lookup(ctx context.Context, st *repoState, ref string, r refSpec) (string, error) {
	if !st.mirrored() {
		return "", st.notMirrored()
	}
	var exprs []string
	if r.name != "" {
		exprs = append(exprs, "refs/heads/"+r.name+"^{commit}", "refs/tags/"+r.name+"^{commit}")
	}
	if r.hex != "" {
		// The bare prefix is asked too, only to tell an ambiguous prefix from an unknown one.
		exprs = append(exprs, r.hex+"^{commit}", r.hex)
	}
	infos, err := m.batchCheck(ctx, st.dir, exprs...)
	if err != nil {
		return "", fmt.Errorf("resolve %s in %s: %w", quoteRepo(ref), st.t.canon, err)
	}
	n := len(infos)
	if r.hex != "" {
		n--
	}
	for _, in := range infos[:n] {
		if in.typ == "commit" {
			return in.sha, nil
		}
	}
	if r.hex != "" && infos[n].typ == "ambiguous" {
		return "", fmt.Errorf("resolve %s in %s: %w: the short SHA is ambiguous, give more digits",
			quoteRepo(ref), st.t.canon, ErrUnknownRef)
	}
	return "", fmt.Errorf("resolve %s in %s: %w (mirror %s)", quoteRepo(ref), st.t.canon, ErrUnknownRef, st.lastFetched())
}

// Commit returns the commit sha (full) of repo from the mirror, without fetching. Errors wrap
// ErrNotAllowed, ErrBadRef or ErrUnknownRef (the mirror does not have it).
func (m *Mirrors) Commit(ctx context.Context, repo, sha string) (Commit, error) {
	st, err := m.repo(repo)
	if err != nil {
		return Commit{}, err
	}
	if sha, err = parseSHA(sha); err != nil {
		return Commit{}, err
	}
	if !st.mirrored() {
		return Commit{}, st.notMirrored()
	}
	return m.commit(ctx, st, sha)
}

// commit reads commit sha from the mirror, or from the cache: a commit never changes. Calls
// for a commit being read wait for it.
func (m *Mirrors) commit(ctx context.Context, st *repoState, sha string) (Commit, error) {
	key := st.t.canon + " " + sha
	if c, ok := m.commits.get(key); ok {
		return c, nil
	}
	return m.commitFlights.do(ctx, key, func() (Commit, error) {
		release, err := m.readSlot(ctx)
		if err != nil {
			return Commit{}, fmt.Errorf("read commit %s of %s: %w", sha, st.t.canon, err)
		}
		defer release()
		c, err := m.readCommit(ctx, st, sha)
		if err == nil {
			m.commits.add(key, c)
		}
		return c, err
	})
}

// readCommit reads commit sha from the mirror.
func (m *Mirrors) readCommit(ctx context.Context, st *repoState, sha string) (Commit, error) {
	out, err := m.run(ctx, gitRun{dir: st.dir, args: []string{"cat-file", "--batch"},
		stdin: strings.NewReader(sha + "\n"), limit: maxCommitBytes + 100})
	if err != nil {
		return Commit{}, fmt.Errorf("read commit %s of %s: %w", sha, st.t.canon, err)
	}
	header, body, _ := bytes.Cut(out, []byte("\n"))
	f := strings.Fields(string(header))
	if len(f) != 3 || f[1] != "commit" {
		return Commit{}, fmt.Errorf("read commit %s of %s: %w (mirror %s)", sha, st.t.canon, ErrUnknownRef, st.lastFetched())
	}
	size, err := strconv.Atoi(f[2])
	if err != nil || size > len(body) {
		return Commit{}, fmt.Errorf("read commit %s of %s: short object from git cat-file", sha, st.t.canon)
	}
	c, err := parseCommit(f[0], body[:size])
	if err != nil {
		return Commit{}, fmt.Errorf("read commit %s of %s: %w", sha, st.t.canon, err)
	}
	return c, nil
}

// parseCommit reads a raw commit object: headers (continued on lines beginning with a space),
// a blank line, the message.
func parseCommit(sha string, raw []byte) (Commit, error) {
	c := Commit{SHA: sha}
	headers, msg, _ := bytes.Cut(raw, []byte("\n\n"))
	found := false
	for _, l := range strings.Split(string(headers), "\n") {
		v, ok := strings.CutPrefix(l, "author ")
		if !ok {
			continue
		}
		name, email, date, err := parseIdent(v)
		if err != nil {
			return Commit{}, err
		}
		c.Author, c.Email, c.Date = name, email, date
		found = true
		break
	}
	if !found {
		return Commit{}, errors.New("commit has no author")
	}
	c.Message = strings.TrimRightFunc(strings.ToValidUTF8(string(msg), "\uFFFD"), unicode.IsSpace)
	c.Bench = benchOf(c.Message)
	return c, nil
}

// parseIdent reads "Name <email> 1700000000 +0100".
func parseIdent(v string) (name, email string, date time.Time, err error) {
	lt := strings.IndexByte(v, '<')
	gt := strings.LastIndexByte(v, '>')
	if lt < 0 || gt < lt {
		return "", "", time.Time{}, fmt.Errorf("bad author line %q", printable(v, 100))
	}
	name = strings.ToValidUTF8(strings.TrimSpace(v[:lt]), "\uFFFD")
	email = strings.ToValidUTF8(v[lt+1:gt], "\uFFFD")
	f := strings.Fields(v[gt+1:])
	if len(f) != 2 {
		return "", "", time.Time{}, fmt.Errorf("bad author date %q", printable(v[gt+1:], 100))
	}
	secs, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return "", "", time.Time{}, fmt.Errorf("bad author date %q", printable(f[0], 40))
	}
	offset := 0
	if tz := f[1]; len(tz) == 5 && (tz[0] == '+' || tz[0] == '-') {
		h, err1 := strconv.Atoi(tz[1:3])
		mi, err2 := strconv.Atoi(tz[3:5])
		if err1 == nil && err2 == nil {
			offset = (h*60 + mi) * 60
			if tz[0] == '-' {
				offset = -offset
			}
		}
	}
	return name, email, time.Unix(secs, 0).In(time.FixedZone("", offset)), nil
}

// benchOf is the bench signature of a message: the number of the last line matching benchLine.
func benchOf(msg string) string {
	lines := strings.Split(msg, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if m := benchLine.FindStringSubmatch(strings.TrimSpace(lines[i])); m != nil {
			return m[2]
		}
	}
	return ""
}

// requireCommits fails, wrapping ErrUnknownRef, unless the mirror has every one of shas as a
// commit.
func (m *Mirrors) requireCommits(ctx context.Context, st *repoState, op string, shas ...string) error {
	infos, err := m.batchCheck(ctx, st.dir, shas...)
	if err != nil {
		return fmt.Errorf("%s in %s: %w", op, st.t.canon, err)
	}
	for i, in := range infos {
		if in.typ != "commit" {
			return fmt.Errorf("%s in %s: commit %s: %w (mirror %s)", op, st.t.canon, shas[i], ErrUnknownRef, st.lastFetched())
		}
	}
	return nil
}

// Keep makes the mirror keep the commits shas (full) for good, whatever happens upstream (a
// force-push, a deleted branch, a gc), with refs of Shoal's own. Errors wrap ErrNotAllowed,
// ErrBadRef, ErrUnknownRef or ErrReadOnly.
func (m *Mirrors) Keep(ctx context.Context, repo string, shas ...string) error {
	st, err := m.repo(repo)
	if err != nil {
		return err
	}
	var in strings.Builder
	for i, s := range shas {
		if shas[i], err = parseSHA(s); err != nil {
			return fmt.Errorf("keep in %s: %w", st.t.canon, err)
		}
		// refs/shoal/ is outside the fetch's refspecs, so --prune never removes these.
		fmt.Fprintf(&in, "update refs/shoal/keep/%s %s\n", shas[i], shas[i])
	}
	if len(shas) == 0 {
		return nil
	}
	if !st.mirrored() {
		return st.notMirrored()
	}
	if err := m.requireCommits(ctx, st, "keep", shas...); err != nil {
		return err
	}
	if err := m.becomeWriter("keep in " + st.t.canon); err != nil {
		return err
	}
	st.keepMu.RLock()
	defer st.keepMu.RUnlock()
	_, err = m.run(ctx, gitRun{dir: st.dir, args: []string{"update-ref", "--stdin"}, stdin: strings.NewReader(in.String())})
	st.kept.Add(1) // even a failed transaction may have made some refs
	if err != nil {
		return fmt.Errorf("keep in %s: %w", st.t.canon, err)
	}
	return nil
}

// Relation tells how base and new (full SHAs) stand, from the mirror, without fetching.
// Relations are cached; calls for one being computed wait for it; a failure is answered again
// for a minute (until a fetch) without running git.
func (m *Mirrors) Relation(ctx context.Context, repo, base, new string) (Relation, error) {
	st, err := m.repo(repo)
	if err != nil {
		return Relation{}, err
	}
	if base, err = parseSHA(base); err != nil {
		return Relation{}, err
	}
	if new, err = parseSHA(new); err != nil {
		return Relation{}, err
	}
	if !st.mirrored() {
		return Relation{}, st.notMirrored()
	}
	head, err := m.headOf(ctx, st)
	if err != nil {
		return Relation{}, err
	}
	// The answer is fixed by the three commits; HEAD moves with fetches, hence its SHA in the key.
	key := st.t.canon + " " + base + " " + new + " " + head.sha
	if r, ok := m.relations.get(key); ok {
		return r, nil
	}
	if err := m.failed(st, "relation "+key); err != nil {
		return Relation{}, err
	}
	return m.relFlights.do(ctx, key, func() (Relation, error) {
		if r, ok := m.relations.get(key); ok {
			return r, nil
		}
		gen := m.fetchGen(st)
		release, err := m.readSlot(ctx)
		if err != nil {
			return Relation{}, fmt.Errorf("relation in %s: %w", st.t.canon, err)
		}
		defer release()
		r, err := m.relation(ctx, st, base, new, head)
		if err != nil {
			m.remember("relation "+key, gen, err)
			return Relation{}, err
		}
		m.relations.add(key, r)
		return r, nil
	})
}

// relation computes the answer of Relation.
func (m *Mirrors) relation(ctx context.Context, st *repoState, base, new string, head headInfo) (Relation, error) {
	if err := m.requireCommits(ctx, st, "relation", base, new); err != nil {
		return Relation{}, err
	}
	mb, err := m.mergeBase(ctx, st.dir, base, new)
	if err != nil {
		return Relation{}, fmt.Errorf("relation in %s: %w", st.t.canon, err)
	}
	// base is an ancestor of new exactly when it is their merge base, so no --is-ancestor call.
	r := Relation{MergeBase: mb, BaseIsAncestor: mb == base, Head: head.name, HeadSHA: head.sha}
	if head.sha != "" {
		if r.HeadMergeBase, err = m.mergeBase(ctx, st.dir, head.sha, new); err != nil {
			return Relation{}, fmt.Errorf("relation in %s: %w", st.t.canon, err)
		}
		r.NewInHead = r.HeadMergeBase == new
		if r.BaseInHead, err = m.isAncestor(ctx, st.dir, base, head.sha); err != nil {
			return Relation{}, fmt.Errorf("relation in %s: %w", st.t.canon, err)
		}
	}
	return r, nil
}

// headOf returns the mirror's default branch and its tip, remembered until the next fetch (for
// an instance that does not fetch, for RefetchAfter).
func (m *Mirrors) headOf(ctx context.Context, st *repoState) (headInfo, error) {
	m.mu.Lock()
	h, gen := st.head, st.gen
	m.mu.Unlock()
	if h != nil && (h.byWriter || m.now().Sub(h.read) < m.cfg.RefetchAfter) {
		return *h, nil
	}
	release, err := m.readSlot(ctx)
	if err != nil {
		return headInfo{}, fmt.Errorf("read the default branch of %s: %w", st.t.canon, err)
	}
	defer release()
	read, byWriter := m.now(), m.writer.Load()
	out, err := m.run(ctx, gitRun{dir: st.dir, args: []string{"symbolic-ref", "-q", "HEAD"}})
	if err != nil && exitCode(err) != 1 {
		return headInfo{}, fmt.Errorf("read the default branch of %s: %w", st.t.canon, err)
	}
	name, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "refs/heads/")
	if !ok || refNameProblem(name) != "" {
		return headInfo{}, nil
	}
	infos, err := m.batchCheck(ctx, st.dir, "refs/heads/"+name+"^{commit}")
	if err != nil {
		return headInfo{}, fmt.Errorf("read the default branch of %s: %w", st.t.canon, err)
	}
	h = &headInfo{name: name, sha: infos[0].sha, read: read, byWriter: byWriter}
	m.mu.Lock()
	// A fetch that ended or began meanwhile may have moved HEAD: then it is read again next time.
	if st.gen == gen && st.flight == nil {
		st.head = h
	}
	m.mu.Unlock()
	return *h, nil
}

// mergeBase returns the best common ancestor of a and b, "" when they have none.
func (m *Mirrors) mergeBase(ctx context.Context, dir, a, b string) (string, error) {
	out, err := m.run(ctx, gitRun{dir: dir, args: []string{"merge-base", "--end-of-options", a, b}})
	if exitCode(err) == 1 && len(bytes.TrimSpace(out)) == 0 {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	mb := strings.TrimSpace(string(out))
	if len(mb) != 40 || !isHex(mb) {
		return "", fmt.Errorf("git merge-base: unexpected answer %q", printable(mb, 100))
	}
	return mb, nil
}

// isAncestor reports whether a is an ancestor of b (or b itself).
func (m *Mirrors) isAncestor(ctx context.Context, dir, a, b string) (bool, error) {
	_, err := m.run(ctx, gitRun{dir: dir, args: []string{"merge-base", "--is-ancestor", "--end-of-options", a, b}})
	if err == nil {
		return true, nil
	}
	if exitCode(err) == 1 {
		return false, nil
	}
	return false, err
}

// File returns the file at path in commit sha (full), at most max bytes of it, without
// fetching; a path the commit lacks wraps os.ErrNotExist.
func (m *Mirrors) File(ctx context.Context, repo, sha, path string, max int64) ([]byte, error) {
	st, err := m.repo(repo)
	if err != nil {
		return nil, err
	}
	if sha, err = parseSHA(sha); err != nil {
		return nil, err
	}
	if why := checkFilePath(path); why != "" {
		return nil, fmt.Errorf("file %s of %s: %w: %s", quoteRepo(path), st.t.canon, fs.ErrInvalid, why)
	}
	if !st.mirrored() {
		return nil, st.notMirrored()
	}
	infos, err := m.batchCheck(ctx, st.dir, sha+"^{commit}", sha+":"+path)
	if err != nil {
		return nil, fmt.Errorf("file %s of %s: %w", path, st.t.canon, err)
	}
	switch {
	case infos[0].typ != "commit":
		return nil, fmt.Errorf("file %s of %s: commit %s: %w", path, st.t.canon, sha, ErrUnknownRef)
	case infos[1].typ == "missing":
		return nil, fmt.Errorf("file %s of commit %s of %s: %w", path, sha, st.t.canon, fs.ErrNotExist)
	case infos[1].typ != "blob":
		return nil, fmt.Errorf("file %s of commit %s of %s: a %s, not a file", path, sha, st.t.canon, infos[1].typ)
	case infos[1].size > max:
		return nil, fmt.Errorf("file %s of commit %s of %s: %d bytes, more than the %d allowed", path, sha, st.t.canon, infos[1].size, max)
	}
	out, err := m.run(ctx, gitRun{dir: st.dir, args: []string{"cat-file", "blob", "--end-of-options", infos[1].sha}, limit: int(infos[1].size) + 1})
	if err != nil {
		return nil, fmt.Errorf("file %s of commit %s of %s: %w", path, sha, st.t.canon, err)
	}
	return out, nil
}
