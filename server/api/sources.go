package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/books"
	"github.com/shoal-chess/shoal/gitmirror"
	"github.com/shoal-chess/shoal/protocol"
	"github.com/shoal-chess/shoal/scheduler"
)

// Workers that build their engines get everything from this server, never from a forge: the
// sources of a run's commits (Source), the networks (/api/nn) and the opening books (Book).

// Sources are the repository mirrors' archives (gitmirror.Mirrors).
type Sources interface {
	Archive(ctx context.Context, repo, sha string) (*gitmirror.Archive, error)
}

// Books are the opening books this server holds (books.Store).
type Books interface {
	Open(name string) (books.File, books.Book, error)
}

// Source is POST /api/source: the git archive of a commit of an active run, for a worker that
// builds its engines. The call carries the worker's credentials and worker_info, checked as on
// every worker call; the reply is the gzipped tarball with its sha256 in
// protocol.SourceSHA256Header. A commit that no approved, unfinished run plays is a 404 in the
// API's error shape: the server is no mirror for anything else.
func (s *Server) Source(c *gin.Context) {
	body, ok := readBody(c, maxWorkerBody)
	if !ok {
		return
	}
	_, parsed, ok := s.authenticate(c, body, nil)
	if !ok {
		return
	}
	sched := primaryOf(c)
	req, err := parsed.SourceRequest(sched.LegacyUsername)
	if err != nil {
		Error(c, http.StatusBadRequest, err.Error())
		return
	}
	if s.deps.Sources == nil {
		Error(c, http.StatusNotFound, "this server keeps no repository mirrors")
		return
	}
	var repo string
	err = s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		var err error
		repo, err = sched.RepoOfActiveCommit(ctx, req.SHA)
		return err
	})
	switch {
	case errors.Is(err, scheduler.ErrRunNotFound):
		Error(c, http.StatusNotFound, fmt.Sprintf("commit %s is not one of an active run", req.SHA))
		return
	case err != nil:
		s.workerFailure(c, err)
		return
	}
	a, err := s.deps.Sources.Archive(c.Request.Context(), repo, req.SHA)
	switch {
	case errors.Is(err, gitmirror.ErrUnknownRef), errors.Is(err, gitmirror.ErrNotAllowed):
		Error(c, http.StatusNotFound, fmt.Sprintf("commit %s is not in the mirror of its repository", req.SHA))
		return
	case errors.Is(err, gitmirror.ErrUnreachable), errors.Is(err, gitmirror.ErrReadOnly):
		// The repository could not be fetched now, or another instance writes the mirrors:
		// the worker may try again.
		s.logger.Warn("source archive", "sha", req.SHA, "repo", repo, "err", err)
		c.Header("Retry-After", "60")
		Error(c, http.StatusServiceUnavailable, fmt.Sprintf("the sources of commit %s cannot be made now; try again later", req.SHA))
		return
	case err != nil:
		s.internalError(c, fmt.Errorf("source archive of %s: %w", req.SHA, err))
		return
	}
	defer a.Close()
	h := c.Writer.Header()
	h.Set("Content-Type", "application/gzip")
	h.Set("Content-Length", strconv.FormatInt(a.Size, 10))
	h.Set("Content-Disposition", attachment(req.SHA+".tar.gz"))
	h.Set(protocol.SourceSHA256Header, a.SHA256)
	c.Status(http.StatusOK)
	if _, err := io.Copy(c.Writer, a); err != nil {
		_ = c.Error(fmt.Errorf("send the source archive of %s: %w", req.SHA, err))
	}
}

// Book is GET /api/books/{name}: an opening book this server holds, for workers, which check it
// against the run's book_sri; its checksum is also in the X-Shoal-Book-Sri header. A book the
// server lacks is a 404 naming it.
func (s *Server) Book(c *gin.Context) {
	name := c.Param("name")
	if s.deps.Books == nil {
		Error(c, http.StatusNotFound, fmt.Sprintf("the book %s is not on this server", name))
		return
	}
	f, b, err := s.deps.Books.Open(name)
	switch {
	case errors.Is(err, books.ErrNotFound):
		Error(c, http.StatusNotFound, fmt.Sprintf("the book %s is not on this server", name))
		return
	case err != nil:
		s.internalError(c, err)
		return
	}
	defer f.Close()
	h := c.Writer.Header()
	h.Set("Content-Type", "text/plain; charset=utf-8")
	h.Set("Content-Disposition", attachment(b.Name))
	h.Set("X-Shoal-Book-Sri", b.SRI)
	http.ServeContent(c.Writer, c.Request, b.Name, b.Added, f)
}
