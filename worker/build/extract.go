package build

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// treeLimits bound an extracted source tree.
type treeLimits struct {
	bytes   int64 // of its files
	entries int
}

// sourceLimits are a source tree's bounds: Stockfish's is a few megabytes in a few hundred
// files.
var sourceLimits = treeLimits{bytes: 512 << 20, entries: 100_000}

// errUnsafe is a tarball that tries to write outside its tree, or holds what a source tree has
// no business holding.
var errUnsafe = errors.New("unsafe source archive")

// extract unpacks a gzipped tarball into dir, which must exist and be empty: directories,
// regular files (mode 0644, or 0755 when any execute bit is set) and symbolic links that stay
// inside the tree. It refuses absolute names, ".." components, links that leave the tree (or
// climb after a step down), hard links, devices and anything else, and more bytes of files or more entries than lim allows (within lim). Symbolic links are made last, so that no file is written through one.
func extract(tgz []byte, dir string, lim treeLimits) error {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return fmt.Errorf("source archive: %w", err)
	}
	tr := tar.NewReader(zr)
	var links [][2]string // name, target
	var total int64
	for entries := 0; ; entries++ {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("source archive: %w", err)
		}
		if entries >= lim.entries {
			return fmt.Errorf("%w: more than %d entries", errUnsafe, lim.entries)
		}
		if h.Typeflag == tar.TypeXGlobalHeader { // git archive's commit id
			continue
		}
		name, err := localName(h.Name)
		if err != nil {
			return err
		}
		if name == "." {
			continue
		}
		dest := filepath.Join(dir, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(dest, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if h.Size < 0 || total+h.Size > lim.bytes {
				return fmt.Errorf("%w: more than %d bytes of files", errUnsafe, lim.bytes)
			}
			total += h.Size
			if err := writeFile(dest, tr, h.Size, h.Mode&0o111 != 0); err != nil {
				return err
			}
		case tar.TypeSymlink:
			target := h.Linkname
			if target == "" || path.IsAbs(target) || strings.Contains(target, `\`) {
				return fmt.Errorf("%w: link %s points to %q", errUnsafe, name, target)
			}
			if _, err := localName(path.Join(path.Dir(name), target)); err != nil || !downward(target) {
				return fmt.Errorf("%w: link %s points to %q, outside the tree", errUnsafe, name, target)
			}
			links = append(links, [2]string{name, target})
		default:
			return fmt.Errorf("%w: %s is not a file, a directory or a symbolic link (type %q)", errUnsafe, name, h.Typeflag)
		}
	}
	for _, l := range links {
		if err := noLinkOnTheWay(dir, l[0]); err != nil {
			return err
		}
		dest := filepath.Join(dir, filepath.FromSlash(l[0]))
		if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(l[1], dest); err != nil {
			return fmt.Errorf("source archive: %w", err)
		}
	}
	return nil
}

// localName checks a name of the archive: relative, no ".." component, no backslash, no NUL.
// It returns the name cleaned ("." for the root).
func localName(name string) (string, error) {
	if name == "" || strings.HasPrefix(name, "/") || strings.ContainsAny(name, "\\\x00") || filepath.VolumeName(name) != "" {
		return "", fmt.Errorf("%w: entry %q is not a relative path", errUnsafe, name)
	}
	for part := range strings.SplitSeq(name, "/") {
		if part == ".." {
			return "", fmt.Errorf("%w: entry %q leaves the tree", errUnsafe, name)
		}
	}
	return path.Clean(name), nil
}

// downward reports whether a link's target climbs only at its start ("../../src/x", not
// "a/../.."): climbing after a step down could climb out of the tree through another link,
// which a check of the target's text cannot see.
func downward(target string) bool {
	parts := strings.Split(target, "/")
	i := 0
	for i < len(parts) && parts[i] == ".." {
		i++
	}
	for _, part := range parts[i:] {
		if part == ".." {
			return false
		}
	}
	return true
}

// noLinkOnTheWay makes sure no directory on the way to name inside dir is a symbolic link, so
// that a link made there lands where its name says.
func noLinkOnTheWay(dir, name string) error {
	p := dir
	parts := strings.Split(name, "/")
	for _, part := range parts[:len(parts)-1] {
		p = filepath.Join(p, part)
		info, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if info.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("%w: %s goes through the link %s", errUnsafe, name, strings.TrimPrefix(p, dir+string(filepath.Separator)))
		}
	}
	return nil
}

// writeFile writes size bytes of r to a new file at dest, its directories made as needed.
func writeFile(dest string, r io.Reader, size int64, executable bool) error {
	if err := os.MkdirAll(filepath.Dir(dest), 0o755); err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if executable {
		mode = 0o755
	}
	f, err := os.OpenFile(dest, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, r, size); err != nil {
		f.Close()
		return fmt.Errorf("source archive: %s: %w", dest, err)
	}
	return f.Close()
}
