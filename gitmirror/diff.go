package gitmirror

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Diff limits: what a reviewer's page can show. Past them Diff.Truncated is set, and every file
// is still listed with its counts.
const (
	maxDiffFiles     = 300      // files with hunks
	maxDiffLines     = 20000    // hunk lines over all files
	maxDiffLineBytes = 2000     // bytes of one line's text
	maxDiffOutput    = 16 << 20 // bytes of git's patch read
	maxDiffIndex     = 8 << 20  // bytes of git's file list (raw and numstat) read
)

// emptyTree is the SHA-1 of the empty tree, git's "before" of commits with no common history.
const emptyTree = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

// Diff returns the diff from the merge base of base and new to new (full SHAs), from the
// mirror, without fetching. Diffs are cached per pair; calls for a pair being computed wait
// for it; a failure is answered again for a minute (until a fetch) without running git. The
// result is shared: do not modify it.
func (m *Mirrors) Diff(ctx context.Context, repo, base, new string) (*Diff, error) {
	st, err := m.repo(repo)
	if err != nil {
		return nil, err
	}
	if base, err = parseSHA(base); err != nil {
		return nil, err
	}
	if new, err = parseSHA(new); err != nil {
		return nil, err
	}
	key := st.t.canon + " " + base + " " + new
	if d, ok := m.diffs.get(key); ok {
		return d, nil
	}
	if !st.mirrored() {
		return nil, st.notMirrored()
	}
	if err := m.failed(st, "diff "+key); err != nil {
		return nil, err
	}
	return m.diffFlights.do(ctx, key, func() (*Diff, error) {
		if d, ok := m.diffs.get(key); ok {
			return d, nil // made while this caller was on its way
		}
		gen := m.fetchGen(st)
		release, err := m.readSlot(ctx)
		if err != nil {
			return nil, fmt.Errorf("diff in %s: %w", st.t.canon, err)
		}
		defer release()
		d, err := m.diff(ctx, st, base, new)
		if err != nil {
			m.remember("diff "+key, gen, err)
			return nil, err
		}
		m.diffs.add(key, d)
		return d, nil
	})
}

// diff computes the diff of Diff.
func (m *Mirrors) diff(ctx context.Context, st *repoState, base, new string) (*Diff, error) {
	m.diffCount.Add(1)
	if m.diffHook != nil {
		m.diffHook()
	}
	if err := m.requireCommits(ctx, st, "diff", base, new); err != nil {
		return nil, err
	}
	mb, err := m.mergeBase(ctx, st.dir, base, new)
	if err != nil {
		return nil, fmt.Errorf("diff in %s: %w", st.t.canon, err)
	}
	from := mb
	if from == "" {
		from = emptyTree
	}
	index, err := m.run(ctx, gitRun{dir: st.dir, limit: maxDiffIndex, args: []string{
		"diff", "--raw", "--numstat", "-z", "-M", "--no-ext-diff", "--no-textconv", "--end-of-options", from, new,
	}})
	if err != nil {
		return nil, fmt.Errorf("diff in %s: list files: %w", st.t.canon, err)
	}
	d := &Diff{Base: base, MergeBase: mb, New: new}
	if d.Files, err = parseIndex(index); err != nil {
		return nil, fmt.Errorf("diff in %s: %w", st.t.canon, err)
	}
	for _, f := range d.Files {
		d.Added += f.Added
		d.Removed += f.Removed
	}
	patch, err := m.run(ctx, gitRun{dir: st.dir, limit: maxDiffOutput, args: []string{
		"diff", "-p", "--no-color", "--no-ext-diff", "--no-textconv", "-M",
		"--src-prefix=a/", "--dst-prefix=b/", "--end-of-options", from, new,
	}})
	cut := errors.Is(err, errOutputLimit)
	if err != nil && !cut {
		return nil, fmt.Errorf("diff in %s: %w", st.t.canon, err)
	}
	addHunks(d, patch, cut)
	return d, nil
}

// diffCost estimates a diff's memory for the cache bound.
func diffCost(d *Diff) int64 {
	n := int64(256)
	for _, f := range d.Files {
		n += 128 + int64(len(f.Path)+len(f.OldPath))
		for _, h := range f.Hunks {
			n += 64 + int64(len(h.Header))
			for _, l := range h.Lines {
				n += 40 + int64(len(l.Text))
			}
		}
	}
	return n
}

// parseIndex reads `git diff --raw --numstat -z`: all the raw records (status and paths), then
// all the numstat records (line counts), in the same order.
func parseIndex(out []byte) ([]FileDiff, error) {
	toks := strings.Split(string(out), "\x00")
	if n := len(toks); n > 0 && toks[n-1] == "" {
		toks = toks[:n-1]
	}
	var files []FileDiff
	i := 0
	for i < len(toks) && strings.HasPrefix(toks[i], ":") {
		f := strings.Fields(toks[i])
		if len(f) != 5 || i+1 >= len(toks) {
			return nil, fmt.Errorf("git diff --raw: unexpected record %q", printable(toks[i], 100))
		}
		fd := FileDiff{Path: toks[i+1], Status: "modified"}
		i += 2
		switch f[4][0] {
		case 'A':
			fd.Status = "added"
		case 'D':
			fd.Status = "deleted"
		case 'R', 'C':
			if i >= len(toks) {
				return nil, errors.New("git diff --raw: a rename without its new path")
			}
			fd.Status = map[byte]string{'R': "renamed", 'C': "copied"}[f[4][0]]
			fd.OldPath, fd.Path = fd.Path, toks[i]
			i++
		}
		files = append(files, fd)
	}
	for k := range files {
		if i >= len(toks) {
			return nil, errors.New("git diff --numstat: fewer records than files")
		}
		f := strings.SplitN(toks[i], "\t", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("git diff --numstat: unexpected record %q", printable(toks[i], 100))
		}
		i++
		if f[2] == "" {
			i += 2 // a rename or copy: the old and new paths follow, as in the raw record
		}
		if f[0] == "-" && f[1] == "-" {
			files[k].Binary = true
			continue
		}
		files[k].Added, _ = strconv.Atoi(f[0])
		files[k].Removed, _ = strconv.Atoi(f[1])
	}
	return files, nil
}

// patchParser reads a unified diff into the files of a Diff, within the limits.
type patchParser struct {
	d      *Diff
	byPath map[string]int // file index by its Path
	done   []bool         // files whose hunks are complete

	cur       int // index of the file being read, -1 for none
	section   sectionHead
	hunk      *Hunk
	old, new  int // next line numbers
	remOld    int // lines still due on each side of the hunk
	remNew    int
	withHunks int // files given hunks
	lines     int // hunk lines kept
	skipping  bool
}

// sectionHead is what the header lines of one "diff --git" section say about its paths.
type sectionHead struct {
	gitA, gitB string // guessed from the "diff --git" line
	minus      string // from "--- a/..." ("" for /dev/null)
	plus       string // from "+++ b/..."
	renameTo   string // from "rename to" or "copy to"
	matched    bool   // cur was chosen
}

// addHunks parses the patch into d's files; cut says the patch was cut short at the output
// limit.
func addHunks(d *Diff, patch []byte, cut bool) {
	p := &patchParser{d: d, byPath: map[string]int{}, done: make([]bool, len(d.Files)), cur: -1}
	for i, f := range d.Files {
		p.byPath[f.Path] = i
	}
	if cut {
		// The last line may be cut in the middle: drop it.
		if i := bytes.LastIndexByte(patch, '\n'); i >= 0 {
			patch = patch[:i+1]
		}
	}
	for len(patch) > 0 {
		line := patch
		if i := bytes.IndexByte(patch, '\n'); i >= 0 {
			line, patch = patch[:i], patch[i+1:]
		} else {
			patch = nil
		}
		p.line(line)
	}
	p.endSection(!cut)
	if cut {
		d.Truncated = true
	}
	for i := range d.Files {
		f := &d.Files[i]
		if !p.done[i] && !f.Binary && (f.Added > 0 || f.Removed > 0) {
			f.Truncated = true
			d.Truncated = true
		}
	}
}

// line takes one line of the patch.
func (p *patchParser) line(l []byte) {
	if p.hunk != nil && (p.remOld > 0 || p.remNew > 0) {
		if p.hunkLine(l) {
			return
		}
	}
	if len(l) > 0 && l[0] == '\\' && p.hunk != nil {
		p.addLine(Line{Op: '\\', Text: strings.TrimSpace(string(l[1:]))})
		return
	}
	s := string(l)
	switch {
	case strings.HasPrefix(s, "diff --git "):
		p.endSection(true)
		p.section = sectionHead{}
		p.section.gitA, p.section.gitB = splitGitLine(s[len("diff --git "):])
	case strings.HasPrefix(s, "--- "):
		p.section.minus = stripPrefix(unquoteName(strings.TrimSuffix(s[4:], "\t")), "a/")
	case strings.HasPrefix(s, "+++ "):
		p.section.plus = stripPrefix(unquoteName(strings.TrimSuffix(s[4:], "\t")), "b/")
	case strings.HasPrefix(s, "rename to "):
		p.section.renameTo = unquoteName(s[len("rename to "):])
	case strings.HasPrefix(s, "copy to "):
		p.section.renameTo = unquoteName(s[len("copy to "):])
	case strings.HasPrefix(s, "@@ "):
		p.startHunk(s)
	}
}

// stripPrefix removes the "a/" or "b/" of a patch path; "/dev/null" becomes "".
func stripPrefix(name, prefix string) string {
	if name == "/dev/null" {
		return ""
	}
	return strings.TrimPrefix(name, prefix)
}

// splitGitLine guesses the two paths of "diff --git a/X b/Y", which is ambiguous when paths
// have spaces; the section's other lines, when there are any, say it exactly.
func splitGitLine(rest string) (a, b string) {
	if strings.HasPrefix(rest, `"`) {
		if end := closingQuote(rest); end > 0 {
			a = unquoteName(rest[:end+1])
			b = unquoteName(strings.TrimPrefix(rest[end+1:], " "))
			return strings.TrimPrefix(a, "a/"), strings.TrimPrefix(b, "b/")
		}
	}
	if n := len(rest); n%2 == 1 {
		half := n / 2
		if rest[half] == ' ' && strings.HasPrefix(rest, "a/") && strings.HasPrefix(rest[half+1:], "b/") && rest[2:half] == rest[half+3:] {
			return rest[2:half], rest[half+3:]
		}
	}
	if i := strings.Index(rest, " b/"); i >= 0 {
		return strings.TrimPrefix(rest[:i], "a/"), unquoteName(rest[i+3:])
	}
	return "", ""
}

// closingQuote is the index of the quote ending the C-quoted string s begins with, or -1.
func closingQuote(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return i
		}
	}
	return -1
}

// unquoteName undoes git's C-style quoting of an unusual path ("a\tb"); other names are
// returned as they are.
func unquoteName(s string) string {
	if len(s) < 2 || s[0] != '"' || s[len(s)-1] != '"' {
		return s
	}
	var b []byte
	for i := 1; i < len(s)-1; i++ {
		c := s[i]
		if c != '\\' || i+1 >= len(s)-1 {
			b = append(b, c)
			continue
		}
		i++
		switch c = s[i]; c {
		case 'a':
			b = append(b, '\a')
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'v':
			b = append(b, '\v')
		case '0', '1', '2', '3':
			if i+2 < len(s)-1 {
				if v, err := strconv.ParseUint(s[i:i+3], 8, 8); err == nil {
					b = append(b, byte(v))
					i += 2
					continue
				}
			}
			b = append(b, c)
		default:
			b = append(b, c)
		}
	}
	return string(b)
}

// match picks the file the current section is about, by its path in new (in base for a
// deleted file), as the raw records name it.
func (p *patchParser) match() {
	if p.section.matched {
		return
	}
	p.section.matched = true
	p.cur = -1
	for _, name := range []string{p.section.renameTo, p.section.plus, p.section.minus, p.section.gitB, p.section.gitA} {
		if i, ok := p.byPath[name]; ok && name != "" {
			p.cur = i
			break
		}
	}
	p.skipping = false
	if p.cur < 0 {
		return
	}
	f := &p.d.Files[p.cur]
	if len(f.Hunks) > 0 {
		return // a type change comes as two sections of one file
	}
	if p.withHunks >= maxDiffFiles || p.lines >= maxDiffLines {
		p.skipping = true
		f.Truncated = true
		p.d.Truncated = true
		return
	}
	p.withHunks++
}

// endSection closes the current file's section; complete says it was read to its end.
func (p *patchParser) endSection(complete bool) {
	if p.cur >= 0 && complete && !p.skipping && !p.d.Files[p.cur].Truncated {
		p.done[p.cur] = true
	}
	if p.cur >= 0 && !complete {
		p.d.Files[p.cur].Truncated = true
	}
	p.cur, p.hunk, p.remOld, p.remNew, p.skipping = -1, nil, 0, 0, false
	p.section.matched = false
}

// startHunk reads "@@ -a,b +c,d @@ context".
func (p *patchParser) startHunk(s string) {
	p.match()
	p.hunk = nil
	p.remOld, p.remNew = 0, 0
	var oldStart, oldN, newStart, newN int
	f := strings.Fields(s)
	if len(f) < 4 || f[3] != "@@" {
		return
	}
	var ok1, ok2 bool
	oldStart, oldN, ok1 = hunkRange(f[1], '-')
	newStart, newN, ok2 = hunkRange(f[2], '+')
	if !ok1 || !ok2 {
		return
	}
	p.old, p.new, p.remOld, p.remNew = oldStart, newStart, oldN, newN
	if p.cur < 0 || p.skipping {
		p.hunk = &Hunk{} // read through, kept nowhere
		return
	}
	fd := &p.d.Files[p.cur]
	fd.Hunks = append(fd.Hunks, Hunk{Header: s})
	p.hunk = &fd.Hunks[len(fd.Hunks)-1]
}

// hunkRange reads "-a,b" or "-a" (b is 1).
func hunkRange(s string, sign byte) (start, n int, ok bool) {
	if len(s) < 2 || s[0] != sign {
		return 0, 0, false
	}
	a, b, hasN := strings.Cut(s[1:], ",")
	start, err := strconv.Atoi(a)
	if err != nil {
		return 0, 0, false
	}
	n = 1
	if hasN {
		if n, err = strconv.Atoi(b); err != nil {
			return 0, 0, false
		}
	}
	return start, n, true
}

// hunkLine takes a line inside a hunk and reports whether it was one.
func (p *patchParser) hunkLine(l []byte) bool {
	op := byte(' ')
	if len(l) > 0 {
		op = l[0]
	}
	var ln Line
	switch op {
	case ' ':
		ln = Line{Op: ' ', Old: p.old, New: p.new}
		p.old++
		p.new++
		p.remOld--
		p.remNew--
	case '-':
		ln = Line{Op: '-', Old: p.old}
		p.old++
		p.remOld--
	case '+':
		ln = Line{Op: '+', New: p.new}
		p.new++
		p.remNew--
	case '\\':
		ln = Line{Op: '\\'}
	default:
		p.remOld, p.remNew = 0, 0 // not a hunk line: the hunk's counts were wrong
		return false
	}
	if len(l) > 0 && p.cur >= 0 && !p.skipping {
		ln.Text = p.text(l[1:])
		if op == '\\' {
			ln.Text = strings.TrimSpace(ln.Text)
		}
	}
	p.addLine(ln)
	return true
}

// text is a line's text, cut at maxDiffLineBytes (on a character boundary).
func (p *patchParser) text(b []byte) string {
	if len(b) <= maxDiffLineBytes {
		return string(b)
	}
	n := maxDiffLineBytes
	for n > 0 && !utf8.RuneStart(b[n]) {
		n--
	}
	if p.cur >= 0 && !p.skipping {
		p.d.Files[p.cur].Truncated = true
		p.d.Truncated = true
	}
	return string(b[:n])
}

// addLine appends ln to the current hunk, within the line limit.
func (p *patchParser) addLine(ln Line) {
	if p.cur < 0 || p.skipping {
		return
	}
	if p.lines >= maxDiffLines {
		p.skipping = true
		p.d.Files[p.cur].Truncated = true
		p.d.Truncated = true
		return
	}
	p.hunk.Lines = append(p.hunk.Lines, ln)
	p.lines++
}
