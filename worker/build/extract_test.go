package build

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// tgzOf makes a gzipped tarball of headers, each regular file's body its name.
func tgzOf(t testing.TB, headers ...*tar.Header) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range headers {
		body := []byte(h.Name)
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(body))
		}
		if h.Mode == 0 && h.Typeflag != tar.TypeXGlobalHeader {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write(body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func file(name string) *tar.Header { return &tar.Header{Name: name, Typeflag: tar.TypeReg} }
func dir(name string) *tar.Header  { return &tar.Header{Name: name, Typeflag: tar.TypeDir, Mode: 0o755} }
func link(name, target string) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target}
}

// A tarball that would write outside its tree, or holds what a source tree has no business
// holding, is refused, and nothing lands outside the tree.
func TestExtractRefusesUnsafeArchives(t *testing.T) {
	tests := []struct {
		name    string
		headers []*tar.Header
	}{
		{"a parent directory in a name", []*tar.Header{dir("src/"), file("src/../../evil")}},
		{"a name that starts with ..", []*tar.Header{file("../evil")}},
		{"an absolute name", []*tar.Header{file("/tmp/shoal-evil")}},
		{"a link out of the tree", []*tar.Header{dir("src/"), link("src/out", "../../evil")}},
		{"an absolute link", []*tar.Header{link("etc", "/etc")}},
		{"a link that climbs after a step down", []*tar.Header{dir("a/b/"), link("a/b/up", "../.."), link("x", "a/b/up/..")}},
		{"a link made through a link", []*tar.Header{dir("d/"), link("d/l", ".."), link("d/l/x", "y")}},
		{"a hard link", []*tar.Header{file("a"), {Name: "b", Typeflag: tar.TypeLink, Linkname: "a"}}},
		{"a device", []*tar.Header{{Name: "null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}}},
		{"a fifo", []*tar.Header{{Name: "fifo", Typeflag: tar.TypeFifo}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parent := t.TempDir()
			tree := filepath.Join(parent, "tree")
			if err := os.Mkdir(tree, 0o755); err != nil {
				t.Fatal(err)
			}
			err := extract(tgzOf(t, tt.headers...), tree, sourceLimits)
			if !errors.Is(err, errUnsafe) {
				t.Fatalf("extract: %v, want an unsafe archive refused", err)
			}
			for _, p := range []string{filepath.Join(parent, "evil"), "/tmp/shoal-evil", filepath.Join(parent, "x")} {
				if _, err := os.Lstat(p); err == nil {
					t.Errorf("%s was written outside the tree", p)
				}
			}
		})
	}
}

// The bounds: too many entries, too many bytes.
func TestExtractBounds(t *testing.T) {
	lim := treeLimits{bytes: 20, entries: 3}
	if err := extract(tgzOf(t, dir("a/"), dir("b/"), dir("c/")), t.TempDir(), lim); err != nil {
		t.Errorf("three entries: %v", err)
	}
	if err := extract(tgzOf(t, dir("a/"), dir("b/"), dir("c/"), dir("d/")), t.TempDir(), lim); !errors.Is(err, errUnsafe) || !strings.Contains(err.Error(), "entries") {
		t.Errorf("four entries: %v, want refused", err)
	}
	// Two files of 12 bytes (their names): 24 bytes.
	if err := extract(tgzOf(t, file("twelve-bytes"), file("twelve-other")), t.TempDir(), lim); !errors.Is(err, errUnsafe) || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("24 bytes: %v, want refused", err)
	}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	_ = tw.WriteHeader(&tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: sourceLimits.bytes + 1, Mode: 0o644})
	_ = tw.Flush()
	_ = zw.Flush() // the header alone: the refusal comes before the body is read
	if err := extract(buf.Bytes(), t.TempDir(), sourceLimits); !errors.Is(err, errUnsafe) || !strings.Contains(err.Error(), "bytes") {
		t.Errorf("a file over the bound: %v, want refused", err)
	}
}

// A git archive's tree: directories, files (executable ones stay executable), relative links
// inside the tree, the pax header of the commit skipped.
func TestExtractSourceTree(t *testing.T) {
	tree := t.TempDir()
	headers := []*tar.Header{
		{Name: "pax_global_header", Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"comment": "4901218d4cc31658942486ccd1dbadf2d2df783a"}},
		dir("src/"), file("src/main.cpp"), {Name: "src/run.sh", Typeflag: tar.TypeReg, Mode: 0o775},
		link("src/main.link", "main.cpp"), dir("scripts/"), link("scripts/src", "../src"), file("README.md"),
	}
	if err := extract(tgzOf(t, headers...), tree, sourceLimits); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(tree, "scripts", "src", "main.link"))
	if err != nil || string(data) != "src/main.cpp" {
		t.Errorf("through the links: %q, %v", data, err)
	}
	info, err := os.Stat(filepath.Join(tree, "src", "run.sh"))
	if err != nil || info.Mode().Perm() != 0o755 {
		t.Errorf("run.sh: %v, %v; want mode 0755", info, err)
	}
	if _, err := os.Lstat(filepath.Join(tree, "pax_global_header")); err == nil {
		t.Error("the pax header became a file")
	}
}

// Whatever the server sends, extract writes nothing outside its tree and does not panic.
func FuzzExtract(f *testing.F) {
	for _, seed := range [][]*tar.Header{
		{dir("src/"), file("src/main.cpp"), link("src/l", "main.cpp")},
		{file("../evil")},
		{dir("a/b/"), link("a/b/up", "../.."), link("x", "a/b/up/..")},
	} {
		f.Add(tgzOf(f, seed...))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		parent := t.TempDir()
		tree := filepath.Join(parent, "tree")
		if err := os.Mkdir(tree, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = extract(data, tree, treeLimits{bytes: 1 << 20, entries: 1000})
		des, err := os.ReadDir(parent)
		if err != nil || len(des) != 1 || des[0].Name() != "tree" {
			t.Fatalf("outside the tree: %v, %v", des, err)
		}
	})
}
