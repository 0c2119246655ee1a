package gitmirror

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Bounds of what an archive's tree may list.
const (
	// maxTreeListing bounds `git ls-tree -r` of a commit: 64 bytes or so a file.
	maxTreeListing = 64 << 20
	// maxLinkTarget bounds a symbolic link's target.
	maxLinkTarget = 4096
)

// treeEntry is one file of a commit's tree, as `git ls-tree` lists it.
type treeEntry struct {
	mode, sha, path string
}

// errTarStopped ends git's output when the tar it feeds failed.
var errTarStopped = errors.New("archive stopped")

// writeTar writes the tree of commit sha of the mirror dir as a tar to w: what Archive says it
// holds. The tree comes from `git ls-tree` and the contents from `git cat-file --batch`, so no
// attribute of the repository (export-ignore, export-subst) has a say, as it would in `git
// archive`.
func (m *Mirrors) writeTar(ctx context.Context, dir, sha string, w io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	listing, err := m.run(ctx, gitRun{dir: dir, limit: maxTreeListing, args: []string{
		"ls-tree", "-r", "-z", "--full-tree", "--end-of-options", sha,
	}})
	if err != nil {
		return err
	}
	entries, err := parseTree(listing)
	if err != nil {
		return err
	}
	// The commit first, for its date, then every file's blob, in the listing's order.
	var in strings.Builder
	in.WriteString(sha + "\n")
	for _, e := range entries {
		in.WriteString(e.sha + "\n")
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := m.run(ctx, gitRun{dir: dir, args: []string{"cat-file", "--batch"}, stdin: strings.NewReader(in.String()), stdout: pw})
		pw.CloseWithError(err) // nil: EOF
		done <- err
	}()
	err = writeTarEntries(bufio.NewReaderSize(pr, 256<<10), sha, entries, w)
	if err != nil {
		pr.CloseWithError(errTarStopped)
		cancel()
	}
	gitErr := <-done
	if err == nil && gitErr != nil {
		err = gitErr
	}
	return err
}

// parseTree reads `git ls-tree -r -z`: "<mode> <type> <sha>\t<path>" records. It keeps regular
// files and symbolic links, and leaves out submodules and the paths git refuses to check out.
func parseTree(listing []byte) ([]treeEntry, error) {
	var entries []treeEntry
	for _, rec := range strings.Split(strings.TrimSuffix(string(listing), "\x00"), "\x00") {
		if rec == "" {
			continue
		}
		meta, path, ok := strings.Cut(rec, "\t")
		f := strings.Fields(meta)
		if !ok || len(f) != 3 {
			return nil, fmt.Errorf("git ls-tree: unexpected record %q", printable(rec, 100))
		}
		if f[1] != "blob" || !treePathOK(path) {
			continue // a submodule's commit, or a path no checkout would write
		}
		if len(f[2]) != 40 || !isHex(f[2]) {
			return nil, fmt.Errorf("git ls-tree: unexpected object %q", printable(f[2], 100))
		}
		entries = append(entries, treeEntry{mode: f[0], sha: f[2], path: path})
	}
	return entries, nil
}

// treePathOK reports whether a tree path is one a checkout writes: relative, no empty, "." or
// ".." component, and no ".git" one (in any case).
func treePathOK(p string) bool {
	if p == "" || strings.ContainsRune(p, '\\') {
		return false
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." || strings.EqualFold(c, ".git") {
			return false
		}
	}
	return true
}

// writeTarEntries reads the commit and then each entry's blob from git cat-file --batch output
// and writes the tar.
func writeTarEntries(r *bufio.Reader, sha string, entries []treeEntry, w io.Writer) error {
	size, err := batchHeader(r, sha, "commit")
	if err != nil {
		return err
	}
	if size > maxCommitBytes {
		return fmt.Errorf("commit %s: %d bytes", sha, size)
	}
	raw := make([]byte, size)
	if err := readObject(r, raw); err != nil {
		return err
	}
	mtime := committerTime(raw)
	tw := tar.NewWriter(w)
	for _, e := range entries {
		size, err := batchHeader(r, e.sha, "blob")
		if err != nil {
			return fmt.Errorf("%s: %w", e.path, err)
		}
		h := &tar.Header{Name: e.path, ModTime: mtime, Typeflag: tar.TypeReg, Mode: 0o644, Size: size}
		switch {
		case e.mode == "120000":
			if size > maxLinkTarget {
				return fmt.Errorf("%s: a symbolic link to %d bytes of path", e.path, size)
			}
			target := make([]byte, size)
			if err := readObject(r, target); err != nil {
				return err
			}
			h.Typeflag, h.Mode, h.Size, h.Linkname = tar.TypeSymlink, 0o777, 0, string(target)
			if err := tw.WriteHeader(h); err != nil {
				return fmt.Errorf("%s: %w", e.path, err)
			}
			continue
		case strings.HasPrefix(e.mode, "100"):
			if mode, err := strconv.ParseUint(e.mode[3:], 8, 32); err == nil && mode&0o111 != 0 {
				h.Mode = 0o755
			}
		default:
			return fmt.Errorf("%s: unexpected mode %q", e.path, printable(e.mode, 20))
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", e.path, err)
		}
		if _, err := io.CopyN(tw, r, size); err != nil {
			return fmt.Errorf("%s: %w", e.path, err)
		}
		if b, err := r.ReadByte(); err != nil || b != '\n' {
			return fmt.Errorf("%s: git cat-file --batch: no newline after the object", e.path)
		}
	}
	return tw.Close()
}

// batchHeader reads one "<sha> <type> <size>" line of git cat-file --batch and returns the size.
func batchHeader(r *bufio.Reader, sha, typ string) (int64, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return 0, fmt.Errorf("git cat-file --batch: %w", err)
	}
	f := strings.Fields(line)
	if len(f) != 3 || f[0] != sha || f[1] != typ {
		return 0, fmt.Errorf("git cat-file --batch: %q where %s %s was due", printable(line, 100), typ, sha)
	}
	size, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil || size < 0 {
		return 0, fmt.Errorf("git cat-file --batch: bad size in %q", printable(line, 100))
	}
	return size, nil
}

// readObject reads an object's whole content into b, and the newline after it.
func readObject(r *bufio.Reader, b []byte) error {
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("git cat-file --batch: %w", err)
	}
	if c, err := r.ReadByte(); err != nil || c != '\n' {
		return errors.New("git cat-file --batch: no newline after the object")
	}
	return nil
}

// committerTime is the committer's date of a raw commit, the time of every file in its archive
// (as git archive has it); the Unix epoch when it has none that reads.
func committerTime(raw []byte) time.Time {
	headers, _, _ := bytes.Cut(raw, []byte("\n\n"))
	for _, l := range strings.Split(string(headers), "\n") {
		if v, ok := strings.CutPrefix(l, "committer "); ok {
			if _, _, date, err := parseIdent(v); err == nil && date.Unix() >= 0 {
				return time.Unix(date.Unix(), 0).UTC()
			}
			break
		}
	}
	return time.Unix(0, 0).UTC()
}
