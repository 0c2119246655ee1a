package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/shoal-chess/shoal/gitmirror"
	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/rundb"
)

// A run names its engines by branch (or tag, or commit) in its repository; the server's mirror
// of the repository (gitmirror) turns the names into commits, and fills what fishtest's form
// fills from GitHub: the commits' SHAs, their first lines, the bench signatures from the last
// "Bench:" line of the messages, the description from the new commit's message and the
// networks the sources name.

// maxSourceFile bounds what is read of a source file to find the networks it names.
const maxSourceFile = 1 << 20

// side is one engine of a run request, by the request's own fields and their JSON names.
type side struct {
	tag, resolved, msg, signature *string
	nets                          *[]string
	tagField, shaField, sigField  string
}

// PrepareRun completes a run request from the repository it names, before CreateRun stores it.
// It may fetch the repository, so it runs outside any database token, and never on the worker
// path.
//
// An engine given by name alone (new_tag, base_tag without resolved_new, resolved_base) is
// resolved in the mirror: its commit, the commit's first line, and, when not given, its bench
// signature (the message's last "Bench: N" line); the description, when empty, comes from the
// new commit's message, and the networks, when not listed, from its sources. Such a request needs
// the repository: a repository not allowed or not reachable, an unknown branch, or a commit with
// no "Bench:" line and no signature given is a *FieldError naming the field. An engine given by
// commit (fishtest's clients) is taken as given: the mirror only fills what was left empty,
// when it can be reached; what it finds wrong (another bench, a base that is not an ancestor) is
// shown on the run's page as a warning, not refused.
//
// CreateRun then makes the mirror keep the stored run's commits for good. Errors other than a
// *FieldError are the caller's context ending.
func (s *Scheduler) PrepareRun(ctx context.Context, req protocol.RunRequest) (protocol.RunRequest, error) {
	repo := strings.TrimSuffix(strings.TrimSpace(req.TestsRepo), "/")
	req.TestsRepo = repo
	if repo == "" {
		return req, fieldErr("tests_repo", "missing: give the engine's repository, such as https://github.com/USER/Stockfish")
	}
	sides := []side{
		{&req.NewTag, &req.ResolvedNew, &req.MsgNew, &req.NewSignature, &req.NewNets, "new_tag", "resolved_new", "new_signature"},
		{&req.BaseTag, &req.ResolvedBase, &req.MsgBase, &req.BaseSignature, &req.BaseNets, "base_tag", "resolved_base", "base_signature"},
	}
	mirrors := s.cfg.Sources
	if mirrors == nil {
		for _, sd := range sides {
			if *sd.resolved == "" {
				return req, fieldErr(sd.shaField, "missing: this server reads no repositories, so give the commit SHA of %q", *sd.tag)
			}
		}
		return req, nil
	}
	if err := mirrors.Check(repo); err != nil {
		return req, repoFieldError(err)
	}
	var commits [2]*gitmirror.Commit
	for i, sd := range sides {
		c, err := s.resolveSide(ctx, repo, sd, req.SPSA != nil && i == 1)
		if err != nil {
			return req, err
		}
		commits[i] = c
	}
	if newCommit := commits[0]; newCommit != nil && strings.TrimSpace(req.Info) == "" {
		req.Info = infoFromMessage(newCommit.Message)
	}
	for i, sd := range sides {
		if commits[i] == nil || len(*sd.nets) > 0 {
			continue
		}
		nets, err := s.netsOf(ctx, repo, commits[i].SHA)
		if err != nil {
			return req, err
		}
		*sd.nets = nets
	}
	return req, ctx.Err()
}

// keepCommits makes the mirror keep a stored run's commits for good (gitmirror.Keep). A
// failure is logged: the run can be played without it, and only a force-push upstream could
// then lose its commits, which its page would say.
func (s *Scheduler) keepCommits(ctx context.Context, args rundb.RunArgs) {
	if s.cfg.Sources == nil {
		return
	}
	shas := []string{args.ResolvedNew}
	if args.ResolvedBase != args.ResolvedNew {
		shas = append(shas, args.ResolvedBase)
	}
	if err := s.cfg.Sources.Keep(ctx, args.TestsRepo, shas...); err != nil {
		s.logger.Warn("keep a run's commits in the mirror", "repo", args.TestsRepo, "commits", shas, "err", err)
	}
}

// resolveSide fills one engine of a request from the mirror and returns its commit, or nil when
// the engine was given by commit and the mirror cannot tell about it. baseOfSPSA: the base of an
// SPSA run, whose signature is the new engine's (BuildRun), so none is needed here.
func (s *Scheduler) resolveSide(ctx context.Context, repo string, sd side, baseOfSPSA bool) (*gitmirror.Commit, error) {
	mirrors := s.cfg.Sources
	byName := *sd.resolved == ""
	if byName {
		if strings.TrimSpace(*sd.tag) == "" {
			return nil, fieldErr(sd.tagField, "missing: give the branch name")
		}
		c, err := mirrors.Resolve(ctx, repo, strings.TrimSpace(*sd.tag))
		if err != nil {
			return nil, refFieldError(sd.tagField, *sd.tag, repo, err)
		}
		*sd.resolved = c.SHA
		*sd.msg = c.Subject()
		if *sd.signature == "" && !baseOfSPSA {
			if c.Bench == "" {
				return nil, fieldErr(sd.sigField, "commit %s (%s) has no \"Bench: N\" line in its message: give its bench signature",
					short(c.SHA), *sd.tag)
			}
			*sd.signature = c.Bench
		}
		return &c, nil
	}
	// Given by commit: checked and completed when the mirror can tell, accepted as given
	// otherwise.
	if !shaPattern.MatchString(*sd.resolved) {
		return nil, nil // BuildRun says what is wrong with it
	}
	c, err := mirrors.Resolve(ctx, repo, *sd.resolved)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		s.logger.Info("a run's commit could not be checked in its repository", "repo", repo, "commit", *sd.resolved, "err", err)
		return nil, nil
	}
	if *sd.msg == "" {
		*sd.msg = c.Subject()
	}
	if *sd.signature == "" && !baseOfSPSA {
		*sd.signature = c.Bench
	}
	return &c, nil
}

// netsOf lists the networks the sources of commit sha name (protocol.NetsInSource):
// src/evaluate.h's, or, for sources older than those, src/ucioption.cpp's.
func (s *Scheduler) netsOf(ctx context.Context, repo, sha string) ([]string, error) {
	read := func(path string) ([]byte, error) {
		data, err := s.cfg.Sources.File(ctx, repo, sha, path, maxSourceFile)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			s.logger.Warn("read a run's sources for its networks", "repo", repo, "commit", sha, "file", path, "err", err)
		}
		return data, nil
	}
	evaluate, err := read("src/evaluate.h")
	if err != nil {
		return nil, err
	}
	nets := protocol.NetsInSource(evaluate, nil)
	if len(nets) == 0 {
		ucioption, err := read("src/ucioption.cpp")
		if err != nil {
			return nil, err
		}
		nets = protocol.NetsInSource(nil, ucioption)
	}
	if nets == nil {
		nets = []string{}
	}
	return nets, nil
}

// repoFieldError is the tests_repo field's message for a mirror error about the repository.
func repoFieldError(err error) *FieldError {
	var fe *FieldError
	if errors.As(err, &fe) {
		return fe
	}
	return fieldErr("tests_repo", "%v", err)
}

// refFieldError is the field's message for a mirror error resolving ref: the repository's own
// errors go to tests_repo, the ref's to the field.
func refFieldError(field, ref, repo string, err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err
	case errors.Is(err, gitmirror.ErrNotAllowed), errors.Is(err, gitmirror.ErrUnreachable), errors.Is(err, gitmirror.ErrTooLarge):
		return repoFieldError(err)
	case errors.Is(err, gitmirror.ErrBadRef):
		return fieldErr(field, "%q is not a branch, tag or commit name", ref)
	case errors.Is(err, gitmirror.ErrUnknownRef):
		return fieldErr(field, "no branch, tag or commit %q in %s", ref, repo)
	}
	return fieldErr(field, "%v", err)
}

// short is a commit's first ten hex digits.
func short(sha string) string { return sha[:min(10, len(sha))] }

var (
	benchToken = regexp.MustCompile(`(^|\s)[Bb]ench[ :]+[1-9][0-9]*`)
	spaceRun   = regexp.MustCompile(`[ \t]+`)
	blankLines = regexp.MustCompile(`\n+`)
)

// infoFromMessage is a run's description made from its new commit's message, as fishtest makes
// it: the "Bench: N" of the last line that has one taken out, runs of spaces and of blank lines
// made single, trailing space trimmed.
func infoFromMessage(msg string) string {
	lines := strings.Split(strings.TrimSpace(msg), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if benchToken.MatchString(lines[i]) {
			lines[i] = benchToken.ReplaceAllString(lines[i], "")
			break
		}
	}
	s := strings.Join(lines, "\n")
	s = spaceRun.ReplaceAllString(s, " ")
	s = blankLines.ReplaceAllString(s, "\n")
	return strings.TrimRight(s, " \t\n")
}

// RepoOfActiveCommit returns the repository of an approved, unfinished run that plays commit
// sha, for a worker asking for its sources: only those are served. A commit of no such run is
// ErrRunNotFound. It reads each unfinished run, so it is for rare calls (a worker's build), never
// for the worker path.
func (s *Scheduler) RepoOfActiveCommit(ctx context.Context, sha string) (string, error) {
	s.mu.Lock()
	ids := slices.Collect(maps.Keys(s.unfinished))
	s.mu.Unlock()
	for _, id := range ids {
		var repo string
		err := s.runs.View(ctx, id, func(r *rundb.Run) {
			if r.Approved && !r.Finished && (r.Args.ResolvedNew == sha || r.Args.ResolvedBase == sha) {
				repo = r.Args.TestsRepo
			}
		})
		switch {
		case errors.Is(err, rundb.ErrNotFound):
		case err != nil:
			return "", fmt.Errorf("find the run of commit %s: %w", sha, err)
		case repo != "":
			return repo, nil
		}
	}
	return "", fmt.Errorf("%w: no active run plays commit %s", ErrRunNotFound, sha)
}
