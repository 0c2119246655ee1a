package build

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"time"
)

// cache is the directory of built engines, one file per commit and ARCH named <sha>-<arch>,
// bounded by count and bytes. A file's modification time is its last use: the least recently
// used go first. It is not safe for concurrent use (the Builder's lock guards it).
type cache struct {
	dir        string
	maxEntries int
	maxBytes   int64
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
// and marks it used. A cached file that is not an executable regular file is removed: it will
// be built again.
func (c *cache) lookup(sha string, fits func(arch string) bool) string {
	var best *entry
	all := c.entries()
	for i := range all {
		e := &all[i]
		if e.sha != sha || !fits(e.arch) {
			continue
		}
		if !executable(e.path) {
			_ = os.Remove(e.path)
			continue
		}
		if best == nil || e.used.After(best.used) {
			best = e
		}
	}
	if best == nil {
		return ""
	}
	now := time.Now()
	_ = os.Chtimes(best.path, now, now)
	return best.path
}

// executable reports whether path is a non-empty regular file with an execute bit set.
func executable(path string) bool {
	info, err := os.Stat(path)
	return err == nil && info.Mode().IsRegular() && info.Mode()&0o111 != 0 && info.Size() > 0
}

// add moves the engine at built (on the same file system) into the cache as sha-arch, and
// evicts what the bounds require, never an engine of the commits in pinned. It returns the
// cached engine's path and the paths evicted.
func (c *cache) add(sha, arch, built string, pinned map[string]bool) (string, []string, error) {
	dest := filepath.Join(c.dir, sha+"-"+arch)
	if err := os.Chmod(built, 0o755); err != nil {
		return "", nil, err
	}
	if err := os.Rename(built, dest); err != nil {
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
		if err := os.Remove(e.path); err != nil {
			continue
		}
		count, bytes = count-1, bytes-e.size
		evicted = append(evicted, e.path)
	}
	return evicted
}
