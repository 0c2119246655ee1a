// Package gitmirror keeps bare mirrors of engine repositories on the server, so that Shoal
// answers every question about commits without any forge's API: a ref resolved to its commit,
// the commit's message and bench signature, ancestry, the diff a reviewer reads, a file of a
// commit, and the source archive the workers build from.
//
// It runs the git command (see the README for why, measured against go-git); nothing from a URL
// or a ref reaches git as an option. The package imports nothing of Shoal's but filelock.
package gitmirror

import (
	"errors"
	"log/slog"
	"os"
	"strings"
	"time"
)

// Config is what an operator sets (or a test) for the mirrors. A zero field takes its default:
// FetchTimeout 10 minutes, MaxBytes 2 GiB, MaxRepos 1000, RefetchAfter 1 minute,
// ArchiveCacheBytes 1 GiB, Git "git".
//
// git runs with an environment of its own: PATH, and from the server's environment the proxy
// variables HTTPS_PROXY, HTTP_PROXY, ALL_PROXY and NO_PROXY (each in upper and lower case) when
// set, so that a server behind an egress proxy fetches through it; nothing else of the
// server's environment, nor any user's or system git configuration.
type Config struct {
	// Dir holds the mirrors and the archive cache (the server's data_dir/repos). Several
	// Mirrors (server instances sharing a data_dir: a primary, a standby, secondaries) may
	// open one Dir. The first to write there (fetch, keep, make an archive) takes an exclusive
	// lock on the file shoal-mirrors.lock in Dir and is the one writer until it closes or its
	// process ends; it then removes what an interrupted writer left and lists the archive
	// cache. The others read what the mirrors and the cache hold, and their writes fail with
	// ErrReadOnly; each write tries the lock again, so a standby becomes the writer once the
	// primary is gone. The lock is flock(2), between processes of one machine; where there is
	// no flock (not Linux, macOS or a BSD) there is no lock either, and only one Mirrors may
	// open a Dir. Nothing else may write in Dir.
	Dir string
	// Allowed are the repositories that may be mirrored: https:// URL prefixes, matched at a
	// path boundary ("https://github.com/" admits every GitHub repository), and absolute local
	// paths, each admitting that repository only. GitHub owner and repository names are
	// matched and mirrored without regard to case, as GitHub answers for them: one mirror,
	// named in lower case (a mirror made under another case is renamed so by the writer).
	Allowed []string
	// FetchTimeout bounds one fetch.
	FetchTimeout time.Duration
	// MaxBytes bounds one repository's mirror on disk. A first fetch that would grow it past
	// this is stopped and leaves no mirror; a later fetch that would is stopped or undone, and
	// leaves the mirror as it was: its refs, and its files but for the objects of a commit kept
	// (Keep) during that fetch. Either fails with ErrTooLarge, and so does every fetch of a
	// mirror already past it.
	MaxBytes int64
	// MaxRepos bounds the repositories mirrored in Dir: the first fetch of one more is refused
	// with ErrTooLarge.
	MaxRepos int
	// RefetchAfter is the least time between two fetches of one repository.
	RefetchAfter time.Duration
	// ArchiveCacheBytes bounds the source archives kept on disk, least recently used out.
	ArchiveCacheBytes int64
	// CAFile, if set, is a PEM file of certificate authorities https fetches also trust.
	CAFile string
	// Git is the git binary; "" means "git" on PATH.
	Git string
	// Logger may be nil.
	Logger *slog.Logger
}

// Errors. Each error the package returns wraps one of these, with the repository and the reason
// in its text, which is meant for the person who asked.
var (
	// ErrNotAllowed: the repository is not one the operator allows, or its URL is not an
	// https:// URL (or a listed path) of the plain shape allowed.
	ErrNotAllowed = errors.New("repository not allowed")
	// ErrUnreachable: the repository could not be fetched (refused, timed out, redirected, not a
	// git repository, objects that fail git's checks), or not now: 16 fetches already wait for
	// one of the two that run at once, or another instance writes the mirrors (ErrReadOnly).
	ErrUnreachable = errors.New("repository not reachable")
	// ErrReadOnly: another instance holds Dir's lock (see Config.Dir), so this one reads the
	// mirrors only and did not fetch, keep or make an archive. An error that is ErrReadOnly
	// (errors.Is) is ErrUnreachable too.
	ErrReadOnly = errors.New("another instance holds the mirrors; this one reads them only")
	// ErrTooLarge: the repository grew past Config.MaxBytes, or it would be one more than
	// Config.MaxRepos.
	ErrTooLarge = errors.New("repository too large")
	// ErrBadRef: a ref that is neither a branch or tag name nor a (short) SHA.
	ErrBadRef = errors.New("not a branch, tag or commit")
	// ErrUnknownRef: no such branch, tag or commit in the repository (after a fetch, where one
	// was allowed).
	ErrUnknownRef = errors.New("no such branch, tag or commit")
)

// Commit is one commit as the mirror has it.
type Commit struct {
	SHA    string // 40 lower-case hex digits
	Author string
	Email  string
	Date   time.Time // the author's date
	// Message is the whole commit message, its trailing space trimmed.
	Message string
	// Bench is the number on the message's last "Bench: N" line (fishtest's rule, any number
	// of digits), "" when there is none.
	Bench string
}

// Subject is the message's first line, trimmed: what fishtest keeps as msg_new and msg_base.
func (c Commit) Subject() string {
	line, _, _ := strings.Cut(c.Message, "\n")
	return strings.TrimSpace(line)
}

// Relation is how two commits of a run stand to each other and to the repository's default
// branch (its HEAD on the forge, "master" for Stockfish).
type Relation struct {
	// MergeBase is the latest common ancestor of base and new, "" if they have none.
	MergeBase string
	// BaseIsAncestor: base is an ancestor of new (or new itself).
	BaseIsAncestor bool
	// Head is the default branch's name and HeadSHA its tip, as of the last fetch.
	Head, HeadSHA string
	// NewInHead: new is already in the default branch.
	NewInHead bool
	// BaseInHead: base is in the default branch.
	BaseInHead bool
	// HeadMergeBase is the latest common ancestor of the default branch and new.
	HeadMergeBase string
}

// Diff is what a reviewer of a patch reads: from the merge base of base and new to new.
type Diff struct {
	Base, MergeBase, New string
	Files                []FileDiff
	// Added and Removed are the lines over all files (binary files count none).
	Added, Removed int
	// Truncated: files or lines were left out past the limits; Files still lists every file
	// with its counts.
	Truncated bool
}

// FileDiff is one file of a Diff.
type FileDiff struct {
	Path    string // the path in new (in base for a deleted file)
	OldPath string // the path in base when the file was renamed or copied, else ""
	Status  string // "added", "deleted", "renamed", "copied" or "modified"
	Added   int
	Removed int
	Binary  bool
	Hunks   []Hunk
	// Truncated: this file's hunks were left out or cut short past the limits.
	Truncated bool
}

// Hunk is one "@@" section of a file's diff.
type Hunk struct {
	Header string // the whole "@@ -a,b +c,d @@ context" line
	Lines  []Line
}

// Line is one line of a hunk.
type Line struct {
	Op       byte // ' ' (context), '+' (added), '-' (removed) or '\\' ("\ No newline at end of file")
	Old, New int  // line numbers on each side, 0 where the line is not on that side
	Text     string
}

// Archive is a cached source archive, open for reading: a gzipped tarball of the commit's tree
// (no leading directory), made by the package itself, not by `git archive`, so that no
// attribute of the repository (export-ignore, export-subst) changes it. It holds every regular
// file (mode 0644, or 0755 when executable) and symbolic link of the tree under its path in the
// tree, owned by uid and gid 0, dated with the commit's committer time; no directories, no
// submodules, and none of the paths git refuses to check out (a ".." or ".git" component).
// The caller closes it; eviction from the cache never spoils an open one.
type Archive struct {
	*os.File
	Size   int64
	SHA256 string // lower-case hex of the whole file
}
