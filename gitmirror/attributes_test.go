package gitmirror

import (
	"archive/tar"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// tarEntry is what a test reads of one entry of an archive.
type tarEntry struct {
	typ  byte
	mode int64
	body string // a file's content, a link's target
}

func readArchive(t *testing.T, r io.Reader) map[string]tarEntry {
	t.Helper()
	zr, err := gzip.NewReader(r)
	if err != nil {
		t.Fatalf("gzip: %v", err)
	}
	tr := tar.NewReader(zr)
	got := map[string]tarEntry{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return got
		}
		if err != nil {
			t.Fatalf("tar: %v", err)
		}
		b, _ := io.ReadAll(tr)
		e := tarEntry{typ: h.Typeflag, mode: h.Mode, body: string(b)}
		if h.Typeflag == tar.TypeSymlink {
			e.body = h.Linkname
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: uid %d gid %d, want 0", h.Name, h.Uid, h.Gid)
		}
		got[h.Name] = e
	}
}

// What a repository's .gitattributes say (export-ignore, export-subst) changes nothing of its
// archive.
func TestArchiveIgnoresAttributes(t *testing.T) {
	up := newUpstream(t)
	files := map[string]string{
		".gitattributes": "* export-ignore\n*.txt export-subst\n",
		"version.txt":    "commit $Format:%H$\n",
		"src/main.cpp":   "int main() {}\n",
	}
	for p, c := range files {
		up.write(p, c)
	}
	up.write("build.sh", "#!/bin/sh\nmake\n")
	if err := os.Chmod(filepath.Join(up.dir, "build.sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	up.git("add", "build.sh")
	if err := os.Symlink("src/main.cpp", filepath.Join(up.dir, "main-link.cpp")); err != nil {
		t.Fatal(err)
	}
	up.git("add", "main-link.cpp")
	sha := up.commit("attributes")
	m := newTestMirrors(t, Config{Allowed: []string{up.dir}})
	ctx := testCtx(t)
	if _, err := m.Resolve(ctx, up.dir, "master"); err != nil {
		t.Fatal(err)
	}
	a, err := m.Archive(ctx, up.dir, sha)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	want := map[string]tarEntry{
		".gitattributes": {tar.TypeReg, 0o644, files[".gitattributes"]},
		"version.txt":    {tar.TypeReg, 0o644, files["version.txt"]},
		"src/main.cpp":   {tar.TypeReg, 0o644, files["src/main.cpp"]},
		"build.sh":       {tar.TypeReg, 0o755, "#!/bin/sh\nmake\n"},
		"main-link.cpp":  {tar.TypeSymlink, 0o777, "src/main.cpp"},
	}
	if got := readArchive(t, a); !reflect.DeepEqual(got, want) {
		t.Errorf("archive holds\n%v\nwant\n%v", got, want)
	}
	if _, err := a.Seek(0, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	zr, _ := gzip.NewReader(a)
	h, err := tar.NewReader(zr).Next()
	if err != nil || !h.ModTime.Equal(time.Unix(1700000100, 0)) {
		t.Errorf("first entry's time %v, %v; want the committer's, %v", h.ModTime, err, time.Unix(1700000100, 0))
	}
}

// A repository's attributes do not make its sources binary to the diff, nor does a file of
// attributes in the mirrors' home; a file with a NUL byte is binary all the same.
func TestDiffIgnoresAttributes(t *testing.T) {
	up := newUpstream(t)
	up.write(".gitattributes", "*.cpp -diff\n")
	up.write("src/search.cpp", "int a;\n")
	up.write("src/nul.cpp", "int a;\n")
	base := up.commit("base")
	up.write("src/search.cpp", "int a;\nint b;\n")
	up.write("src/nul.cpp", "int a;\x00\n")
	patch := up.commit("patch")
	bare := filepath.Join(t.TempDir(), "up.git")
	gitT(t, up.dir, "clone", "-q", "--bare", up.dir, bare)
	m := newTestMirrors(t, Config{Allowed: []string{bare}})
	home := filepath.Join(m.cfg.Dir, ".home", "git")
	if err := os.MkdirAll(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, "attributes"), []byte("*.cpp -diff\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := testCtx(t)
	if _, err := m.Resolve(ctx, bare, "master"); err != nil {
		t.Fatal(err)
	}
	d, err := m.Diff(ctx, bare, base, patch)
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]FileDiff{}
	for _, f := range d.Files {
		byPath[f.Path] = f
	}
	if f := byPath["src/search.cpp"]; f.Binary || f.Added != 1 || len(f.Hunks) != 1 {
		t.Errorf("src/search.cpp: binary %v, +%d, %d hunks; want a text diff of one added line", f.Binary, f.Added, len(f.Hunks))
	}
	if f := byPath["src/nul.cpp"]; !f.Binary {
		t.Errorf("src/nul.cpp with a NUL byte is not binary: %+v", f)
	}
	if !strings.Contains(strings.Join(m.config, " "), "attr.tree="+emptyTree) {
		t.Errorf("git's configuration %v lacks attr.tree", m.config)
	}
}
