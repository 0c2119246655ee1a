package build

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// cache is the directory of built engines, one file per commit and ARCH named <sha>-<arch>,
// bounded by count and bytes, each with its sha256 as it was built in .<sha>-<arch>.sha256
// beside it: an engine that no longer matches it (a later build, which runs the code of a
// patch as the worker's user, or the disk changed it) is not used. A file's modification time
// is its last use: the least recently used go first. It is not safe for concurrent use (the
// Builder's lock guards it).
type cache struct {
	dir        string
	maxEntries int
	maxBytes   int64
	log        *slog.Logger // nil: no log
}

// sumPath is the file of the sha256 of the engine at path. Its name starts with a dot, which
// keeps it out of entries.
func sumPath(path string) string {
	return filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".sha256")
}

// fileSHA256 is the sha256 of the file at path, in hex.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// remove removes a cached engine and its sha256.
func (c *cache) remove(path string) error {
	_ = os.Remove(sumPath(path))
	return os.Remove(path)
}

// entryName is a cached engine's file name: the commit and the ARCH.
var entryName = regexp.MustCompile(`^([0-9a-f]{40})-([A-Za-z0-9_][A-Za-z0-9._-]*)$`)

type entry struct {
	path, sha, arch string
	size            int64
	used            time.Time
}

// entries lists the cached engines; files of other names (a move under way) are not.
func (c *cache) entries() []entry {
	des, _ := os.ReadDir(c.dir)
	var out []entry
	for _, de := range des {
		m := entryName.FindStringSubmatch(de.Name())
		if m == nil {
			continue
		}
		info, err := de.Info()
		if err != nil {
			continue
		}
		out = append(out, entry{path: filepath.Join(c.dir, de.Name()), sha: m[1], arch: m[2], size: info.Size(), used: info.ModTime()})
	}
	return out
}

// lookup returns the most recently used engine built from sha with an ARCH that fits (or ""),
// and marks it used. A cached file that is not an executable regular file, or whose sha256 is
// not the one recorded when it was added (or has none), is removed, with a warning for the
// latter: it will be built again.
func (c *cache) lookup(sha string, fits func(arch string) bool) string {
	var found []entry
	for _, e := range c.entries() {
		if e.sha == sha && fits(e.arch) {
			found = append(found, e)
		}
	}
	slices.SortFunc(found, func(a, b entry) int { return b.used.Compare(a.used) })
	for _, e := range found {
		if !executable(e.path) {
			_ = c.remove(e.path)
			continue
		}
		if why := c.changed(e.path); why != "" {
			if c.log != nil {
				c.log.Warn("Removing a cached engine that changed since it was built: it will be built again",
					"engine", filepath.Base(e.path), "sha256", why)
			}
			_ = c.remove(e.path)
			continue
		}
		now := time.Now()
		_ = os.Chtimes(e.path, now, now)
		return e.path
	}
	return ""
}

// changed says how the engine at path differs from the sha256 recorded when it was added, ""
// when it does not.
func (c *cache) changed(path string) string {
	want, err := os.ReadFile(sumPath(path))
	if err != nil {
		return "none recorded"
	}
	got, err := fileSHA256(path)
	if err != nil {
		return err.Error()
	}
	if w := strings.TrimSpace(string(want)); got != w {
		return got + ", recorded " + w
	}
	return ""
}

// executable reports whether path is a non-empty regular file with an execute bit set.
func executable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0 && info.Size() > 0
}

// add moves the engine at built (on the same file system) into the cache as sha-arch, its
// sha256 recorded beside it, and evicts what the bounds require, never an engine of the commits
// in pinned. It returns the cached engine's path and the paths evicted.
func (c *cache) add(sha, arch, built string, pinned map[string]bool) (string, []string, error) {
	dest := filepath.Join(c.dir, sha+"-"+arch)
	if err := os.Chmod(built, 0o755); err != nil {
		return "", nil, err
	}
	sum, err := fileSHA256(built)
	if err != nil {
		return "", nil, err
	}
	if err := writeAtomic(sumPath(dest), []byte(sum+"\n"), 0o644); err != nil {
		return "", nil, err
	}
	if err := os.Rename(built, dest); err != nil {
		_ = os.Remove(sumPath(dest))
		return "", nil, err
	}
	now := time.Now()
	_ = os.Chtimes(dest, now, now)
	return dest, c.evict(pinned), nil
}

// evict removes the least recently used engines while there are more than maxEntries or more
// than maxBytes of them, sparing those of the commits in pinned.
func (c *cache) evict(pinned map[string]bool) []string {
	all := c.entries()
	slices.SortFunc(all, func(a, b entry) int { return a.used.Compare(b.used) })
	count, bytes := len(all), int64(0)
	for _, e := range all {
		bytes += e.size
	}
	var evicted []string
	for _, e := range all {
		if count <= c.maxEntries && bytes <= c.maxBytes {
			break
		}
		if pinned[e.sha] {
			continue
		}
		if err := c.remove(e.path); err != nil {
			continue
		}
		count, bytes = count-1, bytes-e.size
		evicted = append(evicted, e.path)
	}
	return evicted
}
