package gitmirror

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// numbered is the lines first..last, one number a line.
func numbered(first, last int) string {
	var b strings.Builder
	for i := first; i <= last; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

func TestDiff(t *testing.T) {
	up := newUpstream(t)
	up.write("keep.txt", numbered(1, 30))
	up.write("old.txt", "gone\n")
	up.write("ren.txt", numbered(100, 110))
	up.write("bin.dat", "\x00\x01\x02binary")
	up.write("nonl.txt", "a\nb")
	up.write("sp ace.txt", "x\n")
	up.write("t\tab.txt", "1\n")
	fork := up.commit("fork point")
	// The base moved on in a file the patch does not touch: the diff must not show it.
	up.git("checkout", "-q", "-b", "base")
	up.write("other.txt", "only on base\n")
	base := up.commit("base moves on")
	up.git("checkout", "-q", "-b", "patch", fork)
	up.write("keep.txt", strings.Replace(strings.Replace(numbered(1, 30), "\n3\n", "\nthree\n", 1), "\n25\n", "\ntwenty-five\n", 1))
	up.git("rm", "-q", "old.txt")
	up.git("mv", "ren.txt", "moved.txt")
	up.write("bin.dat", "\x00\x01\x03binary")
	up.write("nonl.txt", "a\nc")
	up.write("added.txt", "x\ny\n")
	up.write("sp ace.txt", "y\n")
	up.write("t\tab.txt", "2\n")
	patch := up.commit("the patch")
	m := newTestMirrors(t, Config{Allowed: []string{up.dir}})
	ctx := testCtx(t)
	if _, err := m.Resolve(ctx, up.dir, "patch"); err != nil {
		t.Fatal(err)
	}

	d, err := m.Diff(ctx, up.dir, base, patch)
	if err != nil {
		t.Fatal(err)
	}
	ctx1 := func(n int) Line { return Line{Op: ' ', Old: n, New: n, Text: fmt.Sprint(n)} }
	want := &Diff{
		Base: base, MergeBase: fork, New: patch, Added: 7, Removed: 6,
		Files: []FileDiff{
			{Path: "added.txt", Status: "added", Added: 2, Hunks: []Hunk{{
				Header: "@@ -0,0 +1,2 @@",
				Lines:  []Line{{Op: '+', New: 1, Text: "x"}, {Op: '+', New: 2, Text: "y"}},
			}}},
			{Path: "bin.dat", Status: "modified", Binary: true},
			{Path: "keep.txt", Status: "modified", Added: 2, Removed: 2, Hunks: []Hunk{
				{Header: "@@ -1,6 +1,6 @@", Lines: []Line{
					ctx1(1), ctx1(2), {Op: '-', Old: 3, Text: "3"}, {Op: '+', New: 3, Text: "three"},
					ctx1(4), ctx1(5), ctx1(6),
				}},
				{Header: "@@ -22,7 +22,7 @@", Lines: []Line{
					ctx1(22), ctx1(23), ctx1(24), {Op: '-', Old: 25, Text: "25"}, {Op: '+', New: 25, Text: "twenty-five"},
					ctx1(26), ctx1(27), ctx1(28),
				}},
			}},
			{Path: "moved.txt", OldPath: "ren.txt", Status: "renamed"},
			{Path: "nonl.txt", Status: "modified", Added: 1, Removed: 1, Hunks: []Hunk{{
				Header: "@@ -1,2 +1,2 @@",
				Lines: []Line{
					{Op: ' ', Old: 1, New: 1, Text: "a"},
					{Op: '-', Old: 2, Text: "b"},
					{Op: '\\', Text: "No newline at end of file"},
					{Op: '+', New: 2, Text: "c"},
					{Op: '\\', Text: "No newline at end of file"},
				},
			}}},
			{Path: "old.txt", Status: "deleted", Removed: 1, Hunks: []Hunk{{
				Header: "@@ -1 +0,0 @@",
				Lines:  []Line{{Op: '-', Old: 1, Text: "gone"}},
			}}},
			{Path: "sp ace.txt", Status: "modified", Added: 1, Removed: 1, Hunks: []Hunk{{
				Header: "@@ -1 +1 @@",
				Lines:  []Line{{Op: '-', Old: 1, Text: "x"}, {Op: '+', New: 1, Text: "y"}},
			}}},
			{Path: "t\tab.txt", Status: "modified", Added: 1, Removed: 1, Hunks: []Hunk{{
				Header: "@@ -1 +1 @@",
				Lines:  []Line{{Op: '-', Old: 1, Text: "1"}, {Op: '+', New: 1, Text: "2"}},
			}}},
		},
	}
	if !reflect.DeepEqual(d, want) {
		t.Errorf("Diff =\n%s\nwant\n%s", dumpDiff(d), dumpDiff(want))
	}
	again, err := m.Diff(ctx, up.dir, base, patch)
	if err != nil || again != d {
		t.Errorf("second Diff = %p, %v; want the cached %p", again, err, d)
	}
}

// dumpDiff prints a diff for a failure message.
func dumpDiff(d *Diff) string {
	var b strings.Builder
	fmt.Fprintf(&b, "base %.7s mb %.7s new %.7s +%d -%d truncated %v\n", d.Base, d.MergeBase, d.New, d.Added, d.Removed, d.Truncated)
	for _, f := range d.Files {
		fmt.Fprintf(&b, "  %q old %q %s +%d -%d bin %v trunc %v\n", f.Path, f.OldPath, f.Status, f.Added, f.Removed, f.Binary, f.Truncated)
		for _, h := range f.Hunks {
			fmt.Fprintf(&b, "    %s\n", h.Header)
			for _, l := range h.Lines {
				fmt.Fprintf(&b, "      %c %d %d %q\n", l.Op, l.Old, l.New, l.Text)
			}
		}
	}
	return b.String()
}

func TestDiffLimits(t *testing.T) {
	up := newUpstream(t)
	up.write("README", "r\n")
	base := up.commit("base")
	const smallFiles = maxDiffFiles + 10
	if err := os.Mkdir(filepath.Join(up.dir, "f"), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range smallFiles {
		if err := os.WriteFile(filepath.Join(up.dir, fmt.Sprintf("f/%03d.txt", i)), []byte("one line\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	up.git("add", "f")
	up.write("a-long.txt", strings.Repeat("é", maxDiffLineBytes)+"\n")
	up.write("zz-huge.txt", numbered(1, maxDiffLines+5000))
	patch := up.commit("huge")
	m := newTestMirrors(t, Config{Allowed: []string{up.dir}})
	ctx := testCtx(t)
	if _, err := m.Resolve(ctx, up.dir, "master"); err != nil {
		t.Fatal(err)
	}
	d, err := m.Diff(ctx, up.dir, base, patch)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Truncated {
		t.Error("Diff.Truncated is false")
	}
	if len(d.Files) != smallFiles+2 {
		t.Fatalf("%d files, want every one of %d listed", len(d.Files), smallFiles+2)
	}
	if d.Added != smallFiles+1+maxDiffLines+5000 {
		t.Errorf("Added = %d, want %d", d.Added, smallFiles+1+maxDiffLines+5000)
	}
	withHunks, lines := 0, 0
	for _, f := range d.Files {
		if f.Added == 0 {
			t.Errorf("%s lost its count", f.Path)
		}
		if len(f.Hunks) > 0 {
			withHunks++
		} else if !f.Truncated {
			t.Errorf("%s has no hunks and is not marked truncated", f.Path)
		}
		for _, h := range f.Hunks {
			lines += len(h.Lines)
			for _, l := range h.Lines {
				if len(l.Text) > maxDiffLineBytes {
					t.Errorf("%s: a line of %d bytes", f.Path, len(l.Text))
				}
			}
		}
	}
	if withHunks > maxDiffFiles || lines > maxDiffLines {
		t.Errorf("%d files with hunks and %d lines, past the limits %d and %d", withHunks, lines, maxDiffFiles, maxDiffLines)
	}
	long := d.Files[0]
	if long.Path != "a-long.txt" || !long.Truncated || len(long.Hunks) != 1 || len(long.Hunks[0].Lines[0].Text) != maxDiffLineBytes {
		t.Errorf("long.txt = %+v truncated %v, want its one line cut to %d bytes", long.Path, long.Truncated, maxDiffLineBytes)
	}
}

func TestDiffOutputCut(t *testing.T) {
	patch := "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1,2 +1,2 @@\n 1\n-2\n+two\n" +
		"diff --git a/b b/b\n--- a/b\n+++ b/b\n@@ -1,3 +1,3 @@\n 1\n-2\n+tw"
	d := &Diff{Files: []FileDiff{
		{Path: "a", Status: "modified", Added: 1, Removed: 1},
		{Path: "b", Status: "modified", Added: 1, Removed: 1},
		{Path: "c", Status: "modified", Added: 1, Removed: 1},
	}}
	addHunks(d, []byte(patch), true)
	if !d.Truncated || d.Files[0].Truncated || !d.Files[1].Truncated || !d.Files[2].Truncated {
		t.Errorf("truncated: diff %v, files %v %v %v; want true, false, true, true",
			d.Truncated, d.Files[0].Truncated, d.Files[1].Truncated, d.Files[2].Truncated)
	}
	if n := len(d.Files[1].Hunks[0].Lines); n != 2 {
		t.Errorf("b kept %d lines, want the 2 before the cut", n)
	}
}

func TestUnquoteName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", "plain"},
		{`"a\tb"`, "a\tb"},
		{`"q\"uote\\"`, `q"uote\`},
		{`"\303\251t\303\251"`, "été"},
		{`"new\nline"`, "new\nline"},
	}
	for _, tt := range tests {
		if got := unquoteName(tt.in); got != tt.want {
			t.Errorf("unquoteName(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestSplitGitLine(t *testing.T) {
	tests := []struct{ in, a, b string }{
		{"a/x b/x", "x", "x"},
		{"a/sp ace b/sp ace", "sp ace", "sp ace"},
		{`"a/t\tb" "b/t\tb"`, "t\tb", "t\tb"},
		{"a/old b/new", "old", "new"},
	}
	for _, tt := range tests {
		if a, b := splitGitLine(tt.in); a != tt.a || b != tt.b {
			t.Errorf("splitGitLine(%q) = %q, %q; want %q, %q", tt.in, a, b, tt.a, tt.b)
		}
	}
}

// FuzzAddHunks feeds the patch parser anything: what git prints is made of what a repository's
// owner committed.
func FuzzAddHunks(f *testing.F) {
	f.Add([]byte("diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1,2 +1,2 @@\n 1\n-2\n+two\n\\ No newline at end of file\n"), false)
	f.Add([]byte("diff --git \"a/x\\ty\" \"b/x\\ty\"\n@@ -0,0 +1 @@\n+x\n"), true)
	f.Add([]byte("@@ -1,-5 +1 @@\n-\n"), false)
	f.Fuzz(func(t *testing.T, patch []byte, cut bool) {
		d := &Diff{Files: []FileDiff{{Path: "a", Added: 1}, {Path: "x\ty", Added: 1}}}
		addHunks(d, patch, cut)
		for _, f := range d.Files {
			for _, h := range f.Hunks {
				for _, l := range h.Lines {
					if len(l.Text) > maxDiffLineBytes {
						t.Fatalf("a line of %d bytes", len(l.Text))
					}
				}
			}
		}
	})
}
