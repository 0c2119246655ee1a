package runs

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/gitmirror"
	"github.com/shoal-chess/shoal/rundb"
)

// A run's page shows its patch as a reviewer reads it, from the server's mirror of the
// repository: the files changed with their counts, then each file's hunks, from the merge base of
// base and new to new. Long diffs start folded (<details>, no script needed). The mirror also
// says what fishtest asks GitHub about: whether the signatures match the commits' "Bench:" lines
// and how base stands to new and to the default branch. Nothing is fetched for a page: what the
// mirror lacks is said, not looked up.

// Folding: a file with more lines than patchFoldFile starts closed, and every file does once the
// whole diff has more than patchFoldAll lines.
const (
	patchFoldFile = 200
	patchFoldAll  = 1000
)

// patchTimeout bounds the git commands of a page whose diff is not cached yet.
const patchTimeout = 10 * time.Second

// viewPatch is a run's patch as its page shows it.
type viewPatch struct {
	// Err says why there is no diff ("" when there is one).
	Err   string
	Diff  *gitmirror.Diff
	Files []viewPatchFile
	// ForgeURL is the forge's compare page, for GitHub repositories.
	ForgeURL string
	// NotGitHub: the repository is not on GitHub, so only Shoal's worker (which gets the
	// sources from this server) can play the run; fishtest's downloads them from GitHub.
	NotGitHub bool
	// Base and New are the commits as the mirror has them, nil when it does not.
	Base, New *gitmirror.Commit
}

// viewPatchFile is one file of a patch.
type viewPatchFile struct {
	*gitmirror.FileDiff
	ID    string // the anchor of its hunks
	Lines int    // lines of its hunks
	Open  bool   // its hunks start unfolded
}

// hasPatch reports whether r's page has a patch card: this server keeps mirrors and r names both
// commits.
func (s *Server) hasPatch(r *rundb.Run) bool {
	return s.deps.Sources != nil && r.Args.ResolvedBase != "" && r.Args.ResolvedNew != "" && r.Args.TestsRepo != ""
}

// patchOf reads r's patch and the repository's warnings about its commits from the mirror.
func (s *Server) patchOf(ctx context.Context, r *rundb.Run) (viewPatch, []string) {
	a := r.Args
	p := viewPatch{NotGitHub: !gitmirror.IsGitHub(a.TestsRepo)}
	if !p.NotGitHub {
		p.ForgeURL = fmt.Sprintf("%s/compare/%s...%s", strings.TrimSuffix(a.TestsRepo, ".git"), runsClip10(a.ResolvedBase), runsClip10(a.ResolvedNew))
	}
	ctx, cancel := context.WithTimeout(ctx, patchTimeout)
	defer cancel()
	src := s.deps.Sources
	var missing []string
	for _, c := range []struct {
		sha string
		dst **gitmirror.Commit
	}{{a.ResolvedNew, &p.New}, {a.ResolvedBase, &p.Base}} {
		commit, err := src.Commit(ctx, a.TestsRepo, c.sha)
		if err != nil {
			missing = append(missing, runsClip10(c.sha))
			continue
		}
		*c.dst = &commit
	}
	if len(missing) > 0 {
		p.Err = fmt.Sprintf("The server's mirror of %s does not hold commit %s, so the patch cannot be shown.",
			a.TestsRepo, strings.Join(missing, " nor "))
		return p, nil
	}
	d, err := src.Diff(ctx, a.TestsRepo, a.ResolvedBase, a.ResolvedNew)
	if err != nil {
		// The details (git's words, paths on the server) are for the log, not for visitors.
		s.logger.Warn("diff of a run", "run", r.ID, "repo", a.TestsRepo, "err", err)
		p.Err = "The patch cannot be shown now; the server's log says why."
	} else {
		p.Diff = d
		p.Files = patchFiles(d)
	}
	return p, s.sourceWarnings(ctx, r, p)
}

// patchFiles lays out a diff's files, folding the long ones.
func patchFiles(d *gitmirror.Diff) []viewPatchFile {
	total := 0
	files := make([]viewPatchFile, len(d.Files))
	for i := range d.Files {
		f := &d.Files[i]
		n := 0
		for _, h := range f.Hunks {
			n += len(h.Lines)
		}
		total += n
		files[i] = viewPatchFile{FileDiff: f, ID: fmt.Sprintf("patch-file-%d", i+1), Lines: n, Open: n <= patchFoldFile}
	}
	if total > patchFoldAll {
		for i := range files {
			files[i].Open = false
		}
	}
	return files
}

// sourceWarnings are fishtest's warnings about a run's commits, from the mirror: a signature that
// is not its commit's "Bench:" number, and a base that is not where a patch should start (an
// ancestor of the default branch, an ancestor of new, their latest common ancestor); a run whose
// new commit is already in the default branch gets none of the latter, nor an SPSA run. A patch
// with binary files is warned of too.
func (s *Server) sourceWarnings(ctx context.Context, r *rundb.Run, p viewPatch) []string {
	// A file git reads as binary (a NUL byte in a .cpp compiles) hides its changes from a
	// reviewer: said first.
	a := r.Args
	var w []string
	for _, side := range []struct {
		what, signature string
		c               *gitmirror.Commit
	}{{"test", a.NewSignature, p.New}, {"base", a.BaseSignature, p.Base}} {
		if side.c == nil || side.c.Bench == "" || side.c.Bench == side.signature || a.SPSA != nil && side.what == "base" {
			continue
		}
		w = append(w, fmt.Sprintf("the %s signature %s is not the bench of its commit, whose message says Bench: %s",
			side.what, side.signature, side.c.Bench))
	}
	if p.Diff != nil {
		var binary []string
		for _, f := range p.Diff.Files {
			if f.Binary {
				binary = append(binary, f.Path)
			}
		}
		if len(binary) > 0 {
			w = append(w, fmt.Sprintf("the patch changes %s that git reads as binary, whose changes are not shown: %s",
				plural(len(binary), "file"), strings.Join(binary, ", ")))
		}
	}
	if a.SPSA != nil {
		return w
	}
	rel, err := s.deps.Sources.Relation(ctx, a.TestsRepo, a.ResolvedBase, a.ResolvedNew)
	if err != nil {
		if !errors.Is(err, gitmirror.ErrUnknownRef) {
			s.logger.Warn("relation of a run's commits", "run", r.ID, "err", err)
		}
		return w
	}
	head := rel.Head
	if head == "" {
		head = "the default branch"
	}
	switch {
	case rel.NewInHead:
	case !rel.BaseInHead:
		w = append(w, fmt.Sprintf("base is not an ancestor of %s", head))
	case !rel.BaseIsAncestor:
		w = append(w, "base is not an ancestor of new")
	case rel.HeadMergeBase != a.ResolvedBase:
		w = append(w, fmt.Sprintf("base is not the latest common ancestor of new and %s", head))
	}
	return w
}
