package build

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// put makes a built engine of size bytes for sha and adds it to c, last used at the given
// minute.
func put(t *testing.T, c *cache, sha string, size int, minute int, pinned ...string) []string {
	t.Helper()
	pins := map[string]bool{}
	for _, p := range pinned {
		pins[p] = true
	}
	// Built beside the cache: the move needs one file system.
	local := filepath.Join(c.dir, ".building")
	if err := os.WriteFile(local, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	p, evicted, err := c.add(sha, "x86-64", local, pins)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 1, 1, 0, minute, 0, 0, time.UTC)
	if err := os.Chtimes(p, at, at); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range evicted {
		names = append(names, filepath.Base(e)[:1])
	}
	return names
}

func sha(c byte) string { return strings.Repeat(string(c), 40) }

func cached(c *cache) []string {
	var names []string
	for _, e := range c.entries() {
		names = append(names, e.sha[:1])
	}
	slices.Sort(names)
	return names
}

// The cache keeps at most its count and its bytes of engines, the least recently used going
// first, and never those of the task being set up; a lookup is a use.
func TestCacheEviction(t *testing.T) {
	t.Run("by count", func(t *testing.T) {
		c := &cache{dir: t.TempDir(), maxEntries: 3, maxBytes: 1 << 30}
		put(t, c, sha('a'), 10, 1)
		put(t, c, sha('b'), 10, 2)
		put(t, c, sha('c'), 10, 3)
		if p := c.lookup(sha('a'), func(string) bool { return true }); p == "" {
			t.Fatal("a is not cached")
		}
		if got := put(t, c, sha('d'), 10, 4); !slices.Equal(got, []string{"b"}) {
			t.Errorf("evicted %v, want b (a was used since)", got)
		}
		if got := cached(c); !slices.Equal(got, []string{"a", "c", "d"}) {
			t.Errorf("cached %v", got)
		}
	})
	t.Run("by bytes", func(t *testing.T) {
		c := &cache{dir: t.TempDir(), maxEntries: 100, maxBytes: 250}
		put(t, c, sha('a'), 100, 1)
		put(t, c, sha('b'), 100, 2)
		if got := put(t, c, sha('c'), 100, 3); !slices.Equal(got, []string{"a"}) {
			t.Errorf("evicted %v, want a", got)
		}
		if got := put(t, c, sha('d'), 200, 4); !slices.Equal(got, []string{"b", "c"}) {
			t.Errorf("evicted %v, want b and c", got)
		}
	})
	t.Run("never the task's own", func(t *testing.T) {
		c := &cache{dir: t.TempDir(), maxEntries: 1, maxBytes: 1 << 30}
		put(t, c, sha('a'), 10, 1)
		if got := put(t, c, sha('b'), 10, 2, sha('a'), sha('b')); len(got) != 0 {
			t.Errorf("evicted %v, want none: both are the task's", got)
		}
		if got := put(t, c, sha('c'), 10, 3, sha('c')); !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("evicted %v, want a and b", got)
		}
	})
	t.Run("a broken engine is not used", func(t *testing.T) {
		c := &cache{dir: t.TempDir(), maxEntries: 10, maxBytes: 1 << 30}
		put(t, c, sha('a'), 10, 1)
		p := filepath.Join(c.dir, sha('a')+"-x86-64")
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
		if got := c.lookup(sha('a'), func(string) bool { return true }); got != "" {
			t.Errorf("lookup of a file that does not execute: %q", got)
		}
		if _, err := os.Stat(p); err == nil {
			t.Error("the broken engine was kept")
		}
	})
}

// An engine is used only while its bytes are those recorded when it was added: one changed
// since, or without a record (cached by an older worker), is removed, with its record.
func TestCacheChecksTheEnginesSHA256(t *testing.T) {
	always := func(string) bool { return true }
	for _, tt := range []struct {
		name   string
		change func(t *testing.T, path string)
	}{
		{"its bytes changed", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("#!/bin/sh\necho another engine\n"), 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"its record is gone", func(t *testing.T, path string) {
			if err := os.Remove(sumPath(path)); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &cache{dir: t.TempDir(), maxEntries: 10, maxBytes: 1 << 30}
			put(t, c, sha('a'), 10, 1)
			p := c.lookup(sha('a'), always)
			if p == "" {
				t.Fatal("an engine just added is not used")
			}
			tt.change(t, p)
			if got := c.lookup(sha('a'), always); got != "" {
				t.Errorf("lookup of a changed engine: %q", got)
			}
			if left, _ := os.ReadDir(c.dir); len(left) != 0 {
				t.Errorf("left in the cache: %v", left)
			}
		})
	}
}
